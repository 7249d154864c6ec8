#!/usr/bin/env python3
"""The model steps of `keel bench`'s e2e/model/ group (bench/suite/kb_models.c)
in PyTorch or Paddle, on the CPU, for side-by-side timing.

    python bench/models_torch_paddle.py FRAMEWORK MODEL MODE [--threads N]
                                         [--seconds S] [--smoke]

FRAMEWORK  torch or paddle
MODEL      bert_layer, resnet18 or lenet
MODE       train (batch 8 / 16 / 64) or infer (batch 1)

The models are the same as keel's, layer for layer, in float32:
BERT-base's post-LayerNorm encoder layer (S 128, H 768, 12 heads, FFN
3072, exact GELU, dropout 0.1 at BERT's three places; MSE to a random
target; AdamW lr 1e-3, weight decay 0.01), ResNet-18 (torchvision's
layout: 7x7/2 stem without bias, BatchNorm, max pool 3x3/2, four stages
of two basic blocks, 1x1 downsample; 3x64x64 inputs, 10 classes;
CrossEntropyLoss, momentum SGD lr 0.01, 0.9) and LeNet-5 (Adam lr 1e-3).
train: forward, loss, backward, optimizer step, zero/clear grad, in
training mode; infer: forward in eval mode under no_grad (torch:
inference_mode), batch 1.

It warms up for 3 steps, then times steps (each a whole step, wall clock)
until S seconds have passed (at least 5 steps) and prints one JSON line:
{"framework", "version", "model", "mode", "batch", "threads", "steps",
"ms_median", "ms_min", "samples_per_s"}. Threads: torch.set_num_threads
and OMP/MKL settings before import; paddle through its flags
(CPU math library threads) and OMP_NUM_THREADS.
"""
import argparse
import json
import os
import statistics
import sys
import time

BATCH = {"bert_layer": 8, "resnet18": 16, "lenet": 64}


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("framework", choices=["torch", "paddle"])
    ap.add_argument("model", choices=list(BATCH))
    ap.add_argument("mode", choices=["train", "infer"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes (as keel bench --smoke)")
    return ap.parse_args()


def dims(a):
    if a.smoke:
        return dict(S=16, H=48, heads=4, F=96, width=8, image=32,
                    batch=1 if a.mode == "infer" else 2)
    return dict(S=128, H=768, heads=12, F=3072, width=64, image=64,
                batch=1 if a.mode == "infer" else BATCH[a.model])


# ---- PyTorch ------------------------------------------------------------------

def torch_models(d):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            H, Fd = d["H"], d["F"]
            self.qkv = nn.Linear(H, 3 * H)
            self.proj = nn.Linear(H, H)
            self.ln1 = nn.LayerNorm(H, eps=1e-5)
            self.ff1 = nn.Linear(H, Fd)
            self.ff2 = nn.Linear(Fd, H)
            self.ln2 = nn.LayerNorm(H, eps=1e-5)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            B, S, H = x.shape
            nh = d["heads"]
            dh = H // nh
            qkv = self.qkv(x).reshape(B, S, 3, nh, dh).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            p = torch.softmax(q @ k.transpose(-1, -2) * (1.0 / dh ** 0.5), -1)
            ctx = (self.drop(p) @ v).permute(0, 2, 1, 3).reshape(B, S, H)
            h = self.ln1(self.drop(self.proj(ctx)) + x)
            f = self.ff2(F.gelu(self.ff1(h)))
            return self.ln2(self.drop(f) + h)

    def conv_bn(cin, cout, k, s, p):
        return [nn.Conv2d(cin, cout, k, s, p, bias=False),
                nn.BatchNorm2d(cout, momentum=0.1, eps=1e-5)]

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = conv_bn(cin, cout, 3, stride, 1)
            self.c2, self.b2 = conv_bn(cout, cout, 3, 1, 1)
            self.ds = (nn.Sequential(*conv_bn(cin, cout, 1, stride, 0))
                       if stride != 1 else None)

        def forward(self, x):
            a = torch.relu(self.b1(self.c1(x)))
            a = self.b2(self.c2(a))
            return torch.relu(a + (self.ds(x) if self.ds is not None else x))

    class ResNet18(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.stem = nn.Sequential(*conv_bn(3, w, 7, 2, 3), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], w
            for stage in range(4):
                cout = w << stage
                for b in range(2):
                    blocks.append(Block(cin, cout,
                                        2 if stage > 0 and b == 0 else 1))
                    cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, 10)

        def forward(self, x):
            h = self.blocks(self.stem(x))
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))

    def lenet():
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

    return Encoder, ResNet18, lenet


def run_torch(a, d):
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    Encoder, ResNet18, lenet = torch_models(d)
    B = d["batch"]
    if a.model == "bert_layer":
        m = Encoder()
        x = torch.randn(B, d["S"], d["H"])
        y = torch.randn(B, d["S"], d["H"])
        loss_fn = torch.nn.MSELoss()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    else:
        if a.model == "resnet18":
            m = ResNet18(d["width"])
            x = torch.rand(B, 3, d["image"], d["image"])
            opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        else:
            m = lenet()
            x = torch.rand(B, 1, 28, 28)
            opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        y = torch.randint(0, 10, (B,))
        loss_fn = torch.nn.CrossEntropyLoss()

    if a.mode == "train":
        m.train()

        def step():
            loss = loss_fn(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
    else:
        m.eval()

        def step():
            with torch.inference_mode():
                return m(x)
    return step, torch.__version__


# ---- Paddle -------------------------------------------------------------------

def paddle_models(d):
    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F

    class Encoder(nn.Layer):
        def __init__(self):
            super().__init__()
            H, Fd = d["H"], d["F"]
            self.qkv = nn.Linear(H, 3 * H)
            self.proj = nn.Linear(H, H)
            self.ln1 = nn.LayerNorm(H, epsilon=1e-5)
            self.ff1 = nn.Linear(H, Fd)
            self.ff2 = nn.Linear(Fd, H)
            self.ln2 = nn.LayerNorm(H, epsilon=1e-5)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            B, S, H = x.shape
            nh = d["heads"]
            dh = H // nh
            qkv = self.qkv(x).reshape([B, S, 3, nh, dh]).transpose(
                [2, 0, 3, 1, 4])
            q, k, v = qkv[0], qkv[1], qkv[2]
            p = F.softmax(paddle.matmul(q, k, transpose_y=True) *
                          (1.0 / dh ** 0.5), -1)
            ctx = paddle.matmul(self.drop(p), v).transpose(
                [0, 2, 1, 3]).reshape([B, S, H])
            h = self.ln1(self.drop(self.proj(ctx)) + x)
            f = self.ff2(F.gelu(self.ff1(h)))
            return self.ln2(self.drop(f) + h)

    def conv_bn(cin, cout, k, s, p):
        return [nn.Conv2D(cin, cout, k, s, p, bias_attr=False),
                nn.BatchNorm2D(cout, momentum=0.9, epsilon=1e-5)]

    class Block(nn.Layer):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = conv_bn(cin, cout, 3, stride, 1)
            self.c2, self.b2 = conv_bn(cout, cout, 3, 1, 1)
            self.ds = (nn.Sequential(*conv_bn(cin, cout, 1, stride, 0))
                       if stride != 1 else None)

        def forward(self, x):
            a = F.relu(self.b1(self.c1(x)))
            a = self.b2(self.c2(a))
            return F.relu(a + (self.ds(x) if self.ds is not None else x))

    class ResNet18(nn.Layer):
        def __init__(self, w):
            super().__init__()
            self.stem = nn.Sequential(*conv_bn(3, w, 7, 2, 3), nn.ReLU(),
                                      nn.MaxPool2D(3, 2, 1))
            blocks, cin = [], w
            for stage in range(4):
                cout = w << stage
                for b in range(2):
                    blocks.append(Block(cin, cout,
                                        2 if stage > 0 and b == 0 else 1))
                    cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, 10)

        def forward(self, x):
            h = self.blocks(self.stem(x))
            return self.fc(paddle.flatten(F.adaptive_avg_pool2d(h, 1), 1))

    def lenet():
        return nn.Sequential(
            nn.Conv2D(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2D(2, 2),
            nn.Conv2D(6, 16, 5), nn.ReLU(), nn.MaxPool2D(2, 2),
            nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))

    return Encoder, ResNet18, lenet


def run_paddle(a, d):
    import paddle
    paddle.set_device("cpu")
    paddle.set_flags({"FLAGS_paddle_num_threads": a.threads})
    paddle.seed(0)
    Encoder, ResNet18, lenet = paddle_models(d)
    B = d["batch"]
    if a.model == "bert_layer":
        m = Encoder()
        x = paddle.randn([B, d["S"], d["H"]])
        y = paddle.randn([B, d["S"], d["H"]])
        loss_fn = paddle.nn.MSELoss()
        opt = paddle.optimizer.AdamW(learning_rate=1e-3, weight_decay=0.01,
                                     parameters=m.parameters())
    else:
        if a.model == "resnet18":
            m = ResNet18(d["width"])
            x = paddle.rand([B, 3, d["image"], d["image"]])
            opt = paddle.optimizer.Momentum(learning_rate=0.01, momentum=0.9,
                                            parameters=m.parameters())
        else:
            m = lenet()
            x = paddle.rand([B, 1, 28, 28])
            opt = paddle.optimizer.Adam(learning_rate=1e-3,
                                        parameters=m.parameters())
        y = paddle.randint(0, 10, [B])
        loss_fn = paddle.nn.CrossEntropyLoss()

    if a.mode == "train":
        m.train()

        def step():
            loss = loss_fn(m(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            return loss
    else:
        m.eval()

        def step():
            with paddle.no_grad():
                return m(x)
    return step, paddle.__version__


def main():
    a = parse()
    n = str(a.threads)
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[v] = n
    d = dims(a)
    step, version = (run_torch if a.framework == "torch" else run_paddle)(
        a, d)
    for _ in range(3):
        r = step()
    float(r.sum())  # the warm-up's result is real
    times = []
    t_end = time.perf_counter() + a.seconds
    while time.perf_counter() < t_end or len(times) < 5:
        t0 = time.perf_counter()
        r = step()
        float(r.sum())  # wait for the whole step
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({
        "framework": a.framework, "version": version, "model": a.model,
        "mode": a.mode, "batch": d["batch"], "threads": a.threads,
        "steps": len(times), "ms_median": med * 1e3,
        "ms_min": min(times) * 1e3, "samples_per_s": d["batch"] / med}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
