"""The training-loop skeleton of the Paddle 3.3 quick reference, whole:
a model, AdamW with a cosine schedule, auto_cast, clear_grad, eval with
no_grad and argmax, and save / load of the weights.

Written against Paddle's API; the first import line is the only one that
differs from the same script for Paddle (`import paddle`). Run:
    PYTHONPATH=build/python python examples/python/train_loop.py
"""
import keel as paddle  # the one line that differs from the Paddle script

import os
import sys
import tempfile

import numpy as np

nn = paddle.nn


class MLP(nn.Layer):
    def __init__(self, d_in, d_hidden, n_classes):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(d_hidden, n_classes)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Blobs(paddle.io.Dataset):
    """Three Gaussian blobs in 8 dimensions, from a fixed NumPy seed."""

    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        centers = np.random.default_rng(0).standard_normal((3, 8)) * 2.5
        self.y = rng.integers(0, 3, n).astype("int64")
        self.x = (centers[self.y] + rng.standard_normal((n, 8))).astype(
            "float32")

    def __getitem__(self, i):
        return self.x[i], self.y[i]

    def __len__(self):
        return len(self.y)


paddle.seed(0)
np.random.seed(0)
epochs = 8
train, test = Blobs(1024, 1), Blobs(512, 2)
loader = paddle.io.DataLoader(train, batch_size=32, shuffle=True,
                              drop_last=True)

model = MLP(8, 32, 3).cuda() if paddle.is_compiled_with_cuda() else \
    MLP(8, 32, 3)
loss_fn = nn.CrossEntropyLoss()
scheduler = paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=3e-3,
                                                     T_max=epochs)
optimizer = paddle.optimizer.AdamW(parameters=model.parameters(),
                                   learning_rate=scheduler, weight_decay=0.01)

model.train()
for epoch in range(epochs):
    for x, y in loader:
        with paddle.amp.auto_cast():
            logits = model(x)
            loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
    scheduler.step()

model.eval()
x_test, y_test = paddle.to_tensor(test.x), paddle.to_tensor(test.y)
with paddle.no_grad():
    pred = model(x_test).argmax(axis=1)
accuracy = float((pred == y_test).astype("float32").mean())

# Save the weights, load them into a fresh model: the same predictions.
path = os.path.join(tempfile.mkdtemp(), "mlp.pdparams")
paddle.save(model.state_dict(), path)
restored = MLP(8, 32, 3)
restored.set_state_dict(paddle.load(path))
restored.eval()
with paddle.no_grad():
    same = bool((restored(x_test).argmax(axis=1) == pred).all())

print("final loss %.4f  test accuracy %.3f  restored model agrees: %s"
      % (float(loss), accuracy, same))
sys.exit(0 if accuracy > 0.9 and same else 1)
