"""keel.nn from Python: registration, modes and errors."""
import pytest
from nets import KeelNet

import keel


def test_layer_registration():
    m = KeelNet()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert len(m.parameters()) == 4
    assert all(not p.stop_gradient for p in m.parameters())
    m.extra = keel.to_tensor([1.0], stop_gradient=False)  # a parameter
    m.note = keel.to_tensor([1.0])                        # not one
    # Paddle's order: the layer's own parameters, then its sublayers'.
    assert [n for n, _ in m.named_parameters()][0] == "extra"
    assert len(m.parameters()) == 5
    seq = keel.nn.Sequential(keel.nn.Linear(2, 3), keel.nn.ReLU())
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias"]
    assert isinstance(seq[1], keel.nn.ReLU)
    bn = keel.nn.BatchNorm1D(3)
    assert sorted(n for n, _ in bn.named_buffers()) == ["_mean",
                                                        "_variance"]
    m.eval()
    assert not m.training and not m.fc1.training
    m.train()
    assert m.fc1.training


def test_layer_errors():
    with pytest.raises(RuntimeError):
        class Bad(keel.nn.Layer):
            def __init__(self):
                self.fc = keel.nn.Linear(2, 2)  # before super().__init__()
        Bad()
    lin = keel.nn.Linear(3, 2)
    with pytest.raises(keel.InvalidArgumentError) as e:
        lin(keel.randn([4, 5]))
    assert "linear" in str(e.value).lower()
    with pytest.raises(ValueError):
        keel.optimizer.Adam()
