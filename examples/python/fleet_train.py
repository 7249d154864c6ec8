"""Fleet, as in the Paddle 3.3 quick reference's Fleet section:
fleet.init(is_collective=True), a DistributedStrategy with amp and
recompute, fleet.distributed_optimizer / distributed_model /
distributed_scaler, and a model whose middle block is recomputed in
backward (fleet.utils.recompute) and whose forward runs under auto_cast.

Written against Paddle's API; the first import line is the only one that
differs from the same script for Paddle (`import paddle`). keel runs it
under Open MPI:
    mpirun -np 2 .venv/bin/python examples/python/fleet_train.py
(with PYTHONPATH=build/python). Run alone it is a world of one.
"""
import keel as paddle  # the one line that differs from the Paddle script

import sys

import numpy as np

nn = paddle.nn
fleet = paddle.distributed.fleet

strategy = fleet.DistributedStrategy()
strategy.amp = True                          # mixed precision
# bfloat16 keeps float32's range: a fixed loss scale (Paddle turns dynamic
# scaling off for bfloat16 anyway).
strategy.amp_configs = {"init_loss_scaling": 1024.0,
                        "use_dynamic_loss_scaling": False}
strategy.recompute = True                    # checkpointing (static graphs)
strategy.recompute_configs = {"checkpoints": []}
fleet.init(is_collective=True, strategy=strategy)
rank, world = fleet.worker_index(), fleet.worker_num()


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(10, 32)
        self.block = nn.Sequential(nn.Linear(32, 32), nn.ReLU(),
                                   nn.Linear(32, 32), nn.ReLU())
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        h = self.inp(x)
        # The block's activations are not kept: backward recomputes them.
        h = fleet.utils.recompute(self.block, h)
        return self.out(h)


paddle.seed(100 + rank)  # different weights per rank: rank 0's win
model = Net()
optimizer = paddle.optimizer.Adam(learning_rate=0.01,
                                  parameters=model.parameters())
optimizer = fleet.distributed_optimizer(optimizer, strategy)
if world > 1:  # (Paddle 3.3's distributed_model wants a PipelineLayer
    model = fleet.distributed_model(model)  # in a world of one)
scaler = fleet.distributed_scaler(paddle.amp.GradScaler(
    init_loss_scaling=strategy.amp_configs["init_loss_scaling"],
    use_dynamic_loss_scaling=strategy.amp_configs["use_dynamic_loss_scaling"]))

rng = np.random.default_rng(0)  # the same global batches on every rank
w_true = rng.standard_normal((10, 1)).astype("float32")
losses = []
for step in range(100):
    xb = rng.standard_normal((16 * world, 10)).astype("float32")
    mine = xb[rank::world]  # this rank's share
    x, y = paddle.to_tensor(mine), paddle.to_tensor(mine @ w_true)
    with paddle.amp.auto_cast(enable=strategy.amp, dtype="bfloat16"):
        pred = model(x)
    loss = nn.functional.mse_loss(pred.astype("float32"), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.clear_grad()
    losses.append(float(loss))

# Every rank must hold the same parameters: compare with the ranks' mean.
flat = paddle.concat([p.astype("float32").flatten()
                      for p in model.parameters()])
mean = flat.clone()
if world > 1:
    paddle.distributed.all_reduce(mean)
same = bool(((mean / world - flat).abs() <= 1e-6).all())
first, last = np.mean(losses[:10]), np.mean(losses[-10:])
print("rank %d of %d: loss %.4f -> %.4f, parameters equal on every rank: %s"
      % (rank, world, first, last, same))
sys.exit(0 if same and last < 0.2 * first else 1)
