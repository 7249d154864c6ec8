#!/usr/bin/env python3
"""Anchor ratios from one `keel bench` JSON report (docs/benchmarks.md).

    python3 bench/suite/anchors.py REPORT.json [--table]

With --table, prints a Markdown table of every benchmark's figure of merit
(median, with the coefficient of variation when there are repetitions).
Otherwise prints, per shape or size present in the report:
  matmul/f32/X  vs host/sgemm/X   keel matmul GFLOP/s / OpenBLAS GFLOP/s,
                                  and both as % of the run's f32 peak
                                  (declared, or the best measured figure)
  memory/d2d/S  vs host/memcpy/S  d2d GB/s / memcpy GB/s
  paired/...                      the same ratios measured iteration by
                                  iteration (the robust anchor figures)
  launch/small_op/add_4xf32       ns per op
Medians of the repetitions are used when the report has them.
"""
import json
import sys


def figures(report):
    """run_name (without the time suffix) -> entry (median if present)."""
    out, runs = {}, {}
    for b in report["benchmarks"]:
        if b.get("error_occurred"):
            continue
        name = b.get("run_name", b["name"])
        for suffix in ("/manual_time", "/real_time"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                out[name] = b
        else:
            runs.setdefault(name, []).append(b)
    for name, rs in runs.items():
        out.setdefault(name, rs[len(rs) // 2])
    return out


KEYS = ("GFLOP/s", "busbw_GB/s", "GB/s", "samples/s")


def table(report):
    """Markdown rows: name, figure, value, cv."""
    cvs, errors = {}, {}
    for b in report["benchmarks"]:
        name = b.get("run_name", b["name"])
        if b.get("error_occurred"):
            errors[name] = b.get("error_message", "error")
        elif b.get("aggregate_name") == "cv":
            cvs[name] = b
    fig = figures(report)
    print("| benchmark | figure | median | cv |")
    print("| --- | --- | ---: | ---: |")
    order = sorted(report["benchmarks"],
                   key=lambda b: (b.get("family_index", 0),
                                  b.get("repetition_index", 0)))
    for b in order:
        name = b.get("run_name", b["name"])
        short = name.rsplit("/", 1)[0] if name.endswith("_time") else name
        if name in errors:
            print(f"| `{short}` | error | {errors.pop(name)} | |")
            continue
        if short not in fig or b is not fig[short]:
            continue
        key = next((k for k in KEYS if b.get(k)), None)
        if key:
            val = f"{b[key]:.3g}"
        else:
            key = f"time ({b['time_unit']})"
            val = f"{b['real_time']:.3g}"
        cv = cvs.get(name)
        cvtxt = ""
        if cv:
            ck = key if key in cv else "real_time"
            cvtxt = f"{100 * cv[ck]:.0f}%"
        print(f"| `{short}` | {key} | {val} | {cvtxt} |")


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and
                                       sys.argv[2] != "--table"):
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    if len(sys.argv) == 3:
        table(report)
        return
    fig = figures(report)
    ctx = report["context"]
    peak = float(ctx.get("keel_matmul_peak_gflops", "0") or 0)
    how = ctx.get("keel_matmul_peak") or ""
    if peak and how.startswith("measured"):
        # keel bench raises a measured peak to any faster f32 benchmark
        # (docs/benchmarks.md, "Peak"): the run's peak is the best of them.
        peak = max([peak] + [b["GFLOP/s"] for b in fig.values()
                             if "%peak" in b and "GFLOP/s" in b])
    print(f"device {ctx.get('keel_device')} ({ctx.get('keel_device_name')}), "
          f"plugin {ctx.get('keel_plugin')} {ctx.get('keel_plugin_version')}")
    print(f"f32 peak: {peak:.1f} GFLOP/s ({how})")
    for name in sorted(fig):
        if not name.startswith("matmul/f32/"):
            continue
        other = "host/sgemm/" + name[len("matmul/f32/"):]
        if other not in fig:
            continue
        k, b = fig[name]["GFLOP/s"], fig[other]["GFLOP/s"]
        line = (f"{name:34s} keel {k:8.1f}  openblas {b:8.1f} GFLOP/s  "
                f"keel/openblas {100 * k / b:6.1f}%")
        if peak:
            line += f"  keel {100 * k / peak:5.1f}% / openblas " \
                    f"{100 * b / peak:5.1f}% of peak"
        print(line)
    for name in sorted(fig, key=lambda n: (len(n), n)):
        if not name.startswith("memory/d2d/"):
            continue
        other = "host/memcpy/" + name[len("memory/d2d/"):]
        if other not in fig:
            continue
        d, m = fig[name]["GB/s"], fig[other]["GB/s"]
        print(f"{name:34s} d2d {d:8.2f}  memcpy {m:8.2f} GB/s  "
              f"d2d/memcpy {100 * d / m:6.1f}%")
    for name in sorted(fig, key=lambda n: (len(n), n)):
        b = fig[name]
        if name.startswith("paired/matmul_f32_vs_sgemm/"):
            line = (f"{name:50s} keel {b['GFLOP/s']:7.1f}  openblas "
                    f"{b['sgemm_GFLOP/s']:7.1f} GFLOP/s  keel/openblas "
                    f"{100 * b['keel/sgemm']:6.1f}%")
            if peak:
                line += (f"  keel {100 * b['GFLOP/s'] / peak:5.1f}% / "
                         f"openblas {100 * b['sgemm_GFLOP/s'] / peak:5.1f}%"
                         f" of peak")
            print(line)
        elif name.startswith("paired/d2d_vs_memcpy/"):
            print(f"{name:50s} d2d {b['GB/s']:7.2f}  memcpy "
                  f"{b['memcpy_GB/s']:7.2f} GB/s  d2d/memcpy "
                  f"{100 * b['d2d/memcpy']:6.1f}%")
    small = fig.get("launch/small_op/add_4xf32")
    if small:
        print(f"launch/small_op/add_4xf32          {small['real_time']:.1f} "
              f"{small['time_unit']}/op")


if __name__ == "__main__":
    main()
