"""`sandbox = "auto" | "require" | "off"` ([tool.hooklint], --sandbox).

A machine without the whole sandbox is made for real: hooklint runs under a
seccomp filter that makes Landlock look absent (ENOSYS) and refuses
unshare() (EPERM), as an old kernel or a container that forbids user
namespaces does; its workers inherit the filter.  Then `auto` says so once
per run and still analyses, `require` runs no model code (one error line,
exit 1, static rules only) and `off` says nothing."""

from __future__ import annotations

import subprocess

import pytest

from security.conftest import hooklint, require_sandbox, write_files
from security.hostile import GOOD

pytestmark = [pytest.mark.torch, pytest.mark.slow]

# Its constructor runs only if hooklint runs model code; it says so in hooklint's output.
WITNESS = '''
import torch.nn as nn


class Witness(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("MODEL CODE RAN")

    def forward(self, x):
        return x
'''


def _run(folder, *args, config: str = "", degraded: bool = True) -> subprocess.CompletedProcess:
    """``degraded``: Landlock looks absent and namespaces are refused."""
    (folder / "pyproject.toml").write_text("[tool.hooklint]\n" + config, encoding="utf-8")
    without = ("landlock_create_ruleset", "unshare") if degraded else ()
    return hooklint("check", "--no-cache", *args, ".", cwd=folder, env={}, without=without)


def _lines(run, words: str) -> list[str]:
    return [line for line in run.stderr.splitlines() if words in line]


@pytest.fixture
def project(tmp_path):
    require_sandbox()  # the filter needs seccomp; a machine lacking more is covered by the skip
    write_files(tmp_path, {"witness.py": WITNESS, **GOOD})
    return tmp_path


def test_auto_says_once_what_is_missing_and_still_analyses(project):
    run = _run(project, "--diff", "--verify")  # the graph worker and the proof worker both start
    lines = _lines(run, "sandbox incomplete:")
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("hooklint: warning: ")
    assert "no Landlock" in lines[0] and "no network namespace" in lines[0], lines[0]
    assert "HKL101 fix at 10:19 verified" in run.stderr  # the proof ran
    assert _lines(run, "MODEL CODE RAN")  # so did the graph layer


def test_require_runs_no_model_code(project):
    run = _run(project, "--output-format", "concise", config='sandbox = "require"\n')
    refused = _lines(run, 'graph analysis skipped: `sandbox = "require"`')
    assert len(refused) == 1 and refused[0].startswith("hooklint: error: "), run.stderr
    assert "no Landlock" in refused[0]
    assert run.returncode == 1
    assert not _lines(run, "MODEL CODE RAN")
    # static rules only: HKL102 names the op it binds to only from the graph
    assert "HKL102" in run.stdout and "DivBackward0" not in run.stdout
    assert "Traceback" not in run.stderr


def test_require_refuses_proofs_too(project):
    run = _run(project, "--diff", "--unsafe-fixes", "--verify", "--sandbox", "require")
    assert len(_lines(run, 'graph analysis skipped: `sandbox = "require"`')) == 1, run.stderr
    assert "HKL101 fix at 10:19 not applied: unverified" in run.stderr, run.stderr
    assert not _lines(run, "MODEL CODE RAN")
    assert run.stdout == ""  # nothing proven, nothing applied


def test_off_says_nothing(project):
    run = _run(project, "--sandbox", "off")
    assert not _lines(run, "sandbox"), run.stderr
    assert _lines(run, "MODEL CODE RAN")


def test_a_full_sandbox_says_nothing_and_require_runs(project):
    run = _run(project, "--output-format", "concise", config='sandbox = "require"\n', degraded=False)
    assert not _lines(run, "sandbox"), run.stderr
    assert _lines(run, "MODEL CODE RAN") and "DivBackward0" in run.stdout


def test_a_bad_value_is_a_one_line_configuration_error(tmp_path):
    run = _run(tmp_path, config='sandbox = "maybe"\n', degraded=False)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and '`sandbox` must be "auto", "require" or "off"' in run.stderr
