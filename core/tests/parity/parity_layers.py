#!/usr/bin/env python3
"""Parity case 'layers': every keel nn layer against the same paddle.nn
layer, forward and backward, from the same weights and inputs.

Each configuration loads deterministic weights (wave(), nn_common.py) into
both layers through the state dict (Paddle names: weight, bias, _mean,
_variance), runs one forward on a deterministic input and the backward of
sum(out * G) for a fixed G of the output's shape, and compares the output,
the input's gradient and the gradient of every parameter. BatchNorm runs a
training step, then an evaluation step with the running statistics the
training step left (output, gradients and the buffers), and an evaluation
step on its own from non-trivial running statistics.

Tolerance: 1e-5 relative, for float32 results whose rounding error is
small next to their own magnitude; the data are built so that this holds:

  - Linear, Conv2D, Conv2DTranspose, AvgPool2D and AdaptiveAvgPool2D run
    on positive inputs, weights, biases and G, so every output and
    gradient is a sum of like-signed terms and the summation order (which
    differs between the frameworks) moves it by a few ulp only. Each
    Linear and convolution configuration also has a "_signed" twin on
    signed data, compared at the tensor's scale (below).
  - The activations get inputs on ranges where the float32 formulas of
    both sides are well conditioned (listed at ACT).
  - Values that are differences of nearly equal sums, whatever the data
    (a normalisation layer's output and gradients, the gradients of
    Softmax and LogSoftmax, the signed twins), are compared at their
    tensor's scale: a "scaled" step reports v + 3 max|t|, which makes the
    relative test an absolute bound of about 3e-5 max|t| (nn_common.py).
    A wrong epsilon (1e-4 for 1e-5 in BatchNorm) already fails it.

The configuration format and the report items are described in
nn_common.h; the Paddle side is nn_common.paddle_result.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nn_common import T, output_shape, paddle_result, wave  # noqa: E402,F401

TOLERANCE = 1e-5

CONFIGS = []
_k = [0]


def _next():
    _k[0] += 1
    return _k[0]


def add(group, name, layer_type, args, x, state=None, params=(),
        mode="train", eval_after=False, buffers=(), x_grad=True,
        positive_g=False, scaled=False, split=False):
    """One configuration: a forward + backward step in `mode` reporting
    the output, the input's gradient and each of `params`' gradients;
    eval_after adds an evaluation step on the same input (with buffers).
    positive_g: G > 0. scaled: the steps report scaled values (nn_common).
    split: the output in a plain step, the gradients in a scaled one."""
    layer = {"type": layer_type, "args": args}
    state = {k: T(v) for k, v in state.items()} if state else None
    inputs = [T(x)]
    shape = output_shape(layer, state, mode, inputs)

    def g():
        return T(wave(shape, _next(), 0.5, 1.0) if positive_g
                 else wave(shape, _next(), 1.5))

    grads = (["grad:0"] if x_grad else []) + [f"grad:{p}" for p in params]
    if split:
        steps = [{"mode": mode, "inputs": inputs, "report": ["out"]},
                 {"mode": mode, "inputs": inputs, "grad_out": g(),
                  "report": grads, "scaled": True}]
    else:
        steps = [{"mode": mode, "inputs": inputs, "grad_out": g(),
                  "report": ["out"] + grads +
                  [f"buffer:{b}" for b in buffers], "scaled": scaled}]
    if eval_after:
        steps.append({"mode": "eval", "inputs": inputs, "grad_out": g(),
                      "report": ["out"] + grads, "scaled": scaled})
    cfg = {"group": group, "name": f"{layer_type}:{name}", "layer": layer,
           "steps": steps}
    if state:
        cfg["state"] = state
    CONFIGS.append(cfg)


def x_of(shape, scale=2.0):
    """Signed data in [-scale, scale]."""
    return wave(shape, _next(), scale)


def pos(shape, lo=0.5, hi=1.5):
    """Data in [lo, hi]."""
    return wave(shape, _next(), (hi - lo) / 2, (hi + lo) / 2)


def in_ranges(shape, ranges):
    """Data spread over the union of the intervals `ranges`."""
    n = int(np.prod(shape))
    u = (wave([n], _next()).astype(np.float64) + 1) / 2  # [0, 1]
    total = sum(b - a for a, b in ranges)
    out = np.empty(n)
    for i, v in enumerate(u * total):
        for a, b in ranges:
            if v <= b - a:
                out[i] = a + v
                break
            v -= b - a
        else:
            out[i] = ranges[-1][1]
    return out.astype(np.float32).reshape(shape)


# ---- Linear ------------------------------------------------------------------

for name, n_in, n_out, xshape in [("2d", 5, 3, [4, 5]),
                                  ("3d", 6, 4, [2, 3, 6]),
                                  ("1row", 7, 2, [1, 7])]:
    args = {"in_features": n_in, "out_features": n_out}
    add("Linear", name, "Linear", args, pos(xshape),
        {"weight": pos([n_in, n_out], 0.2, 0.8),
         "bias": pos([n_out], 0.1, 0.5)},
        params=("weight", "bias"), positive_g=True)
    add("Linear", name + "_signed", "Linear", args, x_of(xshape),
        {"weight": wave([n_in, n_out], _next(), 0.6),
         "bias": wave([n_out], _next(), 0.3)},
        params=("weight", "bias"), scaled=True)

# ---- Conv2D --------------------------------------------------------------------

CONV = [
    ("3x3", dict(in_channels=3, out_channels=4, kernel_size=3), [2, 3, 7, 6]),
    ("stride2_pad1", dict(in_channels=2, out_channels=3, kernel_size=3,
                          stride=2, padding=1), [2, 2, 7, 8]),
    ("rect_kernel", dict(in_channels=2, out_channels=2,
                         kernel_size=[2, 3], padding=[1, 0]), [1, 2, 5, 6]),
    ("dilation2", dict(in_channels=2, out_channels=3, kernel_size=3,
                       dilation=2, padding=2), [1, 2, 8, 7]),
    ("groups2", dict(in_channels=4, out_channels=6, kernel_size=3,
                     groups=2, padding=1), [2, 4, 5, 5]),
    ("depthwise", dict(in_channels=3, out_channels=3, kernel_size=3,
                       groups=3, stride=[1, 2]), [1, 3, 6, 7]),
    ("pad4", dict(in_channels=2, out_channels=2, kernel_size=2,
                  padding=[1, 0, 2, 1], stride=[2, 1]), [1, 2, 5, 5]),
    ("1x1", dict(in_channels=5, out_channels=3, kernel_size=1), [2, 5, 3, 4]),
]
for name, args, xs in CONV:
    kh, kw = (args["kernel_size"] if isinstance(args["kernel_size"], list)
              else [args["kernel_size"]] * 2)
    w = [args["out_channels"], args["in_channels"] // args.get("groups", 1),
         kh, kw]
    add("Conv2D", name, "Conv2D", args, pos(xs),
        {"weight": pos(w, 0.2, 0.8),
         "bias": pos([args["out_channels"]], 0.1, 0.5)},
        params=("weight", "bias"), positive_g=True)
    add("Conv2D", name + "_signed", "Conv2D", args, x_of(xs),
        {"weight": wave(w, _next(), 0.5),
         "bias": wave([args["out_channels"]], _next(), 0.2)},
        params=("weight", "bias"), scaled=True)

add("Conv2D", "no_bias", "Conv2D",
    dict(in_channels=2, out_channels=3, kernel_size=3, bias_attr=False),
    pos([1, 2, 5, 5]), {"weight": pos([3, 2, 3, 3], 0.2, 0.8)},
    params=("weight",), positive_g=True)

CONVT = [
    ("3x3", dict(in_channels=3, out_channels=2, kernel_size=3), [2, 3, 4, 5]),
    ("stride2_pad1", dict(in_channels=2, out_channels=3, kernel_size=3,
                          stride=2, padding=1), [1, 2, 4, 4]),
    ("output_padding", dict(in_channels=2, out_channels=2, kernel_size=3,
                            stride=2, padding=1, output_padding=1),
     [1, 2, 3, 4]),
    ("dilation2", dict(in_channels=2, out_channels=2, kernel_size=2,
                       dilation=2), [1, 2, 4, 3]),
    ("groups2", dict(in_channels=4, out_channels=6, kernel_size=3,
                     groups=2, stride=[2, 1]), [1, 4, 3, 3]),
    ("rect_kernel", dict(in_channels=2, out_channels=3, kernel_size=[3, 2],
                         padding=[1, 0]), [2, 2, 3, 4]),
]
for name, args, xs in CONVT:
    kh, kw = (args["kernel_size"] if isinstance(args["kernel_size"], list)
              else [args["kernel_size"]] * 2)
    w = [args["in_channels"], args["out_channels"] // args.get("groups", 1),
         kh, kw]
    add("Conv2DTranspose", name, "Conv2DTranspose", args, pos(xs),
        {"weight": pos(w, 0.2, 0.8),
         "bias": pos([args["out_channels"]], 0.1, 0.5)},
        params=("weight", "bias"), positive_g=True)
    add("Conv2DTranspose", name + "_signed", "Conv2DTranspose", args,
        x_of(xs), {"weight": wave(w, _next(), 0.5),
                   "bias": wave([args["out_channels"]], _next(), 0.2)},
        params=("weight", "bias"), scaled=True)

# ---- normalisation -------------------------------------------------------------


def bn_state(c):
    return {"weight": wave([c], _next(), 0.5, 1.0),
            "bias": wave([c], _next(), 0.3),
            "_mean": wave([c], _next(), 0.4),
            "_variance": wave([c], _next(), 0.5, 1.2)}


BN = [
    ("BatchNorm1D", "2d", dict(num_features=4), [6, 4]),
    ("BatchNorm1D", "3d", dict(num_features=3), [4, 3, 5]),
    ("BatchNorm1D", "momentum_eps", dict(num_features=3, momentum=0.7,
                                         epsilon=1e-3), [5, 3]),
    ("BatchNorm2D", "4d", dict(num_features=3), [2, 3, 4, 5]),
    ("BatchNorm2D", "momentum_eps", dict(num_features=2, momentum=0.5,
                                         epsilon=0.01), [3, 2, 3, 3]),
]
for t, name, args, xs in BN:
    c = args["num_features"]
    add(t, "train+" + name, t, args, x_of(xs, 3.0), bn_state(c),
        params=("weight", "bias"), eval_after=True,
        buffers=("_mean", "_variance"), scaled=True)
    add(t, "eval+" + name, t, args, x_of(xs, 3.0), bn_state(c),
        params=("weight", "bias"), mode="eval", scaled=True)

for name, shape, xs, eps in [("last_axis", [6], [3, 6], 1e-5),
                             ("last_two", [3, 4], [2, 3, 4], 1e-5),
                             ("eps", [5], [2, 2, 5], 1e-3)]:
    n = 1
    for d in shape:
        n *= d
    add("LayerNorm", name, "LayerNorm",
        {"normalized_shape": shape, "epsilon": eps}, x_of(xs, 3.0),
        {"weight": wave([n], _next(), 0.5, 1.0),
         "bias": wave([n], _next(), 0.3)},
        params=("weight", "bias"), scaled=True)

for name, g, c, xs, eps in [("g2", 2, 4, [2, 4, 3, 3], 1e-5),
                            ("g1", 1, 3, [2, 3, 2, 4], 1e-5),
                            ("per_channel", 3, 3, [1, 3, 4, 4], 1e-5),
                            ("eps", 2, 6, [2, 6, 2, 2], 1e-2)]:
    add("GroupNorm", name, "GroupNorm",
        {"num_groups": g, "num_channels": c, "epsilon": eps}, x_of(xs, 3.0),
        {"weight": wave([c], _next(), 0.5, 1.0),
         "bias": wave([c], _next(), 0.3)},
        params=("weight", "bias"), scaled=True)

# ---- Embedding ------------------------------------------------------------------

IDS = [[1, 3, 0, 3], [5, 2, 2, 1]]  # repeated ids: gradients accumulate
for name, pad in [("plain", None), ("padding_idx2", 2),
                  ("padding_idx_neg", -1), ("padding_idx0", 0)]:
    args = {"num_embeddings": 6, "embedding_dim": 3}
    if pad is not None:
        args["padding_idx"] = pad
    add("Embedding", name, "Embedding", args, np.array(IDS, np.int64),
        {"weight": wave([6, 3], _next(), 0.8)},
        params=("weight",), x_grad=False)

# ---- pooling and Flatten ----------------------------------------------------------

POOL = [
    ("MaxPool2D", "k2", dict(kernel_size=2), [2, 2, 6, 6]),
    ("MaxPool2D", "k3_s2_p1", dict(kernel_size=3, stride=2, padding=1),
     [1, 2, 7, 7]),
    ("MaxPool2D", "k3_s2_ceil", dict(kernel_size=3, stride=2,
                                     ceil_mode=True), [1, 2, 6, 8]),
    ("MaxPool2D", "k2_s1", dict(kernel_size=2, stride=1), [1, 1, 4, 5]),
    ("AvgPool2D", "k2", dict(kernel_size=2), [2, 2, 6, 6]),
    ("AvgPool2D", "k3_s2_p1_exclusive", dict(kernel_size=3, stride=2,
                                             padding=1), [1, 2, 7, 7]),
    ("AvgPool2D", "k3_s2_p1_inclusive", dict(kernel_size=3, stride=2,
                                             padding=1, exclusive=False),
     [1, 2, 7, 7]),
    ("AvgPool2D", "k3_s2_ceil", dict(kernel_size=3, stride=2,
                                     ceil_mode=True), [1, 2, 6, 8]),
    ("AvgPool2D", "k3_s2_p1_ceil_inclusive",
     dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
          exclusive=False), [1, 1, 6, 6]),
    ("AdaptiveAvgPool2D", "1x1", dict(output_size=1), [2, 3, 5, 4]),
    ("AdaptiveAvgPool2D", "3x2_uneven", dict(output_size=[3, 2]),
     [1, 2, 7, 5]),
    ("AdaptiveAvgPool2D", "same", dict(output_size=[4, 4]), [1, 1, 4, 4]),
    ("Flatten", "default", dict(), [2, 3, 2, 2]),
    ("Flatten", "1_2", dict(start_axis=1, stop_axis=2), [2, 3, 2, 2]),
    ("Flatten", "all", dict(start_axis=0, stop_axis=-1), [2, 3, 2]),
]
for t, name, args, xs in POOL:
    if t == "MaxPool2D" or t == "Flatten":
        add(t, name, t, args, x_of(xs))
    else:
        add(t, name, t, args, pos(xs), positive_g=True)

# ---- activations -----------------------------------------------------------------

# Inputs stay where the float32 formulas of both frameworks are well
# conditioned (see the module docstring): away from the zeros of a
# derivative (GELU near -0.75, Silu near -1.28, Hardswish at -1.5), from
# the roots of an output near cancellation (Hardswish at -3, ELU at 0-),
# and from the far tails where 1 + erf, 1 - tanh^2 or log(1 + exp) lose
# their digits; the bends (ReLU6 at 6, Hardswish at +-3, the Softplus
# threshold) are crossed.
SIGNED = [(-3.0, -0.05), (0.05, 3.0)]
ACT = [
    ("ReLU", "default", {}, SIGNED),
    ("ReLU6", "default", {}, [(-2.0, -0.05), (0.05, 8.0)]),
    ("LeakyReLU", "default", {}, SIGNED),
    ("LeakyReLU", "slope0.2", {"negative_slope": 0.2}, SIGNED),
    ("ELU", "default", {}, [(-4.0, -0.25), (0.05, 3.0)]),
    ("ELU", "alpha0.5", {"alpha": 0.5}, [(-4.0, -0.25), (0.05, 3.0)]),
    ("GELU", "exact", {}, [(-2.0, -0.95), (-0.55, 3.0)]),
    ("GELU", "tanh", {"approximate": True}, [(-2.0, -0.95), (-0.55, 3.0)]),
    ("Silu", "default", {}, [(-4.0, -1.5), (-1.05, 4.0)]),
    ("Sigmoid", "default", {}, [(-3.5, 3.5)]),
    ("Tanh", "default", {}, [(-2.0, 2.0)]),
    ("Softplus", "default", {}, [(-3.0, 3.0), (20.5, 22.0)]),
    ("Softplus", "beta2_threshold3", {"beta": 2.0, "threshold": 3.0},
     [(-1.5, 1.4), (1.6, 3.0)]),
    ("Hardswish", "default", {},
     [(-5.0, -3.2), (-2.8, -1.7), (-1.3, -0.05), (0.05, 5.0)]),
]
for t, name, args, ranges in ACT:
    add("activations", name, t, args, in_ranges([3, 4, 5], ranges))

# Softmax and LogSoftmax: the outputs compared as they are, the gradients
# (G - sum(softmax * G) and the like) at the tensor's scale.
for t, name, args in [("Softmax", "default", {}),
                      ("Softmax", "axis1", {"axis": 1}),
                      ("LogSoftmax", "default", {}),
                      ("LogSoftmax", "axis0", {"axis": 0})]:
    add("activations", name, t, args, x_of([3, 4, 5], 3.0), split=True)

if __name__ == "__main__":
    print(len(CONFIGS), "configurations")
