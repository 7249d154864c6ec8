#!/usr/bin/env python3
"""LeNet's two conv layers, forward + backward, batch 64, in PyTorch on the
CPU: the reference for bench/conv_bench.c. As in training, conv1's backward
computes dweight and dbias only (its input needs no gradient); conv2's
computes dx, dweight and dbias.

    .venv/bin/python bench/conv_torch.py [threads] [iterations=30]

(PyTorch from the project's .venv: `KEEL_WITH_TORCH=1 bash tools/deps.sh`.)

Both layers and the phases are timed as in conv_bench.c (median ms).
Run both at 1 and 2 threads:

    for t in 1 2; do KEEL_CPU_THREADS=$t OPENBLAS_NUM_THREADS=$t \
      KEEL_PLUGIN_PATH=build/plugins/cpu build/bench/conv_bench; \
      .venv/bin/python bench/conv_torch.py $t; done
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def layer(xs, ws, ys, pad, need_dx):
    x = torch.rand(xs) * 2 - 1
    x.requires_grad_(need_dx)
    w = (torch.rand(ws) * 2 - 1).requires_grad_(True)
    b = (torch.rand(ws[0]) * 2 - 1).requires_grad_(True)
    dy = torch.rand(ys) * 2 - 1
    return x, w, b, dy, pad, need_dx


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else torch.get_num_threads()
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    layers = [layer((64, 1, 28, 28), (6, 1, 5, 5), (64, 6, 28, 28), 2, False),
              layer((64, 6, 14, 14), (16, 6, 5, 5), (64, 16, 10, 10), 0, True)]
    names = ["conv1 fwd", "conv1 bwd", "conv2 fwd", "conv2 bwd"]
    times = [[] for _ in range(5)]
    for i in range(-5, iters):
        t0 = tp = time.perf_counter()
        for k, (x, w, b, dy, pad, need_dx) in enumerate(layers):
            y = F.conv2d(x, w, b, padding=pad)
            tn = time.perf_counter()
            if i >= 0:
                times[2 * k].append((tn - tp) * 1e3)
            tp = tn
            torch.autograd.grad(y, (x, w, b) if need_dx else (w, b), dy)
            tn = time.perf_counter()
            if i >= 0:
                times[2 * k + 1].append((tn - tp) * 1e3)
            tp = tn
        if i >= 0:
            times[4].append((tp - t0) * 1e3)
    med = [statistics.median(t) for t in times]
    phases = ", ".join("%s %.2f" % (n, m) for n, m in zip(names, med))
    print("torch  LeNet convs fwd+bwd, batch 64, threads %d: %.2f ms/iter "
          "(median of %d; %s) [torch %s, mkldnn %s]"
          % (threads, med[4], iters, phases, torch.__version__,
             torch.backends.mkldnn.is_available()))


if __name__ == "__main__":
    main()
