#!/usr/bin/env python3
"""LeNet on Fashion-MNIST in PyTorch or PaddlePaddle, the same model,
optimizer and loop as examples/mnist (keel-mnist): the anchors of
bench/mnist_throughput.sh.

    .venv/bin/python bench/mnist_train.py torch|paddle [--threads N] [--epochs N]
                                 [--data DIR] [--limit N]

conv 1->6 k5 pad 2, relu, max-pool 2, conv 6->16 k5, relu, max-pool 2,
fc 400->120->84->10, cross entropy, Adam lr 1e-3, batch 64, shuffled each
epoch; test batches of 1000 in eval mode without gradients. Per epoch it
prints one line like keel-mnist's:

    epoch 1/1  loss 0.5125  4507 images/s  test accuracy 84.52%  (14.2 s)

images/s counts the training loop only (shuffle, batching, forward,
backward, step), as keel-mnist does; the test pass is timed apart.
The thread count must be fixed before the framework starts its pools, so
the script sets OMP/MKL/OpenBLAS thread variables and re-executes itself.
"""
import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack(">I", raw[:4])[0]
    nd = magic & 0xFF
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def find(data, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data, name)
        if os.path.exists(p):
            return p
    sys.exit(f"mnist_train: {stem}[.gz] not found in {data}")


def load(data, limit):
    xtr = read_idx(find(data, "train-images-idx3-ubyte"))
    ytr = read_idx(find(data, "train-labels-idx1-ubyte"))
    xte = read_idx(find(data, "t10k-images-idx3-ubyte"))
    yte = read_idx(find(data, "t10k-labels-idx1-ubyte"))
    if limit:
        xtr, ytr = xtr[:limit], ytr[:limit]
    f = lambda x: (x.astype(np.float32) / 255.0).reshape(-1, 1, 28, 28)
    return f(xtr), ytr.astype(np.int64), f(xte), yte.astype(np.int64)


def run_torch(a, xtr, ytr, xte, yte):
    import torch
    import torch.nn as nn
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    xtr_t, ytr_t = torch.from_numpy(xtr), torch.from_numpy(ytr)
    xte_t, yte_t = torch.from_numpy(xte), torch.from_numpy(yte)
    gen = torch.Generator().manual_seed(a.seed)

    def train_epoch():
        model.train()
        perm = torch.randperm(len(xtr_t), generator=gen)
        total, n = 0.0, 0
        for i in range(0, len(perm), 64):
            idx = perm[i:i + 64]
            x, y = xtr_t[idx], ytr_t[idx]
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            n += len(idx)
        return total / n

    def test():
        model.eval()
        ok = 0
        with torch.no_grad():
            for i in range(0, len(xte_t), 1000):
                ok += (model(xte_t[i:i + 1000]).argmax(1) ==
                       yte_t[i:i + 1000]).sum().item()
        return ok / len(xte_t)

    return train_epoch, test


def run_paddle(a, xtr, ytr, xte, yte):
    import paddle
    import paddle.nn as nn
    paddle.set_device("cpu")
    paddle.seed(a.seed)
    model = nn.Sequential(
        nn.Conv2D(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2D(2),
        nn.Conv2D(6, 16, 5), nn.ReLU(), nn.MaxPool2D(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, 10))
    opt = paddle.optimizer.Adam(learning_rate=1e-3,
                                parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()
    xtr_t, ytr_t = paddle.to_tensor(xtr), paddle.to_tensor(ytr)
    xte_t, yte_t = paddle.to_tensor(xte), paddle.to_tensor(yte)

    def train_epoch():
        model.train()
        perm = paddle.randperm(xtr_t.shape[0])
        total, n = 0.0, 0
        for i in range(0, perm.shape[0], 64):
            idx = perm[i:i + 64]
            x = paddle.gather(xtr_t, idx)
            y = paddle.gather(ytr_t, idx)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            total += float(loss) * idx.shape[0]
            n += idx.shape[0]
        return total / n

    def test():
        model.eval()
        ok = 0
        with paddle.no_grad():
            for i in range(0, xte_t.shape[0], 1000):
                pred = model(xte_t[i:i + 1000]).argmax(1)
                ok += int((pred == yte_t[i:i + 1000]).astype("int64").sum())
        return ok / xte_t.shape[0]

    return train_epoch, test


def main():
    p = argparse.ArgumentParser()
    p.add_argument("framework", choices=["torch", "paddle"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--data", default=DATA)
    p.add_argument("--limit", type=int, default=0)
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the initial weights and the shuffling")
    a = p.parse_args()
    want = str(a.threads)
    if os.environ.get("MNIST_TRAIN_THREADS") != want:
        env = dict(os.environ, MNIST_TRAIN_THREADS=want, OMP_NUM_THREADS=want,
                   MKL_NUM_THREADS=want, OPENBLAS_NUM_THREADS=want)
        os.execvpe(sys.executable, [sys.executable] + sys.argv, env)
    xtr, ytr, xte, yte = load(a.data, a.limit)
    make = run_torch if a.framework == "torch" else run_paddle
    train_epoch, test = make(a, xtr, ytr, xte, yte)
    print(f"mnist_train: {a.framework}, {a.threads} thread(s), "
          f"{len(xtr)} training images", flush=True)
    for e in range(a.epochs):
        t0 = time.perf_counter()
        loss = train_epoch()
        t1 = time.perf_counter()
        acc = test()
        t2 = time.perf_counter()
        print(f"epoch {e + 1}/{a.epochs}  loss {loss:.4f}  "
              f"{len(xtr) / (t1 - t0):.0f} images/s  "
              f"test accuracy {100 * acc:.2f}%  ({t2 - t0:.1f} s)",
              flush=True)


if __name__ == "__main__":
    main()
