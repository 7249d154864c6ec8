#!/usr/bin/env python3
"""Parity case 'lr': keel's learning-rate schedulers against
paddle.optimizer.lr, 300 steps per configuration.

The configurations are defined here only; run.py hands them to the C
driver (parity_lr.c) and runs each in Paddle with paddle_result(). Each
gives 301 values: the rate after construction, then after each of 300
steps (ReduceOnPlateau is fed METRICS, one per step). A step that raises in
Paddle, or fails in keel, is null. "args" holds Paddle's keyword
arguments; what is left out takes Paddle's default on both sides.

Configurations that Paddle rejects are listed too (REJECTED, and one
marked "expect_error" among the others): both sides must refuse them.
Paddle refuses by raising; any error elsewhere fails the configuration.

    .venv/bin/python parity_lr.py path/to/parity_lr     (or through meson:
    meson test -C build --suite parity)
"""

import math
import os
import sys

STEPS = 300
TOLERANCE = 1e-9


def _metrics():
    """A fixed loss curve: falls, plateaus with small ripples, falls
    again, rises; deterministic (no random numbers)."""
    out = []
    for i in range(STEPS):
        if i < 60:
            v = 1.0 - 0.01 * i
        elif i < 200:
            v = 0.4 + 1e-5 * math.sin(1.7 * i)
        elif i < 250:
            v = 0.4 - 1e-3 * (i - 200)
        else:
            v = 0.35 + 2e-3 * (i - 250) * (1 + 0.1 * math.cos(i))
        out.append(v)
    return out


METRICS = _metrics()
NEG_METRICS = [-m for m in METRICS]


def _cfg(group, name, scheduler, metrics=None, **args):
    c = {"group": group, "name": f"{scheduler}:{name}",
         "scheduler": scheduler, "args": args, "steps": STEPS}
    if metrics is not None:
        c["metrics"] = metrics
    return c


def _spec(scheduler, **args):
    """A scheduler for LinearWarmup to wrap."""
    return {"scheduler": scheduler, "args": args}


def _configs():
    c = []

    def add(scheduler, name, metrics=None, **args):
        c.append(_cfg(scheduler, name, scheduler, metrics, **args))

    add("StepDecay", "defaults", learning_rate=0.5, step_size=30)
    add("StepDecay", "step_size 1", learning_rate=0.5, step_size=1)
    add("StepDecay", "gamma 0.9", learning_rate=0.1, step_size=7, gamma=0.9)
    add("StepDecay", "gamma 0", learning_rate=1.0, step_size=3, gamma=0.0)
    add("StepDecay", "gamma < 0", learning_rate=0.1, step_size=2,
        gamma=-0.5)
    add("StepDecay", "step_size 300", learning_rate=0.3, step_size=300,
        gamma=0.2)

    add("MultiStepDecay", "defaults", learning_rate=0.5, milestones=[30, 80])
    add("MultiStepDecay", "milestone at 0", learning_rate=0.5,
        milestones=[0, 5, 10])
    add("MultiStepDecay", "one", learning_rate=0.1, milestones=[1],
        gamma=0.5)
    add("MultiStepDecay", "none", learning_rate=0.1, milestones=[],
        gamma=0.5)
    add("MultiStepDecay", "before 0 and at the end", learning_rate=1.0,
        milestones=[-3, 2, 299, 300], gamma=0.25)

    add("ExponentialDecay", "0.9", learning_rate=0.5, gamma=0.9)
    add("ExponentialDecay", "0.5", learning_rate=1.0, gamma=0.5)
    add("ExponentialDecay", "0.999999", learning_rate=0.1, gamma=0.999999)
    add("ExponentialDecay", "1e-3", learning_rate=3.0, gamma=1e-3)

    add("CosineAnnealingDecay", "T_max 10", learning_rate=0.5, T_max=10)
    add("CosineAnnealingDecay", "T_max 1", learning_rate=0.5, T_max=1)
    add("CosineAnnealingDecay", "eta_min", learning_rate=0.1, T_max=50,
        eta_min=0.01)
    add("CosineAnnealingDecay", "T_max 300", learning_rate=1.0, T_max=300)
    add("CosineAnnealingDecay", "eta_min above lr", learning_rate=0.1,
        T_max=7, eta_min=0.2)
    add("CosineAnnealingDecay", "T_max 3", learning_rate=2.0, T_max=3,
        eta_min=1e-4)
    add("CosineAnnealingDecay", "T_max 1000", learning_rate=1.0, T_max=1000)

    add("PolynomialDecay", "defaults", learning_rate=0.5, decay_steps=20)
    add("PolynomialDecay", "cycle", learning_rate=0.5, decay_steps=20,
        cycle=True)
    add("PolynomialDecay", "decay_steps 1", learning_rate=0.1, decay_steps=1,
        end_lr=0.0, power=2.0)
    add("PolynomialDecay", "decay_steps 1 cycle", learning_rate=0.1,
        decay_steps=1, end_lr=0.0, power=2.0, cycle=True)
    add("PolynomialDecay", "sqrt cycle", learning_rate=1.0, decay_steps=100,
        end_lr=0.01, power=0.5, cycle=True)
    add("PolynomialDecay", "cube", learning_rate=1.0, decay_steps=37,
        end_lr=0.2, power=3.0)
    add("PolynomialDecay", "end_lr above lr", learning_rate=0.1,
        decay_steps=7, end_lr=0.3, power=1.5, cycle=True)

    add("LinearWarmup", "constant", learning_rate=0.5, warmup_steps=10,
        start_lr=0.0, end_lr=0.5)
    add("LinearWarmup", "warmup_steps 1", learning_rate=0.1, warmup_steps=1,
        start_lr=0.0, end_lr=0.1)
    add("LinearWarmup", "lands below", learning_rate=0.05, warmup_steps=50,
        start_lr=0.01, end_lr=0.2)
    add("LinearWarmup", "negative constant", learning_rate=-0.5,
        warmup_steps=5, start_lr=0.1, end_lr=0.2)
    add("LinearWarmup", "cosine (closed form)",
        learning_rate=_spec("CosineAnnealingDecay", learning_rate=0.5,
                            T_max=40, eta_min=0.01),
        warmup_steps=25, start_lr=0.0, end_lr=0.5)
    add("LinearWarmup", "step decay",
        learning_rate=_spec("StepDecay", learning_rate=0.5, step_size=20,
                            gamma=0.5),
        warmup_steps=10, start_lr=0.0, end_lr=0.5)
    add("LinearWarmup", "polynomial cycle",
        learning_rate=_spec("PolynomialDecay", learning_rate=0.5,
                            decay_steps=30, end_lr=0.001, power=2.0,
                            cycle=True),
        warmup_steps=1, start_lr=0.1, end_lr=0.5)
    add("LinearWarmup", "exponential",
        learning_rate=_spec("ExponentialDecay", learning_rate=0.3,
                            gamma=0.99),
        warmup_steps=7, start_lr=0.05, end_lr=0.2)
    add("LinearWarmup", "multi-step",
        learning_rate=_spec("MultiStepDecay", learning_rate=0.3,
                            milestones=[0, 40, 100]),
        warmup_steps=30, start_lr=0.0, end_lr=0.3)
    add("LinearWarmup", "nested warm-ups",
        learning_rate=_spec("LinearWarmup",
                            learning_rate=_spec("CosineAnnealingDecay",
                                                learning_rate=0.5, T_max=40),
                            warmup_steps=10, start_lr=0.1, end_lr=0.5),
        warmup_steps=5, start_lr=0.0, end_lr=0.1)
    add("LinearWarmup", "one-cycle, stepped past its end",
        learning_rate=_spec("OneCycleLR", max_learning_rate=0.1,
                            total_steps=100),
        warmup_steps=20, start_lr=0.0, end_lr=0.004)

    add("OneCycleLR", "defaults", max_learning_rate=0.1, total_steps=300)
    add("OneCycleLR", "linear", max_learning_rate=0.1, total_steps=300,
        anneal_strategy="linear")
    add("OneCycleLR", "three_phase", max_learning_rate=0.1, total_steps=300,
        three_phase=True)
    add("OneCycleLR", "three_phase linear", max_learning_rate=0.1,
        total_steps=300, three_phase=True, anneal_strategy="linear")
    add("OneCycleLR", "phase_pct 0.1", max_learning_rate=1.0,
        total_steps=400, divide_factor=10.0, end_learning_rate=0.0,
        phase_pct=0.1)
    add("OneCycleLR", "phase_pct 0.45 three_phase", max_learning_rate=0.5,
        total_steps=350, divide_factor=4.0, end_learning_rate=1e-3,
        phase_pct=0.45, anneal_strategy="linear", three_phase=True)
    add("OneCycleLR", "stepped past total_steps", max_learning_rate=0.1,
        total_steps=100)
    add("OneCycleLR", "phase_pct 0", max_learning_rate=0.1, total_steps=250,
        phase_pct=0.0)
    add("OneCycleLR", "phase_pct 1 (zero-length fall)",
        max_learning_rate=0.1, total_steps=200, phase_pct=1.0)
    add("OneCycleLR", "total_steps 1", max_learning_rate=0.1, total_steps=1)
    # Paddle fails here with a ZeroDivisionError (the rise has no steps)
    # and keel refuses it with INVALID_ARGUMENT: both must reject it.
    add("OneCycleLR", "total_steps 2, zero-length rise",
        max_learning_rate=0.1, total_steps=2, phase_pct=0.5)
    c[-1]["expect_error"] = True
    add("OneCycleLR", "divide_factor 1", max_learning_rate=0.5,
        total_steps=301, divide_factor=1.0, end_learning_rate=0.5,
        phase_pct=0.25)

    add("ReduceOnPlateau", "defaults", METRICS, learning_rate=1.0)
    add("ReduceOnPlateau", "patience 2", METRICS, learning_rate=1.0,
        factor=0.5, patience=2)
    add("ReduceOnPlateau", "abs, cooldown", METRICS, learning_rate=1.0,
        factor=0.5, patience=3, threshold=1e-3, threshold_mode="abs",
        cooldown=5)
    add("ReduceOnPlateau", "max", NEG_METRICS, learning_rate=0.5,
        mode="max", factor=0.5, patience=4)
    add("ReduceOnPlateau", "max, positive metrics",
        [2.0 - m for m in METRICS], learning_rate=0.5, mode="max",
        factor=0.5, patience=4)
    add("ReduceOnPlateau", "max abs, cooldown", NEG_METRICS,
        learning_rate=0.5, mode="max", factor=0.2, patience=1,
        threshold=1e-6, threshold_mode="abs", cooldown=2)
    add("ReduceOnPlateau", "min_lr floor", METRICS, learning_rate=1.0,
        patience=0, threshold=0.0, min_lr=1e-3)
    add("ReduceOnPlateau", "epsilon suppresses", METRICS, learning_rate=1e-6,
        factor=0.5, patience=1, epsilon=1e-6)
    add("ReduceOnPlateau", "negative metrics, rel", [m - 2 for m in METRICS],
        learning_rate=1.0, factor=0.5, patience=5, threshold=1e-2,
        cooldown=1)
    add("ReduceOnPlateau", "upper-case modes", NEG_METRICS,
        learning_rate=1.0, mode="MAX", threshold_mode="ABS", patience=3,
        factor=0.3)
    return c


# Paddle rejects each of these; keel must too.
REJECTED = [
    ("StepDecay", dict(learning_rate=0.1, step_size=0)),
    ("StepDecay", dict(learning_rate=0.1, step_size=-3)),
    ("StepDecay", dict(learning_rate=0.1, step_size=2, gamma=1.0)),
    ("StepDecay", dict(learning_rate=-0.1, step_size=2)),
    ("MultiStepDecay", dict(learning_rate=0.1, milestones=[5, 3])),
    ("MultiStepDecay", dict(learning_rate=0.1, milestones=[5, 5])),
    ("MultiStepDecay", dict(learning_rate=0.1, milestones=[5], gamma=1.5)),
    ("ExponentialDecay", dict(learning_rate=0.1, gamma=1.0)),
    ("ExponentialDecay", dict(learning_rate=0.1, gamma=0.0)),
    ("CosineAnnealingDecay", dict(learning_rate=0.1, T_max=0)),
    ("CosineAnnealingDecay", dict(learning_rate=-1.0, T_max=5)),
    ("PolynomialDecay", dict(learning_rate=0.1, decay_steps=0)),
    ("PolynomialDecay", dict(learning_rate=0.1, decay_steps=5, power=0.0)),
    ("LinearWarmup", dict(learning_rate=0.1, warmup_steps=0, start_lr=0.0,
                          end_lr=0.1)),
    ("LinearWarmup", dict(learning_rate=0.1, warmup_steps=-1, start_lr=0.0,
                          end_lr=0.1)),
    ("LinearWarmup", dict(learning_rate=0.1, warmup_steps=5, start_lr=0.1,
                          end_lr=0.1)),
    ("LinearWarmup", dict(learning_rate=0.1, warmup_steps=5, start_lr=-0.1,
                          end_lr=0.1)),
    ("OneCycleLR", dict(max_learning_rate=0.1, total_steps=0)),
    ("OneCycleLR", dict(max_learning_rate=-0.1, total_steps=10)),
    ("OneCycleLR", dict(max_learning_rate=0.1, total_steps=10,
                        end_learning_rate=-1.0)),
    ("OneCycleLR", dict(max_learning_rate=0.1, total_steps=10,
                        phase_pct=1.5)),
    ("OneCycleLR", dict(max_learning_rate=0.1, total_steps=10,
                        phase_pct=-0.5)),
    ("OneCycleLR", dict(max_learning_rate=0.1, total_steps=10,
                        phase_pct=0.5, three_phase=True)),
    ("OneCycleLR", dict(max_learning_rate=0.1, total_steps=10,
                        anneal_strategy="Cos")),
    ("OneCycleLR", dict(max_learning_rate=0.1, total_steps=10,
                        divide_factor=0.0)),
    ("OneCycleLR", dict(max_learning_rate=0.1, total_steps=10,
                        divide_factor=-2.0)),
    ("ReduceOnPlateau", dict(learning_rate=0.1, mode="avg")),
    ("ReduceOnPlateau", dict(learning_rate=0.1, factor=1.0)),
    ("ReduceOnPlateau", dict(learning_rate=0.1, threshold_mode="pct")),
]


def _rejected():
    out = []
    for i, (scheduler, args) in enumerate(REJECTED):
        c = _cfg(f"{scheduler} rejects", f"rejected #{i}", scheduler,
                 METRICS if scheduler == "ReduceOnPlateau" else None, **args)
        c["expect_error"] = True
        out.append(c)
    return out


CONFIGS = _configs() + _rejected()


def _number(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _build(spec):
    import paddle.optimizer.lr as lr

    args = dict(spec["args"])
    if isinstance(args.get("learning_rate"), dict):
        args["learning_rate"] = _build(args["learning_rate"])
    return getattr(lr, spec["scheduler"])(**args)


def paddle_result(config):
    """Run one configuration in Paddle, in the driver's format."""
    s = _build(config)  # raises when Paddle refuses the arguments
    metrics = config.get("metrics")
    values = [_number(s())]
    for k in range(1, config["steps"] + 1):
        try:
            if config["scheduler"] == "ReduceOnPlateau":
                s.step(metrics[k - 1])
            else:
                s.step()
            values.append(_number(s()))
        except (ValueError, ZeroDivisionError):
            # Paddle's OneCycleLR refuses steps past total_steps
            # (ValueError) and divides by a zero-length phase: a failed
            # step, which keel must report as failed too (null).
            values.append(None)
    return {"values": values}


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run

    if len(sys.argv) != 2:
        print("usage: parity_lr.py path/to/parity_lr", file=sys.stderr)
        sys.exit(2)
    sys.exit(run.main(["lr", sys.argv[1]]))
