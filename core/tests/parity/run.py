#!/usr/bin/env python3
"""Parity runner: keel against Python's PaddlePaddle, case by case.

    run.py [--python VENV_PYTHON] NAME DRIVER

A case is a pair of files in this folder:

  parity_NAME.c   a driver linked with libkeel: reads {"configs": [...]}
                  as JSON on stdin, writes {"results": [...]} on stdout,
                  one {"name", "values": [...]} or {"name", "error"} per
                  configuration
  parity_NAME.py  the configurations (CONFIGS, a list of dicts, each with
                  a unique "name", a "group" for the summary and, for
                  one both sides must refuse, "expect_error": true) and
                  paddle_result(config), which runs one configuration in
                  real Paddle and returns {"values": [...]} in the
                  driver's format, or raises when Paddle refuses it

plus its name in parity_cases in meson.build (one meson test per case, in
the 'parity' suite). The configurations live in the .py file only; the
runner hands them to the driver, so both sides always run the same list.

The runner compares value by value: numbers must agree within a relative
tolerance (TOLERANCE in the case module, default 1e-9); null (a step that
failed) and strings ("nan", "inf") must match exactly. A case module may
replace that comparison with compare(config, ours, theirs, tol) -> (values
compared, largest difference, first mismatch or None).

Errors never count as agreement. A configuration agrees only when both
sides produce values that match, or, for one marked "expect_error", when
the driver reports an error and Paddle raises one of REJECTIONS (the
exceptions Paddle uses to refuse arguments). Any other exception from the
Paddle side (an ImportError, an AttributeError, a RuntimeError ...) or an
error from the driver on a configuration that should work is a mismatch,
as is a driver that crashes or leaves out a configuration.

It prints, per group, configurations x values compared and the largest
relative difference, and for every mismatching configuration the first
mismatch (configuration, index, both values).

--python names the interpreter of the project's virtual environment
(.venv/bin/python, made by tools/deps.sh). The runner re-executes itself
there; when that interpreter is missing or cannot import paddlepaddle
PADDLE_VERSION it prints what to run and exits 77, which meson reports as
SKIP (and tools/test.sh then fails). It never installs anything.

Exit status: 0 all agree; 1 a mismatch or a broken driver; 77 SKIP.
selftest.py proves that each of these failures is caught.
"""

import importlib.util
import json
import os
import subprocess
import sys
import traceback

PADDLE_VERSION = "3.3.1"
SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))

# The exceptions with which Paddle refuses a configuration (seen for the
# 'lr' case's rejected configurations). Anything else from the Paddle side
# is a broken environment or harness, never an agreement.
REJECTIONS = (ValueError, AssertionError, TypeError, ZeroDivisionError)

SETUP_HINT = ("run 'bash tools/deps.sh' at the top of the source tree (it "
              "creates .venv/ with Debian's python3-venv and installs "
              f"paddlepaddle=={PADDLE_VERSION} and numpy into it)")


def venv_problem(python):
    """None when `python` imports numpy and paddle PADDLE_VERSION, else why
    not."""
    if not os.path.exists(python):
        return f"{python} does not exist"
    probe = ("import sys, numpy, paddle; "
             "sys.stdout.write(paddle.__version__)")
    try:
        r = subprocess.run([python, "-c", probe], capture_output=True,
                           text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python} could not be run: {e}"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        return f"{python} cannot import paddle and numpy: {last}"
    if r.stdout.strip() != PADDLE_VERSION:
        return (f"{python} has paddle {r.stdout.strip()}, the suite "
                f"compares with {PADDLE_VERSION}")
    return None


def skip(name, why):
    bar = "!" * 72
    print(bar)
    print(f"parity {name}: SKIPPED, NOT RUN: {why}.")
    print(f"parity {name}: to run it, {SETUP_HINT}.")
    print(bar)
    return SKIP


def load_case(name):
    path = os.path.join(HERE, f"parity_{name}.py")
    spec = importlib.util.spec_from_file_location(f"parity_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_driver(driver, configs):
    r = subprocess.run([driver], input=json.dumps({"configs": configs}),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"driver {driver} exited {r.returncode}:\n"
                           f"{r.stderr}")
    return {res["name"]: res for res in json.loads(r.stdout)["results"]}


def rel_diff(a, b):
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def compare_values(config, a, b, tol):
    """Default comparison of two value lists: (values compared, largest
    relative difference, first mismatch or None)."""
    name = config["name"]
    if len(a) != len(b):
        return 0, 0.0, f"{name}: keel gave {len(a)} values, Paddle {len(b)}"
    worst = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, float) and isinstance(y, float):
            d = rel_diff(x, y)
            worst = max(worst, d)
            if d <= tol:
                continue
        elif x == y and type(x) is type(y):
            continue
        return len(a), worst, (f"{name}: first mismatch at index {i}: "
                               f"keel {x!r}, Paddle {y!r}")
    return len(a), worst, None


def as_float(v):
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def paddle_side(case, config):
    """Paddle's answer: ("values", list), ("rejected", text) or
    ("broken", text)."""
    try:
        r = case.paddle_result(config)
    except REJECTIONS as e:
        return "rejected", f"{type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - reported as a failure
        tb = traceback.format_exception_only(type(e), e)[-1].strip()
        return "broken", f"raised {tb}"
    if not isinstance(r, dict) or not isinstance(r.get("values"), list):
        return "broken", f"returned {r!r:.200} instead of {{'values': [...]}}"
    return "values", [as_float(v) for v in r["values"]]


def judge(case, config, mine, tol):
    """(values compared, worst difference, both rejected, mismatch or
    None) for one configuration."""
    name = config["name"]
    kind, theirs = paddle_side(case, config)
    if mine is None:
        return 0, 0.0, False, f"{name}: no result from the driver"
    if kind == "broken":
        return 0, 0.0, False, f"{name}: the Paddle side {theirs}"
    keel_error = mine.get("error")
    if config.get("expect_error"):
        if keel_error is not None and kind == "rejected":
            return 0, 0.0, True, None
        return 0, 0.0, False, (
            f"{name}: must be rejected by both: keel "
            f"{'rejected it: ' + repr(keel_error) if keel_error is not None else 'accepted it'}"
            f", Paddle "
            f"{'rejected it: ' + repr(theirs) if kind == 'rejected' else 'accepted it'}")
    if keel_error is not None or kind == "rejected":
        return 0, 0.0, False, (
            f"{name}: an error is never agreement: keel "
            f"{repr(keel_error) if keel_error is not None else 'succeeded'}"
            f", Paddle "
            f"{repr(theirs) if kind == 'rejected' else 'succeeded'}")
    ours = mine.get("values")
    if not isinstance(ours, list):
        return 0, 0.0, False, f"{name}: the driver gave no values"
    ours = [as_float(v) for v in ours]
    compare = getattr(case, "compare", compare_values)
    n, worst, bad = compare(config, ours, theirs, tol)
    return n, worst, False, bad


def run_case(name, case, driver):
    """Run every configuration of `case` (a module) through `driver` and
    Paddle, print the summary; the exit status."""
    tol = getattr(case, "TOLERANCE", 1e-9)
    configs = case.CONFIGS
    try:
        ours = run_driver(driver, configs)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        print(f"parity {name}: the driver failed: {e}")
        print(f"parity {name}: 0/{len(configs)} configurations agree")
        return 1

    groups = {}
    mismatches = []
    for cfg in configs:
        n, worst, rejected, bad = judge(case, cfg, ours.get(cfg["name"]),
                                        tol)
        g = groups.setdefault(cfg.get("group", cfg["name"]),
                              {"configs": 0, "values": 0, "worst": 0.0,
                               "rejected": 0, "bad": 0})
        g["configs"] += 1
        g["values"] += n
        g["worst"] = max(g["worst"], worst)
        g["rejected"] += rejected
        if bad:
            g["bad"] += 1
            mismatches.append(bad)

    print(f"parity {name}: keel vs Paddle {PADDLE_VERSION}, relative "
          f"tolerance {tol:g}")
    print(f"  {'group':<30} {'configs':>7} {'values':>7} {'max rel diff':>13}"
          f"  both rejected  mismatching")
    for g, s in groups.items():
        print(f"  {g:<30} {s['configs']:>7} {s['values']:>7} "
              f"{s['worst']:>13.3g}  {s['rejected']:>13}  {s['bad']:>11}")
    for m in mismatches:
        print("  MISMATCH", m)
    print(f"parity {name}: {len(configs) - len(mismatches)}/{len(configs)} "
          f"configurations agree")
    return 1 if mismatches else 0


def main(argv):
    python = None
    if len(argv) >= 2 and argv[0] == "--python":
        python, argv = argv[1], argv[2:]
    if len(argv) != 2:
        print("usage: run.py [--python VENV_PYTHON] NAME DRIVER",
              file=sys.stderr)
        return 2
    name, driver = argv
    if python and os.path.abspath(sys.executable) != os.path.abspath(python):
        why = venv_problem(python)
        if why:
            return skip(name, why)
        sys.stdout.flush()
        os.execv(python, [python, os.path.abspath(__file__),
                          "--python", python, name, driver])
    try:
        import paddle  # noqa: F401
    except ImportError as e:
        return skip(name, f"{sys.executable} cannot import paddle ({e})")
    return run_case(name, load_case(name), driver)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
