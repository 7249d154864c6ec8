#!/usr/bin/env python3
"""keel's ONNX export and import, checked against onnxruntime.

    check_onnx.py [--python VENV_PYTHON] --driver TEST_ONNX --workdir DIR
                  [--keel KEEL] {export,import,cli,self-test}

export     runs `TEST_ONNX export DIR` (core/tests/test_onnx.c): the four
           jit test models (MLP, LeNet, a conv-BatchNorm residual block, a
           transformer encoder block), traced with a dynamic batch and
           exported at opset 17 and a newer opset, with keel's input and
           output for batch 1, 7 and 64. Each model must pass
           onnx.checker (full check) and keep its dynamic dimensions as
           dim_params; onnxruntime (CPUExecutionProvider, graph
           optimisations off) runs it on keel's input, and its output
           must match keel's.
import     builds models with onnx.helper (no keel involved): an MLP of
           Gemms, a CNN (Conv, BatchNormalization, MaxPool, Flatten,
           Gemm), an attention block (MatMul, Reshape, Transpose,
           Softmax, LayerNormalization) and one of the remaining mapped
           ops (Unsqueeze, Squeeze, ReduceMean, Pow, Sqrt, Cast, Constant,
           Identity, Dropout, Concat, Gather); runs each in onnxruntime
           and, through `TEST_ONNX import`, in keel, at batch 1, 7 and 64,
           and compares.
cli        the import models again, through the command line: `keel
           import-onnx`, then `keel infer --output-dir` at batch 1 and 64
           against onnxruntime on the original model, `keel infer` on the
           .onnx file itself likewise, and `keel export-onnx --opset 18`
           of the imported graph run by onnxruntime against the same.
self-test  only the checks below.

Each mode first prove that the comparison fails when it should: keel's
output with one element moved by 1e-2 (relative), with a NaN, and with
another shape must each be reported as a mismatch, against onnxruntime's
real output for a real model.

The comparison: |keel - ort| <= RTOL * max(|ort|, 1e-2 * max|ort|) for
every element (RTOL = 1e-4 for float32: relative error, with elements
near zero measured against 1% of the tensor's largest magnitude), equal
shapes and dtypes, NaN where the other has NaN. Printed per model and
batch: the largest absolute and relative error.

--python names the project's virtual environment (.venv/bin/python); the
script re-runs itself there when the interpreter that started it cannot
import onnx and onnxruntime, and exits 77 (SKIP) with what to install
when neither can. It never installs anything.

Exit status: 0 every comparison agrees; 1 a mismatch, a driver failure or
a self-test that did not catch its error; 77 SKIP.
"""

import argparse
import os
import shutil
import subprocess
import sys

SKIP = 77
RTOL = 1e-4
FLOOR = 1e-2
HINT = ("run 'bash tools/deps.sh' at the top of the source tree: it "
        "installs onnx and onnxruntime into .venv/ (keel's ONNX support "
        "itself needs the Debian packages libprotobuf-c-dev "
        "protobuf-c-compiler libonnx-dev)")


def modules_problem():
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


# ---- the comparison ---------------------------------------------------------

def compare(keel, ref):
    """(ok, max_abs, max_rel, why)."""
    import numpy as np

    if keel.shape != ref.shape:
        return False, float("inf"), float("inf"), \
            f"shape {keel.shape} != {ref.shape}"
    if keel.dtype != ref.dtype:
        return False, float("inf"), float("inf"), \
            f"dtype {keel.dtype} != {ref.dtype}"
    k = keel.astype(np.float64)
    r = ref.astype(np.float64)
    if not np.array_equal(np.isnan(k), np.isnan(r)):
        return False, float("nan"), float("nan"), "NaN in one, not the other"
    fin = ~np.isnan(r)
    if not k.size or not fin.any():
        return True, 0.0, 0.0, ""
    diff = np.abs(k[fin] - r[fin])
    scale = float(np.max(np.abs(r[fin])))
    den = np.maximum(np.abs(r[fin]), FLOOR * scale) if scale > 0 else 1.0
    rel = diff / den
    max_abs, max_rel = float(diff.max()), float(np.max(rel))
    ok = bool(np.all(rel <= RTOL))
    why = "" if ok else f"relative error {max_rel:.3e} > {RTOL:g}"
    return ok, max_abs, max_rel, why


def self_test(keel, ref):
    """The comparison must accept (keel, ref) and refuse three damaged
    copies of keel's output. Returns the number of failures."""
    import numpy as np

    failures = 0
    ok, a, r, _ = compare(keel, ref)
    print(f"self-test: the real output agrees: {ok} (max abs {a:.2e}, "
          f"max rel {r:.2e})")
    failures += not ok
    bad = keel.copy()
    flat = bad.reshape(-1)
    scale = float(np.max(np.abs(ref)))
    i = int(np.argmax(np.abs(flat)))
    flat[i] += np.float32(1e-2 * max(abs(float(flat[i])), FLOOR * scale))
    for what, damaged in [("one element moved by 1e-2", bad),
                          ("a NaN", np.where(np.arange(keel.size).reshape(
                              keel.shape) == 0, np.nan, keel).astype(
                                  keel.dtype)),
                          ("another shape", keel.reshape(-1))]:
        ok, a, r, why = compare(damaged, ref)
        caught = not ok
        print(f"self-test: {what}: caught {caught} ({why})")
        failures += not caught
    return failures


# ---- onnxruntime ------------------------------------------------------------

_sessions = {}


def session(path):
    import onnxruntime as ort

    if path not in _sessions:
        so = ort.SessionOptions()
        so.graph_optimization_level = \
            ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.intra_op_num_threads = 2
        _sessions[path] = ort.InferenceSession(
            path, so, providers=["CPUExecutionProvider"])
    return _sessions[path]


def ort_run(path, x):
    s = session(path)
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def run_driver(args, *argv):
    r = subprocess.run([args.driver, *argv], capture_output=True, text=True)
    if r.returncode != 0:
        sys.stdout.write(r.stdout)
        sys.stdout.write(r.stderr)
    return r.returncode


def row(name, batch, ok, max_abs, max_rel, why):
    flag = "ok" if ok else "MISMATCH " + why
    print(f"{name:<28} batch {batch:>3}  max abs {max_abs:9.2e}  "
          f"max rel {max_rel:9.2e}  {flag}")


# ---- export: keel's models in onnxruntime -----------------------------------

def check_export(args):
    import numpy as np
    import onnx

    rc = run_driver(args, "export", args.workdir)
    if rc == SKIP:
        print("SKIP: keel was built without ONNX support; " + HINT)
        return SKIP
    if rc != 0:
        print(f"FAIL: {args.driver} export exited with {rc}")
        return 1
    with open(os.path.join(args.workdir, "export.txt")) as f:
        entries = [line.split() for line in f if line.strip()]
    if len(entries) != 4 * 3 * 2:
        print(f"FAIL: {len(entries)} exported cases, expected 24")
        return 1
    failures = 0
    checked = set()
    for i, (model, fname, batch, xin, yout) in enumerate(entries):
        path = os.path.join(args.workdir, fname)
        if path not in checked:
            m = onnx.load(path)
            onnx.checker.check_model(m, full_check=True)
            dim0 = m.graph.input[0].type.tensor_type.shape.dim[0]
            if dim0.dim_param != "batch":
                print(f"FAIL: {fname}: the batch dimension is not the "
                      f"dim_param 'batch' ({dim0})")
                failures += 1
            ops = sorted({n.op_type for n in m.graph.node})
            print(f"{fname}: opset {m.opset_import[0].version}, IR "
                  f"{m.ir_version}, {len(m.graph.node)} nodes: "
                  f"{' '.join(ops)}")
            checked.add(path)
        x = np.load(os.path.join(args.workdir, xin))
        keel = np.load(os.path.join(args.workdir, yout))
        ref = ort_run(path, x)
        if i == 2:
            failures += self_test(keel, ref)
        ok, a, r, why = compare(keel, ref)
        row(fname, int(batch), ok, a, r, why)
        failures += not ok
    print(f"export: {len(entries)} comparisons, {failures} failures")
    return 1 if failures else 0


# ---- import: onnx.helper's models in keel ------------------------------------

def build_models():
    """name -> (ModelProto, input shape for batch b)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(20260521)

    def w(name, *shape, scale=None):
        s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * s).astype(np.float32), name)

    def i64(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    def model(nodes, name, inputs, outputs, inits):
        g = helper.make_graph(nodes, name, inputs, outputs, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="check_onnx.py")
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m

    f32 = TensorProto.FLOAT
    models = {}

    # An MLP of Gemms: transB as PyTorch writes it, plain, and one with
    # alpha, beta and a [1, N] bias.
    models["gemm_mlp"] = (model(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1),
         helper.make_node("Relu", ["h1"], ["a1"]),
         helper.make_node("Gemm", ["a1", "w2", "b2"], ["h2"]),
         helper.make_node("Tanh", ["h2"], ["a2"]),
         helper.make_node("Gemm", ["a2", "w3", "b3"], ["h3"], transB=1,
                          alpha=0.5, beta=2.0),
         helper.make_node("Sigmoid", ["h3"], ["y"])],
        "gemm_mlp",
        [helper.make_tensor_value_info("x", f32, ["N", 16])],
        [helper.make_tensor_value_info("y", f32, ["N", 4])],
        [w("w1", 32, 16), w("b1", 32), w("w2", 32, 24), w("b2", 24),
         w("w3", 4, 24), w("b3", 1, 4)]), lambda b: (b, 16))

    # A small CNN.
    models["cnn"] = (model(
        [helper.make_node("Conv", ["x", "c1", "c1b"], ["t1"],
                          pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
         helper.make_node("BatchNormalization",
                          ["t1", "bn_s", "bn_b", "bn_m", "bn_v"], ["t2"],
                          epsilon=1e-5),
         helper.make_node("Relu", ["t2"], ["t3"]),
         helper.make_node("MaxPool", ["t3"], ["t4"], kernel_shape=[2, 2],
                          strides=[2, 2]),
         helper.make_node("Conv", ["t4", "c2"], ["t5"], strides=[2, 2]),
         helper.make_node("Relu", ["t5"], ["t6"]),
         helper.make_node("AveragePool", ["t6"], ["t7"],
                          kernel_shape=[2, 2], pads=[1, 1, 1, 1],
                          count_include_pad=0),
         helper.make_node("Flatten", ["t7"], ["t8"], axis=1),
         helper.make_node("Gemm", ["t8", "fc", "fcb"], ["t9"], transB=1),
         helper.make_node("Softmax", ["t9"], ["y"], axis=1)],
        "cnn",
        [helper.make_tensor_value_info("x", f32, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", f32, ["N", 10])],
        [w("c1", 8, 3, 3, 3, scale=0.3), w("c1b", 8),
         numpy_helper.from_array(
             rng.uniform(0.5, 1.5, 8).astype(np.float32), "bn_s"),
         w("bn_b", 8), w("bn_m", 8, scale=0.1),
         numpy_helper.from_array(
             rng.uniform(0.5, 2.0, 8).astype(np.float32), "bn_v"),
         w("c2", 16, 8, 3, 3, scale=0.2), w("fc", 10, 256), w("fcb", 10)]),
        lambda b: (b, 3, 16, 16))

    # Attention: 4 heads of 8 on hidden 32, then a residual LayerNorm.
    nodes = []
    for p in "qkv":
        nodes += [helper.make_node("MatMul", ["x", "w" + p], [p + "0"]),
                  helper.make_node("Add", [p + "0", "b" + p], [p + "1"]),
                  helper.make_node("Reshape", [p + "1", "heads"],
                                   [p + "2"]),
                  helper.make_node("Transpose", [p + "2"], [p + "3"],
                                   perm=[0, 2, 3, 1] if p == "k"
                                   else [0, 2, 1, 3])]
    nodes += [
        helper.make_node("MatMul", ["q3", "k3"], ["s0"]),
        helper.make_node("Constant", [], ["scale"],
                         value=numpy_helper.from_array(
                             np.array(1 / np.sqrt(8), np.float32))),
        helper.make_node("Mul", ["s0", "scale"], ["s1"]),
        helper.make_node("Softmax", ["s1"], ["s2"], axis=-1),
        helper.make_node("MatMul", ["s2", "v3"], ["o0"]),
        helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["o1", "merge"], ["o2"]),
        helper.make_node("Add", ["o2", "x"], ["o3"]),
        helper.make_node("LayerNormalization", ["o3", "ln_s", "ln_b"],
                         ["y"], axis=-1, epsilon=1e-5)]
    models["attention"] = (model(
        nodes, "attention",
        [helper.make_tensor_value_info("x", f32, ["N", "S", 32])],
        [helper.make_tensor_value_info("y", f32, ["N", "S", 32])],
        [w("wq", 32, 32), w("bq", 32), w("wk", 32, 32), w("bk", 32),
         w("wv", 32, 32), w("bv", 32), i64("heads", [0, 0, 4, 8]),
         i64("merge", [0, 0, 32]),
         numpy_helper.from_array(
             rng.uniform(0.5, 1.5, 32).astype(np.float32), "ln_s"),
         w("ln_b", 32)]),
        lambda b: (b, 5 + b % 3, 32))

    # The remaining mapped ops: a normalisation written out by hand.
    models["misc"] = (model(
        [helper.make_node("Unsqueeze", ["x", "ax1"], ["u"]),
         helper.make_node("Squeeze", ["u", "ax1"], ["v"]),
         helper.make_node("ReduceMean", ["v"], ["m"], axes=[1], keepdims=1),
         helper.make_node("Sub", ["v", "m"], ["d"]),
         helper.make_node("Constant", [], ["two"], value_float=2.0),
         helper.make_node("Pow", ["d", "two"], ["p"]),
         helper.make_node("ReduceMean", ["p"], ["var"], axes=[1]),
         helper.make_node("Add", ["var", "eps"], ["ve"]),
         helper.make_node("Sqrt", ["ve"], ["sd"]),
         helper.make_node("Div", ["d", "sd"], ["z"]),
         helper.make_node("Cast", ["z"], ["z64"], to=TensorProto.DOUBLE),
         helper.make_node("Cast", ["z64"], ["z32"], to=f32),
         helper.make_node("Identity", ["z32"], ["zi"]),
         helper.make_node("Dropout", ["zi"], ["zd"]),
         helper.make_node("Concat", ["zd", "x"], ["c"], axis=1),
         helper.make_node("Constant", [], ["idx"],
                          value=numpy_helper.from_array(
                              np.array([0, 3, 5, 9, -1], np.int64))),
         helper.make_node("Gather", ["c", "idx"], ["y"], axis=1)],
        "misc",
        [helper.make_tensor_value_info("x", f32, ["N", 8])],
        [helper.make_tensor_value_info("y", f32, ["N", 5])],
        [i64("ax1", [1]),
         numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]),
        lambda b: (b, 8))
    return models


def check_import(args):
    import numpy as np
    import onnx

    models = build_models()
    rng = np.random.default_rng(7)
    failures = 0
    count = 0
    for name, (m, shape) in models.items():
        path = os.path.join(args.workdir, f"{name}.onnx")
        onnx.save(m, path)
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{name}.onnx: {len(m.graph.node)} nodes: {' '.join(ops)}")
        for b in (1, 7, 64):
            x = rng.standard_normal(shape(b)).astype(np.float32)
            xin = os.path.join(args.workdir, f"{name}.b{b}.x.npy")
            yout = os.path.join(args.workdir, f"{name}.b{b}.keel.npy")
            np.save(xin, x)
            ref = ort_run(path, x)
            rc = run_driver(args, "import", path, xin, yout)
            if rc == SKIP:
                print("SKIP: keel was built without ONNX support; " + HINT)
                return SKIP
            if rc != 0:
                print(f"FAIL: keel could not import or run {name}.onnx")
                failures += 1
                continue
            keel = np.load(yout)
            if count == 0:
                failures += self_test(keel, ref)
            ok, a, r, why = compare(keel, ref)
            row(f"{name}.onnx", b, ok, a, r, why)
            failures += not ok
            count += 1
    print(f"import: {count} comparisons, {failures} failures")
    return 1 if failures else 0


def check_cli(args):
    """keel import-onnx, keel infer and keel export-onnx on the models the
    onnx package builds: keel infer's .npy outputs against onnxruntime on
    the original model, and onnxruntime on the re-exported model against
    the same."""
    import numpy as np
    import onnx

    def keel(*argv):
        r = subprocess.run([args.keel, *argv], capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.stdout.write(r.stdout)
            sys.stdout.write(r.stderr)
        return r.returncode

    rng = np.random.default_rng(11)
    failures = 0
    count = 0
    for name, (m, shape) in build_models().items():
        path = os.path.join(args.workdir, f"{name}.onnx")
        prefix = os.path.join(args.workdir, name)
        back = os.path.join(args.workdir, f"{name}.back.onnx")
        onnx.save(m, path)
        if keel("import-onnx", path, prefix) != 0:
            print(f"FAIL: keel import-onnx {name}.onnx")
            failures += 1
            continue
        if keel("export-onnx", prefix, back, "--opset", "18") != 0:
            print(f"FAIL: keel export-onnx {name}")
            failures += 1
            continue
        for b in (1, 64):
            x = rng.standard_normal(shape(b)).astype(np.float32)
            xin = os.path.join(args.workdir, f"{name}.b{b}.x.npy")
            outdir = os.path.join(args.workdir, f"{name}.b{b}.out")
            os.makedirs(outdir)
            np.save(xin, x)
            ref = ort_run(path, x)
            if keel("infer", prefix, "--input", xin, "--output-dir",
                    outdir) != 0:
                print(f"FAIL: keel infer {name} at batch {b}")
                failures += 1
                continue
            outs = sorted(os.listdir(outdir))
            if len(outs) != 1:
                print(f"FAIL: keel infer {name} wrote {outs}, not one .npy")
                failures += 1
                continue
            got = np.load(os.path.join(outdir, outs[0]))
            if count == 0:
                failures += self_test(got, ref)
            ok, a, r, why = compare(got, ref)
            row(f"keel infer {name}", b, ok, a, r, why)
            failures += not ok
            ok, a, r, why = compare(ort_run(back, x), ref)
            row(f"{name}.back.onnx", b, ok, a, r, why)
            failures += not ok
            count += 2
            # keel infer on the .onnx file itself (imported on the fly)
            outdir = os.path.join(args.workdir, f"{name}.b{b}.direct")
            os.makedirs(outdir)
            if keel("infer", path, "--input", xin, "--output-dir",
                    outdir) != 0:
                print(f"FAIL: keel infer {name}.onnx at batch {b}")
                failures += 1
                continue
            got = np.load(os.path.join(outdir, sorted(os.listdir(outdir))[0]))
            ok, a, r, why = compare(got, ref)
            row(f"keel infer {name}.onnx", b, ok, a, r, why)
            failures += not ok
            count += 1
    print(f"cli: {count} comparisons, {failures} failures")
    return 1 if failures else 0


def check_self(args):
    """The comparison alone, on made-up data."""
    import numpy as np

    ref = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
    failures = self_test(ref.copy(), ref)
    print(f"self-test: {failures} failures")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python", default="")
    ap.add_argument("--driver", default="")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--keel", default="", help="the keel executable "
                    "(mode cli)")
    ap.add_argument("mode", choices=["export", "import", "cli",
                                     "self-test"])
    args = ap.parse_args()

    problem = modules_problem()
    if problem:
        # A venv's python is often a link to the system one, so the paths
        # are compared as given (a venv is recognised by its own path).
        if (args.python and os.path.exists(args.python)
                and os.path.abspath(args.python)
                != os.path.abspath(sys.executable)
                and not os.environ.get("KEEL_CHECK_ONNX_REEXEC")):
            env = dict(os.environ, KEEL_CHECK_ONNX_REEXEC="1")
            os.execve(args.python, [args.python, os.path.abspath(__file__)]
                      + sys.argv[1:], env)
        print(f"SKIP: {sys.executable} cannot import numpy, onnx and "
              f"onnxruntime ({problem}); {HINT}")
        return SKIP
    import onnx
    import onnxruntime

    print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__} "
          f"(CPUExecutionProvider), tolerance {RTOL:g} relative")
    if args.mode == "self-test":
        return check_self(args)
    if not args.driver or not args.workdir:
        ap.error("--driver and --workdir are needed")
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    if args.mode == "export":
        return check_export(args)
    if args.mode == "cli":
        if not args.keel:
            ap.error("--keel is needed")
        return check_cli(args)
    return check_import(args)


if __name__ == "__main__":
    sys.exit(main())
