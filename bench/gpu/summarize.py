#!/usr/bin/env python3
"""Summarise a bench/gpu/run.sh output folder as Markdown: the GPU
targets (conformance, bf16 matmul vs cuBLAS, d2d copy and add vs the
measured copy bandwidth) and the Fashion-MNIST run.

    python3 bench/gpu/summarize.py OUT_DIR
"""
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def bench_entry(bench, prefix):
    for b in (bench or {}).get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        if b["name"].startswith(prefix):
            return b
    return None


def main():
    d = sys.argv[1]
    ref = load(os.path.join(d, "cuda_ref.json"))
    bench = load(os.path.join(d, "bench.json"))
    conf = load(os.path.join(d, "conform.json"))
    refs = {r["name"]: r for r in (ref or {}).get("results", [])}
    print(f"# keel on {ref['device'] if ref else 'an unknown GPU'}\n")
    rows = []

    def target(what, got, want, goal):
        g = f">= {goal:.0%}" if goal else "(reported)"
        if got is None or want is None or not want:
            rows.append((what, "not measured", "", g, "n/a"))
            return
        ratio = got / want
        verdict = ("met" if ratio >= goal else "NOT met") if goal else ""
        rows.append((what, f"{got:,.1f}", f"{want:,.1f}", g,
                     f"{ratio:.1%} {verdict}".strip()))

    if conf:
        s = conf.get("summary", {})
        ok = s.get("failed", 1) == 0
        rows.append((f"conformance, {conf.get('level')} level",
                     f"{s.get('passed')} passed, {s.get('failed')} failed, "
                     f"{s.get('skipped')} not provided/skipped",
                     f"{s.get('total')} tests", "all pass",
                     "met" if ok else "NOT met"))
    else:
        rows.append(("conformance, full level", "no report", "", "all pass",
                     "n/a"))
    for dt in ("bf16", "f32"):
        for n in (4096, 8192):
            b = bench_entry(bench, f"matmul/{dt}/square/{n}")
            r = refs.get(f"gemm/{dt}/{n}")
            target(f"matmul {dt} {n}^3, GFLOP/s (keel vs cuBLAS direct)",
                   b.get("GFLOP/s") if b else None,
                   r["value"] * 1e3 if r else None,
                   0.90 if dt == "bf16" else 0.0)
    b = bench_entry(bench, "memory/d2d/1GiB")
    r = refs.get("d2d/1GiB")
    target("d2d copy 1 GiB, GB/s copied (keel vs cudaMemcpyAsync)",
           b["bytes_per_second"] / 1e9 if b else None,
           r["value"] if r else None, 0.85)
    b = bench_entry(bench, "elementwise/add/f32/64M")
    target("add f32 64M, GB/s traffic (keel vs d2d copy traffic)",
           b.get("GB/s") if b else None,
           r["traffic_gbs"] if r else None, 0.80)
    print("| measurement | keel | reference | goal | result |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")
    extra = refs.get("add/f32/64M")
    if extra:
        print(f"\nA plain float4 add kernel reaches {extra['value']:,.0f} "
              "GB/s of traffic on this GPU (cuda_ref).")
    b = bench_entry(bench, "e2e/lenet_train_step/adam")
    if b:
        print(f"\nLeNet training step (Adam, batch 64): "
              f"{b['real_time']:.3f} {b['time_unit']} per step.")
    try:
        log = open(os.path.join(d, "mnist.log")).read().replace("\r", "\n")
        ep = [l for l in log.splitlines()
              if re.match(r"^epoch \d+/\d+ .*accuracy", l)]
        if ep:
            print("\nFashion-MNIST on gpu:0:\n")
            for l in ep:
                print("    " + l)
    except OSError:
        pass
    if conf and conf.get("summary", {}).get("failed"):
        print("\nFailed conformance tests:\n")
        for r in conf.get("results", []):
            if r.get("result") == "fail":
                print(f"- {r.get('id')}: {r.get('message', '')}"[:300])


if __name__ == "__main__":
    main()
