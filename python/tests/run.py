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
    ap.add_argument("tests")
    a, rest = ap.parse_known_args()
    if not os.access(a.python, os.X_OK):
        print("SKIP: no Python environment at %s: run 'bash tools/deps.sh' "
              "(it creates .venv with numpy and pytest)" % a.python)
        return 77
    probe = subprocess.run([a.python, "-c", "import numpy, pytest"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("SKIP: %s cannot import numpy and pytest (%s): run 'bash "
              "tools/deps.sh'" % (a.python, probe.stderr.strip().splitlines()
                                  [-1] if probe.stderr.strip() else "?"))
        return 77
    env = dict(os.environ)
    env["PYTHONPATH"] = a.tree + (os.pathsep + env["PYTHONPATH"]
                                  if env.get("PYTHONPATH") else "")
    cmd = [a.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           a.tests] + rest
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
