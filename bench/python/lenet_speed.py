#!/usr/bin/env python3
"""LeNet training from Python against the C example, images/s, in
interleaved rounds: keel.nn's LeNet (the layers of examples/mnist), Adam
1e-3, batch 64, on the first --images Fashion-MNIST training images, and
`keel-mnist --epochs 1 --limit IMAGES` on the same images.

    PYTHONPATH=build/python KEEL_PLUGIN_PATH=build/plugins/cpu \\
        .venv/bin/python bench/python/lenet_speed.py --build build

Both run with one thread (KEEL_CPU_THREADS=1). Prints each round and the
median of the per-round ratios Python / C.
"""
import argparse
import gzip
import os
import re
import statistics
import subprocess
import time

os.environ.setdefault("KEEL_CPU_THREADS", "1")

import numpy as np  # noqa: E402

import keel  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"


def idx(path):
    with gzip.open(path) as f:
        raw = f.read()
    nd = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


def lenet():
    nn = keel.nn
    return nn.Sequential(
        nn.Conv2D(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2D(2, 2),
        nn.Conv2D(6, 16, 5), nn.ReLU(), nn.MaxPool2D(2, 2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))


def python_run(x, y, batch):
    model = lenet()
    opt = keel.optimizer.Adam(learning_rate=1e-3,
                              parameters=model.parameters())
    loss_fn = keel.nn.CrossEntropyLoss()
    steps = x.shape[0] // batch
    t0 = time.perf_counter()
    for s in range(steps):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        opt.clear_grad()
    loss.item()
    return steps * batch / (time.perf_counter() - t0)


def c_run(prog, images):
    r = subprocess.run([prog, "--epochs", "1", "--limit", str(images),
                        "--log-every", "0"], capture_output=True, text=True,
                       check=True)
    m = re.search(r"epoch 1/1 .* (\d+) images/s", r.stdout)
    if not m:
        raise SystemExit("keel-mnist printed no images/s:\n" + r.stdout)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--images", type=int, default=6400)
    a = ap.parse_args()
    prog = os.path.join(a.build, "examples", "mnist", "keel-mnist")
    keel.set_device("cpu")
    xs = idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"))[:a.images]
    ys = idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"))[:a.images]
    x = keel.to_tensor((xs.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28))
    y = keel.to_tensor(ys.astype(np.int64))
    py, c = [], []
    for i in range(a.rounds):
        py.append(python_run(x, y, 64))
        c.append(c_run(prog, a.images))
        print("round %d: python %.0f images/s, C example %.0f images/s"
              % (i + 1, py[-1], c[-1]))
    ratios = [p / q for p, q in zip(py, c)]
    print("median: python %.0f, C %.0f images/s; python / C %.3f"
          % (statistics.median(py), statistics.median(c),
             statistics.median(ratios)))


if __name__ == "__main__":
    main()
