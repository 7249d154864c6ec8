#!/usr/bin/env python3
"""Parity case 'grad_scaler': keel's GradScaler against paddle.amp.GradScaler.

Each configuration trains a float32 Linear(4, 3) on fixed data (x [6, 4],
y [6, 3], loss = mean((x W + b - y)^2)) for a few steps, with the loss
multiplied by inf or NaN at chosen steps ("inject"), so that the scaled
gradients are not finite there. Every step is, on both sides,

    with auto_cast(enable=False, dtype=amp_dtype):   # keel_amp_begin/end
        loss = mean(square(linear(x) - y)) [* inf | * nan]
    scaled = scaler.scale(loss); scaled.backward()
    then, by "mode":
      step          scaler.step(opt); scaler.update()
      minimize      scaler.minimize(opt, scaled)
      unscale_step  scaler.unscale_(opt); scaler.step(opt); scaler.update()
    opt.clear_grad()

The auto_cast scope is disabled on both sides: Paddle's dygraph auto_cast
does nothing on the CPU anyway, and with enable=False both frameworks
compute the same float32 forward pass while the scope still records
amp_dtype as the last auto_cast dtype, which the scaler consults (float16:
dynamic scaling; anything else: the scaler turns itself off at the first
scale(), with a warning).

Values, per step: the scale after the step's update (keel_grad_scaler_get_
scale; Paddle: the float32 _scale tensor, or 1.0 once disabled, which is
what scale() then multiplies by), whether the step was skipped (found
inf/NaN), the unscaled gradients left on the parameters after the step
(W then b; "nan"/"inf" on a skipped step) and the parameters (W then b).
"misuse" adds, at one step, a call that Paddle refuses with RuntimeError
and keel with INVALID_STATE (unscale_ twice, unscale_ after step, step
twice): both report "refused" at that point and go on. At the end, the
number of entries of the scaler's state dict (Paddle: {} when disabled)
and the entries STATE_KEYS, "absent" when missing.

compare() checks: the scale, the skip flags, the state dict and any string
exactly (the scale is float32 arithmetic on both sides, so a decrease by
0.3 must give Paddle's f32(s) * f32(0.3), not a float64 product rounded
once); gradients and parameters within TOLERANCE (1e-6) relative to the
larger of the two values and the largest magnitude of that tensor (a
gradient element near zero carries the rounding of the sums it came
from).

Paddle's GradScaler refuses to work outside GPU, XPU and custom devices:
paddle_result() answers its device check for the CPU by giving
paddle.amp.grad_scaler a tracer proxy whose _expected_place is a custom
place (only while the configuration runs). Paddle 3.3.1's _update()
prints float(self._scale) of a shape-[1] tensor when it decreases the
scale, which numpy 2 refuses; Tensor.__float__ is replaced by one that
reads the single element, for the same span, and the message is
swallowed.

    .venv/bin/python parity_grad_scaler.py path/to/parity_grad_scaler
"""

import contextlib
import io
import math
import os
import sys
import warnings

import numpy as np

TOLERANCE = 1e-6

IN, OUT, BATCH = 4, 3, 6

STATE_KEYS = ["scale", "incr_ratio", "decr_ratio", "incr_every_n_steps",
              "decr_every_n_nan_or_inf", "incr_count", "decr_count",
              "use_dynamic_loss_scaling"]


def _wave(n, k, scale=1.0, offset=0.0):
    i = np.arange(n, dtype=np.float64)
    v = scale * np.sin(0.91 * i + k + 0.1) * np.cos(0.37 * i + 0.5 * k + 0.2)
    return [float(np.float32(x)) for x in v + offset]


def _away_from_zero(vals, floor=0.3):
    """Signed values with |v| >= floor (parameters that stay clear of 0)."""
    return [float(np.float32(math.copysign(max(abs(v), floor) + 0.1, v)))
            for v in vals]


DATA = {
    "weight": _away_from_zero(_wave(IN * OUT, 1)),   # [in, out], Paddle
    "bias": _away_from_zero(_wave(OUT, 2, 0.5)),
    "x": _wave(BATCH * IN, 3, 1.5),
    "y": _wave(BATCH * OUT, 4, 1.0, 0.5),
}


def _cfg(name, group, steps=8, inject=None, mode="step", optimizer="SGD",
         opt_args=None, amp_dtype="float16", misuse=None, **scaler):
    inj = [None] * steps
    for k, what in (inject or {}).items():
        inj[k] = what
    c = {"name": name, "group": group, "mode": mode, "optimizer": optimizer,
         "opt_args": opt_args or {"learning_rate": 0.05},
         "amp_dtype": amp_dtype, "scaler": scaler, "inject": inj}
    c.update(DATA)
    if misuse:
        c["misuse"] = misuse
    return c


CONFIGS = [
    # The established trace: scales 8, 16, 8, 4, 4, 8; steps 2, 3 skipped.
    _cfg("sgd_inf_2_3", "SGD step+update", steps=6,
         inject={2: "inf", 3: "inf"}, init_loss_scaling=8.0,
         incr_every_n_steps=2),
    _cfg("sgd_nan_inf", "SGD step+update", inject={1: "nan", 4: "inf"},
         init_loss_scaling=1024.0, incr_every_n_steps=3),
    _cfg("sgd_first_step_inf", "SGD step+update",
         inject={0: "inf", 5: "nan"}, init_loss_scaling=2.0 ** 15,
         incr_every_n_steps=1),
    # decr_every_n_nan_or_inf 2: bad steps 2 and 4 are not consecutive
    # (the good step 3 resets the count), 4 and 5 are.
    _cfg("sgd_decr_every_2", "SGD step+update",
         inject={2: "inf", 4: "nan", 5: "inf"}, init_loss_scaling=64.0,
         incr_every_n_steps=2, decr_every_n_nan_or_inf=2),
    # Ratios that are not powers of two: the scale's float32 arithmetic
    # and the unscaling of gradients by a scale like 1000 show.
    _cfg("sgd_ratios_3_0.3", "SGD step+update",
         inject={2: "inf", 3: "nan", 6: "inf"}, init_loss_scaling=1000.0,
         incr_ratio=3.0, decr_ratio=0.3, incr_every_n_steps=2),
    _cfg("sgd_static_scale", "SGD step+update", inject={3: "inf"},
         init_loss_scaling=512.0, use_dynamic_loss_scaling=False),
    _cfg("sgd_minimize", "SGD minimize", mode="minimize",
         inject={2: "inf", 3: "inf"}, init_loss_scaling=8.0,
         incr_every_n_steps=2),
    _cfg("sgd_minimize_ratios", "SGD minimize", mode="minimize",
         inject={1: "nan", 5: "inf"}, init_loss_scaling=3.0,
         incr_ratio=1.5, decr_ratio=0.7, incr_every_n_steps=2,
         decr_every_n_nan_or_inf=2),
    _cfg("sgd_unscale_first", "SGD unscale_+step", mode="unscale_step",
         inject={2: "nan", 3: "inf"}, init_loss_scaling=16.0,
         incr_every_n_steps=2),
    _cfg("adam_inf_2_3", "Adam", optimizer="Adam",
         opt_args={"learning_rate": 0.01}, inject={2: "inf", 3: "inf"},
         init_loss_scaling=8.0, incr_every_n_steps=2),
    # A skipped first step: the moments and beta powers must not move.
    _cfg("adam_first_step_nan", "Adam", optimizer="Adam",
         opt_args={"learning_rate": 0.01, "beta1": 0.8, "beta2": 0.95},
         inject={0: "nan", 4: "inf"}, init_loss_scaling=256.0,
         incr_every_n_steps=3, decr_every_n_nan_or_inf=1),
    _cfg("adam_minimize_l2", "Adam", optimizer="Adam", mode="minimize",
         opt_args={"learning_rate": 0.01, "weight_decay": 0.1},
         inject={3: "inf", 4: "nan"}, init_loss_scaling=100.0,
         incr_ratio=3.0, decr_ratio=0.3, incr_every_n_steps=2,
         decr_every_n_nan_or_inf=2),
    _cfg("adam_unscale_first", "Adam", optimizer="Adam",
         mode="unscale_step", opt_args={"learning_rate": 0.01},
         inject={1: "inf"}, init_loss_scaling=8.0, incr_every_n_steps=2),
    _cfg("momentum_inf", "Momentum and AdamW", optimizer="Momentum",
         opt_args={"learning_rate": 0.02, "momentum": 0.9},
         inject={2: "inf", 5: "nan"}, init_loss_scaling=32.0,
         incr_every_n_steps=2),
    _cfg("adamw_inf", "Momentum and AdamW", optimizer="AdamW",
         opt_args={"learning_rate": 0.01, "weight_decay": 0.05},
         inject={1: "inf", 2: "inf"}, init_loss_scaling=8.0,
         incr_every_n_steps=2),
    # Global-norm clipping runs on the unscaled gradients.
    _cfg("sgd_clip_global_norm", "SGD + ClipGradByGlobalNorm",
         opt_args={"learning_rate": 0.05, "clip_global_norm": 0.5},
         inject={3: "inf"}, init_loss_scaling=4096.0, incr_every_n_steps=2),
    # A scaler that is off: scale() returns the loss, step() always steps
    # (a NaN loss at the last step reaches the parameters).
    _cfg("disabled", "disabled", enable=False, inject={7: "nan"},
         init_loss_scaling=8.0),
    # bfloat16 as the last auto_cast dtype: the first scale() turns dynamic
    # scaling off for good (Paddle warns); training goes on unscaled.
    _cfg("bf16_turns_it_off", "disabled", amp_dtype="bfloat16",
         inject={7: "inf"}, init_loss_scaling=8.0, incr_every_n_steps=2),
    # Calls Paddle refuses with RuntimeError (keel: INVALID_STATE).
    _cfg("misuse_unscale_twice", "misuse", mode="unscale_step", steps=4,
         misuse={"step": 1, "call": "unscale_twice"},
         init_loss_scaling=8.0, incr_every_n_steps=2),
    _cfg("misuse_unscale_after_step", "misuse", steps=4,
         misuse={"step": 2, "call": "unscale_after_step"},
         inject={2: "inf"}, init_loss_scaling=8.0, incr_every_n_steps=2),
    _cfg("misuse_step_twice", "misuse", steps=4,
         misuse={"step": 0, "call": "step_twice"},
         init_loss_scaling=8.0, incr_every_n_steps=2),
    # Arguments both refuse (Paddle asserts them).
    dict(_cfg("incr_ratio_1", "rejected", steps=1, init_loss_scaling=8.0,
              incr_ratio=1.0), expect_error=True),
    dict(_cfg("decr_ratio_1", "rejected", steps=1, init_loss_scaling=8.0,
              decr_ratio=1.0), expect_error=True),
]


# ---- comparison -------------------------------------------------------------

def _layout(config):
    """Per step: (kind, count) blocks, in the driver's order."""
    n_w, n_b = IN * OUT, OUT
    per_step = [("exact", 1), ("exact", 1), ("tensor", n_w), ("tensor", n_b),
                ("tensor", n_w), ("tensor", n_b)]
    blocks = []
    misuse = config.get("misuse")
    for k in range(len(config["inject"])):
        if misuse and misuse["step"] == k:
            blocks.append(("exact", 1))
        blocks += per_step
    blocks.append(("exact", 1 + len(STATE_KEYS)))
    return blocks


def _finite(v):
    return isinstance(v, float) and math.isfinite(v)


def compare(config, ours, theirs, tol):
    name = config["name"]
    if len(ours) != len(theirs):
        return 0, 0.0, f"{name}: keel gave {len(ours)} values, Paddle " \
                       f"{len(theirs)}"
    blocks = _layout(config)
    if sum(n for _, n in blocks) != len(ours):
        return 0, 0.0, (f"{name}: {len(ours)} values, the layout expects "
                        f"{sum(n for _, n in blocks)}")
    worst, i = 0.0, 0
    for kind, n in blocks:
        a, b = ours[i:i + n], theirs[i:i + n]
        if kind == "exact":
            for j, (x, y) in enumerate(zip(a, b)):
                if not (x == y and type(x) is type(y)):
                    return len(ours), worst, (
                        f"{name}: value {i + j}: keel {x!r}, Paddle {y!r} "
                        f"(compared exactly)")
        else:
            big = max([abs(y) for y in b if _finite(y)], default=0.0)
            for j, (x, y) in enumerate(zip(a, b)):
                if _finite(x) and _finite(y):
                    ref = max(abs(x), abs(y), big)
                    d = abs(x - y) / ref if ref else 0.0
                    worst = max(worst, d)
                    if d <= tol:
                        continue
                elif x == y and type(x) is type(y):
                    continue
                return len(ours), worst, (
                    f"{name}: value {i + j}: keel {x!r}, Paddle {y!r} "
                    f"(tolerance {tol:g} of the tensor's scale {big:.3g})")
        i += n
    return len(ours), worst, None


# ---- the Paddle side --------------------------------------------------------

def _num(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


class _CustomPlace:
    """Answers the GradScaler's device check as a custom device would."""

    def is_gpu_place(self):
        return False

    def is_xpu_place(self):
        return False

    def is_custom_place(self):
        return True


class _TracerProxy:
    def __init__(self, tracer):
        self._tracer = tracer

    def __getattr__(self, name):
        if name == "_expected_place":
            return _CustomPlace()
        return getattr(self._tracer, name)


@contextlib.contextmanager
def _scaler_on_cpu(paddle):
    gs = paddle.amp.grad_scaler
    real_tracer = gs._dygraph_tracer
    real_float = paddle.Tensor.__dict__.get("__float__")
    gs._dygraph_tracer = lambda: _TracerProxy(real_tracer())
    paddle.Tensor.__float__ = lambda t: float(t.numpy().reshape(-1)[0])
    try:
        yield
    finally:
        gs._dygraph_tracer = real_tracer
        if real_float is None:
            del paddle.Tensor.__float__
        else:
            paddle.Tensor.__float__ = real_float


def _optimizer(paddle, config, params):
    args = dict(config["opt_args"])
    clip = args.pop("clip_global_norm", None)
    if clip is not None:
        args["grad_clip"] = paddle.nn.ClipGradByGlobalNorm(clip)
    return getattr(paddle.optimizer, config["optimizer"])(
        parameters=params, **args)


def _refused(call):
    try:
        call()
    except RuntimeError:
        return "refused"
    return "accepted"


def paddle_result(config):
    warnings.filterwarnings("ignore")
    import paddle

    paddle.disable_static()
    paddle.set_device("cpu")
    with _scaler_on_cpu(paddle), contextlib.redirect_stdout(io.StringIO()):
        return _train(paddle, config)


def _train(paddle, config):
    sargs = config["scaler"]
    scaler = paddle.amp.GradScaler(**sargs)
    lin = paddle.nn.Linear(IN, OUT)
    lin.weight.set_value(np.array(config["weight"], np.float32)
                         .reshape(IN, OUT))
    lin.bias.set_value(np.array(config["bias"], np.float32))
    opt = _optimizer(paddle, config, lin.parameters())
    x = paddle.to_tensor(np.array(config["x"], np.float32)
                         .reshape(BATCH, IN))
    y = paddle.to_tensor(np.array(config["y"], np.float32)
                         .reshape(BATCH, OUT))
    misuse = config.get("misuse") or {}
    mode = config["mode"]
    values = []
    for k, inject in enumerate(config["inject"]):
        with paddle.amp.auto_cast(enable=False, dtype=config["amp_dtype"]):
            loss = paddle.mean(paddle.square(lin(x) - y))
            if inject:
                loss = loss * paddle.full([], float(inject), "float32")
        scaled = scaler.scale(loss)
        scaled.backward()
        bad = misuse.get("call") if misuse.get("step") == k else None
        if mode == "minimize":
            scaler.minimize(opt, scaled)
        else:
            if mode == "unscale_step":
                scaler.unscale_(opt)
                if bad == "unscale_twice":
                    values.append(_refused(lambda: scaler.unscale_(opt)))
            scaler.step(opt)
            if bad == "unscale_after_step":
                values.append(_refused(lambda: scaler.unscale_(opt)))
            if bad == "step_twice":
                values.append(_refused(lambda: scaler.step(opt)))
            scaler.update()
        scale = float(scaler._scale.numpy().reshape(-1)[0]) \
            if scaler.is_enable() else 1.0
        values.append(scale)
        values.append(bool(getattr(scaler, "_cache_found_inf", None)))
        for p in (lin.weight, lin.bias):
            g = p.grad
            values += [_num(v) for v in
                       (g.numpy() if g is not None else np.zeros(p.shape))
                       .astype(np.float64).ravel()]
        for p in (lin.weight, lin.bias):
            values += [_num(v) for v in p.numpy().astype(np.float64).ravel()]
        opt.clear_grad()
    sd = scaler.state_dict()
    values.append(float(len(sd)))
    for key in STATE_KEYS:
        if key not in sd:
            values.append("absent")
            continue
        v = sd[key]
        if key == "use_dynamic_loss_scaling":
            values.append("true" if v else "false")
        else:
            values.append(float(np.asarray(v, np.float64).reshape(-1)[0]))
    return {"values": values}


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run

    if len(sys.argv) != 2:
        print("usage: parity_grad_scaler.py path/to/parity_grad_scaler",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(run.main(["grad_scaler", sys.argv[1]]))
