#!/usr/bin/env python3
"""One inference measurement of another framework, in its own process
(bench/infer/infer_ratio.py starts it):

    infer_others.py ort    MODEL.onnx X.npy THREADS SECONDS
    infer_others.py torch  lenet|encoder BATCH THREADS SECONDS
    infer_others.py paddle lenet|encoder BATCH THREADS SECONDS

ort runs the ONNX file keel exported (the same weights keel's Predictor
runs) in onnxruntime's CPUExecutionProvider, all graph optimisations on,
intra-op threads THREADS, one inter-op thread. torch runs the same
architecture in PyTorch eager under torch.inference_mode() with
torch.set_num_threads(THREADS); paddle saves it with paddle.jit.save and
runs it in a Paddle Inference predictor (CPU, THREADS math threads, IR
optimisation on; memory optimisation off: Paddle 3.3 refuses it for the
PIR programs jit.save writes). torch and paddle use their own random
weights: the time of these models does not depend on the values.

After a warm-up of 0.5 s (at least 3 runs) it times single runs for
SECONDS and prints `median_ms M runs N` and a line describing the set-up.
"""
import os
import sys
import time

import numpy as np

SEQ, HIDDEN, HEADS, FFN = 64, 256, 4, 1024


def measure(run, seconds):
    t_end = time.perf_counter() + 0.5
    n = 0
    while n < 3 or time.perf_counter() < t_end:
        run()
        n += 1
    times = []
    t_end = time.perf_counter() + seconds
    while len(times) < 3 or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2], len(times)


def input_of(model, batch):
    rng = np.random.default_rng(3)
    shape = (batch, 1, 28, 28) if model == "lenet" else (batch, SEQ, HIDDEN)
    return rng.standard_normal(shape).astype(np.float32)


def ort(path, xfile, threads, seconds):
    import onnxruntime as rt

    so = rt.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = rt.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = rt.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    x = np.load(xfile)
    feed = {sess.get_inputs()[0].name: x}
    print(f"onnxruntime {rt.__version__}, CPUExecutionProvider, "
          f"ORT_ENABLE_ALL, intra-op threads {threads}")
    return measure(lambda: sess.run(None, feed), seconds)


def torch_models(nn, F, torch):
    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(1, 6, 5, padding=2)
            self.c2 = nn.Conv2d(6, 16, 5)
            self.f1 = nn.Linear(400, 120)
            self.f2 = nn.Linear(120, 84)
            self.f3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.c1(x)), 2)
            x = F.max_pool2d(F.relu(self.c2(x)), 2)
            x = torch.flatten(x, 1)
            return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN)
                                              for _ in range(4))
            self.ff1 = nn.Linear(HIDDEN, FFN)
            self.ff2 = nn.Linear(FFN, HIDDEN)
            self.ln1 = nn.LayerNorm(HIDDEN)
            self.ln2 = nn.LayerNorm(HIDDEN)

        def forward(self, x):
            b, s, d = x.shape
            hd = d // HEADS

            def heads(t):
                return t.reshape(b, s, HEADS, hd).permute(0, 2, 1, 3)

            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            a = torch.softmax(q @ k.transpose(-1, -2) * (hd ** -0.5), -1)
            a = (a @ v).permute(0, 2, 1, 3).reshape(b, s, d)
            x1 = self.ln1(x + self.o(a))
            return self.ln2(x1 + self.ff2(F.gelu(self.ff1(x1))))

    return {"lenet": LeNet, "encoder": Encoder}


def run_torch(model, batch, threads, seconds):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    m = torch_models(nn, F, torch)[model]().eval()
    x = torch.from_numpy(input_of(model, batch))
    print(f"torch {torch.__version__}, eager, inference_mode, "
          f"threads {torch.get_num_threads()}")

    def run():
        with torch.inference_mode():
            m(x)

    return measure(run, seconds)


def run_paddle(model, batch, threads, seconds):
    import tempfile

    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F
    from paddle import inference
    from paddle.static import InputSpec

    class LeNet(nn.Layer):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2D(1, 6, 5, padding=2)
            self.c2 = nn.Conv2D(6, 16, 5)
            self.f1 = nn.Linear(400, 120)
            self.f2 = nn.Linear(120, 84)
            self.f3 = nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.c1(x)), 2)
            x = F.max_pool2d(F.relu(self.c2(x)), 2)
            x = paddle.flatten(x, 1)
            return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))

    class Encoder(nn.Layer):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN)
                                              for _ in range(4))
            self.ff1 = nn.Linear(HIDDEN, FFN)
            self.ff2 = nn.Linear(FFN, HIDDEN)
            self.ln1 = nn.LayerNorm(HIDDEN)
            self.ln2 = nn.LayerNorm(HIDDEN)

        def forward(self, x):
            hd = HIDDEN // HEADS

            def heads(t):
                return t.reshape([0, SEQ, HEADS, hd]).transpose([0, 2, 1, 3])

            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            a = F.softmax(paddle.matmul(q, k, transpose_y=True)
                          * (hd ** -0.5), -1)
            a = paddle.matmul(a, v).transpose([0, 2, 1, 3])
            a = a.reshape([0, SEQ, HIDDEN])
            x1 = self.ln1(x + self.o(a))
            return self.ln2(x1 + self.ff2(F.gelu(self.ff1(x1))))

    paddle.set_device("cpu")
    layer = (LeNet if model == "lenet" else Encoder)()
    layer.eval()
    shape = [None, 1, 28, 28] if model == "lenet" else [None, SEQ, HIDDEN]
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, model)
        paddle.jit.save(layer, prefix,
                        input_spec=[InputSpec(shape, "float32", "x")])
        files = os.listdir(d)
        prog = next(os.path.join(d, f) for f in files
                    if f.endswith(".json") or f.endswith(".pdmodel"))
        config = inference.Config(prog, prefix + ".pdiparams")
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(threads)
        config.switch_ir_optim(True)
        # enable_memory_optim() stops create_predictor in Paddle 3.3's PIR
        # mode ("Not find ... memory_optimize_pass"), so it stays off.
        predictor = inference.create_predictor(config)
    x = input_of(model, batch)
    h = predictor.get_input_handle(predictor.get_input_names()[0])
    out = predictor.get_output_handle(predictor.get_output_names()[0])
    print(f"paddle {paddle.__version__}, Paddle Inference, CPU, math "
          f"threads {threads}, oneDNN {config.mkldnn_enabled()}")

    def run():
        h.reshape(list(x.shape))
        h.copy_from_cpu(x)
        predictor.run()
        out.copy_to_cpu()

    return measure(run, seconds)


def main():
    mode = sys.argv[1]
    if mode == "ort":
        ms, n = ort(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                    float(sys.argv[5]))
    elif mode in ("torch", "paddle"):
        fn = run_torch if mode == "torch" else run_paddle
        ms, n = fn(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                   float(sys.argv[5]))
    else:
        sys.exit(f"unknown mode {mode}")
    print(f"median_ms {ms:.6f} runs {n}")


if __name__ == "__main__":
    main()
