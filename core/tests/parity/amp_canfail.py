#!/usr/bin/env python3
"""Self-test of the AMP parity cases' own comparisons (grad_scaler,
amp_dtypes, amp_lists): each case compares with its own compare(), which
the generic harness self-test (selftest.py) does not reach. Here the real
drivers run behind a wrapper that corrupts one thing in their output (or
the case's table is changed), run.run_case runs the case on a few
configurations against the real Paddle, and every corruption must make
the case fail naming the configuration, while the untouched output must
pass:

  grad_scaler  a scale rounded in float64 instead of float32, a flipped
               skip flag, a parameter off by 2e-6 relative, a wrong
               incr_count in the state dict, gradients left scaled
  amp_dtypes   an op's dtype, a layer's output dtype, an extra cast, a
               missing add
  amp_lists    a wrong class, a catalog op without a mapping, a wrong
               Paddle name in the mapping, a mapping whose probe disagrees

    amp_canfail.py [--python VENV_PYTHON] DRIVER_DIR

DRIVER_DIR holds parity_grad_scaler, parity_amp_dtypes, parity_amp_lists.
Without Paddle it reports SKIP (77) as the cases do.
"""

import contextlib
import io
import os
import stat
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run  # noqa: E402

WRAPPER = """#!{python}
import json, struct, subprocess, sys
r = subprocess.run([{driver!r}], input=sys.stdin.read(),
                   capture_output=True, text=True)
if r.returncode:
    sys.stderr.write(r.stderr)
    sys.exit(r.returncode)
out = json.loads(r.stdout)
res = {{x['name']: x for x in out['results']}}
def f32(v):
    return struct.unpack('f', struct.pack('f', v))[0]
{body}
print(json.dumps(out))
"""


class Checks:
    def __init__(self, drivers, tmp):
        self.drivers, self.tmp = drivers, tmp
        self.results = []

    def check(self, case, name, body, configs, expect=None, patch=None):
        """body: Python run on the driver's output (res[name]['values']);
        expect None: must pass; else must fail with a MISMATCH line that
        contains `expect`."""
        mod = run.load_case(case)
        if patch:
            patch(mod)
        mod.CONFIGS = [c for c in mod.CONFIGS if c["name"] in configs]
        if len(mod.CONFIGS) != len(configs):
            self.results.append((False, f"{case}/{name}: configurations "
                                 f"{configs} not all found"))
            return
        path = os.path.join(self.tmp, f"drv_{case}_{name}.py")
        with open(path, "w") as f:
            f.write(WRAPPER.format(python=sys.executable,
                                   driver=self.drivers[case], body=body))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = run.run_case(case, mod, path)
        bad = [line for line in out.getvalue().splitlines()
               if "MISMATCH" in line]
        if expect is None:
            ok = rc == 0 and not bad
            what = "honest output passes"
        else:
            ok = rc == 1 and any(expect in line for line in bad)
            what = f"corruption caught, naming {expect!r}"
        self.results.append((ok, f"{case}/{name}: {what}: rc {rc}"
                             + ("" if ok else "\n      " +
                                "\n      ".join(out.getvalue()
                                                .splitlines()[-6:]))))


def grad_scaler(c):
    cfg = ["sgd_ratios_3_0.3", "adam_inf_2_3", "sgd_inf_2_3"]
    c.check("grad_scaler", "honest", "pass", cfg)
    c.check("grad_scaler", "scale_f64", """
v = res['sgd_ratios_3_0.3']['values']
i = [k for k, x in enumerate(v) if x == f32(f32(3000.0) * f32(0.3))][0]
v[i] = f32(3000.0 * 0.3)
""", cfg, "sgd_ratios_3_0.3")
    c.check("grad_scaler", "skip_flag", """
v = res['sgd_inf_2_3']['values']
i = [k for k, x in enumerate(v) if x is True][0]
v[i] = False
""", cfg, "sgd_inf_2_3")
    c.check("grad_scaler", "param_2e-6", """
v = res['adam_inf_2_3']['values']
v[-10] *= 1 + 2e-6
""", cfg, "adam_inf_2_3")
    c.check("grad_scaler", "state_incr_count", """
v = res['sgd_inf_2_3']['values']
v[-3] += 1.0
""", cfg, "sgd_inf_2_3")
    c.check("grad_scaler", "grads_not_unscaled", """
v = res['sgd_inf_2_3']['values']
v[2:17] = [x * 8 if isinstance(x, float) else x for x in v[2:17]]
""", cfg, "sgd_inf_2_3")


def amp_dtypes(c):
    cfg = ["chain:O2:bfloat16", "one:BatchNorm2D:O2:bfloat16:in_bfloat16",
           "one:Conv2D_bias:O1:bfloat16:in_float32"]
    c.check("amp_dtypes", "honest", "pass", cfg)
    c.check("amp_dtypes", "op_dtype", """
v = res['chain:O2:bfloat16']['values']
v[v.index('linear_b op linear bfloat16')] = 'linear_b op linear float32'
""", cfg, "chain:O2:bfloat16")
    c.check("amp_dtypes", "out_dtype", """
v = res['chain:O2:bfloat16']['values']
v[v.index('gelu out bfloat16')] = 'gelu out float32'
""", cfg, "chain:O2:bfloat16")
    c.check("amp_dtypes", "norm_dtype", """
v = res['one:BatchNorm2D:O2:bfloat16:in_bfloat16']['values']
v[:] = [x.replace('batch_norm bfloat16', 'batch_norm float32') for x in v]
""", cfg, "BatchNorm2D")
    c.check("amp_dtypes", "extra_cast", """
v = res['one:Conv2D_bias:O1:bfloat16:in_float32']['values']
v.append('Conv2D_bias op cast float32')
""", cfg, "Conv2D_bias")
    c.check("amp_dtypes", "missing_add", """
v = res['one:Conv2D_bias:O1:bfloat16:in_float32']['values']
v.remove('Conv2D_bias op add float32')
""", cfg, "Conv2D_bias")


def amp_lists(c):
    cfg = ["catalog", "op:exp", "op:softmax", "op:conv2d", "op:embedding"]
    c.check("amp_lists", "honest", "pass", cfg)
    c.check("amp_lists", "class", """
res['op:exp']['values'] = ['promote']
""", cfg, "op:exp")
    c.check("amp_lists", "new_op", """
res['catalog']['values'].append('fancy_new_op')
""", cfg, "fancy_new_op")

    def wrong_name(m):
        m.CONFIGS = [dict(x, paddle=["softmax_v9"])
                     if x["name"] == "op:softmax" else x for x in m.CONFIGS]
    c.check("amp_lists", "wrong_mapping", "pass", cfg, "op:softmax",
            patch=wrong_name)

    def wrong_probe(m):
        m.CONFIGS = [dict(x, paddle=["conv2d_transpose"])
                     if x["name"] == "op:conv2d" else x for x in m.CONFIGS]
    c.check("amp_lists", "probe_vs_lists", "pass", cfg, "op:conv2d",
            patch=wrong_probe)


def main(argv):
    python = None
    if len(argv) >= 2 and argv[0] == "--python":
        python, argv = argv[1], argv[2:]
    if len(argv) != 1:
        print("usage: amp_canfail.py [--python VENV_PYTHON] DRIVER_DIR",
              file=sys.stderr)
        return 2
    ddir = os.path.abspath(argv[0])
    if python and os.path.abspath(sys.executable) != os.path.abspath(python):
        why = run.venv_problem(python)
        if why:
            return run.skip("amp-canfail", why)
        sys.stdout.flush()
        os.execv(python, [python, os.path.abspath(__file__),
                          "--python", python, ddir])
    try:
        import paddle  # noqa: F401
    except ImportError as e:
        return run.skip("amp-canfail",
                        f"{sys.executable} cannot import paddle ({e})")
    drivers = {c: os.path.join(ddir, f"parity_{c}")
               for c in ("grad_scaler", "amp_dtypes", "amp_lists")}
    with tempfile.TemporaryDirectory() as tmp:
        c = Checks(drivers, tmp)
        grad_scaler(c)
        amp_dtypes(c)
        amp_lists(c)
    for ok, line in c.results:
        print(("ok      " if ok else "FAILED  ") + line)
    good = sum(ok for ok, _ in c.results)
    print(f"amp canfail: {good} passed, {len(c.results) - good} failed")
    return 0 if good == len(c.results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
