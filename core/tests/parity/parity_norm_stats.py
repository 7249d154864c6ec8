#!/usr/bin/env python3
"""Parity case 'norm_stats': BatchNorm's running statistics.

Paddle updates, per channel, after every training-mode forward:

    _mean     = momentum * _mean     + (1 - momentum) * batch mean
    _variance = momentum * _variance + (1 - momentum) * batch variance

with the biased batch variance (divided by the element count, not count -
1: checked in Paddle 3.3.1 CPU, and keel's kernel does the same). Each
configuration loads a BatchNorm1D ([N, C] or [N, C, L]) or BatchNorm2D
layer (default momentum 0.9 and epsilon 1e-5, or other values), runs
several training forwards on different deterministic batches and reports
both buffers after each, then an evaluation forward with the final
statistics. Small batches (N = 2) make the biased and unbiased variances
differ by a factor of two, so the rule cannot pass by accident.

Tolerance 1e-5 relative. Batches sit on positive per-channel offsets, so
the batch means are sums of like-signed terms and the variances are not
the small difference of large moments; the evaluation output
((x - _mean) / sqrt(_variance + epsilon) * weight + bias, near zero for
some elements) is compared at the tensor's scale ("scaled", nn_common.py).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nn_common import T, paddle_result, wave  # noqa: E402,F401

TOLERANCE = 1e-5

CONFIGS = []
_k = [300]


def _next():
    _k[0] += 1
    return _k[0]


def batch(shape):
    """Channel c (axis 1) around 1 + 0.4 c, spread +-0.8."""
    x = wave(shape, _next(), 0.8).astype(np.float64)
    offs = 1.0 + 0.4 * np.arange(shape[1])
    x += offs.reshape([1, shape[1]] + [1] * (len(shape) - 2))
    return x.astype(np.float32)


def add(name, layer_type, args, shape, passes, state=None):
    c = args["num_features"]
    steps = [{"mode": "train", "inputs": [T(batch(shape))],
              "report": ["buffer:_mean", "buffer:_variance"]}
             for _ in range(passes)]
    steps.append({"mode": "eval", "inputs": [T(batch(shape))],
                  "report": ["out"], "scaled": True})
    cfg = {"group": layer_type, "name": f"{layer_type}:{name}",
           "layer": {"type": layer_type, "args": args}, "steps": steps}
    if state:
        cfg["state"] = {
            "weight": T(wave([c], _next(), 0.3, 1.0)),
            "bias": T(wave([c], _next(), 0.2)),
            "_mean": T(wave([c], _next(), 0.3, 0.8)),
            "_variance": T(wave([c], _next(), 0.4, 1.5))}
    CONFIGS.append(cfg)


B1, B2 = "BatchNorm1D", "BatchNorm2D"
add("2d_default", B1, {"num_features": 4}, [8, 4], 5)
add("2d_n2", B1, {"num_features": 3}, [2, 3], 4)
add("3d_default", B1, {"num_features": 3}, [4, 3, 5], 5)
add("3d_n1", B1, {"num_features": 2}, [1, 2, 6], 3)
add("2d_momentum0.5_eps1e-3", B1,
    {"num_features": 4, "momentum": 0.5, "epsilon": 1e-3}, [6, 4], 5)
add("3d_momentum0.99", B1, {"num_features": 3, "momentum": 0.99},
    [3, 3, 4], 6)
add("2d_momentum0", B1, {"num_features": 3, "momentum": 0.0}, [5, 3], 3)
add("2d_loaded_state", B1, {"num_features": 4, "momentum": 0.8}, [6, 4], 4,
    state=True)
add("4d_default", B2, {"num_features": 3}, [2, 3, 4, 5], 5)
add("4d_n1", B2, {"num_features": 2}, [1, 2, 3, 3], 3)
add("4d_n2_1x1", B2, {"num_features": 3}, [2, 3, 1, 1], 4)
add("4d_momentum0.7_eps0.01", B2,
    {"num_features": 2, "momentum": 0.7, "epsilon": 0.01}, [3, 2, 4, 4], 5)
add("4d_momentum0.95_eps1e-4", B2,
    {"num_features": 4, "momentum": 0.95, "epsilon": 1e-4}, [2, 4, 3, 2], 6)
add("4d_loaded_state", B2, {"num_features": 3, "momentum": 0.6},
    [2, 3, 3, 3], 4, state=True)

if __name__ == "__main__":
    print(len(CONFIGS), "configurations")
