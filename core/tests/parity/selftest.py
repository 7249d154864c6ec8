#!/usr/bin/env python3
"""Self-test of the parity harness (run.py): it must be able to fail.

    python3 selftest.py

Feeds run.run_case fake cases (a CONFIGS list and a paddle_result) and fake
drivers (small Python programs in a temporary folder) and checks the exit
status and the summary line of each:

  - an honest pair agrees (so the checks below fail for the reason given);
  - a deliberately wrong implementation (values off by more than the
    tolerance, a value missing, null for a number, a dropped
    configuration, a crashing driver) fails;
  - an error never counts as agreement: a driver error, a Paddle side
    that raises, or both, on a configuration that should work, fail; a
    Paddle that raises on every call fails every configuration, the
    rejected ones included;
  - a configuration both must reject agrees only when the driver reports
    an error and Paddle raises one of run.REJECTIONS;
  - the optim case's update check fails a first Adam step 6.5e-6
    (relative) too large, which its weight check alone lets through;
  - a missing virtual environment is a SKIP (77) that says what to run.

Needs no Paddle; exits 0 when every check holds, 1 otherwise.
"""

import contextlib
import io
import os
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402

FAILURES = []
CHECKS = [0]

# A schedule both sides compute: lr * gamma^(k // 3) for 7 steps.
STEPS = 7


def step_decay(cfg, k):
    return cfg["lr"] * cfg["gamma"] ** (k // 3)


CONFIGS = [
    {"name": "a", "group": "g", "lr": 0.1, "gamma": 0.5},
    {"name": "b", "group": "g", "lr": 0.2, "gamma": 0.9},
    {"name": "reject", "group": "r", "lr": -1.0, "gamma": 0.5,
     "expect_error": True},
]


def honest_paddle(cfg):
    if cfg["lr"] < 0:
        raise ValueError("Invalid learning rate")
    return {"values": [step_decay(cfg, k) for k in range(STEPS)]}


def case(paddle_result, configs=CONFIGS, tol=1e-9, **extra):
    mod = types.ModuleType("fake_case")
    mod.CONFIGS = configs
    mod.TOLERANCE = tol
    mod.paddle_result = paddle_result
    for k, v in extra.items():
        setattr(mod, k, v)
    return mod


DRIVER_HEAD = """
import json, sys
def step_decay(cfg, k):
    return cfg["lr"] * cfg["gamma"] ** (k // 3)
configs = json.load(sys.stdin)["configs"]
results = []
for cfg in configs:
    if cfg["lr"] < 0:
        results.append({"name": cfg["name"], "error": "learning rate < 0"})
        continue
    values = [step_decay(cfg, k) for k in range(7)]
"""

DRIVER_TAIL = """
    results.append({"name": cfg["name"], "values": values})
"""


def driver(tmp, tag, body="", tail=DRIVER_TAIL, after=""):
    """A driver program: the honest implementation, with `body` inserted
    before each configuration's result is appended (to break it) and
    `after` run before printing."""
    path = os.path.join(tmp, f"driver_{tag}.py")
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n")
        f.write(DRIVER_HEAD)
        f.write(body)
        f.write(tail)
        f.write(after)
        f.write('print(json.dumps({"results": results}))\n')
    os.chmod(path, 0o755)
    return path


def check(what, mod, drv, want_rc, want_agree=None, want_text=None):
    CHECKS[0] += 1
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = run.run_case("selftest", mod, drv)
    text = out.getvalue()
    problems = []
    if rc != want_rc:
        problems.append(f"exit status {rc}, expected {want_rc}")
    if want_agree is not None:
        line = f"{want_agree}/{len(mod.CONFIGS)} configurations agree"
        if line not in text:
            problems.append(f"no line '{line}'")
    if want_text and want_text not in text:
        problems.append(f"no text {want_text!r}")
    status = "ok  " if not problems else "FAIL"
    print(f"{status} {what}")
    if problems:
        FAILURES.append(what)
        for p in problems:
            print(f"     {p}")
        print("     harness output:")
        for line in text.splitlines():
            print(f"       {line}")


def harness_checks(tmp):
    honest = driver(tmp, "honest")
    check("honest driver and Paddle agree", case(honest_paddle), honest,
          0, 3)

    off = driver(tmp, "off", "    values[4] *= 1 + 1e-6\n")
    check("a value off by 1e-6 at tolerance 1e-9 fails",
          case(honest_paddle), off, 1, 1, "first mismatch at index 4")
    check("the same value within tolerance 1e-5 agrees",
          case(honest_paddle, tol=1e-5), off, 0, 3)

    short = driver(tmp, "short", "    values = values[:-1]\n")
    check("a missing value fails", case(honest_paddle), short, 1, 1,
          "keel gave 6 values, Paddle 7")

    null = driver(tmp, "null", "    values[2] = None\n")
    check("null for a number fails", case(honest_paddle), null, 1, 1)

    dropped = driver(tmp, "dropped", after="results = results[1:]\n")
    check("a configuration the driver leaves out fails",
          case(honest_paddle), dropped, 1, 2, "no result from the driver")

    crash = driver(tmp, "crash", after="sys.exit(3)\n")
    check("a crashing driver fails", case(honest_paddle), crash, 1, 0,
          "exited 3")

    garbage = driver(tmp, "garbage", after="print('not json')\n"
                     "sys.exit(0)\n")
    check("a driver writing no JSON fails", case(honest_paddle), garbage,
          1, 0)

    kerr = driver(tmp, "kerr", tail="""
    if cfg["name"] == "b":
        results.append({"name": "b", "error": "out of memory"})
        continue
    results.append({"name": cfg["name"], "values": values})
""")
    check("a driver error on a valid configuration fails",
          case(honest_paddle), kerr, 1, 2, "an error is never agreement")

    def paddle_raises_on_b(cfg):
        if cfg["name"] == "b":
            raise ValueError("unsupported")
        return honest_paddle(cfg)

    check("a Paddle rejection of a valid configuration fails",
          case(paddle_raises_on_b), honest, 1, 2,
          "an error is never agreement")
    check("errors on both sides of a valid configuration fail",
          case(paddle_raises_on_b), kerr, 1, 2,
          "an error is never agreement")

    def broken_paddle(cfg):
        raise RuntimeError("paddle is broken")

    check("a Paddle that raises on every call fails every configuration",
          case(broken_paddle), honest, 1, 0, "raised RuntimeError")

    def paddle_import_fails(cfg):
        import paddle_that_does_not_exist  # noqa: F401

    check("a Paddle that cannot be imported fails every configuration",
          case(paddle_import_fails), honest, 1, 0, "ModuleNotFoundError")

    def paddle_returns_error(cfg):
        return {"error": "something"}

    check("a Paddle side returning no values fails",
          case(paddle_returns_error), honest, 1, 0, "instead of")

    def paddle_accepts_all(cfg):
        return {"values": [step_decay(cfg, k) for k in range(STEPS)]}

    check("a configuration Paddle accepts but keel rejects fails",
          case(paddle_accepts_all), honest, 1, 2, "must be rejected by both")

    accepts = driver(tmp, "accepts", body="", tail=DRIVER_TAIL)
    accepts_src = open(accepts).read().replace(
        'if cfg["lr"] < 0:', 'if False:')
    with open(accepts, "w") as f:
        f.write(accepts_src)
    check("a configuration keel accepts but Paddle rejects fails",
          case(honest_paddle), accepts, 1, 2, "must be rejected by both")

    def paddle_rejects_wrongly(cfg):
        if cfg["lr"] < 0:
            raise KeyError("lr")
        return honest_paddle(cfg)

    check("a rejection by an exception outside REJECTIONS fails",
          case(paddle_rejects_wrongly), honest, 1, 2, "raised KeyError")


def optim_update_checks():
    """parity_optim.compare against a first Adam step too large by 6.5e-6
    (the size a starting beta power left in float64 gives)."""
    spec_path = os.path.join(HERE, "parity_optim.py")
    import importlib.util
    spec = importlib.util.spec_from_file_location("parity_optim", spec_path)
    optim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(optim)

    def weights(cfg, first_step_scale):
        """Fake per-step weights: each step moves every weight by 0.01
        (Adam's first steps are about lr), the first by 0.01 * scale,
        rounded to float32 as a float32 parameter would be."""
        init = [optim._f32(v) for p in cfg["params"] for v in p["init"]]
        out, w = [], init
        for k in range(len(cfg["grads"])):
            step = 0.01 * (first_step_scale if k == 0 else 1.0)
            w = [optim._f32(x - step) for x in w]
            out.extend(w)
        return out

    for name in ("Adam:plain", "Adam:zero_start", "AdamW:zero_start"):
        cfg = next(c for c in optim.CONFIGS if c["name"] == name)
        good = weights(cfg, 1.0)
        bad = weights(cfg, 1.0 + 6.5e-6)
        CHECKS[0] += 1
        n, worst, mismatch = optim.compare(cfg, good, good, optim.TOLERANCE)
        if mismatch:
            FAILURES.append(f"optim compare: {name} identical runs")
            print(f"FAIL optim compare: identical weights of {name} "
                  f"mismatch: {mismatch}")
        else:
            print(f"ok   optim compare: identical weights of {name} agree")
        n, worst, wmismatch = run.compare_values(cfg, bad, good,
                                                 optim.TOLERANCE)
        n, worst, mismatch = optim.compare(cfg, bad, good, optim.TOLERANCE)
        if name.endswith("zero_start"):
            CHECKS[0] += 1
            if mismatch:
                print(f"ok   optim compare: {name}, first step 6.5e-6 "
                      f"too large, fails ({mismatch})")
            else:
                FAILURES.append(f"optim compare: {name} 6.5e-6")
                print(f"FAIL optim compare: {name}, first step 6.5e-6 too "
                      f"large, passed")
        else:
            # Starting at |p| ~ 1, one float32 rounding of the weight is
            # as large as the error: only the zero_start configurations can
            # see it. Record what the weights alone say, for the reader.
            print(f"info optim compare: {name} (|p| ~ 1), first step 6.5e-6 "
                  f"too large: weights alone "
                  f"{'fail' if wmismatch else 'pass'}, with updates "
                  f"{'fail' if mismatch else 'pass'}")


def skip_check():
    CHECKS[0] += 1
    out = io.StringIO()
    missing = os.path.join(tempfile.gettempdir(), "no-such-venv", "python")
    with contextlib.redirect_stdout(out):
        rc = run.main(["--python", missing, "lr", "/bin/false"])
    text = out.getvalue()
    if rc == run.SKIP and "SKIPPED" in text and "tools/deps.sh" in text:
        print("ok   a missing virtual environment is a loud SKIP (77)")
    else:
        FAILURES.append("skip")
        print(f"FAIL missing virtual environment: exit {rc}, output:\n{text}")


def main():
    with tempfile.TemporaryDirectory(prefix="keel-parity-selftest-") as tmp:
        harness_checks(tmp)
    optim_update_checks()
    skip_check()
    passed = CHECKS[0] - len(FAILURES)
    print(f"parity harness self-test: {passed} passed, {len(FAILURES)} "
          f"failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
