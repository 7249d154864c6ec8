"""Data-parallel training as in the Paddle 3.3 quick reference:
init_parallel_env, DataParallel, each rank training on its share of every
global batch, loss.backward() averaging the gradients over the ranks.

Written against Paddle's API; the first import line is the only one that
differs from the same script for Paddle (`import paddle`). keel runs it
under Open MPI:
    mpirun -np 2 .venv/bin/python examples/python/data_parallel.py
(with PYTHONPATH=build/python). Run alone it is a world of one.
"""
import keel as paddle  # the one line that differs from the Paddle script

import sys

import numpy as np

nn = paddle.nn
dist = paddle.distributed

dist.init_parallel_env()
rank, world = dist.get_rank(), dist.get_world_size()

paddle.seed(100 + rank)  # different weights per rank: DataParallel
model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
model = paddle.DataParallel(model)  # broadcasts rank 0's
opt = paddle.optimizer.SGD(learning_rate=0.05, parameters=model.parameters())

rng = np.random.default_rng(0)  # the same global batches on every rank
w_true = rng.standard_normal((10, 1)).astype("float32")
losses = []
for step in range(120):
    xb = rng.standard_normal((16 * world, 10)).astype("float32")
    mine = xb[rank::world]  # this rank's share
    x, y = paddle.to_tensor(mine), paddle.to_tensor(mine @ w_true)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.clear_grad()
    losses.append(float(loss))

# Every rank must hold the same parameters: compare with the ranks' mean.
flat = paddle.concat([p.flatten() for p in model.parameters()])
mean = flat.clone()
if world > 1:  # (Paddle has no global group in a world of one)
    dist.all_reduce(mean)
same = bool(((mean / world - flat).abs() <= 1e-6).all())
first, last = np.mean(losses[:10]), np.mean(losses[-10:])
print("rank %d of %d: loss %.4f -> %.4f, parameters equal on every rank: %s"
      % (rank, world, first, last, same))
sys.exit(0 if same and last < 0.2 * first else 1)
