#!/usr/bin/env python3
"""keel's Predictor against onnxruntime, PyTorch and Paddle Inference on
the CPU, one process per measurement, rounds interleaved.

    .venv/bin/python bench/infer/infer_ratio.py [-r ROUNDS] [-t "1 2"]
                                                [-s SECONDS] [-o OUT.md]
                                                [BUILD]

BUILD (default build/) must hold keel and keel-infer-models. The models
(bench/infer/write_models.c): LeNet, input [batch, 1, 28, 28], and a
post-LayerNorm transformer encoder block (hidden 256, 4 heads, FFN 1024,
exact GELU), input [batch, 64, 256], traced once with a dynamic batch,
saved for keel and exported to ONNX from the same graph, so keel and
onnxruntime run the same weights. Batches 1 and 64.

Each measurement is one process timing single runs for SECONDS after a
warm-up, and reports the median ms per run: keel is `keel infer PREFIX
--runs N --threads T` (the Predictor with every pass on; N from a short
calibration run, so it also runs about SECONDS), the others
bench/infer/infer_others.py. The four run in an order that rotates from
round to round; each process runs under /usr/bin/time for its peak RSS.
Threads: KEEL_CPU_THREADS and OPENBLAS_NUM_THREADS for keel,
intra_op_num_threads, torch.set_num_threads and
set_cpu_math_library_num_threads for the others, OMP/MKL variables for
all. OPENBLAS_CORETYPE is neither set nor changed.

The table gives the median over rounds of each framework's ms per run
and keel's speed relative to each: the median over rounds of (their ms /
keel's ms) in the same round, above 1 meaning keel is faster, with the
min and max. Run it on a quiet machine.
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from models_ratio import (compare_cells, have, rss_cell,  # noqa: E402
                          thread_env, timed)

MODELS = ["lenet", "encoder"]
BATCHES = [1, 64]


def keel_env(build, threads):
    env = thread_env(threads)
    env.setdefault("KEEL_PLUGIN_PATH", os.path.join(build, "plugins", "cpu"))
    env.setdefault("KEEL_PLUGIN_DEFAULT_PATHS", "0")
    return env


def run_keel(build, prefix, xfile, threads, runs):
    out, rss = timed([os.path.join(build, "core", "cli", "keel"), "infer",
                      prefix, "--input", xfile, "--runs", str(runs),
                      "--threads", str(threads)], keel_env(build, threads))
    m = re.search(r"(\d+) runs: median ([0-9.]+) ms", out)
    if not m:
        raise RuntimeError(f"keel infer printed no timing:\n{out[-2000:]}")
    return float(m.group(2)), rss


def run_other(fw, model, batch, onnx, xfile, threads, secs):
    args = ([onnx, xfile] if fw == "ort" else [model, str(batch)])
    out, rss = timed([sys.executable, os.path.join(HERE, "infer_others.py"),
                      fw, *args, str(threads), str(secs)],
                     thread_env(threads))
    m = re.search(r"median_ms ([0-9.]+) runs", out)
    if not m:
        raise RuntimeError(f"{fw} printed no timing:\n{out[-2000:]}")
    setup = [l for l in out.splitlines() if l.startswith(
        ("onnxruntime ", "torch ", "paddle "))]
    return float(m.group(1)), rss, setup[-1] if setup else fw


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", default="1 2")
    ap.add_argument("-s", "--seconds", type=float, default=2.0)
    ap.add_argument("-o", "--out")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split()]
    fws = ["keel", "ort"] + [f for f in ("torch", "paddle") if have(f)]
    missing = [f for f in ("torch", "paddle") if f not in fws]
    if not have("onnxruntime"):
        sys.exit("onnxruntime is missing from this Python: run "
                 "'bash tools/deps.sh' and use .venv/bin/python")
    with tempfile.TemporaryDirectory(prefix="keel-infer-bench-") as work:
        return measure_all(a, threads, fws, missing, work)


def measure_all(a, threads, fws, missing, work):
    import numpy as np

    subprocess.run([os.path.join(a.build, "bench", "keel-infer-models"),
                    work], check=True, env=keel_env(a.build, 1),
                   stdout=subprocess.DEVNULL)
    rng = np.random.default_rng(3)
    xfiles = {}
    for model in MODELS:
        for b in BATCHES:
            shape = (b, 1, 28, 28) if model == "lenet" else (b, 64, 256)
            xfiles[(model, b)] = os.path.join(work, f"{model}.b{b}.npy")
            np.save(xfiles[(model, b)],
                    rng.standard_normal(shape).astype(np.float32))
    # keel's run count: about SECONDS of runs, from a 20-run calibration.
    runs = {}
    for model in MODELS:
        for b in BATCHES:
            for t in threads:
                ms, _ = run_keel(a.build, os.path.join(work, model),
                                 xfiles[(model, b)], t, 20)
                runs[(model, b, t)] = max(20, int(a.seconds * 1e3 / ms))
    res, setups = {}, {}
    for r in range(a.rounds):
        for t in threads:
            for model in MODELS:
                for b in BATCHES:
                    order = fws[r % len(fws):] + fws[:r % len(fws)]
                    for fw in order:
                        if fw == "keel":
                            ms, rss = run_keel(a.build,
                                               os.path.join(work, model),
                                               xfiles[(model, b)], t,
                                               runs[(model, b, t)])
                        else:
                            ms, rss, setups[fw] = run_other(
                                fw, model, b,
                                os.path.join(work, model + ".onnx"),
                                xfiles[(model, b)], t, a.seconds)
                        res.setdefault((model, b, t, fw), []).append(
                            (ms, rss))
                        print(f"round {r + 1} t{t} {model} b{b} {fw}: "
                              f"{ms:.3f} ms, {rss:.0f} MiB", file=sys.stderr)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    names = {"ort": "onnxruntime", "torch": "PyTorch", "paddle": "Paddle"}
    lines = [f"Inference on the CPU, {datetime.date.today()}, {cpu}, "
             f"{a.rounds} rounds of about {a.seconds} s per process.",
             "keel: Predictor, every IR pass on (keel infer --runs). " +
             "; ".join(re.sub(r"threads \d+", "threads as in the row",
                              setups[f]) for f in fws[1:] if f in setups) +
             (f" (not installed: {', '.join(missing)})" if missing else ""),
             "",
             "| model | batch | threads | keel ms | " +
             " | ".join(f"{names[f]} ms | keel vs {names[f]} (min-max)"
                        for f in fws[1:]) +
             " | peak RSS MiB " + " / ".join(fws) + " |",
             "|" + " --- |" * (4 + 2 * (len(fws) - 1) + 1)]
    for model in MODELS:
        for b in BATCHES:
            for t in threads:
                k = res[(model, b, t, "keel")]
                row = [model, str(b), str(t),
                       f"{statistics.median(x[0] for x in k):.3g}"]
                for fw in fws[1:]:
                    row += compare_cells(res[(model, b, t, fw)], k)
                row.append(rss_cell(res[(model, b, t, f)] for f in fws))
                lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
