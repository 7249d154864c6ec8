#!/usr/bin/env python3
"""Parity case 'dropout': the scaling rules of Dropout's two modes.

    upscale_in_train (Paddle's default)
        train: kept elements are x / (1 - p), dropped ones 0; eval: x
    downscale_in_infer
        train: kept elements are x, dropped ones 0; eval: x * (1 - p)

for p = 0, 0.3 and 1. The random masks of keel and Paddle differ, so
only what is deterministic is compared (report items in nn_common.h):

  - eval: the output and the input's gradient, value by value;
  - train on a constant input (10,000 elements of 2.0): the set of
    distinct output values ({0, 2 / 0.7} for upscale at p = 0.3, ...),
    the kept fraction and the rule;
  - train on a large signed input (100,000 elements): the kept fraction,
    which must lie within six standard deviations of 1 - p
    (sqrt(p (1 - p) / n), about 0.0087 at p = 0.3) on each side, and the
    backward rule: where the output is kept it equals x * scale and the
    gradient G * scale, where it is dropped both are 0 (scale 1 / (1 - p)
    for upscale_in_train, 1 for downscale_in_infer; checked within 1e-6
    relative on each side, reported as "ok" or the first broken index).

Tolerance 1e-5 relative (values compared are single multiplications).
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nn_common import T, paddle_result, wave  # noqa: E402,F401

TOLERANCE = 1e-5

CONFIGS = []
_k = [500]


def _next():
    _k[0] += 1
    return _k[0]


for mode in ("upscale_in_train", "downscale_in_infer"):
    for p in (0.0, 0.3, 1.0):
        layer = {"type": "Dropout", "args": {"p": p, "mode": mode}}
        if mode == "upscale_in_train":
            scale = 1.0 / (1.0 - p) if p < 1 else 0.0
        else:
            scale = 1.0
        kept = f"kept:{1.0 - p!r}"
        rule = f"rule:{scale!r}"
        short = "upscale" if mode == "upscale_in_train" else "downscale"
        x = wave([4, 5], _next(), 2.0)
        CONFIGS.append({
            "group": f"{short} eval", "name": f"{short}:p{p}:eval",
            "layer": layer,
            "steps": [{"mode": "eval", "inputs": [T(x)],
                       "grad_out": T(wave([4, 5], _next(), 1.5)),
                       "report": ["out", "grad:0"]}]})
        CONFIGS.append({
            "group": f"{short} train", "name": f"{short}:p{p}:constant",
            "layer": layer,
            "steps": [{"mode": "train",
                       "inputs": [T(np.full([100, 100], 2.0, np.float32))],
                       "grad_out": T(np.ones([100, 100], np.float32)),
                       "report": ["distinct", kept, rule]}]})
        CONFIGS.append({
            "group": f"{short} train", "name": f"{short}:p{p}:large",
            "layer": layer,
            "steps": [{"mode": "train",
                       "inputs": [T(wave([400, 250], _next(), 3.0))],
                       "grad_out": T(wave([400, 250], _next(), 1.5)),
                       "report": [kept, rule]}]})

if __name__ == "__main__":
    print(len(CONFIGS), "configurations")
