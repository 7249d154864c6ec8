#!/usr/bin/env python3
"""bench-smoke: run `keel bench --smoke` on a plugin and check the report.

    check_smoke.py KEEL PLUGIN OUT.json

Runs `KEEL bench --plugin PLUGIN --smoke --list`, then `--smoke --format
json --out OUT.json`, and checks:

  - the run: exit status 0 and the summary line "N benchmarks ...: 0
    skipped ..., 0 wrong results, 0 errors" (keel bench checks every
    kernel's result against a reference and counts the wrong ones), with N
    the number of benchmarks listed;
  - every listed benchmark is in the report exactly once, without an
    error, with at least one iteration and a finite positive time;
  - the rates, recomputed here from the benchmark's name and its measured
    time: bytes per second for copies (the size), elementwise ops (inputs
    read plus the output written), softmax and layer norm (x in, y out),
    the optimizer updates (parameter, gradient and state read, parameter
    and state written); GFLOP/s for matmul (2 M K N); the collectives'
    algorithm bandwidth (size / time) and bus bandwidth (NCCL's factors:
    2 (n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter,
    1 for broadcast); samples/s of the end-to-end steps (batch / time);
    GB/s = bytes_per_second / 1e9, and the paired ratios;
  - the caching allocator never calls the plugin's alloc in steady state
    (plugin_allocs_per_iter = 0);
  - `keel bench compare` reads the report back, finds no change against
    itself and a regression (exit 1) against a copy twice as slow.

Then it proves it can fail: each of a set of corruptions of the report (a
benchmark missing, one rate 10% off, a zero time, an error entry, a
nonzero allocation count) must be caught. Exit 0 when everything holds.
"""

import copy
import json
import math
import os
import re
import subprocess
import sys
import tempfile

UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8}
BINARY = {"add", "sub", "mul", "div", "maximum", "minimum", "pow"}
REL = 0.005   # counters are printed rounded; the time is the same number


def size_bytes(tok):
    m = re.fullmatch(r"(\d+)(B|KiB|MiB|GiB)", tok)
    if not m:
        return None
    return int(m.group(1)) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20,
                              "GiB": 1 << 30}[m.group(2)]


def count(tok):
    m = re.fullmatch(r"(\d+)([KM]?)", tok)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20}[m.group(2)]


def dims(tok):
    parts = tok.split("x")
    return [int(p) for p in parts] if all(p.isdigit() for p in parts) else None


def expected(name):
    """{counter: value per second} derived from the name, as a function of
    the time in seconds; {} when the name's family has no formula here."""
    p = name.split("/")
    fam = p[0]
    if fam in ("memory", "host") and p[1] in ("h2d", "d2h", "d2d", "memcpy"):
        b = size_bytes(p[-2])
        return {"bytes_per_second": b} if b else {}
    if fam == "paired" and p[1] == "d2d_vs_memcpy":
        b = size_bytes(p[2])
        return {"bytes_per_second": b} if b else {}
    if fam == "elementwise":
        n, es = count(p[3]), DTYPE_BYTES.get(p[2])
        if n is None or es is None:
            return {}
        return {"bytes_per_second": (3 if p[1] in BINARY else 2) * n * es}
    if fam in ("softmax", "layer_norm") and p[1] == "f32":
        d = dims(p[2])
        return {"bytes_per_second": 2 * d[0] * d[1] * 4} if d else {}
    if fam == "optimizer" and p[2] == "f32":
        n = count(p[3])
        tensors = {"sgd_update": 3, "momentum_update": 5, "adam_update": 7,
                   "adamw_update": 7}.get(p[1])
        return {"bytes_per_second": tensors * n * 4} if n and tensors else {}
    if fam in ("matmul", "host", "paired") and \
            ("square" in p or "bert_qkv" in p):
        i = p.index("square") if "square" in p else p.index("bert_qkv")
        d = dims(p[i + 1])
        if not d:
            return {}
        m, k, n = (d[0], d[0], d[0]) if len(d) == 1 else d
        return {"GFLOP/s": 2.0 * m * k * n / 1e9}
    if fam == "e2e":
        m = re.fullmatch(r"n(\d+)", p[-1])
        return {"samples/s": int(m.group(1))} if m else {}
    return {}


def check_report(report, listed, problems):
    """Append every problem of `report` (a parsed JSON report) to
    problems; return the number of rates recomputed."""
    by_name = {}
    for b in report.get("benchmarks", []):
        base = re.sub(r"/(manual_time|real_time)$", "", b.get("name", ""))
        by_name.setdefault(base, []).append(b)
    for name in listed:
        if len(by_name.get(name, [])) != 1:
            problems.append(f"{name}: {len(by_name.get(name, []))} entries "
                            f"in the report, expected 1")
    for name in by_name:
        if name not in listed:
            problems.append(f"{name}: in the report but not listed")
    derived = 0
    for name, entries in by_name.items():
        b = entries[0]
        if b.get("error_occurred") or b.get("skipped"):
            problems.append(f"{name}: reported an error: "
                            f"{b.get('error_message', '?')}")
            continue
        t = b.get("real_time")
        unit = UNIT.get(b.get("time_unit"))
        if not isinstance(t, (int, float)) or not math.isfinite(t) or \
                t <= 0 or unit is None:
            problems.append(f"{name}: time {t!r} {b.get('time_unit')!r}")
            continue
        if not isinstance(b.get("iterations"), int) or b["iterations"] < 1:
            problems.append(f"{name}: iterations {b.get('iterations')!r}")
        secs = t * unit
        want = {k: v / secs for k, v in expected(name).items()}
        if name.startswith("collective/"):
            size = size_bytes(name.split("/")[3])
            ranks = b.get("ranks")
            factor = {"all_reduce": lambda n: 2 * (n - 1) / n,
                      "all_gather": lambda n: (n - 1) / n,
                      "reduce_scatter": lambda n: (n - 1) / n,
                      "broadcast": lambda n: 1.0}.get(name.split("/")[1])
            if size and isinstance(ranks, (int, float)) and ranks >= 2 \
                    and factor:
                want["algbw_GB/s"] = size / secs / 1e9
                want["busbw_GB/s"] = size / secs / 1e9 * factor(ranks)
            else:
                problems.append(f"{name}: cannot derive its bandwidth "
                                f"(ranks {ranks!r})")
        if "bytes_per_second" in b and "GB/s" in b:
            want.setdefault("GB/s", b["bytes_per_second"] / 1e9)
        if "GFLOP/s" in want and "sgemm_GFLOP/s" in b:
            want["keel/sgemm"] = want["GFLOP/s"] / b["sgemm_GFLOP/s"]
        if "memcpy_GB/s" in b and "bytes_per_second" in want:
            want["d2d/memcpy"] = want["bytes_per_second"] / 1e9 / \
                b["memcpy_GB/s"]
        for k, v in want.items():
            got = b.get(k)
            if not isinstance(got, (int, float)) or \
                    abs(got - v) > REL * abs(v):
                problems.append(f"{name}: {k} = {got!r}, expected {v:.6g} "
                                f"from the name and {t:g} {b['time_unit']}")
            derived += 1
        if "/alloc_free/caching/" in name + "/":
            if b.get("plugin_allocs_per_iter") != 0:
                problems.append(f"{name}: the caching allocator called the "
                                f"plugin {b.get('plugin_allocs_per_iter')!r} "
                                f"times per iteration (expected 0)")
    return derived


def corruptions(report):
    """(what, corrupted copy) pairs the checker must reject."""
    out = []
    bs = report["benchmarks"]

    def mutate(what, fn):
        r = copy.deepcopy(report)
        fn(r["benchmarks"])
        out.append((what, r))

    first_rate = next(i for i, b in enumerate(bs) if "bytes_per_second" in b)
    first_flops = next(i for i, b in enumerate(bs) if "GFLOP/s" in b)
    mutate("a benchmark missing", lambda b: b.pop(len(b) // 2))
    mutate("a benchmark twice", lambda b: b.append(b[0]))
    mutate("bytes_per_second 10% high",
           lambda b: b[first_rate].update(
               bytes_per_second=b[first_rate]["bytes_per_second"] * 1.1))
    mutate("GFLOP/s 10% low",
           lambda b: b[first_flops].update(
               {"GFLOP/s": b[first_flops]["GFLOP/s"] * 0.9}))
    mutate("a zero time", lambda b: b[1].update(real_time=0.0))
    mutate("an error entry",
           lambda b: b[2].update(error_occurred=True,
                                 error_message="wrong result"))
    for i, b in enumerate(bs):
        if "plugin_allocs_per_iter" in b:
            mutate("the caching allocator calling the plugin",
                   lambda b, i=i: b[i].update(plugin_allocs_per_iter=1.0))
            break
    for i, b in enumerate(bs):
        if "busbw_GB/s" in b:
            mutate("a collective's bus bandwidth doubled",
                   lambda b, i=i: b[i].update(
                       {"busbw_GB/s": b[i]["busbw_GB/s"] * 2}))
            break
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    keel, plugin, out = argv
    failures = []

    lst = subprocess.run([keel, "bench", "--plugin", plugin, "--smoke",
                          "--list"],
                         capture_output=True, text=True)
    listed = {re.sub(r"/(manual_time|real_time)$", "", line.strip())
              for line in lst.stdout.splitlines() if line.strip()}
    if lst.returncode != 0 or not listed:
        print(f"bench-smoke: --list failed ({lst.returncode}):\n{lst.stderr}")
        return 1
    run = subprocess.run([keel, "bench", "--plugin", plugin, "--smoke",
                          "--format", "json", "--out", out],
                         capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    sys.stdout.write(run.stderr)
    if run.returncode != 0:
        failures.append(f"keel bench --smoke exited {run.returncode}")
    m = re.search(r"keel bench: (\d+) benchmarks on .*: (\d+) skipped .*?, "
                  r"(\d+) wrong results, (\d+) errors", run.stderr)
    if not m:
        failures.append("no summary line from keel bench")
    else:
        ran, skipped, wrong, errors = map(int, m.groups())
        if ran != len(listed) or skipped or wrong or errors:
            failures.append(f"summary: {ran} run of {len(listed)} listed, "
                            f"{skipped} skipped, {wrong} wrong, "
                            f"{errors} errors")
    try:
        with open(out) as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        print(f"bench-smoke: no readable report {out}: {e}")
        return 1
    derived = check_report(report, listed, failures)

    with tempfile.TemporaryDirectory(prefix="keel-bench-smoke-") as tmp:
        slow = copy.deepcopy(report)
        for b in slow["benchmarks"]:
            for k in ("real_time", "cpu_time"):
                if isinstance(b.get(k), (int, float)):
                    b[k] *= 2
        slow_path = os.path.join(tmp, "slow.json")
        with open(slow_path, "w") as f:
            json.dump(slow, f)
        same = subprocess.run([keel, "bench", "compare", out, out],
                              capture_output=True, text=True)
        if same.returncode != 0:
            failures.append(f"bench compare of the report with itself "
                            f"exited {same.returncode}: {same.stderr}")
        worse = subprocess.run([keel, "bench", "compare", out, slow_path],
                               capture_output=True, text=True)
        if worse.returncode != 1:
            failures.append(f"bench compare against a copy twice as slow "
                            f"exited {worse.returncode}, expected 1")

    caught = 0
    cases = corruptions(report)
    for what, bad in cases:
        found = []
        check_report(bad, listed, found)
        if found:
            caught += 1
        else:
            failures.append(f"self-test: the checker let through {what}")

    print(f"bench-smoke: {len(listed)} benchmarks listed, "
          f"{len(report.get('benchmarks', []))} reported, {derived} rates "
          f"recomputed from names and times; self-test: {caught}/"
          f"{len(cases)} corruptions caught")
    for f in failures:
        print(f"bench-smoke: FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
