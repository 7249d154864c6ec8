#!/usr/bin/env python3
"""Parity case 'optim': keel's optimizers against paddle.optimizer.

Each configuration gives two float32 parameters ("w" [4] and "b" [3]) the
same initial values and, for STEPS steps, the same gradients on both sides
(Paddle gets them as the gradient of sum(p * g), which is exactly g), and
compares the weights after the last step (7 values, relative 1e-6).
"args" holds Paddle's keyword arguments for the optimizer; "clip" an
optional paddle.nn.ClipGradBy* and "no_decay" the parameter names that
AdamW's apply_decay_param_fun excludes.

    python3 parity_optim.py path/to/parity_optim
"""

import math
import os
import sys

STEPS = 20
TOLERANCE = 1e-6

PARAMS = [
    {"name": "w", "init": [0.5, -1.25, 2.0, 0.8]},
    {"name": "b", "init": [0.75, -0.3, 1.1]},
]


def _grads(scale):
    out = []
    for k in range(STEPS):
        step = []
        for i, p in enumerate(PARAMS):
            step.append([scale * math.sin(1.3 * k + 0.7 * j + 2.1 * i) +
                         0.05 * scale for j in range(len(p["init"]))])
        out.append(step)
    return out


def _cfg(name, optimizer, clip=None, no_decay=None, scale=1.0, **args):
    c = {"group": optimizer, "name": f"{optimizer}:{name}",
         "optimizer": optimizer, "args": args, "params": PARAMS,
         "grads": _grads(scale)}
    if clip:
        c["clip"] = clip
    if no_decay:
        c["no_decay"] = no_decay
    return c


CONFIGS = [
    _cfg("plain", "SGD", learning_rate=0.05),
    _cfg("l2", "SGD", learning_rate=0.05, weight_decay=0.1),
    _cfg("clip_value", "SGD", learning_rate=0.05,
         clip={"kind": "value", "max": 0.4, "min": -0.3}),
    _cfg("plain", "Momentum", learning_rate=0.02),
    _cfg("nesterov_l2", "Momentum", learning_rate=0.02, momentum=0.8,
         use_nesterov=True, weight_decay=0.05),
    _cfg("clip_norm", "Momentum", learning_rate=0.02, scale=2.0,
         clip={"kind": "norm", "clip_norm": 0.5}),
    _cfg("plain", "Adam", learning_rate=0.01),
    _cfg("l2_betas", "Adam", learning_rate=0.01, beta1=0.8, beta2=0.95,
         epsilon=1e-6, weight_decay=0.1),
    _cfg("clip_global", "Adam", learning_rate=0.01, scale=3.0,
         clip={"kind": "global_norm", "clip_norm": 1.0}),
    _cfg("plain", "AdamW", learning_rate=0.01),
    _cfg("no_bias_decay", "AdamW", learning_rate=0.01, weight_decay=0.2,
         no_decay=["b"]),
]


_RUNS = [0]


def paddle_result(config):
    """Run one configuration in Paddle, in the driver's format. Paddle's
    parameter names must be unique per process: each run suffixes them
    with "_run<n>", which the decay filter strips again."""
    import paddle

    _RUNS[0] += 1
    suffix = f"_run{_RUNS[0]}"

    paddle.set_device("cpu")
    params = []
    for p in config["params"]:
        t = paddle.create_parameter(
            [len(p["init"])], "float32", name=p["name"] + suffix,
            default_initializer=paddle.nn.initializer.Assign(
                paddle.to_tensor(p["init"], dtype="float32")))
        params.append(t)
    args = dict(config["args"])
    clip = config.get("clip")
    if clip:
        if clip["kind"] == "value":
            args["grad_clip"] = paddle.nn.ClipGradByValue(clip["max"],
                                                          clip["min"])
        elif clip["kind"] == "norm":
            args["grad_clip"] = paddle.nn.ClipGradByNorm(clip["clip_norm"])
        else:
            args["grad_clip"] = paddle.nn.ClipGradByGlobalNorm(
                clip["clip_norm"])
    if config.get("no_decay"):
        excluded = set(config["no_decay"])
        args["apply_decay_param_fun"] = (
            lambda n: n[:-len(suffix)] not in excluded)
    try:
        opt = getattr(paddle.optimizer, config["optimizer"])(
            parameters=params, **args)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}
    for step in config["grads"]:
        loss = None
        for t, g in zip(params, step):
            term = (t * paddle.to_tensor(g, dtype="float32")).sum()
            loss = term if loss is None else loss + term
        loss.backward()
        opt.step()
        opt.clear_grad()
    values = []
    for t in params:
        values.extend(float(v) for v in t.numpy().tolist())
    return {"values": values}


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run

    if len(sys.argv) != 2:
        print("usage: parity_optim.py path/to/parity_optim", file=sys.stderr)
        sys.exit(2)
    sys.exit(run.main(["optim", sys.argv[1]]))
