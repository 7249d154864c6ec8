"""Shared Paddle side of the nn parity cases (parity_layers, parity_losses,
parity_norm_stats, parity_dropout); nn_common.h is keel's side and
describes the configuration format (layer, state, steps, report items).

Data are deterministic: wave() builds float32 arrays from sine and cosine
formulas, and they travel in the configuration JSON as the exact float32
values (a float32 converted to a Python float is exact), so keel and Paddle
start from identical numbers.
"""

import math
import warnings

import numpy as np

warnings.filterwarnings("ignore")
import paddle  # noqa: E402

paddle.set_device("cpu")


# ---- data ------------------------------------------------------------------

def wave(shape, k, scale=1.0, offset=0.0):
    """A float32 array of `shape`, element i = scale * sin(0.91 i + k) *
    cos(0.37 i + 0.5 k) + offset: smooth, signed, without ties or zeros in
    practice, different for each k."""
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n, dtype=np.float64)
    v = scale * np.sin(0.91 * i + k + 0.1) * np.cos(0.37 * i + 0.5 * k + 0.2)
    return (v + offset).astype(np.float32).reshape(shape)


def T(arr, dtype=None):
    """A tensor spec for the configuration JSON."""
    a = np.asarray(arr)
    if dtype == "int64" or (dtype is None and a.dtype.kind in "iu"):
        return {"shape": list(a.shape), "dtype": "int64",
                "data": [int(v) for v in a.ravel()]}
    a = a.astype(np.float32)
    return {"shape": list(a.shape), "data": [float(v) for v in a.ravel()]}


def from_spec(spec):
    a = np.array(spec["data"], dtype=np.float64).reshape(spec["shape"])
    if spec.get("dtype") == "int64":
        return paddle.to_tensor(a.astype(np.int64))
    return paddle.to_tensor(a.astype(np.float32))


def _is_spec(v):
    return isinstance(v, dict) and "shape" in v and "data" in v


# ---- the Paddle layer --------------------------------------------------------

def build(spec):
    args = {k: (from_spec(v) if _is_spec(v) else v)
            for k, v in spec.get("args", {}).items()}
    return getattr(paddle.nn, spec["type"])(**args)


def load_state(layer, state):
    if state:
        layer.set_state_dict({k: from_spec(v) for k, v in state.items()})
        mine = layer.state_dict()
        for k, v in state.items():
            got = mine[k].numpy().ravel().astype(np.float64)
            if not np.array_equal(got, np.array(v["data"], np.float64)):
                raise RuntimeError(f"Paddle did not take state '{k}'")


def output_shape(spec, state, mode, inputs):
    """The shape of the layer's output for these inputs, from Paddle."""
    layer = build(spec)
    load_state(layer, state)
    layer.train() if mode == "train" else layer.eval()
    with paddle.no_grad():
        out = layer(*[from_spec(s) for s in inputs])
    return list(out.shape)


def _num(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _flat(t, scaled=False):
    """Values for the report; scaled: each v as v + 3 max|t|.

    Scaled steps are for values that float32 fixes only to an absolute
    precision at the scale of their tensor: gradients that are
    differences of nearly equal sums (a normalisation layer's x - mean,
    softmax's G - sum(softmax * G)). There the exact value of an element
    may be arbitrarily close to zero while its float32 rounding error
    stays near eps * max|t|, and the reduction order, which differs
    between the frameworks, decides that error. Shifting every value by
    3 max|t| makes run.py's relative test an absolute one of about
    3 * TOLERANCE * max|t|: still far below any error in the formula.
    """
    a = np.asarray(t, dtype=np.float32).ravel().astype(np.float64)
    if scaled and a.size:
        a = a + 3 * np.max(np.abs(a))
    return [_num(v) for v in a]


def _kept(out, q):
    n = out.size
    f = np.count_nonzero(out) / n if n else 0.0
    bound = 6 * math.sqrt(q * (1 - q) / max(n, 1)) + 1.0 / n
    return "ok" if abs(f - q) <= bound else f"kept {f:.6f}"


def _rule(x, out, g, xg, s):
    if xg is None:
        return "no input gradient"
    x, out, g, xg = (np.asarray(a, np.float32).ravel().astype(np.float64)
                     for a in (x, out, g, xg))
    if not (x.size == out.size == g.size == xg.size):
        return "broken at 0"
    kept = out != 0
    tol = 1e-6 * np.maximum(np.abs(out), np.abs(x * s))
    ok_out = np.abs(out - x * s) <= tol
    tol = 1e-6 * np.maximum(np.abs(xg), np.abs(g * s))
    ok_grad = np.abs(xg - g * s) <= tol
    ok = np.where(kept, ok_out & ok_grad, xg == 0)
    bad = np.flatnonzero(~ok)
    return f"broken at {bad[0]}" if bad.size else "ok"


def _step(layer, step, values):
    layer.train() if step["mode"] == "train" else layer.eval()
    ins = [from_spec(s) for s in step["inputs"]]
    if ins[0].dtype == paddle.float32:
        ins[0].stop_gradient = False
    out = layer(*ins)
    g = None
    if "grad_out" in step:
        g = from_spec(step["grad_out"])
        out.backward(g)
    sc = bool(step.get("scaled"))
    params = dict(layer.named_parameters())
    # Paddle keeps BatchNorm's _mean and _variance as parameters that
    # need no gradient; the state dict holds them either way.
    buffers = layer.state_dict()
    for item in step["report"]:
        if item == "out":
            values += _flat(out.numpy(), sc)
        elif item == "distinct":
            values += _flat(np.unique(out.numpy()))
        elif item.startswith("kept:"):
            values.append(_kept(out.numpy(), float(item[5:])))
        elif item.startswith("rule:"):
            xg = ins[0].grad
            values.append(_rule(ins[0].numpy(), out.numpy(), g.numpy(),
                                None if xg is None else xg.numpy(),
                                float(item[5:])))
        elif item.startswith("grad:") and item[5:].isdigit():
            t = ins[int(item[5:])]
            values += _flat(t.grad.numpy() if t.grad is not None
                            else np.zeros(t.shape), sc)
        elif item.startswith("grad:"):
            p = params[item[5:]]
            values += _flat(p.grad.numpy() if p.grad is not None
                            else np.zeros(p.shape), sc)
        elif item.startswith("buffer:"):
            values += _flat(buffers[item[7:]].numpy(), sc)
        else:
            raise ValueError(f"unknown report item {item!r}")
    layer.clear_gradients()


def paddle_result(config):
    layer = build(config["layer"])
    load_state(layer, config.get("state"))
    values = []
    for step in config["steps"]:
        _step(layer, step, values)
    return {"values": values}
