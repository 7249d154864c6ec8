#!/usr/bin/env python3
"""Per-op overhead from Python: a 4-element float32 add, repeated, on
keel, PyTorch and PaddlePaddle in one process, in interleaved rounds.

    PYTHONPATH=build/python KEEL_PLUGIN_PATH=build/plugins/cpu \\
        .venv/bin/python bench/python/op_overhead.py [--rounds 7] [--n 20000]

Prints each round's microseconds per op and the medians of the per-round
ratios to keel. A framework that is not installed is left out with a
line saying so. Single-threaded: each library is asked for one thread.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("KEEL_CPU_THREADS", "1")


def loop_timer(make, n):
    a, b = make()

    def run():
        t0 = time.perf_counter()
        for _ in range(n):
            c = a + b
        t1 = time.perf_counter()
        del c
        return (t1 - t0) / n * 1e6
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=20000)
    a = ap.parse_args()
    runners = {}
    import numpy as np
    x = np.arange(4, dtype=np.float32)
    import keel
    keel.set_device("cpu")
    runners["keel"] = loop_timer(lambda: (keel.to_tensor(x),
                                          keel.to_tensor(x)), a.n)
    try:
        import torch
        torch.set_num_threads(1)
        runners["torch %s" % torch.__version__] = loop_timer(
            lambda: (torch.from_numpy(x.copy()), torch.from_numpy(x.copy())),
            a.n)
    except ImportError:
        print("torch: not installed (KEEL_WITH_TORCH=1 bash tools/deps.sh)")
    try:
        import paddle
        paddle.set_device("cpu")
        runners["paddle %s" % paddle.__version__] = loop_timer(
            lambda: (paddle.to_tensor(x), paddle.to_tensor(x)), a.n)
    except ImportError:
        print("paddle: not installed (bash tools/deps.sh)")
    for r in runners.values():  # warm up
        r()
    per = {k: [] for k in runners}
    for i in range(a.rounds):
        line = []
        for k, r in runners.items():
            us = r()
            per[k].append(us)
            line.append("%s %.2f us" % (k, us))
        print("round %d: %s" % (i + 1, ", ".join(line)))
    print()
    for k in runners:
        ratios = [o / kv for o, kv in zip(per[k], per["keel"])]
        print("%-14s median %.2f us/op   per-op time / keel's: %.2fx"
              % (k, statistics.median(per[k]), statistics.median(ratios)))


if __name__ == "__main__":
    main()
