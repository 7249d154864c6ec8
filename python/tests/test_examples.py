"""The quick-reference scripts in examples/python run on keel and reach
their goals (each script checks its own result and exits non-zero
otherwise)."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                        "python")
SCRIPTS = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py"))
IMPORT_LINE = "import keel as paddle"


def run_script(path):
    return subprocess.run([sys.executable, path], capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs_on_keel(script):
    r = run_script(os.path.join(EXAMPLES, script))
    assert r.returncode == 0, r.stdout + r.stderr
    print(r.stdout)


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_differs_from_paddle_only_in_its_import(script):
    lines = open(os.path.join(EXAMPLES, script)).read().splitlines()
    keel_lines = [l for l in lines if "keel" in l and not l.lstrip()
                  .startswith(("#", '"""'))]
    assert len(keel_lines) == 1 and keel_lines[0].startswith(IMPORT_LINE), \
        keel_lines
