"""The quick-reference scripts in examples/python run on keel and reach
their goals (each script checks its own result and exits non-zero
otherwise)."""
import ast
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                        "python")
SCRIPTS = sorted(f for f in os.listdir(EXAMPLES) if f.endswith(".py"))


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
    """In the code (docstrings and comments aside) keel appears once: as
    `import keel as paddle`; everything else is written against the name
    paddle."""
    tree = ast.parse(open(os.path.join(EXAMPLES, script)).read())
    imports = [(a.name, a.asname) for n in ast.walk(tree)
               if isinstance(n, ast.Import) for a in n.names
               if a.name.split(".")[0] == "keel"]
    froms = [n.module for n in ast.walk(tree)
             if isinstance(n, ast.ImportFrom) and n.module and
             n.module.split(".")[0] == "keel"]
    names = [n.id for n in ast.walk(tree)
             if isinstance(n, ast.Name) and n.id == "keel"]
    assert imports == [("keel", "paddle")] and not froms and not names, \
        (imports, froms, names)
