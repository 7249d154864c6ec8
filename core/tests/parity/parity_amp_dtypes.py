#!/usr/bin/env python3
"""Parity case 'amp_dtypes': the dtype every layer and every op computes in
under auto_cast, keel against Paddle, at O1 and O2 with bfloat16 and
float16.

Paddle 3.3.1's dygraph auto_cast switches itself off on the CPU, but its
static (PIR) builder runs the AMP step of every op while the program is
built: under paddle.enable_static() and paddle.amp.auto_cast(level,
dtype), each op's API casts its inputs as Paddle's lists and promote rule
decide, then builds the op, whose result dtypes are in the program. That
is Paddle's decision, read here op by op (paddle.amp.decorate(level='O2')
at O2, as a user would).

keel's side (parity_amp_dtypes.c) runs the same layers eagerly inside
keel_amp_begin/end and reads, per call, keel_amp_op_stats: each op it ran
and the dtype it computed in.

Configurations:

  chain:<level>:<dtype>   a model with every layer type both have
      conv(bias) -> relu -> conv(no bias) -> BatchNorm2D (O1 only) ->
      relu -> MaxPool2D -> AvgPool2D -> Flatten -> Linear(bias) ->
      LayerNorm -> GELU -> Dropout(downscale_in_infer, eval) ->
      Dropout(p=0) -> Linear(no bias) = logits; Softmax(logits);
      CrossEntropyLoss(logits, label); Embedding(ids); add(logits,
      embedding); mean(softmax). Each call sees the previous call's output
      of its own framework, as in a real model.
  one:<layer>:<level>:<dtype>:in_<dtype>   each layer (or op) alone, on an
      input of float32 or of the amp dtype, so that a difference shows
      where it arises rather than downstream.

Values, per call: "<id> out <dtype>" and one "<id> op <keel op> <dtype>"
per op that computed (casts as "cast <source dtype>"). compare() matches
them call by call as multisets, exactly, and names every call that
differs.

Paddle's ops are named as keel's by PADDLE_OPS; PADDLE_SHAPE_ONLY are
reshapes, views and constants that keel does without an op. Where keel
runs one op for two of Paddle's (FOLDS: CrossEntropyLoss's mean
reduction inside keel's cross_entropy; the bias add of Conv2D and Linear
inside keel's conv2d and linear when the bias is in the amp dtype), the
second is folded into the first only when both ran in the same dtype
(else it stays, and fails). An op Paddle emits that neither table knows
fails the configuration.

Where Paddle's CPU-only build has no kernel of the chosen dtype (float16
conv2d, matmul, add, mean, relu, gelu, softmax, layer_norm, batch_norm,
cross_entropy_with_softmax; bfloat16 batch_norm and
cross_entropy_with_softmax), its builder checks the registered kernels
after the AMP step has cast the inputs and raises
"Check data type error for op: OP, input: NAME, NAME.dtype: DTYPE". The
dtype it names is the AMP step's decision for that op (a GPU build would
build the op with it). _refusals() catches exactly that error for the
ops of STANDIN_SHAPES, records the op with that dtype, and hands the
layer a stand-in value of that dtype and the op's output shape, so that
the rest of the layer (the bias add after a refused conv2d) and the rest
of the model are built by Paddle as they would be.

keel follows Paddle here with no exception: the norms decide from x
alone and keep float32 parameters (docs/amp.md.in, "The norms"), so
batch_norm under O2 runs in x's dtype on both sides.

    .venv/bin/python parity_amp_dtypes.py path/to/parity_amp_dtypes
"""

import contextlib
import os
import re
import sys
import warnings
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nn_common import T, wave  # noqa: E402

TOLERANCE = 0.0

LEVELS = ("O1", "O2")
DTYPES = ("bfloat16", "float16")

# Paddle op -> keel op. Paddle's Linear is matmul (+ add of the bias);
# keel's Linear runs the linear op (+ add, under auto_cast with a float32
# bias; amp.h). pool2d is max_pool2d or avg_pool2d by its pooling_type.
PADDLE_OPS = {
    "pd_op.conv2d": "conv2d",
    "pd_op.add": "add",
    "pd_op.relu": "relu",
    "pd_op.pool2d": None,  # by pooling_type
    "pd_op.matmul": "linear",
    "pd_op.batch_norm": "batch_norm",
    "pd_op.batch_norm_": "batch_norm",
    "pd_op.layer_norm": "layer_norm",
    "pd_op.gelu": "gelu",
    "pd_op.dropout": "dropout",
    "pd_op.softmax": "softmax",
    "pd_op.cross_entropy_with_softmax": "cross_entropy",
    "pd_op.embedding": "embedding",
    "pd_op.mean": "mean",
    "pd_op.cast": "cast",
}

# No floating computation: constants, and reshapes that are views in keel
# (Flatten, the bias reshape of Conv2D, CrossEntropyLoss's unsqueeze of
# the label).
PADDLE_SHAPE_ONLY = {"pd_op.full", "pd_op.full_int_array", "pd_op.reshape",
                     "pd_op.flatten", "pd_op.unsqueeze", "pd_op.data"}


# ---- configurations ---------------------------------------------------------

def _image(shape, k):
    return T(wave(shape, k, 1.0))


IDS = {"tensor": T([1, 7], "int64")}      # [2]
LABEL = {"tensor": T([3, 1], "int64")}    # [2], for logits [2, 5]
LABEL3 = {"tensor": T([3, 1, 6], "int64")}  # [3], for logits [3, 8]


def _chain(level, dtype):
    calls = [
        ("conv_b", {"type": "Conv2D", "args": {
            "in_channels": 3, "out_channels": 4, "kernel_size": 3,
            "padding": 1}}, ["x"]),
        ("relu", {"type": "ReLU"}, ["conv_b"]),
        ("conv_nb", {"type": "Conv2D", "args": {
            "in_channels": 4, "out_channels": 4, "kernel_size": 3,
            "padding": 1, "bias_attr": False}}, ["relu"]),
    ]
    prev = "conv_nb"
    if level == "O1":
        calls.append(("bn", {"type": "BatchNorm2D",
                             "args": {"num_features": 4}}, [prev]))
        prev = "bn"
    calls += [
        ("relu2", {"type": "ReLU"}, [prev]),
        ("maxpool", {"type": "MaxPool2D", "args": {
            "kernel_size": 2, "stride": 2}}, ["relu2"]),
        ("avgpool", {"type": "AvgPool2D", "args": {
            "kernel_size": 2, "stride": 2}}, ["maxpool"]),
        ("flatten", {"type": "Flatten"}, ["avgpool"]),
        ("linear_b", {"type": "Linear", "args": {
            "in_features": 16, "out_features": 12}}, ["flatten"]),
        ("ln", {"type": "LayerNorm", "args": {"normalized_shape": 12}},
         ["linear_b"]),
        ("gelu", {"type": "GELU"}, ["ln"]),
        ("dropout", {"type": "Dropout", "args": {
            "p": 0.5, "mode": "downscale_in_infer"}}, ["gelu"]),
        ("dropout_p0", {"type": "Dropout", "args": {"p": 0.0}},
         ["dropout"]),
        ("linear_nb", {"type": "Linear", "args": {
            "in_features": 12, "out_features": 5, "bias_attr": False}},
         ["dropout_p0"]),
        ("softmax", {"type": "Softmax"}, ["linear_nb"]),
        ("ce", {"type": "CrossEntropyLoss"}, ["linear_nb", "label"]),
        ("emb", {"type": "Embedding", "args": {
            "num_embeddings": 10, "embedding_dim": 5}}, ["ids"]),
        ("add", "add", ["linear_nb", "emb"]),
        ("mean", "mean", ["softmax"]),
    ]
    return {
        "name": f"chain:{level}:{dtype}", "group": f"chain {level}",
        "level": level, "dtype": dtype,
        "inputs": {"x": {"tensor": _image([2, 3, 8, 8], 1),
                         "dtype": "float32"},
                   "ids": IDS,
                   "label": LABEL},
        "calls": [_call(i, what, ins) for i, what, ins in calls]}


def _call(cid, what, inputs):
    if isinstance(what, str):
        return {"id": cid, "op": what, "inputs": inputs}
    return {"id": cid, "layer": what, "inputs": inputs}


# (name, layer spec or op name, input shapes; "label"/"ids" for integers)
ONE = [
    ("Conv2D_bias", {"type": "Conv2D", "args": {
        "in_channels": 3, "out_channels": 4, "kernel_size": 3,
        "padding": 1}}, [[2, 3, 6, 6]]),
    ("Conv2D_no_bias", {"type": "Conv2D", "args": {
        "in_channels": 3, "out_channels": 4, "kernel_size": 3,
        "bias_attr": False}}, [[2, 3, 6, 6]]),
    ("BatchNorm2D", {"type": "BatchNorm2D", "args": {"num_features": 3}},
     [[2, 3, 4, 4]]),
    ("ReLU", {"type": "ReLU"}, [[2, 3, 4, 4]]),
    ("MaxPool2D", {"type": "MaxPool2D", "args": {"kernel_size": 2,
                                                 "stride": 2}},
     [[2, 3, 4, 4]]),
    ("AvgPool2D", {"type": "AvgPool2D", "args": {"kernel_size": 2,
                                                 "stride": 2}},
     [[2, 3, 4, 4]]),
    ("Flatten", {"type": "Flatten"}, [[2, 3, 2, 2]]),
    ("Linear_bias", {"type": "Linear", "args": {"in_features": 8,
                                                "out_features": 5}},
     [[2, 8]]),
    ("Linear_no_bias", {"type": "Linear", "args": {
        "in_features": 8, "out_features": 5, "bias_attr": False}},
     [[2, 8]]),
    ("LayerNorm", {"type": "LayerNorm", "args": {"normalized_shape": 8}},
     [[2, 8]]),
    ("GELU", {"type": "GELU"}, [[2, 8]]),
    ("Dropout_downscale_eval", {"type": "Dropout", "args": {
        "p": 0.5, "mode": "downscale_in_infer"}}, [[2, 8]]),
    ("Dropout_p0", {"type": "Dropout", "args": {"p": 0.0}}, [[2, 8]]),
    ("Softmax", {"type": "Softmax"}, [[2, 8]]),
    ("CrossEntropyLoss", {"type": "CrossEntropyLoss"}, [[3, 8], "label"]),
    ("mean", "mean", [[2, 8]]),
]


def _one(name, what, shapes, level, dtype, in_dtype, k):
    inputs, names = {}, []
    for j, s in enumerate(shapes):
        if s == "label":
            inputs["label"] = LABEL3
            names.append("label")
        else:
            inputs[f"x{j}"] = {"tensor": _image(s, k + j), "dtype": in_dtype}
            names.append(f"x{j}")
    return {"name": f"one:{name}:{level}:{dtype}:in_{in_dtype}",
            "group": f"one layer {level}",
            "level": level, "dtype": dtype, "inputs": inputs,
            "calls": [_call(name, what, names)]}


def _configs():
    out = [_chain(level, dtype) for level in LEVELS for dtype in DTYPES]
    k = 10
    for level in LEVELS:
        for dtype in DTYPES:
            for name, what, shapes in ONE:
                for in_dtype in ("float32", dtype):
                    k += 1
                    out.append(_one(name, what, shapes, level, dtype,
                                    in_dtype, k))
            # Integer input: nothing to cast but the table.
            out.append({
                "name": f"one:Embedding:{level}:{dtype}",
                "group": f"one layer {level}", "level": level,
                "dtype": dtype, "inputs": {"ids": IDS},
                "calls": [_call("Embedding", {
                    "type": "Embedding",
                    "args": {"num_embeddings": 10, "embedding_dim": 4}},
                    ["ids"])]})
            # add of every pair of float32 and amp dtype.
            for a in ("float32", dtype):
                for b in ("float32", dtype):
                    k += 1
                    out.append({
                        "name": f"one:add:{level}:{dtype}:in_{a}+{b}",
                        "group": f"one layer {level}", "level": level,
                        "dtype": dtype,
                        "inputs": {"a": {"tensor": _image([2, 4], k),
                                         "dtype": a},
                                   "b": {"tensor": _image([2, 4], k + 1),
                                         "dtype": b}},
                        "calls": [_call("add", "add", ["a", "b"])]})
    return out


CONFIGS = _configs()


# ---- comparison -------------------------------------------------------------

def _by_call(values):
    calls, order = {}, []
    for v in values:
        cid = v.split(" ", 1)[0] if isinstance(v, str) else "?"
        if cid not in calls:
            calls[cid] = Counter()
            order.append(cid)
        calls[cid][v] += 1
    return order, calls


def compare(config, ours, theirs, tol):
    name = config["name"]
    for v in ours + theirs:
        if not isinstance(v, str):
            return 0, 0.0, f"{name}: a value is not a row string: {v!r}"
    o_order, o = _by_call(ours)
    t_order, t = _by_call(theirs)
    bad = []
    for cid in t_order + [c for c in o_order if c not in t]:
        if o.get(cid) != t.get(cid):
            only_k = sorted((o.get(cid, Counter()) - t.get(cid, Counter()))
                            .elements())
            only_p = sorted((t.get(cid, Counter()) - o.get(cid, Counter()))
                            .elements())
            bad.append(f"[{cid}] keel only {only_k}, Paddle only {only_p}")
    if not bad and o_order != t_order:
        bad.append(f"call order keel {o_order}, Paddle {t_order}")
    if bad:
        return len(ours), 1.0, (f"{name}: {len(bad)} call(s) differ: "
                                + "; ".join(bad))
    return len(ours), 0.0, None


# ---- the Paddle side --------------------------------------------------------

_REFUSAL = re.compile(r"Check data type error for op: (\w+), input: (\w+), "
                      r"\w+\.dtype: (\w+),")


def _conv_shape(args):
    x, w, strides, paddings, _alg, dilations = args[:6]
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    pad = list(paddings)
    if len(pad) == 2:
        pad = [pad[0], pad[0], pad[1], pad[1]]
    ho = (h + pad[0] + pad[1] - (dilations[0] * (kh - 1) + 1)) // \
        strides[0] + 1
    wo = (wd + pad[2] + pad[3] - (dilations[1] * (kw - 1) + 1)) // \
        strides[1] + 1
    return [[n, o, ho, wo]]


def _matmul_shape(args):
    x, y = args[0], args[1]
    if len(args) > 2 and (args[2] or args[3]):
        raise RuntimeError("stand-in for a transposed matmul not written")
    return [list(x.shape[:-1]) + [y.shape[-1]]]


def _ce_shape(args):
    x, axis = args[0], args[6]
    loss = list(x.shape)
    loss[axis] = 1
    return [list(x.shape), loss]


def _broadcast_shape(args):
    a, b = list(args[0].shape), list(args[1].shape)
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    return [[x if y == 1 else y for x, y in zip(a, b)]]


def _mean_shape(args):
    x, axis = args[0], args[1] if len(args) > 1 else None
    keepdim = bool(args[2]) if len(args) > 2 else False
    if axis is None or len(list(axis)) == 0:
        axes = set(range(len(x.shape)))
    else:
        axes = {a % len(x.shape) for a in axis}
    return [[1 if i in axes else d for i, d in enumerate(x.shape)
             if keepdim or i not in axes]]


def _bn_shape(args):
    c = [args[0].shape[1]]
    return [list(args[0].shape), c, c, c, c, [0]]


# _C_ops function -> (the shapes of its outputs, from its arguments; the
# outputs that take the decided dtype, the others being float32).
STANDIN_SHAPES = {
    "conv2d": (_conv_shape, {0}),
    "matmul": (_matmul_shape, {0}),
    "relu": (lambda a: [list(a[0].shape)], {0}),
    "gelu": (lambda a: [list(a[0].shape)], {0}),
    "softmax": (lambda a: [list(a[0].shape)], {0}),
    "layer_norm": (lambda a: [list(a[0].shape)], {0}),
    "batch_norm": (_bn_shape, {0}),
    "batch_norm_": (_bn_shape, {0}),
    "cross_entropy_with_softmax": (_ce_shape, {0, 1}),
    "add": (_broadcast_shape, {0}),
    "mean": (_mean_shape, {0}),
}


def _keel_name(pd_name):
    """keel's name of a Paddle op refused by the kernel check."""
    return PADDLE_OPS["pd_op." + pd_name]


@contextlib.contextmanager
def _refusals(paddle, refused):
    """Replace the _C_ops functions of STANDIN_SHAPES with ones that turn
    the CPU build's kernel-registration refusal into a stand-in value (see
    the module text); refused collects (keel op, dtype) per refusal."""
    ops = paddle._C_ops
    saved = {n: getattr(ops, n) for n in STANDIN_SHAPES}
    count = [0]

    def wrap(fname, fn):
        shapes, decided = STANDIN_SHAPES[fname]

        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except TypeError as e:
                m = _REFUSAL.search(str(e))
                if not m or m.group(1).rstrip("_") != fname.rstrip("_"):
                    raise
                dtype = m.group(3)
                if dtype not in ("float32", "float16", "bfloat16"):
                    raise
            refused.append((_keel_name(fname), dtype))
            outs = []
            for i, shape in enumerate(shapes(args)):
                count[0] += 1
                outs.append(paddle.static.data(
                    f"standin_{count[0]}", shape,
                    dtype if i in decided else "float32"))
            return outs[0] if len(outs) == 1 else tuple(outs)
        return call

    for n, fn in saved.items():
        setattr(ops, n, wrap(n, fn))
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(ops, n, fn)


def _dt(value):
    return str(value.dtype).replace("paddle.", "")


def _op_rows(cid, ops):
    rows = []
    for op in ops:
        name = op.name()
        if name in PADDLE_SHAPE_ONLY:
            continue
        if name not in PADDLE_OPS:
            raise RuntimeError(f"call {cid}: Paddle op {name} has no keel "
                               f"counterpart in PADDLE_OPS")
        keel = PADDLE_OPS[name]
        if name == "pd_op.pool2d":
            keel = {"max": "max_pool2d", "avg": "avg_pool2d"}[
                op.attrs()["pooling_type"]]
        if name == "pd_op.cast":
            rows.append(f"{cid} op cast {_dt(op.operand_source(0))}")
        else:
            rows.append(f"{cid} op {keel} {_dt(op.result(0))}")
    return rows


# Layers whose Paddle ops keel runs as one op, when the second runs in the
# same dtype as the first (see the module text): layer type -> (op, op
# folded into it).
FOLDS = {
    # Paddle: cross_entropy_with_softmax, then mean (reduction='mean');
    # keel's cross_entropy op reduces itself.
    "CrossEntropyLoss": ("cross_entropy", "mean"),
    # Paddle: conv2d / matmul, then add of the bias. keel's conv2d and
    # linear take the bias: with a bias in the amp dtype (O2, decorated)
    # they run fused (amp.h and docs/amp.md.in, "linear and conv2d with a
    # bias"); with a float32 bias the add promotes and keel runs it as an
    # add too, so it stays on both sides.
    "Conv2D": ("conv2d", "add"),
    "Linear": ("linear", "add"),
}


def _fold(cid, layer_type, rows):
    if layer_type not in FOLDS:
        return rows
    first, second = FOLDS[layer_type]
    out = list(rows)
    for r in rows:
        m = re.fullmatch(rf"{re.escape(cid)} op {first} (\w+)", r)
        folded = f"{cid} op {second} {m.group(1)}" if m else None
        if folded in out:
            out.remove(folded)
    return out


def _layer(paddle, spec):
    return getattr(paddle.nn, spec["type"])(**spec.get("args", {}))


def _build(paddle, config, main):
    level, dtype = config["level"], config["dtype"]
    layers = {c["id"]: _layer(paddle, c["layer"])
              for c in config["calls"] if "layer" in c}
    if level == "O2" and layers:
        paddle.amp.decorate(models=paddle.nn.LayerList(list(layers.values())),
                            level="O2", dtype=dtype)
    for layer in layers.values():
        layer.eval()
    env = {}
    for name, spec in config["inputs"].items():
        t = spec["tensor"]
        env[name] = paddle.static.data(
            name, t["shape"], spec.get("dtype", t.get("dtype", "float32")))
    rows = []
    with paddle.amp.auto_cast(level=level, dtype=dtype):
        for call in config["calls"]:
            cid = call["id"]
            block = main.global_block()
            before = list(block.ops)
            refused = []
            args = [env[i] for i in call["inputs"]]
            with _refusals(paddle, refused):
                if "layer" in call:
                    out = layers[cid](*args)
                else:
                    out = getattr(paddle, call["op"])(*args)
            env[cid] = out
            new = [op for op in block.ops if op not in before]
            ops = _op_rows(cid, new) + [f"{cid} op {k} {d}"
                                        for k, d in refused]
            rows.append(f"{cid} out {_dt(out)}")
            rows += _fold(cid, call.get("layer", {}).get("type"), ops)
    return rows


def paddle_result(config):
    warnings.filterwarnings("ignore")
    import paddle

    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            rows = _build(paddle, config, main)
    finally:
        paddle.disable_static()
    return {"values": rows}


if __name__ == "__main__":
    import run

    if len(sys.argv) != 2:
        print("usage: parity_amp_dtypes.py path/to/parity_amp_dtypes",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(run.main(["amp_dtypes", sys.argv[1]]))
