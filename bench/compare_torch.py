#!/usr/bin/env python3
"""Small-op overhead side by side: keel_add vs torch.add on 4-element float32
tensors (PyTorch CPU eager from the project's .venv, installed there by
`KEEL_WITH_TORCH=1 bash tools/deps.sh`), in one run.

    .venv/bin/python bench/compare_torch.py [BUILD_DIR]

Both are measured as whole loops of `out = add(x, y)` with the result freed,
median of 7 repeats; the ratio is keel / torch (lower is better).
"""
import os
import re
import statistics
import subprocess
import sys
import time


def torch_ns(iters=200000, reps=7):
    import torch
    torch.set_num_threads(1)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    y = torch.tensor([5.0, 6.0, 7.0, 8.0])
    for _ in range(10000):
        torch.add(x, y)
    res = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            torch.add(x, y)
        res.append((time.perf_counter_ns() - t0) / iters)
    return statistics.median(res), torch.__version__


def keel_ns(build):
    exe = os.path.join(build, "bench", "keel-bench-overhead")
    env = dict(os.environ, KEEL_CPU_THREADS="1")
    out = subprocess.run([exe], capture_output=True, text=True, env=env,
                         check=True).stdout
    m = re.search(r"median ([0-9.]+) ns/op", out)
    return float(m.group(1))


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    k = keel_ns(build)
    t, ver = torch_ns()
    print(f"add of two 4-element float32 tensors, ns/op (median of 7)")
    print(f"  keel            {k:10.1f}")
    print(f"  torch {ver:9s} {t:10.1f}")
    print(f"  keel / torch    {k / t:10.3f}")


if __name__ == "__main__":
    main()
