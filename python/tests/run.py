#!/usr/bin/env python3
"""Run the Python package's pytest suite over a built tree.

    run.py --python VENV_PYTHON --tree BUILD/python TESTS_DIR

Started by the interpreter that runs meson; runs pytest with the project's
environment (.venv, made by tools/deps.sh), importing keel from the build
tree. When that environment is missing or lacks numpy or pytest, it
reports SKIP (exit 77, meson's skip code) with the command that installs
them; it installs nothing itself.
"""
import argparse
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--tree", required=True)
    ap.add_argument("--no-paddle", action="store_true",
                    help="leave out test_paddle_parity.py (sanitizer builds: "
                         "Paddle's own libraries do not run under ASan)")
    ap.add_argument("--mpirun", help="run the script TESTS under this "
                    "mpirun with -np 2 instead of pytest")
    ap.add_argument("tests")
    a, rest = ap.parse_known_args()
    need = "numpy, pytest" if a.no_paddle else "numpy, pytest, paddle"
    if not os.access(a.python, os.X_OK):
        print("SKIP: no Python environment at %s: run 'bash tools/deps.sh' "
              "(it creates .venv with numpy, pytest and paddlepaddle)" % a.python)
        return 77
    probe = subprocess.run([a.python, "-c", "import " + need],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("SKIP: %s cannot import %s (%s): run 'bash tools/deps.sh'"
              % (a.python, need, probe.stderr.strip().splitlines()[-1]
                 if probe.stderr.strip() else "?"))
        return 77
    env = dict(os.environ)
    env["PYTHONPATH"] = a.tree + (os.pathsep + env["PYTHONPATH"]
                                  if env.get("PYTHONPATH") else "")
    if a.mpirun:
        cmd = [a.mpirun, "--bind-to", "none", "-np", "2"]
        for v in ("PYTHONPATH", "KEEL_PLUGIN_PATH",
                  "KEEL_PLUGIN_DEFAULT_PATHS", "KEEL_CPU_THREADS"):
            cmd += ["-x", v]
        cmd += [a.python, a.tests]
        print(" ".join(cmd))
        return subprocess.run(cmd, env=env).returncode
    cmd = [a.python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
           a.tests] + rest
    if a.no_paddle:
        print("run.py: test_paddle_parity.py left out (sanitizer build); "
              "the plain build runs it")
        cmd.append("--ignore=" + os.path.join(a.tests,
                                              "test_paddle_parity.py"))
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
