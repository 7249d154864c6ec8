"""keel.nn and keel.optimizer from Python, against PaddlePaddle 3.3.1 in the
same environment: the same model, initial weights and batches, trained
side by side; every step's loss and the final weights must agree to
float32 rounding."""
import numpy as np
import pytest

import keel

import paddle  # noqa: E402 (run.py has checked it is there)


from nets import KeelNet  # noqa: E402


class PaddleNet(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = paddle.nn.Linear(6, 16)
        self.act = paddle.nn.Tanh()
        self.fc2 = paddle.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def _make(opt_name):
    keel.seed(3)
    km = KeelNet()
    paddle.seed(3)
    pm = PaddleNet()
    # Paddle starts from keel's weights.
    for (kn, kp), (pn, pp) in zip(km.named_parameters(),
                                  pm.named_parameters()):
        assert kn == pn and kp.shape == list(pp.shape)
        pp.set_value(kp.numpy())
    kw = dict(learning_rate=0.05)
    if opt_name == "Momentum":
        kw["momentum"] = 0.9
    ko = getattr(keel.optimizer, opt_name)(parameters=km.parameters(), **kw)
    po = getattr(paddle.optimizer, opt_name)(parameters=pm.parameters(), **kw)
    return km, pm, ko, po


@pytest.mark.parametrize("opt_name", ["SGD", "Momentum", "Adam", "AdamW"])
def test_training_matches_paddle(opt_name):
    paddle.set_device("cpu")
    km, pm, ko, po = _make(opt_name)
    kloss, ploss = keel.nn.CrossEntropyLoss(), paddle.nn.CrossEntropyLoss()
    rng = np.random.default_rng(7)
    w_true = rng.standard_normal((6, 4)).astype(np.float32)
    losses = []
    for step in range(40):
        x = rng.standard_normal((16, 6)).astype(np.float32)
        y = (x @ w_true).argmax(1).astype(np.int64)  # a learnable rule
        lk = kloss(km(keel.to_tensor(x)), keel.to_tensor(y))
        lk.backward()
        ko.step()
        ko.clear_grad()
        lp = ploss(pm(paddle.to_tensor(x)), paddle.to_tensor(y))
        lp.backward()
        po.step()
        po.clear_grad()
        np.testing.assert_allclose(lk.item(), float(lp), rtol=2e-5,
                                   err_msg="%s step %d" % (opt_name, step))
        losses.append(lk.item())
    for (n, kp), (_, pp) in zip(km.named_parameters(),
                                pm.named_parameters()):
        np.testing.assert_allclose(kp.numpy(), pp.numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=n)
    # It trained: the last batches' loss is well below the first ones'.
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])


@pytest.mark.parametrize("opt_name", ["SGD", "Momentum", "Adam", "AdamW"])
def test_parameter_groups_match_paddle(opt_name):
    """Two groups: fc1 at 0.1x the learning rate with its own weight
    decay, fc2 with the optimizer's; the same run on Paddle."""
    paddle.set_device("cpu")
    keel.seed(5)
    km = KeelNet()
    paddle.seed(5)
    pm = PaddleNet()
    for (_, kp), (_, pp) in zip(km.named_parameters(),
                                pm.named_parameters()):
        pp.set_value(kp.numpy())

    def groups(m):
        return [{"params": m.fc1.parameters(), "learning_rate": 0.1,
                 "weight_decay": 0.05},
                {"params": m.fc2.parameters()}]
    kw = dict(learning_rate=0.05, weight_decay=0.01)
    ko = getattr(keel.optimizer, opt_name)(parameters=groups(km), **kw)
    po = getattr(paddle.optimizer, opt_name)(parameters=groups(pm), **kw)
    rng = np.random.default_rng(11)
    for step in range(15):
        x = rng.standard_normal((8, 6)).astype(np.float32)
        y = rng.integers(0, 4, 8).astype(np.int64)
        lk = keel.nn.functional.cross_entropy(km(keel.to_tensor(x)),
                                              keel.to_tensor(y))
        lk.backward()
        ko.step()
        ko.clear_grad()
        lp = paddle.nn.functional.cross_entropy(pm(paddle.to_tensor(x)),
                                                paddle.to_tensor(y))
        lp.backward()
        po.step()
        po.clear_grad()
        np.testing.assert_allclose(lk.item(), float(lp), rtol=2e-5,
                                   err_msg="%s step %d" % (opt_name, step))
    for (n, kp), (_, pp) in zip(km.named_parameters(),
                                pm.named_parameters()):
        np.testing.assert_allclose(kp.numpy(), pp.numpy(), rtol=1e-4,
                                   atol=1e-5, err_msg=n)


# ---- the examples, on Paddle ----------------------------------------------

def test_examples_run_on_paddle_with_the_import_changed(tmp_path):
    """examples/python with `import keel as paddle` replaced by `import
    paddle` run on PaddlePaddle and reach the same goals: the scripts are
    Paddle programs."""
    import os
    import subprocess
    import sys
    here = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                        "python")
    for script in sorted(f for f in os.listdir(here) if f.endswith(".py")):
        src = open(os.path.join(here, script)).read()
        assert src.count("import keel as paddle") == 1
        out = tmp_path / script
        out.write_text(src.replace("import keel as paddle", "import paddle"))
        r = subprocess.run([sys.executable, str(out)], capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, script + ": " + r.stdout + r.stderr[-2000:]


@pytest.mark.parametrize("case", ["conv2d_transpose", "group_norm",
                                  "smooth_l1", "nll", "bce_with_logits",
                                  "ce_weight"])
def test_more_layers_match_paddle(case):
    """The layers bound last: forward and the input's gradient against
    Paddle's, from the same parameters and inputs."""
    paddle.set_device("cpu")
    rng = np.random.default_rng(21)
    if case == "conv2d_transpose":
        kl = keel.nn.Conv2DTranspose(3, 4, 3, stride=2, padding=1,
                                     output_padding=1)
        pl = paddle.nn.Conv2DTranspose(3, 4, 3, stride=2, padding=1,
                                       output_padding=1)
        xs = [rng.standard_normal((2, 3, 5, 5)).astype("float32")]
    elif case == "group_norm":
        kl, pl = keel.nn.GroupNorm(2, 6), paddle.nn.GroupNorm(2, 6)
        xs = [rng.standard_normal((2, 6, 4, 4)).astype("float32")]
    elif case == "smooth_l1":
        kl = keel.nn.SmoothL1Loss(delta=0.5)
        pl = paddle.nn.SmoothL1Loss(delta=0.5)
        xs = [rng.standard_normal((4, 5)).astype("float32"),
              rng.standard_normal((4, 5)).astype("float32")]
    elif case == "nll":
        kl, pl = keel.nn.NLLLoss(), paddle.nn.NLLLoss()
        logits = rng.standard_normal((6, 4)).astype("float32")
        logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        xs = [logp.astype("float32"), rng.integers(0, 4, 6).astype("int64")]
    elif case == "ce_weight":
        w = np.array([0.5, 2.0, 1.0, 3.0], "float32")
        kl = keel.nn.CrossEntropyLoss(weight=keel.to_tensor(w))
        pl = paddle.nn.CrossEntropyLoss(weight=paddle.to_tensor(w))
        xs = [rng.standard_normal((6, 4)).astype("float32"),
              rng.integers(0, 4, 6).astype("int64")]
    else:
        pw = np.array([1.5, 0.5, 2.0], "float32")
        kl = keel.nn.BCEWithLogitsLoss(pos_weight=keel.to_tensor(pw))
        pl = paddle.nn.BCEWithLogitsLoss(pos_weight=paddle.to_tensor(pw))
        xs = [rng.standard_normal((4, 3)).astype("float32"),
              rng.integers(0, 2, (4, 3)).astype("float32")]
    for (n, kp), (_, pp) in zip(kl.named_parameters(),
                                pl.named_parameters()):
        assert kp.shape == list(pp.shape), n
        pp.set_value(kp.numpy())
    kx = [keel.to_tensor(a, stop_gradient=(i > 0)) for i, a in enumerate(xs)]
    px = [paddle.to_tensor(a, stop_gradient=(i > 0)) for i, a in enumerate(xs)]
    ky, py = kl(*kx), pl(*px)
    np.testing.assert_allclose(ky.numpy(), py.numpy(), rtol=1e-5, atol=1e-5)
    (ky * ky).sum().backward()
    (py * py).sum().backward()
    np.testing.assert_allclose(kx[0].grad.numpy(), px[0].grad.numpy(),
                               rtol=1e-4, atol=1e-5)
