#!/usr/bin/env python3
"""Parity case 'losses': keel's loss layers against paddle.nn's, the loss
value and the gradient of the input, from the same logits and labels.

Every configuration is one step of nn_common's format: the loss layer is
called as loss(input, label), and the backward runs from a fixed upstream
gradient (0.75 for a reduced loss, a deterministic tensor for
reduction='none'). Covered: CrossEntropyLoss (hard labels, soft_label,
ignore_index, per-class weight, label_smoothing, use_softmax=False, axis
1 on [N, C, L] input, every reduction), MSELoss, L1Loss, SmoothL1Loss
(delta), NLLLoss (weight, ignore_index, [N, C, L] input) and
BCEWithLogitsLoss (weight, pos_weight, both).

Tolerance 1e-5 relative. The data keep every compared value away from
cancellation: logits in [-2, 2] (softmax - one_hot and sigmoid - label
keep two or more digits), input - label differences at least 0.05 away
from 0 and from SmoothL1's +-delta. Soft-label cross-entropy gradients
(softmax * sum(label) - label) and BCE's with soft targets (sigmoid -
target), which may cancel to any degree, are compared at the tensor's
scale (a "scaled" step, nn_common.py).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nn_common import T, output_shape, paddle_result, wave  # noqa: E402,F401

TOLERANCE = 1e-5

CONFIGS = []
_k = [100]
REDUCTIONS = ("mean", "sum", "none")


def _next():
    _k[0] += 1
    return _k[0]


def add(group, name, loss, args, x, label, scaled=False):
    layer = {"type": loss, "args": {k: (T(v) if isinstance(v, np.ndarray)
                                        else v) for k, v in args.items()}}
    inputs = [T(x), T(label)]
    shape = output_shape(layer, None, "train", inputs)
    g = (T(np.float32(0.75)) if not shape
         else T(wave(shape, _next(), 0.5, 1.0)))
    CONFIGS.append({"group": group, "name": f"{loss}:{name}",
                    "layer": layer,
                    "steps": [{"mode": "train", "inputs": inputs,
                               "grad_out": g, "report": ["out", "grad:0"],
                               "scaled": scaled}]})


def logits(shape):
    return wave(shape, _next(), 2.0)


def labels(n, c, ids=None):
    """Class ids: each class appears, deterministically."""
    return np.array([(3 * i + 1) % c for i in range(n)] if ids is None
                    else ids, dtype=np.int64)


def probs(shape, axis=-1):
    e = np.exp(wave(shape, _next(), 1.5).astype(np.float64))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


def away(shape, lo, hi, avoid=()):
    """Values in [lo, hi] at least 0.05 from each of `avoid`."""
    v = wave(shape, _next(), (hi - lo) / 2, (hi + lo) / 2).astype(np.float64)
    for a in avoid:
        near = np.abs(v - a) < 0.05
        v[near] = a + np.where(v[near] >= a, 0.05, -0.05)
    return v.astype(np.float32)


N, C = 6, 4
W = np.array([0.5, 1.5, 1.0, 2.0], np.float32)

# ---- CrossEntropyLoss --------------------------------------------------------
CE = "CrossEntropyLoss"
for r in REDUCTIONS:
    add(CE, "hard_" + r, CE, {"reduction": r}, logits([N, C]), labels(N, C))
    add(CE, "weight_" + r, CE, {"reduction": r, "weight": W},
        logits([N, C]), labels(N, C))
    add(CE, "ignore_index_" + r, CE, {"reduction": r, "ignore_index": 2},
        logits([N, C]), labels(N, C, [2, 0, 2, 3, 1, 2]))
    add(CE, "soft_label_" + r, CE, {"reduction": r, "soft_label": True},
        logits([N, C]), probs([N, C]), scaled=True)
add(CE, "ignore_index_default", CE, {},
    logits([N, C]), labels(N, C, [1, -100, 3, 0, -100, 2]))
add(CE, "ignore_index_default_weight_mean", CE, {"weight": W},
    logits([N, C]), labels(N, C, [1, -100, 3, 0, -100, 2]))
add(CE, "ignore_index_default_sum", CE, {"reduction": "sum"},
    logits([N, C]), labels(N, C, [1, -100, 3, 0, -100, 2]))
add(CE, "ignore_index_weight_mean", CE, {"ignore_index": 0, "weight": W},
    logits([N, C]), labels(N, C, [0, 1, 3, 0, 2, 1]))
add(CE, "soft_label_weight_mean", CE, {"soft_label": True, "weight": W},
    logits([N, C]), probs([N, C]), scaled=True)
add(CE, "label_smoothing_mean", CE, {"label_smoothing": 0.1},
    logits([N, C]), labels(N, C))
add(CE, "no_softmax_mean", CE, {"use_softmax": False},
    probs([N, C]), labels(N, C))
add(CE, "label_n1_mean", CE, {}, logits([N, C]),
    labels(N, C).reshape(N, 1))
add(CE, "3d_last_axis_none", CE, {"reduction": "none"},
    logits([2, 3, C]), labels(6, C).reshape(2, 3))
for r in ("mean", "none"):
    add(CE, "axis1_" + r, CE, {"axis": 1, "reduction": r},
        logits([2, C, 3]), labels(6, C).reshape(2, 3))
add(CE, "axis1_weight_mean", CE, {"axis": 1, "weight": W},
    logits([2, C, 3]), labels(6, C).reshape(2, 3))

# ---- regression losses --------------------------------------------------------
for r in REDUCTIONS:
    add("MSELoss", r, "MSELoss", {"reduction": r},
        away([3, 5], -2, 2), away([3, 5], -2, 2))
    y = away([3, 5], -1, 1)
    add("L1Loss", r, "L1Loss", {"reduction": r},
        (y + away([3, 5], -2, 2, avoid=(0.0,))).astype(np.float32), y)
for delta in (1.0, 0.5, 2.0):
    for r in REDUCTIONS:
        y = away([3, 5], -1, 1)
        d = away([3, 5], -3, 3, avoid=(0.0, delta, -delta))
        args = {"reduction": r}
        if delta != 1.0:
            args["delta"] = delta
        add("SmoothL1Loss", f"delta{delta}_{r}", "SmoothL1Loss", args,
            (y + d).astype(np.float32), y)

# ---- NLLLoss ---------------------------------------------------------------------


def log_probs(shape, axis=1):
    return np.log(probs(shape, axis)).astype(np.float32)


for r in REDUCTIONS:
    add("NLLLoss", r, "NLLLoss", {"reduction": r}, log_probs([N, C]),
        labels(N, C))
    add("NLLLoss", "weight_" + r, "NLLLoss", {"reduction": r, "weight": W},
        log_probs([N, C]), labels(N, C))
    add("NLLLoss", "ignore_index_" + r, "NLLLoss",
        {"reduction": r, "ignore_index": 1}, log_probs([N, C]),
        labels(N, C, [1, 0, 3, 1, 2, 3]))
add("NLLLoss", "ignore_index_default_mean", "NLLLoss", {},
    log_probs([N, C]), labels(N, C, [1, -100, 3, 0, -100, 2]))
add("NLLLoss", "ignore_index_weight_mean", "NLLLoss",
    {"ignore_index": 3, "weight": W}, log_probs([N, C]),
    labels(N, C, [3, 0, 3, 1, 2, 0]))
add("NLLLoss", "3d_mean", "NLLLoss", {}, log_probs([2, C, 3]),
    labels(6, C).reshape(2, 3))

# ---- BCEWithLogitsLoss -------------------------------------------------------------
BCE = "BCEWithLogitsLoss"
BL = (np.arange(15).reshape(3, 5) % 3 == 0).astype(np.float32)  # 0 / 1
for r in REDUCTIONS:
    add(BCE, r, BCE, {"reduction": r}, logits([3, 5]), BL)
    add(BCE, "weight_" + r, BCE,
        {"reduction": r, "weight": wave([3, 5], _next(), 0.4, 1.0)},
        logits([3, 5]), BL)
    add(BCE, "pos_weight_" + r, BCE,
        {"reduction": r, "pos_weight": wave([5], _next(), 0.8, 1.5)},
        logits([3, 5]), BL)
add(BCE, "weight_pos_weight_mean", BCE,
    {"weight": wave([5], _next(), 0.4, 1.0),
     "pos_weight": wave([5], _next(), 0.8, 1.5)}, logits([3, 5]), BL)
add(BCE, "soft_targets_mean", BCE, {}, logits([3, 5]),
    wave([3, 5], _next(), 0.3, 0.5), scaled=True)  # sigmoid - target

if __name__ == "__main__":
    print(len(CONFIGS), "configurations")
