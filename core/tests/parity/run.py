#!/usr/bin/env python3
"""Parity runner: keel against Python's PaddlePaddle, case by case.

    python3 run.py NAME DRIVER

A case is a pair of files in this folder:

  parity_NAME.c   a driver linked with libkeel: reads {"configs": [...]}
                  as JSON on stdin, writes {"results": [...]} on stdout
  parity_NAME.py  the configurations (CONFIGS, a list of dicts, each with
                  a unique "name", a "group" for the summary and, for
                  one both sides must refuse, "expect_error": true) and
                  paddle_result(config), which runs one configuration in
                  real Paddle and returns {"values": [...]} or
                  {"error": "..."}, in the driver's format

plus its name in parity_cases in meson.build (one meson test per case, in
the 'parity' suite). The configurations live in the .py file only; the
runner hands them to the driver, so both sides always run the same list.

The runner compares value by value: numbers must agree within a relative
tolerance (TOLERANCE in the case module, default 1e-9); null (a step that
failed), strings ("nan", "inf") and errors must match exactly in kind. It
prints, per group, configurations x values compared and the largest
relative difference, and for every mismatching configuration the first
mismatch (configuration, index, both values).

Exit status: 0 all agree; 1 a mismatch or a broken driver; 77 (meson's
SKIP) when Paddle cannot be imported and installing it failed. Set
KEEL_PARITY_NO_INSTALL=1 to skip without trying to install.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys

PADDLE_VERSION = "3.3.1"
SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))


def paddle_importable():
    r = subprocess.run([sys.executable, "-c", "import paddle"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    return r.returncode == 0, r.stderr.strip().splitlines()[-1:]


def ensure_paddle():
    """True when `import paddle` works, after one install attempt."""
    ok, why = paddle_importable()
    if ok:
        return True
    print(f"parity: 'import paddle' failed ({' '.join(why) or 'no reason'})")
    if os.environ.get("KEEL_PARITY_NO_INSTALL") == "1":
        print("parity: KEEL_PARITY_NO_INSTALL=1: not installing")
        return False
    cmd = [sys.executable, "-m", "pip", "install", "--quiet",
           f"paddlepaddle=={PADDLE_VERSION}"]
    print("parity: trying once:", " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd, timeout=1500)
        installed = r.returncode == 0
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"parity: pip failed: {e}")
        installed = False
    return installed and paddle_importable()[0]


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


def compare(config, ours, theirs, tol):
    """(values compared, max relative difference, first mismatch or None)."""
    name = config["name"]
    if "error" in ours or "error" in theirs:
        if "error" in ours and "error" in theirs:
            return 0, 0.0, None
        return 0, 0.0, (f"{name}: construction: keel "
                        f"{ours.get('error', 'succeeded')!r}, Paddle "
                        f"{theirs.get('error', 'succeeded')!r}")
    a, b = ours["values"], theirs["values"]
    if len(a) != len(b):
        return 0, 0.0, f"{name}: keel gave {len(a)} values, Paddle {len(b)}"
    worst = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        numbers = isinstance(x, float) and isinstance(y, float)
        if numbers:
            d = rel_diff(x, y)
            worst = max(worst, d)
            if d <= tol:
                continue
        elif x == y:
            continue
        return len(a), worst, (f"{name}: first mismatch at index {i}: "
                               f"keel {x!r}, Paddle {y!r}")
    return len(a), worst, None


def as_float(v):
    return float(v) if isinstance(v, int) and not isinstance(v, bool) else v


def main(argv):
    if len(argv) != 2:
        print("usage: run.py NAME DRIVER", file=sys.stderr)
        return 2
    name, driver = argv
    if not ensure_paddle():
        print(f"parity: SKIPPED: PaddlePaddle {PADDLE_VERSION} is not "
              f"importable by {sys.executable} and could not be installed; "
              f"install it (pip install paddlepaddle=={PADDLE_VERSION}) to "
              f"run the '{name}' parity checks")
        return SKIP
    case = load_case(name)
    tol = getattr(case, "TOLERANCE", 1e-9)
    configs = case.CONFIGS
    try:
        ours = run_driver(driver, configs)
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        print(f"parity: {name}: {e}")
        return 1

    groups = {}
    mismatches = []
    for cfg in configs:
        theirs = case.paddle_result(cfg)
        if "values" in theirs:
            theirs["values"] = [as_float(v) for v in theirs["values"]]
        mine = ours.get(cfg["name"])
        if mine is None:
            mismatches.append(f"{cfg['name']}: no result from the driver")
            continue
        if "values" in mine:
            mine["values"] = [as_float(v) for v in mine["values"]]
        n, worst, bad = compare(cfg, mine, theirs, tol)
        if cfg.get("expect_error") and not bad and "error" not in mine:
            bad = f"{cfg['name']}: both accepted a configuration to reject"
        g = groups.setdefault(cfg.get("group", cfg["name"]),
                              {"configs": 0, "values": 0, "worst": 0.0,
                               "errors": 0, "bad": 0})
        g["configs"] += 1
        g["values"] += n
        g["worst"] = max(g["worst"], worst)
        g["errors"] += "error" in mine and "error" in theirs
        if bad:
            g["bad"] += 1
            mismatches.append(bad)

    print(f"parity {name}: keel vs Paddle {PADDLE_VERSION}, relative "
          f"tolerance {tol:g}")
    print(f"  {'group':<30} {'configs':>7} {'values':>7} {'max rel diff':>13}"
          f"  both rejected  mismatching")
    for g, s in groups.items():
        print(f"  {g:<30} {s['configs']:>7} {s['values']:>7} "
              f"{s['worst']:>13.3g}  {s['errors']:>13}  {s['bad']:>11}")
    for m in mismatches:
        print("  MISMATCH", m)
    print(f"parity {name}: {len(configs) - len(mismatches)}/{len(configs)} "
          f"configurations agree")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
