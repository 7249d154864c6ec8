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


def test_parameter_groups_by_hand():
    """SGD with groups, against the update written out in NumPy:
    w <- w - lr * scale * (g + wd * w)."""
    import numpy as np

    keel.set_device("cpu")
    a = keel.to_tensor(np.array([1.0, -2.0], np.float32), stop_gradient=False)
    b = keel.to_tensor(np.array([3.0], np.float32), stop_gradient=False)
    a.name, b.name = "a", "b"
    opt = keel.optimizer.SGD(
        learning_rate=0.5, weight_decay=0.1,
        parameters=[{"params": [a], "learning_rate": 0.2,
                     "weight_decay": 0.0},
                    {"params": [b]}])
    ((a * a).sum() + (b * b * b).sum()).backward()
    opt.step()
    ga, gb = np.array([2.0, -4.0]), np.array([27.0])
    np.testing.assert_allclose(a.numpy(), np.array([1.0, -2.0]) -
                               0.5 * 0.2 * ga, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), np.array([3.0]) -
                               0.5 * (gb + 0.1 * 3.0), rtol=1e-6)


def test_parameter_group_errors():
    import pytest

    w = keel.to_tensor([1.0], stop_gradient=False)
    with pytest.raises(ValueError, match="unknown keys"):
        keel.optimizer.SGD(parameters=[{"params": [w], "betas": 1}])
    with pytest.raises(ValueError, match="two groups"):
        keel.optimizer.SGD(parameters=[{"params": [w]}, {"params": [w]}])
    with pytest.raises(ValueError, match="not both"):
        keel.optimizer.SGD(parameters=[w, {"params": [w]}])
    with pytest.raises(keel.InvalidArgumentError, match="scale"):
        keel.optimizer.SGD(parameters=[{"params": [w],
                                        "learning_rate": -1.0}])


def test_decorate_refuses_trained_parameters_and_changes_nothing():
    import pytest

    m = keel.nn.Linear(3, 2)
    opt = keel.optimizer.Adam(parameters=m.parameters())
    m(keel.ones([1, 3])).sum().backward()
    with pytest.raises(keel.InvalidArgumentError):
        keel.amp.decorate(m, opt, level="O2")
    assert [p.dtype for p in m.parameters()] == ["float32", "float32"]
    with pytest.raises(ValueError, match="level"):
        keel.amp.decorate(keel.nn.Linear(3, 2), level="O3")
    assert keel.amp.decorate(m, level="O1") is m


class _Scaled(keel.nn.Layer):
    """A Python layer with a parameter of its own (not a C layer's)."""

    def __init__(self):
        super().__init__()
        self.lin = keel.nn.Linear(6, 16)
        self.norm = keel.nn.LayerNorm(16)
        self.out = keel.nn.Linear(16, 4)
        self.gain = self.create_parameter([4], default_initializer=lambda s:
                                          keel.ones(s))

    def forward(self, x):
        return self.out(self.norm(self.lin(x))) * self.gain


def test_decorate_o2_casts_in_place_and_trains():
    """Paddle's O2 rules: Linear weights and Python-made parameters become
    float16, LayerNorm stays float32 (float16 only); the tensors stay the
    same objects; Adam keeps float32 master weights, so training with
    auto_cast O2 lowers the loss and keeps the dtypes."""
    import numpy as np

    keel.seed(2)
    m = _Scaled()
    before = {n: id(p) for n, p in m.named_parameters()}
    opt = keel.optimizer.Adam(learning_rate=0.01, parameters=m.parameters())
    m2, opt2 = keel.amp.decorate(m, opt, level="O2", dtype="float16")
    assert m2 is m and opt2 is opt
    dt = {n: p.dtype for n, p in m.named_parameters()}
    assert dt["lin.weight"] == dt["out.bias"] == dt["gain"] == "float16", dt
    assert dt["norm.weight"] == dt["norm.bias"] == "float32", dt
    assert {n: id(p) for n, p in m.named_parameters()} == before
    rng = np.random.default_rng(0)
    x = keel.to_tensor(rng.standard_normal((32, 6)).astype("float32"))
    y = keel.to_tensor(rng.standard_normal((32, 4)).astype("float32"))
    losses = []
    for _ in range(40):
        with keel.amp.auto_cast(level="O2", dtype="float16"):
            out = m(x)
        loss = ((out.astype("float32") - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(loss.item())
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.7 * losses[0], losses[::8]
    assert {n: p.dtype for n, p in m.named_parameters()} == dt


def test_fleet_strategy_and_refusals():
    import pytest

    fleet = keel.distributed.fleet
    s = fleet.DistributedStrategy()
    assert s.amp is False and s.fuse_grad_size_in_MB == 32
    assert s.amp_configs["init_loss_scaling"] == 32768.0
    s.amp_configs = {"init_loss_scaling": 8.0}
    assert s.amp_configs["init_loss_scaling"] == 8.0
    assert s.amp_configs["incr_ratio"] == 2.0          # others kept
    with pytest.raises(ValueError, match="unknown keys"):
        s.amp_configs = {"init_scale": 1.0}
    with pytest.raises(AttributeError, match="no option"):
        s.ampp = True
    with pytest.raises(NotImplementedError, match="parameter-server"):
        fleet.init(is_collective=False)
    s.pipeline = True
    with pytest.raises(NotImplementedError, match="pipeline"):
        fleet.init(is_collective=True, strategy=s)
    s.pipeline = False
    s.hybrid_configs = {"mp_degree": 2}
    with pytest.raises(NotImplementedError, match="mp_degree"):
        fleet.init(is_collective=True, strategy=s)
    fleet.init(is_collective=True)
    m = keel.nn.Linear(2, 2)
    assert fleet.distributed_model(m) is m              # a world of one
    assert fleet.worker_num() == 1 and fleet.is_first_worker()


def test_recompute_gradients_equal_the_plain_call():
    import numpy as np

    keel.seed(4)
    block = keel.nn.Sequential(keel.nn.Linear(5, 7), keel.nn.Tanh(),
                               keel.nn.Linear(7, 3))
    xv = np.random.default_rng(1).standard_normal((4, 5)).astype("float32")
    grads = []
    for use in (False, True):
        x = keel.to_tensor(xv, stop_gradient=False)
        y = (keel.distributed.fleet.utils.recompute(block, x) if use
             else block(x))
        (y * y).sum().backward()
        grads.append([x.grad.numpy()] +
                     [p.grad.numpy() for p in block.parameters()])
        block.clear_gradients()
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
