"""The suite passes whatever the clone's folder is called.

`git clone <url>` makes a folder named `hooklint/`; `make setup` puts the
virtualenv inside it, so torch's own traceback frames then live under a
`.../hooklint/.venv/...` path.  Tests that check that tracebacks show no
frame of hooklint must look for hooklint's package folder, not for the text
"hooklint/" (issue 18: 2 tests failed in a default clone).  This runs those
checks from a copy of the repository in a folder named `hooklint`, with the
virtualenv inside it as `make setup` makes it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.torch]

# Every test that asserts something about the paths in a traceback.
PATH_CHECKS = (
    "tests/runtime/test_runtime_misses.py::test_hooklint_run_traceback_has_no_hooklint_frames",
    "tests/runtime/test_runtime_misses.py::test_instrument_traceback_has_no_hooklint_frames",
    "tests/runtime/test_runtime_misses.py::test_pytest_traceback_hides_the_wrappers",
    "tests/runtime/test_pytest_plugin.py::test_helpers_hide_their_frames",
    "tests/runtime/test_cli_run.py::test_uncaught_exception_traceback_then_findings",
)
_NOT_COPIED = shutil.ignore_patterns(".git", ".venv", ".hooklint_cache", "__pycache__", "*.pyc", ".pytest_cache",
                                     "*.egg-info", "build", "dist")


def test_the_path_checks_pass_in_a_clone_named_hooklint(tmp_path):
    pytest.importorskip("torch")
    if sys.prefix == sys.base_prefix:
        pytest.skip("needs the suite to run in a virtualenv (as `make test` does), to place one in the copy")
    clone = tmp_path / "hooklint"
    shutil.copytree(ROOT, clone, ignore=_NOT_COPIED, symlinks=True)
    (clone / ".venv").symlink_to(sys.prefix, target_is_directory=True)  # the venv where `make setup` puts it
    python = clone / ".venv" / "bin" / os.path.basename(sys.executable)
    env = dict(os.environ, PYTHONPATH=str(clone))  # import the copy's hooklint, not the editable install's
    env.pop("PYTEST_ADDOPTS", None)
    probe = subprocess.run([str(python), "-c", "import torch, hooklint; print(torch.__file__); print(hooklint.__file__)"],
                           cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    torch_file, hooklint_file = probe.stdout.split()
    # the situation of the report: both torch's frames and hooklint's own under a folder named hooklint
    assert torch_file.startswith(f"{clone}{os.sep}.venv{os.sep}") and f"{os.sep}hooklint{os.sep}" in torch_file
    assert hooklint_file == str(clone / "hooklint" / "__init__.py")
    r = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *PATH_CHECKS],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert f"{len(PATH_CHECKS)} passed" in r.stdout, r.stdout[-2000:]
