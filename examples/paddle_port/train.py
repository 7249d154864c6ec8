# Paddle's standard training loop on synthetic data: an MLP, CrossEntropyLoss,
# AdamW with cosine decay, train/eval, clear_grad, no_grad evaluation with
# argmax, and a save / load of the state dict. train.c is the same program
# in C with keel (docs/examples.md compares the two).
import sys

import paddle
from paddle import nn
from paddle.io import DataLoader, TensorDataset

N_TRAIN, N_TEST, DIM, CLASSES, EPOCHS = 1024, 256, 16, 4, 5


def mlp():
    return nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 64),
                         nn.ReLU(), nn.Linear(64, CLASSES))


def make_data(centers, n):
    # n samples: N(0, 1) noise around the centre of a random class
    y = paddle.randint(0, CLASSES, [n])
    return paddle.randn([n, DIM]) + paddle.index_select(centers, y), y


def evaluate(model, x, y):
    model.eval()
    with paddle.no_grad():
        logits = model(x)
        acc = (logits.argmax(axis=1) == y).astype('float32').mean()
    return logits, float(acc)


paddle.seed(0)
centers = paddle.randn([CLASSES, DIM])
x, y = make_data(centers, N_TRAIN)
x_test, y_test = make_data(centers, N_TEST)
loader = DataLoader(TensorDataset([x, y]), batch_size=64, shuffle=True)

model = mlp()
loss_fn = nn.CrossEntropyLoss()
scheduler = paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=3e-3,
                                                     T_max=EPOCHS)
optimizer = paddle.optimizer.AdamW(parameters=model.parameters(),
                                   learning_rate=scheduler, weight_decay=0.01)
losses = []
model.train()
for epoch in range(EPOCHS):
    losses.append(0.0)
    for xb, yb in loader:
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses[-1] += float(loss) / len(loader)
    scheduler.step()
    print(f"epoch {epoch + 1}/{EPOCHS}  loss {losses[-1]:.4f}  "
          f"lr {scheduler.last_lr:.6f}")
logits, acc = evaluate(model, x_test, y_test)

path = sys.argv[1] if len(sys.argv) > 1 else "paddle_port.pdparams"
paddle.save(model.state_dict(), path)
model2 = mlp()
model2.set_state_dict(paddle.load(path))
logits2, acc2 = evaluate(model2, x_test, y_test)
same = bool(paddle.equal_all(logits, logits2))
print(f"test accuracy {100 * acc:.2f}%, reloaded {100 * acc2:.2f}% "
      f"({'identical' if same else 'DIFFERENT'})")
sys.exit(0 if losses[-1] < losses[0] and same else 1)
