#!/usr/bin/env python3
"""Parity case 'amp_lists': the AMP class of every op of keel's catalog
(device-api/include/keel/ops.def, the AMP column) against Paddle's own
lists, imported at run time from paddle.amp.amp_lists.

TABLE maps each keel op to its Paddle op name(s), in catalog order, with a
kind that says how Paddle's class follows:

  float     a floating computation: the class comes from Paddle's lists
            (the first rule that holds, over all its names):
              a name in WHITE_LIST        -> white
              a name in EXTRA_BLACK_LIST  -> fp32  (float32 at every level)
              a name in FP16_BLACK_LIST   -> black (float32 at O1)
              otherwise                   -> promote
  composed  Paddle has no such op and composes it from the ops named (in
            the order Paddle's API emits them); under O1 the composition
            computes in float32 once one of them is black, so: white if
            all are white, fp32 if one is extra-black, black if one is
            black, else promote
  bool      a boolean result (comparisons, logical ops, all/any)
  index     an integer result (argmax, argmin, argsort)
  creation  no floating tensor input decides the dtype (full, arange,
            random numbers; bernoulli's p is only a probability)
  int_in    an integer input (one_hot)
  cast      the cast op itself
  update    optimizer updates and the GradScaler's unscale: run by the
            optimizer and the scaler on their own tensors, outside the
            forward pass (Paddle: optimizer.step() and scaler.step() after
            the auto_cast block)
  grad      a backward op: Paddle's lists name forward ops only and
            neither framework casts in a backward pass (amp.h: "Backward
            passes never cast"), so there is no Paddle class to compare
            with; any keel class agrees
The kinds bool, index, creation, int_in, cast and update expect "none"
(keel never casts them: amp.h), unless one of their Paddle names is in a
Paddle list, which then decides as for float (and fails on purpose).

A "catalog" configuration lists every op keel has: a catalog op missing
from TABLE, or a TABLE entry that is not a catalog op, fails it, so a new
op cannot go unmapped.

Each float or composed entry with a probe (PROBES) is also checked against
what Paddle does, not only what its lists say: the probe's Paddle API is
built in static (PIR) mode under auto_cast with bfloat16 (float16 where
noted) three times, and the dtype of its result decides the class Paddle
acts on: O1 on float32 inputs gives the low dtype -> white; O2 on
low-precision inputs gives float32 -> fp32; O1 on low-precision inputs
gives float32 -> black; O1 keeps either input dtype -> promote. Where
the CPU build has no bfloat16 kernel of the op, Paddle refuses it after
its AMP step with "Check data type error for op: OP, input: X, X.dtype:
D": D is the decision (see parity_amp_dtypes.py). A probe that disagrees
with the lists fails the configuration, naming both: the mapping in TABLE
would then be wrong.

Paddle's names are its legacy (fluid) and PIR names; the lists hold the
legacy ones (reduce_sum, lookup_table_v2, ...), which Paddle's AMP step
matches to the PIR ops (pd_op.sum, pd_op.embedding).

    .venv/bin/python parity_amp_lists.py path/to/parity_amp_lists
"""

import os
import re
import sys
import warnings

TOLERANCE = 0.0

NONE_KINDS = {"bool", "index", "creation", "int_in", "cast", "update"}

# (keel op, kind, Paddle names, note) in catalog order.
TABLE = [
    ("add", "float", ["elementwise_add", "add"], ""),
    ("subtract", "float", ["elementwise_sub", "subtract"], ""),
    ("multiply", "float", ["elementwise_mul", "multiply"], ""),
    ("divide", "float", ["elementwise_div", "divide"], ""),
    ("pow", "float", ["elementwise_pow"],
     "keel's pow has a tensor exponent: Paddle's elementwise_pow; Paddle's "
     "pow op (a scalar exponent, black) has no keel counterpart"),
    ("maximum", "float", ["elementwise_max", "maximum"], ""),
    ("minimum", "float", ["elementwise_min", "minimum"], ""),
    ("floor_divide", "float", ["elementwise_floordiv", "floor_divide"], ""),
    ("remainder", "float", ["elementwise_mod", "remainder"], ""),
    ("equal", "bool", ["equal"], ""),
    ("not_equal", "bool", ["not_equal"], ""),
    ("less", "bool", ["less_than"], ""),
    ("less_equal", "bool", ["less_equal"], ""),
    ("greater", "bool", ["greater_than"], ""),
    ("greater_equal", "bool", ["greater_equal"], ""),
    ("logical_and", "bool", ["logical_and"], ""),
    ("logical_or", "bool", ["logical_or"], ""),
    ("logical_xor", "bool", ["logical_xor"], ""),
    ("logical_not", "bool", ["logical_not"], ""),
    ("where", "float", ["where"], ""),
    ("neg", "float", ["scale"], "paddle.neg is scale(x, -1)"),
    ("abs", "float", ["abs"], ""),
    ("sign", "float", ["sign"], ""),
    ("exp", "float", ["exp"], ""),
    ("log", "float", ["log"], ""),
    ("log1p", "float", ["log1p"], ""),
    ("sqrt", "float", ["sqrt"], ""),
    ("rsqrt", "float", ["rsqrt"], ""),
    ("square", "float", ["square"], ""),
    ("sin", "float", ["sin"], ""),
    ("cos", "float", ["cos"], ""),
    ("floor", "float", ["floor"], ""),
    ("ceil", "float", ["ceil"], ""),
    ("round", "float", ["round"], ""),
    ("relu", "float", ["relu"], ""),
    ("relu6", "float", ["relu6"], ""),
    ("leaky_relu", "float", ["leaky_relu"], ""),
    ("elu", "float", ["elu"], ""),
    ("gelu", "float", ["gelu"], ""),
    ("silu", "float", ["silu"], ""),
    ("sigmoid", "float", ["sigmoid"], ""),
    ("tanh", "float", ["tanh"], ""),
    ("softplus", "float", ["softplus"], ""),
    ("hardswish", "float", ["hard_swish", "hardswish"], ""),
    ("clip", "float", ["clip"], ""),
    ("cast", "cast", ["cast"], ""),
    ("full", "creation", ["fill_constant", "full"], ""),
    ("arange", "creation", ["range", "arange"], ""),
    ("linspace", "creation", ["linspace"], ""),
    ("eye", "creation", ["eye"], ""),
    ("uniform", "creation", ["uniform_random", "uniform"], ""),
    ("normal", "creation", ["gaussian_random", "gaussian"], ""),
    ("randint", "creation", ["randint"], ""),
    ("bernoulli", "creation", ["bernoulli"], ""),
    ("copy", "float", ["assign"], "keel_contiguous; Paddle's clone/assign"),
    ("sum", "float", ["reduce_sum", "sum"], ""),
    ("mean", "float", ["reduce_mean", "mean"], ""),
    ("max", "float", ["reduce_max", "max"], ""),
    ("min", "float", ["reduce_min", "min"], ""),
    ("prod", "float", ["reduce_prod", "prod"], ""),
    ("argmax", "index", ["arg_max", "argmax"], ""),
    ("argmin", "index", ["arg_min", "argmin"], ""),
    ("var", "composed", ["reduce_mean", "elementwise_sub", "pow",
                         "reduce_sum", "elementwise_div"],
     "paddle.var: mean, subtract, pow, sum, divide"),
    ("std", "composed", ["reduce_mean", "elementwise_sub", "pow",
                         "reduce_sum", "elementwise_div", "sqrt"],
     "paddle.std: sqrt of paddle.var"),
    ("logsumexp", "float", ["logsumexp"], ""),
    ("all", "bool", ["reduce_all", "all"], ""),
    ("any", "bool", ["reduce_any", "any"], ""),
    ("cumsum", "float", ["cumsum"], ""),
    ("matmul", "float", ["matmul_v2", "matmul"], ""),
    ("linear", "float", ["matmul_v2", "linear_v2"],
     "Paddle's Linear is matmul_v2 plus an add of the bias; keel splits "
     "the add off under auto_cast when the bias is float32 (amp.h)"),
    ("conv2d", "float", ["conv2d"], ""),
    ("conv2d_grad", "grad", ["conv2d_grad"], ""),
    ("conv2d_transpose", "float", ["conv2d_transpose"], ""),
    ("conv2d_transpose_grad", "grad", ["conv2d_transpose_grad"], ""),
    ("max_pool2d", "float", ["pool2d"],
     "MaxPool2D without return_mask is pool2d; max_pool2d_with_index "
     "(return_mask=True, white) has no keel counterpart"),
    ("max_pool2d_grad", "grad", ["pool2d_grad"], ""),
    ("avg_pool2d", "float", ["pool2d"], ""),
    ("avg_pool2d_grad", "grad", ["pool2d_grad"], ""),
    ("adaptive_avg_pool2d", "float", ["pool2d"], "pool2d, adaptive=True"),
    ("adaptive_avg_pool2d_grad", "grad", ["pool2d_grad"], ""),
    ("batch_norm", "float", ["batch_norm"], ""),
    ("batch_norm_grad", "grad", ["batch_norm_grad"], ""),
    ("layer_norm", "float", ["layer_norm"], ""),
    ("layer_norm_grad", "grad", ["layer_norm_grad"], ""),
    ("group_norm", "float", ["group_norm"], ""),
    ("group_norm_grad", "grad", ["group_norm_grad"], ""),
    ("softmax", "float", ["softmax"], ""),
    ("softmax_grad", "grad", ["softmax_grad"], ""),
    ("log_softmax", "float", ["log_softmax"], ""),
    ("log_softmax_grad", "grad", ["log_softmax_grad"], ""),
    ("cross_entropy", "float", ["softmax_with_cross_entropy",
                                "cross_entropy_with_softmax",
                                "cross_entropy2", "cross_entropy"], ""),
    ("cross_entropy_grad", "grad", ["softmax_with_cross_entropy_grad"], ""),
    ("mse_loss", "composed", ["elementwise_sub", "square", "reduce_mean"],
     "F.mse_loss: subtract, square, mean"),
    ("bce_with_logits", "float", ["sigmoid_cross_entropy_with_logits"], ""),
    ("nll_loss", "float", ["nll_loss"], ""),
    ("embedding", "float", ["lookup_table_v2", "embedding"], ""),
    ("embedding_grad", "grad", ["lookup_table_v2_grad"], ""),
    ("dropout", "float", ["dropout"], ""),
    ("one_hot", "int_in", ["one_hot_v2", "one_hot"], ""),
    ("concat", "float", ["concat"], ""),
    ("stack", "float", ["stack"], ""),
    ("split", "float", ["split"], ""),
    ("gather", "float", ["gather"], ""),
    ("index_select", "float", ["index_select"], ""),
    ("scatter", "float", ["scatter"], ""),
    ("take_along_axis", "float", ["take_along_axis"], ""),
    ("tile", "float", ["tile"], ""),
    ("flip", "float", ["flip"], ""),
    ("pad", "float", ["pad3d", "pad"], ""),
    ("topk", "float", ["top_k_v2", "topk"], "values and int64 indices"),
    ("sort", "float", ["argsort"],
     "paddle.sort is the argsort op's values output"),
    ("argsort", "index", ["argsort"], "the indices only"),
    ("sgd_update", "update", ["sgd"], ""),
    ("momentum_update", "update", ["momentum"], ""),
    ("adam_update", "update", ["adam"], ""),
    ("adamw_update", "update", ["adamw"], ""),
    ("check_finite_and_unscale", "update", ["check_finite_and_unscale"],
     ""),
    ("fused_linear", "float", ["fused_gemm_epilogue"],
     "paddle.incubate.nn.functional.fused_linear_activation is the "
     "fused_gemm_epilogue op"),
    ("fused_conv2d", "float", ["conv2d", "fused_conv2d_add_act"],
     "Paddle Inference's conv + activation fusion pass makes "
     "fused_conv2d_add_act, which its lists do not name; the conv2d it "
     "replaces decides the cast"),
]


def _i64(paddle, *shape):
    return paddle.zeros(list(shape), "int64")


# keel op -> (float input shapes, the Paddle API on them). All inputs get
# the probe's dtype; integer indices are made inside.
PROBES = {
    "add": ([[4, 6]] * 2, lambda p, x, y: p.add(x, y)),
    "subtract": ([[4, 6]] * 2, lambda p, x, y: p.subtract(x, y)),
    "multiply": ([[4, 6]] * 2, lambda p, x, y: p.multiply(x, y)),
    "divide": ([[4, 6]] * 2, lambda p, x, y: p.divide(x, y)),
    "pow": ([[4, 6]] * 2, lambda p, x, y: p.pow(x, y)),
    "maximum": ([[4, 6]] * 2, lambda p, x, y: p.maximum(x, y)),
    "minimum": ([[4, 6]] * 2, lambda p, x, y: p.minimum(x, y)),
    "floor_divide": ([[4, 6]] * 2, lambda p, x, y: p.floor_divide(x, y)),
    "remainder": ([[4, 6]] * 2, lambda p, x, y: p.remainder(x, y)),
    "where": ([[4, 6]] * 2,
              lambda p, x, y: p.where(p.ones([4, 6], "bool"), x, y)),
    "neg": ([[4, 6]], lambda p, x: p.neg(x)),
    "abs": ([[4, 6]], lambda p, x: p.abs(x)),
    "sign": ([[4, 6]], lambda p, x: p.sign(x)),
    "exp": ([[4, 6]], lambda p, x: p.exp(x)),
    "log": ([[4, 6]], lambda p, x: p.log(x)),
    "log1p": ([[4, 6]], lambda p, x: p.log1p(x)),
    "sqrt": ([[4, 6]], lambda p, x: p.sqrt(x)),
    "rsqrt": ([[4, 6]], lambda p, x: p.rsqrt(x)),
    "square": ([[4, 6]], lambda p, x: p.square(x)),
    "sin": ([[4, 6]], lambda p, x: p.sin(x)),
    "cos": ([[4, 6]], lambda p, x: p.cos(x)),
    "floor": ([[4, 6]], lambda p, x: p.floor(x)),
    "ceil": ([[4, 6]], lambda p, x: p.ceil(x)),
    "round": ([[4, 6]], lambda p, x: p.round(x)),
    "relu": ([[4, 6]], lambda p, x: p.nn.functional.relu(x)),
    "relu6": ([[4, 6]], lambda p, x: p.nn.functional.relu6(x)),
    "leaky_relu": ([[4, 6]], lambda p, x: p.nn.functional.leaky_relu(x)),
    "elu": ([[4, 6]], lambda p, x: p.nn.functional.elu(x)),
    "gelu": ([[4, 6]], lambda p, x: p.nn.functional.gelu(x)),
    "silu": ([[4, 6]], lambda p, x: p.nn.functional.silu(x)),
    "sigmoid": ([[4, 6]], lambda p, x: p.nn.functional.sigmoid(x)),
    "tanh": ([[4, 6]], lambda p, x: p.tanh(x)),
    "softplus": ([[4, 6]], lambda p, x: p.nn.functional.softplus(x)),
    "hardswish": ([[4, 6]], lambda p, x: p.nn.functional.hardswish(x)),
    "clip": ([[4, 6]], lambda p, x: p.clip(x, -1.0, 1.0)),
    "copy": ([[4, 6]], lambda p, x: p.assign(x)),
    "sum": ([[4, 6]], lambda p, x: p.sum(x)),
    "mean": ([[4, 6]], lambda p, x: p.mean(x)),
    "max": ([[4, 6]], lambda p, x: p.max(x)),
    "min": ([[4, 6]], lambda p, x: p.min(x)),
    "prod": ([[4, 6]], lambda p, x: p.prod(x)),
    "logsumexp": ([[4, 6]], lambda p, x: p.logsumexp(x)),
    "cumsum": ([[4, 6]], lambda p, x: p.cumsum(x)),
    "matmul": ([[4, 6], [6, 3]], lambda p, x, y: p.matmul(x, y)),
    "linear": ([[4, 6], [6, 3]],
               lambda p, x, w: p.nn.functional.linear(x, w)),
    "conv2d": ([[1, 2, 5, 5], [3, 2, 3, 3]],
               lambda p, x, w: p.nn.functional.conv2d(x, w)),
    "conv2d_transpose": ([[1, 2, 5, 5], [2, 3, 3, 3]],
                         lambda p, x, w:
                         p.nn.functional.conv2d_transpose(x, w)),
    "max_pool2d": ([[1, 2, 4, 4]],
                   lambda p, x: p.nn.functional.max_pool2d(x, 2)),
    "avg_pool2d": ([[1, 2, 4, 4]],
                   lambda p, x: p.nn.functional.avg_pool2d(x, 2)),
    "adaptive_avg_pool2d": ([[1, 2, 4, 4]],
                            lambda p, x:
                            p.nn.functional.adaptive_avg_pool2d(x, 2)),
    "layer_norm": ([[4, 6], [6], [6]],
                   lambda p, x, w, b:
                   p.nn.functional.layer_norm(x, [6], w, b)),
    "group_norm": ([[1, 4, 3, 3], [4], [4]],
                   lambda p, x, w, b:
                   p.nn.functional.group_norm(x, 2, weight=w, bias=b)),
    "softmax": ([[4, 6]], lambda p, x: p.nn.functional.softmax(x)),
    "log_softmax": ([[4, 6]], lambda p, x: p.nn.functional.log_softmax(x)),
    "cross_entropy": ([[4, 6]],
                      lambda p, x: p.nn.functional.cross_entropy(
                          x, _i64(p, 4), reduction="none")),
    "bce_with_logits": ([[4, 6]] * 2,
                        lambda p, x, y:
                        p.nn.functional.binary_cross_entropy_with_logits(
                            x, y, reduction="none")),
    "nll_loss": ([[4, 6]],
                 lambda p, x: p.nn.functional.nll_loss(
                     x, _i64(p, 4), reduction="none")),
    "embedding": ([[5, 3]],
                  lambda p, w: p.nn.functional.embedding(_i64(p, 4), w)),
    "dropout": ([[4, 6]],
                lambda p, x: p.nn.functional.dropout(
                    x, 0.5, training=False, mode="downscale_in_infer")),
    "concat": ([[4, 6]] * 2, lambda p, x, y: p.concat([x, y])),
    "stack": ([[4, 6]] * 2, lambda p, x, y: p.stack([x, y])),
    "split": ([[4, 6]], lambda p, x: p.split(x, 2, axis=1)[0]),
    "gather": ([[4, 6]], lambda p, x: p.gather(x, _i64(p, 2))),
    "index_select": ([[4, 6]], lambda p, x: p.index_select(x, _i64(p, 2))),
    "scatter": ([[4, 6], [2, 6]],
                lambda p, x, u: p.scatter(x, _i64(p, 2), u)),
    "take_along_axis": ([[4, 6]],
                        lambda p, x: p.take_along_axis(x, _i64(p, 4, 1), 1)),
    "tile": ([[4, 6]], lambda p, x: p.tile(x, [2, 1])),
    "flip": ([[4, 6]], lambda p, x: p.flip(x, [0])),
    "pad": ([[1, 2, 4, 6]],
            lambda p, x: p.nn.functional.pad(x, [1, 1, 1, 1])),
    "topk": ([[4, 6]], lambda p, x: p.topk(x, 2)[0]),
    "sort": ([[4, 6]], lambda p, x: p.sort(x)),
    # paddle.var's Python check refuses bfloat16 input (float16 passes).
    "var": ([[4, 6]], lambda p, x: p.var(x), "float16"),
}
# Not probed: std (paddle.std is sqrt(paddle.var(x)), and paddle.var
# casts its float32 result back to x's dtype, so under O1 Paddle computes
# the variance in float32 and the final sqrt in x's dtype, where keel's
# std runs in float32 throughout; the lists' reading, black, is the
# variance's), mse_loss (F.mse_loss's Python check takes float32 and
# float64 only, so no low-precision input reaches its AMP step),
# batch_norm (Paddle's AMP step looks at x alone and keeps the statistics
# float32, so the probe's reading does not apply; the amp_dtypes case
# runs it), and every op of a kind without a class.

CLASSES = ("white", "black", "promote", "fp32", "none")


def _configs():
    out = [{"name": "catalog", "group": "catalog coverage",
            "catalog": True}]
    for op, kind, names, note in TABLE:
        c = {"name": f"op:{op}", "group": f"kind {kind}", "op": op,
             "kind": kind, "paddle": names}
        if note:
            c["note"] = note
        out.append(c)
    return out


CONFIGS = _configs()


def compare(config, ours, theirs, tol):
    """Exact, except: the catalog as sets (naming what is missing on each
    side), and a grad op, which agrees with any keel class."""
    name = config["name"]
    if config.get("catalog"):
        mine, table = set(ours), set(theirs)
        problems = []
        if mine - table:
            problems.append(f"catalog ops without a TABLE entry: "
                            f"{sorted(mine - table)}")
        if table - mine:
            problems.append(f"TABLE entries that are not catalog ops: "
                            f"{sorted(table - mine)}")
        if len(ours) != len(mine) or len(theirs) != len(table):
            problems.append("a name appears twice")
        return len(ours), 0.0, (f"{name}: " + "; ".join(problems)
                                if problems else None)
    if config.get("kind") == "grad":
        if len(ours) == 1 and ours[0] in CLASSES:
            return 1, 0.0, None
        return 1, 1.0, f"{name}: keel gave {ours!r}, not a class"
    if ours != theirs:
        return len(ours), 1.0, (f"{name}: keel {ours}, Paddle {theirs} "
                                f"({config['kind']}: {config['paddle']})")
    return len(ours), 0.0, None


# ---- the Paddle side --------------------------------------------------------

def _list_class(lists, names):
    white, extra, black = lists
    if any(n in white for n in names):
        return "white"
    if any(n in extra for n in names):
        return "fp32"
    if any(n in black for n in names):
        return "black"
    return None


def expected_class(kind, names):
    from paddle.amp import amp_lists

    lists = (amp_lists.WHITE_LIST, amp_lists.EXTRA_BLACK_LIST,
             amp_lists.FP16_BLACK_LIST)
    if kind == "composed":
        if all(n in lists[0] for n in names):
            return "white"
        if any(n in lists[1] for n in names):
            return "fp32"
        if any(n in lists[2] for n in names):
            return "black"
        return "promote"
    listed = _list_class(lists, names)
    if kind in NONE_KINDS:
        return listed or "none"
    if kind == "float":
        return listed or "promote"
    raise ValueError(f"unknown kind {kind!r}")


_REFUSAL = re.compile(r"Check data type error for op: \w+, input: \w+, "
                      r"\w+\.dtype: (\w+),")


def _probe_dtype(op):
    return PROBES[op][2] if len(PROBES[op]) > 2 else "bfloat16"


# Ops that compute nothing: constants, shapes, and casts (paddle.var and
# paddle.std compute in float32 under O1, then cast the result back to
# x's dtype: the last computing op shows the decision, not the result).
_NOT_COMPUTING = {"pd_op.data", "pd_op.full", "pd_op.full_int_array",
                  "pd_op.full_like", "pd_op.cast", "pd_op.numel",
                  "pd_op.reshape", "pd_op.squeeze", "pd_op.unsqueeze",
                  "pd_op.ones", "pd_op.zeros", "builtin.combine"}


def _out_dtype(paddle, op, level, in_dtype):
    """The dtype the probe's last computing op ran in (or, when the CPU
    build refused it, the dtype the refusal names)."""
    shapes, fn = PROBES[op][:2]
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        xs = [paddle.static.data(f"x{i}", s, in_dtype)
              for i, s in enumerate(shapes)]
        with paddle.amp.auto_cast(level=level, dtype=_probe_dtype(op)):
            try:
                fn(paddle, *xs)
            except TypeError as e:
                m = _REFUSAL.search(str(e))
                if not m:
                    raise
                return m.group(1)
    for o in reversed(main.global_block().ops):
        if o.name() in _NOT_COMPUTING:
            continue
        try:
            return str(o.result(0).dtype).replace("paddle.", "")
        except ValueError:
            continue  # a vector of tensors (split): builtin.split has them
    raise RuntimeError(f"the probe of {op} built no computing op")


def observed_class(op):
    """The class Paddle acts on for op, from three static builds."""
    import paddle

    low = _probe_dtype(op)
    paddle.enable_static()
    try:
        o1_low = _out_dtype(paddle, op, "O1", low)
        o1_f32 = _out_dtype(paddle, op, "O1", "float32")
        o2_low = _out_dtype(paddle, op, "O2", low)
    finally:
        paddle.disable_static()
    seen = (o1_low, o1_f32, o2_low)
    if o1_f32 == low and o1_low == low:
        return "white", seen
    if o2_low == "float32" and o1_low == "float32":
        return "fp32", seen
    if o1_low == "float32" and o2_low == low:
        return "black", seen
    if seen == (low, "float32", low):
        return "promote", seen
    return "unclear", seen


def paddle_result(config):
    warnings.filterwarnings("ignore")
    if config.get("catalog"):
        return {"values": [op for op, _, _, _ in TABLE]}
    kind, names, op = config["kind"], config["paddle"], config["op"]
    if kind == "grad":
        return {"values": ["(grad op: not in Paddle's lists)"]}
    want = expected_class(kind, names)
    if op in PROBES:
        seen, dtypes = observed_class(op)
        if seen != want:
            raise RuntimeError(
                f"TABLE maps {op} to {names}, whose lists class is {want}, "
                f"but Paddle's AMP step acts as {seen} (compute dtypes at O1 "
                f"on {_probe_dtype(op)}, O1 on float32, O2 on "
                f"{_probe_dtype(op)} inputs: {dtypes})")
    return {"values": [want]}


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run

    if len(sys.argv) != 2:
        print("usage: parity_amp_lists.py path/to/parity_amp_lists",
              file=sys.stderr)
        sys.exit(2)
    sys.exit(run.main(["amp_lists", sys.argv[1]]))
