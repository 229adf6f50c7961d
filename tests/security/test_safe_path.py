"""`python -m hooklint` in a repository with its own `tokenize.py` (or any
module named like the standard library's): hooklint, and the workers it
starts there, never import from the working folder (hooklint/safe_path.py).
Such a file would otherwise run as hooklint's own code, before any sandbox."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from security.conftest import write_files
from security.hostile import GOOD

SHADOW = '''
import os
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "SHADOWED_" + __name__), "w").close()
raise SystemExit("the working folder's {name}.py was imported")
'''
# tokenize: the static pass reads files with it; the others, the workers on start-up
SHADOWED = ("tokenize", "json", "signal", "select", "ctypes", "resource", "faulthandler")


def test_the_working_folder_is_never_imported_from(tmp_path):
    files = {f"{name}.py": SHADOW.replace("{name}", name) for name in SHADOWED}
    write_files(tmp_path, {"pyproject.toml": "[tool.hooklint]\n", **files, **GOOD})
    run = subprocess.run([sys.executable, "-m", "hooklint", "check", "--no-cache", "--output-format", "concise",
                          "good_conv.py", "good_mean.py"], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ, NO_COLOR="1"), timeout=300)
    assert not list(tmp_path.glob("SHADOWED_*")), run.stderr
    assert "working folder's" not in run.stderr
    assert run.returncode == 1, run.stderr
    assert "good_conv.py:10:19: HKL101" in run.stdout


@pytest.mark.parametrize("entry", ["hooklint", "hooklint.graph.worker"])
def test_entry_points_drop_the_working_folder(tmp_path, entry):
    code = ("import sys, os; from hooklint.safe_path import drop_working_folder; drop_working_folder(); "
            "print(any(p in ('', '.') or os.path.realpath(p) == os.path.realpath(os.getcwd()) for p in sys.path))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
    source = __import__("importlib").util.find_spec(entry + (".__main__" if entry == "hooklint" else "")).origin
    with open(source, encoding="utf-8") as handle:
        text = handle.read()
    first_import = text.index("\nimport ") if "\nimport " in text else len(text)
    assert text.index("drop_working_folder()") < first_import
