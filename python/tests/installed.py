"""The package pip installed into the project's environment (.venv), used
the way a user uses it: another interpreter process, run from an empty
folder, with no PYTHONPATH and no KEEL_PLUGIN_PATH, so keel, libkeel and
the CPU plugin can only come from site-packages.

    .venv/bin/python python/tests/installed.py

Exit 0 when the installed package trains a small model (the loss falls)
and says where it came from; 77 (meson's SKIP) when keel is not installed
in this environment, with the command that installs it; 1 otherwise.
"""
import os
import subprocess
import sys
import sysconfig
import tempfile

CHILD = r"""
import os, sys, sysconfig
import keel
site = os.path.realpath(sysconfig.get_paths()["platlib"])
where = os.path.realpath(os.path.dirname(keel.__file__))
assert where.startswith(site), (where, site)
lib = os.path.join(where, "_lib")
assert os.path.exists(os.path.join(lib, "libkeel.so")), os.listdir(where)
plugins = os.listdir(os.path.join(lib, "keel", "plugins"))
assert "libkeel-cpu.so" in plugins, plugins
keel.set_device("cpu")
assert keel.get_device().startswith("cpu"), keel.get_device()
keel.seed(1)
net = keel.nn.Sequential(keel.nn.Linear(4, 8), keel.nn.ReLU(),
                         keel.nn.Linear(8, 1))
opt = keel.optimizer.Adam(learning_rate=0.05, parameters=net.parameters())
x = keel.randn([32, 4])
y = x.sum(axis=1, keepdim=True)
losses = []
for _ in range(60):
    loss = keel.nn.functional.mse_loss(net(x), y)
    loss.backward()
    opt.step()
    opt.clear_grad()
    losses.append(float(loss))
assert losses[-1] < 0.1 * losses[0], losses[::10]
print("installed keel at", where)
print("plugins:", " ".join(sorted(plugins)))
print("loss %.4f -> %.4f" % (losses[0], losses[-1]))
"""


def main():
    probe = subprocess.run(
        [sys.executable, "-c",
         "import importlib.util as u, sys; "
         "s = u.find_spec('keel'); "
         "sys.exit(0 if s and s.origin else 1)"],
        env=_clean_env(), cwd=tempfile.gettempdir())
    if probe.returncode != 0:
        print("SKIP: keel is not installed in %s: run 'bash tools/main.sh' "
              "(or: %s -m pip install --no-build-isolation .)"
              % (sys.prefix, sys.executable))
        return 77
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run([sys.executable, "-c", CHILD], env=_clean_env(),
                           cwd=d, capture_output=True, text=True,
                           timeout=300)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    print("installed package: %s" % ("OK" if r.returncode == 0 else "FAILED"))
    return 0 if r.returncode == 0 else 1


def _clean_env():
    env = dict(os.environ)
    for v in ("PYTHONPATH", "KEEL_PLUGIN_PATH", "KEEL_PLUGIN_DEFAULT_PATHS",
              "LD_LIBRARY_PATH", "LD_PRELOAD"):
        env.pop(v, None)
    return env


if __name__ == "__main__":
    sys.exit(main())
