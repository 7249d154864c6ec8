#!/usr/bin/env python3
"""keel against PyTorch and Paddle on real model steps, on the CPU.

    .venv/bin/python bench/models_ratio.py [-r ROUNDS] [-t "1 2"] [-s SECONDS]
                                           [-m MODEL/MODE ...] [-o OUT.md]
                                           [--smoke] [BUILD]

For each round, thread count and model step (e2e/model/ of keel bench:
bert_layer, resnet18 and lenet, train and infer; bench/suite/kb_models.c),
runs keel (`keel bench --filter` that one benchmark) and the same step in
PyTorch and in Paddle (bench/models_torch_paddle.py), the three in an
order that rotates from round to round, each process under
`/usr/bin/time -f %M` for its peak RSS. Every process times steps for
SECONDS (default 2) after its warm-up. The table gives, per step and
thread count, the median ms per step of each framework over the rounds,
and keel's speed relative to each: the median over rounds of
(their ms / keel's ms) in the same round, above 1 meaning keel is faster,
with the min and max; and the peak RSS of each (median, MiB).

PyTorch comes from the project's .venv (KEEL_WITH_TORCH=1 bash
tools/deps.sh); without it its columns say so. Threads: KEEL_CPU_THREADS
and OPENBLAS_NUM_THREADS for keel, torch.set_num_threads and
FLAGS_paddle_num_threads for the others, OMP/MKL variables for all.
OPENBLAS_CORETYPE is neither set nor changed. Run it on a quiet machine.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEPS = [("bert_layer", "train"), ("bert_layer", "infer"),
         ("resnet18", "train"), ("resnet18", "infer"),
         ("lenet", "train"), ("lenet", "infer")]
BATCH = {"bert_layer": 8, "resnet18": 16, "lenet": 64}


def timed(cmd, env):
    """Run cmd under /usr/bin/time; (stdout, peak RSS in MiB)."""
    with tempfile.NamedTemporaryFile("r") as f:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", f.name] + cmd,
                           capture_output=True, text=True, env=env)
        rss = f.read().strip().splitlines()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n"
                           f"{p.stderr[-2000:]}")
    return p.stdout, int(rss[-1]) / 1024.0 if rss else float("nan")


def thread_env(n):
    env = dict(os.environ)
    for v in ("KEEL_CPU_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
              "MKL_NUM_THREADS"):
        env[v] = str(n)
    return env


def run_keel(build, model, mode, threads, secs, smoke):
    batch = 1 if mode == "infer" else (2 if smoke else BATCH[model])
    name = f"e2e/model/{model}/{mode}/n{batch}"
    env = thread_env(threads)
    env.setdefault("KEEL_PLUGIN_PATH", os.path.join(build, "plugins", "cpu"))
    env.setdefault("KEEL_PLUGIN_DEFAULT_PATHS", "0")
    with tempfile.NamedTemporaryFile("r", suffix=".json") as f:
        cmd = [os.path.join(build, "core", "cli", "keel"), "bench",
               "--plugin", "cpu", "--filter", "^" + name + "/",
               "--min-time", str(secs), "--format", "json", "--out", f.name]
        if smoke:
            cmd.append("--smoke")
        _, rss = timed(cmd, env)
        rep = json.load(f)
    for b in rep["benchmarks"]:
        if b.get("run_name", b["name"]).startswith(name + "/"):
            if b.get("error_occurred"):
                raise RuntimeError(f"keel {name}: {b.get('error_message')}")
            unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[
                b.get("time_unit", "ns")]
            return b["real_time"] * unit, rss
    raise RuntimeError(f"keel bench ran no {name}")


def run_py(fw, model, mode, threads, secs, smoke):
    cmd = [sys.executable, os.path.join(HERE, "models_torch_paddle.py"), fw,
           model, mode, "--threads", str(threads), "--seconds", str(secs)]
    if smoke:
        cmd.append("--smoke")
    out, rss = timed(cmd, thread_env(threads))
    r = json.loads(out.strip().splitlines()[-1])
    return r["ms_median"], rss, r["version"]


def compare_cells(theirs, keel):
    """Two table cells from per-round (ms, rss) lists of one framework and
    of keel: its median ms, and keel's speed against it (median over
    rounds of its ms / keel's ms, with the min and max)."""
    ratios = [o[0] / k[0] for o, k in zip(theirs, keel)]
    return [f"{statistics.median(x[0] for x in theirs):.3g}",
            f"{statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f})"]


def rss_cell(runs):
    """The median peak RSS of each framework's runs, "a / b / c"."""
    return " / ".join(f"{statistics.median(x[1] for x in r):.0f}"
                      for r in runs)


def have(module):
    return subprocess.run([sys.executable, "-c", f"import {module}"],
                          capture_output=True).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", nargs="?", default=os.path.join(ROOT, "build"))
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", default="1 2")
    ap.add_argument("-s", "--seconds", type=float, default=2.0)
    ap.add_argument("-m", "--steps", nargs="*",
                    help="MODEL/MODE, e.g. lenet/train (default: all six)")
    ap.add_argument("-o", "--out")
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    steps = [tuple(s.split("/")) for s in a.steps] if a.steps else STEPS
    threads = [int(t) for t in a.threads.split()]
    fws = ["keel"] + [f for f in ("torch", "paddle") if have(f)]
    missing = [f for f in ("torch", "paddle") if f not in fws]
    res = {}  # (model, mode, threads, fw) -> [(ms, rss)], round order
    versions = {}
    for r in range(a.rounds):
        for t in threads:
            for model, mode in steps:
                order = fws[r % len(fws):] + fws[:r % len(fws)]
                for fw in order:
                    if fw == "keel":
                        ms, rss = run_keel(a.build, model, mode, t,
                                           a.seconds, a.smoke)
                    else:
                        ms, rss, versions[fw] = run_py(fw, model, mode, t,
                                                       a.seconds, a.smoke)
                    res.setdefault((model, mode, t, fw), []).append((ms, rss))
                    print(f"round {r + 1} t{t} {model}/{mode} {fw}: "
                          f"{ms:.3f} ms, {rss:.0f} MiB", file=sys.stderr)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    lines = [f"Model steps on the CPU, {datetime.date.today()}, {cpu}, "
             f"{a.rounds} rounds of {a.seconds} s per process"
             f"{', smoke sizes' if a.smoke else ''}.",
             "keel " + " ".join(f"/ {f} {v}" for f, v in versions.items()) +
             (f" (not installed: {', '.join(missing)})" if missing else ""),
             "",
             "| step | threads | keel ms | " +
             " | ".join(f"{f} ms | keel vs {f} (min-max)" for f in fws[1:]) +
             " | peak RSS MiB " + " / ".join(fws) + " |",
             "|" + " --- |" * (3 + 2 * (len(fws) - 1) + 1)]
    for model, mode in steps:
        for t in threads:
            k = res[(model, mode, t, "keel")]
            row = [f"{model} {mode}", str(t),
                   f"{statistics.median(x[0] for x in k):.3g}"]
            for fw in fws[1:]:
                row += compare_cells(res[(model, mode, t, fw)], k)
            row.append(rss_cell(res[(model, mode, t, f)] for f in fws))
            lines.append("| " + " | ".join(row) + " |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump({"|".join(map(str, k)): v for k, v in res.items()}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
