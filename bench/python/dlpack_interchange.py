#!/usr/bin/env python3
"""What moving a tensor between keel and NumPy / PyTorch costs: the copy
(`t.numpy()`, `keel.to_tensor(a)`) against DLPack's view
(`np.from_dlpack(t)`, `keel.from_dlpack(a)`, `torch.from_dlpack(t)`), for
float32 tensors of several sizes, in interleaved rounds.

    PYTHONPATH=build/python KEEL_PLUGIN_PATH=build/plugins/cpu \\
        .venv/bin/python bench/python/dlpack_interchange.py [--rounds 7]

Prints the median microseconds of each way per size. PyTorch is left out,
saying so, when it is not installed.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("KEEL_CPU_THREADS", "1")


def timed(fn, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    import numpy as np
    import keel
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None
        print("PyTorch not installed: its column is left out "
              "(KEEL_WITH_TORCH=1 bash tools/deps.sh)")
    keel.set_device("cpu")
    sizes = [1 << 10, 1 << 16, 1 << 22]  # elements: 4 KiB, 256 KiB, 16 MiB
    ways = ["t.numpy()", "np.from_dlpack(t)", "keel.to_tensor(a)",
            "keel.from_dlpack(a)"]
    if torch is not None:
        ways.append("torch.from_dlpack(t)")
    print("%-10s " % "elements" + " ".join("%20s" % w for w in ways)
          + "   (median µs)")
    for n in sizes:
        a = np.arange(n, dtype=np.float32)
        t = keel.to_tensor(a)
        reps = max(3, (1 << 22) // n // 8)
        fns = {
            "t.numpy()": lambda: t.numpy(),
            "np.from_dlpack(t)": lambda: np.from_dlpack(t),
            "keel.to_tensor(a)": lambda: keel.to_tensor(a),
            "keel.from_dlpack(a)": lambda: keel.from_dlpack(a),
        }
        if torch is not None:
            fns["torch.from_dlpack(t)"] = lambda: torch.from_dlpack(t)
        samples = {w: [] for w in ways}
        for _ in range(args.rounds):
            for w in ways:  # interleaved: every way once per round
                samples[w].append(timed(fns[w], reps))
        print("%-10d " % n + " ".join(
            "%20.2f" % statistics.median(samples[w]) for w in ways))


if __name__ == "__main__":
    main()
