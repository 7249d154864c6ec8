#!/usr/bin/env python3
"""Parity case 'optim': keel's optimizers against paddle.optimizer.

Each configuration gives two float32 parameters ("w" [4] and "b" [3]) the
same initial values and, for STEPS steps, the same gradients on both sides
(Paddle gets them as the gradient of sum(p * g), which is exactly g). Both
sides report the weights after every step (STEPS x 7 values, step-major),
and compare() checks two things per step:

  - the weights, within TOLERANCE (1e-6) of Paddle's, relative to the
    larger of |p| and |p_0| + the sum of Paddle's |updates| so far (a
    weight that updates have brought near zero carries the rounding of
    the larger numbers it was summed from);
  - the update, d = p_k - p_(k-1) from each side's own weights, within
    UPDATE_TOLERANCE (1e-6) of Paddle's update, plus one float32 rounding
    of the weight (ulp(p) / 2 for each of p_k and p_(k-1)): the most the
    update can move when both frameworks compute it alike. AdamW gets two
    roundings: its decoupled decay makes an intermediate weight
    p * (1 - lr * coeff) that keel rounds to float32 before adding the
    Adam step, while Paddle's CPU AdamW has a JIT kernel for CPUs with
    avx512f (AdamWJitCode in libphi_core.so) that rounds these steps in its
    own order; each result is then within one ulp of the exact value, so
    the two may lie two ulp apart (seen: exactly 2 ulp at step 9 of
    zero_start_betas on an AVX-512 CPU, where 1 ulp failed).

The weights alone hide an update error as large as 1e-5 when |p| is a
hundred times the step; the update test does not. The "zero_start"
configurations begin at 0, where the first update is the weight itself,
so even a first-step error of a few 1e-6 (a starting beta power not
rounded to float32) fails.

"args" holds Paddle's keyword arguments for the optimizer; "clip" an
optional paddle.nn.ClipGradBy* and "no_decay" the parameter names that
AdamW's apply_decay_param_fun excludes.

    .venv/bin/python parity_optim.py path/to/parity_optim
"""

import math
import os
import struct
import sys

STEPS = 20
TOLERANCE = 1e-6
UPDATE_TOLERANCE = 1e-6

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


ZERO_PARAMS = [{"name": p["name"], "init": [0.0] * len(p["init"])}
               for p in PARAMS]


def _cfg(name, optimizer, clip=None, no_decay=None, scale=1.0,
         params=PARAMS, **args):
    c = {"group": optimizer, "name": f"{optimizer}:{name}",
         "optimizer": optimizer, "args": args, "params": params,
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
    _cfg("zero_start", "Adam", learning_rate=0.01, params=ZERO_PARAMS),
    _cfg("plain", "AdamW", learning_rate=0.01),
    _cfg("no_bias_decay", "AdamW", learning_rate=0.01, weight_decay=0.2,
         no_decay=["b"]),
    _cfg("zero_start", "AdamW", learning_rate=0.01, params=ZERO_PARAMS),
    _cfg("zero_start_betas", "AdamW", learning_rate=0.01, beta1=0.8,
         beta2=0.95, params=ZERO_PARAMS),
    _cfg("zero_start", "Momentum", learning_rate=0.02, params=ZERO_PARAMS),
]


def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def _ulp32(x):
    """The spacing of float32 numbers at x."""
    if x == 0.0:
        return 2.0 ** -149
    e = math.frexp(abs(x))[1]
    return 2.0 ** max(e - 24, -149)


def compare(config, ours, theirs, tol):
    """Weights and per-step updates; see the module's text. The largest
    difference reported is the larger of the weights' relative difference
    (to their scale) and the updates' relative difference beyond the
    rounding allowance, so a value over the tolerance always means a
    mismatch."""
    name = config["name"]
    init = [_f32(v) for p in config["params"] for v in p["init"]]
    width = len(init)
    steps = len(config["grads"])
    if len(ours) != len(theirs):
        return 0, 0.0, f"{name}: keel gave {len(ours)} values, Paddle " \
                       f"{len(theirs)}"
    if len(ours) != width * steps:
        return 0, 0.0, (f"{name}: {len(ours)} values, expected "
                        f"{width} weights x {steps} steps")
    for i, (x, y) in enumerate(zip(ours, theirs)):
        if not isinstance(x, float) or not isinstance(y, float) or \
                not math.isfinite(x) or not math.isfinite(y):
            return 0, 0.0, (f"{name}: value {i}: keel {x!r}, Paddle {y!r}: "
                            f"finite numbers expected")
    worst = 0.0
    roundings = 2 if config.get("optimizer") == "AdamW" else 1
    prev_a, prev_b = init, init
    scale = [abs(v) for v in init]
    for k in range(steps):
        a = ours[k * width:(k + 1) * width]
        b = theirs[k * width:(k + 1) * width]
        for j in range(width):
            da, db = a[j] - prev_a[j], b[j] - prev_b[j]
            scale[j] += abs(db)
            ref = max(abs(b[j]), scale[j])
            wrel = abs(a[j] - b[j]) / ref if ref else abs(a[j] - b[j])
            worst = max(worst, wrel)
            if wrel > tol:
                return len(ours), worst, (
                    f"{name}: step {k + 1}, weight {j}: keel {a[j]!r}, "
                    f"Paddle {b[j]!r} (difference {wrel:.3g} of the "
                    f"weight's scale {ref:.3g}; tolerance {tol:g})")
            slack = roundings * (_ulp32(b[j]) + _ulp32(prev_b[j])) / 2
            excess = max(0.0, abs(da - db) - slack)
            rel = excess / abs(db) if db else (math.inf if excess else 0.0)
            worst = max(worst, rel)
            if rel > UPDATE_TOLERANCE:
                return len(ours), worst, (
                    f"{name}: step {k + 1}, weight {j}: update keel "
                    f"{da!r}, Paddle {db!r} (relative difference "
                    f"{abs(da - db) / abs(db) if db else math.inf:.3g}, "
                    f"{rel:.3g} beyond {roundings} float32 rounding(s) of the "
                    f"weight; "
                    f"tolerance {UPDATE_TOLERANCE:g})")
        prev_a, prev_b = a, b
    return len(ours), worst, None


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
    opt = getattr(paddle.optimizer, config["optimizer"])(
        parameters=params, **args)
    values = []
    for step in config["grads"]:
        loss = None
        for t, g in zip(params, step):
            term = (t * paddle.to_tensor(g, dtype="float32")).sum()
            loss = term if loss is None else loss + term
        loss.backward()
        opt.step()
        opt.clear_grad()
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
