"""keel.jit and keel.inference from Python: a Python-defined model traced,
saved, loaded and served; the answers equal the eager model's."""
import numpy as np
import pytest
from nets import KeelNet

import keel


def test_save_load_predict(tmp_path):
    keel.seed(5)
    m = KeelNet()
    m.eval()
    prefix = str(tmp_path / "net")
    keel.jit.save(m, prefix, input_spec=[keel.static.InputSpec([None, 6])])
    assert (tmp_path / "net.keel.json").exists()
    assert (tmp_path / "net.safetensors").exists()
    x = np.random.default_rng(0).standard_normal((7, 6)).astype(np.float32)
    with keel.no_grad():
        eager = m(keel.to_tensor(x)).numpy()
    loaded = keel.jit.load(prefix)
    assert loaded.program_info()["inputs"] == ["x0"]
    np.testing.assert_array_equal(loaded(keel.to_tensor(x)).numpy(), eager)
    pred = keel.inference.create_predictor(keel.inference.Config(prefix))
    h = pred.get_input_handle(pred.get_input_names()[0])
    h.copy_from_cpu(x[:3])  # the batch is dynamic
    pred.run()
    out = pred.get_output_handle(pred.get_output_names()[0]).copy_to_cpu()
    np.testing.assert_allclose(out, eager[:3], rtol=1e-6, atol=1e-7)


def test_save_errors(tmp_path):
    m = KeelNet()
    with pytest.raises(ValueError):
        keel.jit.save(m, str(tmp_path / "a"))

    class Raises(keel.nn.Layer):
        def forward(self, x):
            raise ArithmeticError("from the model")
    with pytest.raises(ArithmeticError):
        keel.jit.save(Raises(), str(tmp_path / "b"),
                      input_spec=[keel.static.InputSpec([2, 2])])
    with pytest.raises(keel.KeelError):
        keel.jit.load(str(tmp_path / "missing"))
    pred = None
    with pytest.raises(keel.KeelError):
        pred = keel.inference.create_predictor(
            keel.inference.Config(str(tmp_path / "missing")))
    assert pred is None
