"""Mixed precision with a GradScaler, as in the Paddle 3.3 quick
reference: the forward under auto_cast, the loss scaled for backward,
the step skipped when a gradient is inf or NaN, the scale updated.

Written against Paddle's API; the first import line is the only one that
differs from the same script for Paddle (`import paddle`).
"""
import keel as paddle  # the one line that differs from the Paddle script

import sys

import numpy as np

nn = paddle.nn

paddle.seed(0)
rng = np.random.default_rng(3)
w_true = rng.standard_normal((16, 1)).astype("float32")
model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
optimizer = paddle.optimizer.Adam(learning_rate=1e-2,
                                  parameters=model.parameters())
scaler = paddle.amp.GradScaler(init_loss_scaling=1024)
loss_fn = nn.MSELoss()

losses = []
for step in range(150):
    xb = rng.standard_normal((32, 16)).astype("float32")
    x, y = paddle.to_tensor(xb), paddle.to_tensor(xb @ w_true)
    with paddle.amp.auto_cast(level="O1", dtype="bfloat16"):
        loss = loss_fn(model(x), y)
    scaled = scaler.scale(loss)
    scaled.backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.clear_grad()
    losses.append(float(loss))

first, last = np.mean(losses[:10]), np.mean(losses[-10:])
print("loss %.4f -> %.4f (mean of the first and last 10 steps)"
      % (first, last))
sys.exit(0 if last < 0.2 * first else 1)
