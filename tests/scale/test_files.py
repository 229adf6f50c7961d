"""Hostile file systems: every odd file gets a clear diagnostic and every other
file is still checked.

Unreadable files: CI runs as root, which reads a file whatever its mode, so
the unreadable files here are ones root cannot read either: a dangling
symlink, a symlink loop and a FIFO (which would also block a naive `open`
forever).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hooklint.config import Config
from hooklint.engine import CheckOptions, run_check
from tests.conftest import run_cli

BAD_HOOK = "import torch\nx = torch.ones(2, requires_grad=True)\nx.register_hook(lambda g: g.mul_(2))\n"


def _findings(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _by_file(findings: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in findings:
        out.setdefault(Path(f["filename"]).as_posix(), []).append(f["code"])
    return out


@pytest.fixture
def odd_tree(tmp_path: Path) -> Path:
    (tmp_path / "good.py").write_text(BAD_HOOK)
    sub = tmp_path / "pkg"
    sub.mkdir()
    (sub / "inner.py").write_text(BAD_HOOK)
    (sub / "up").symlink_to("..")  # a folder symlink loop: pkg/up/pkg/up/...
    (sub / "self").symlink_to(".")
    (tmp_path / "gone.py").symlink_to("deleted.py")  # dangling
    (tmp_path / "a.py").symlink_to("b.py")  # a file symlink loop
    (tmp_path / "b.py").symlink_to("a.py")
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "folder.py").mkdir()  # a folder with a Python name: walked, not read
    (tmp_path / "folder.py" / "deep.py").write_text(BAD_HOOK)
    return tmp_path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_odd_files_get_a_diagnostic_and_the_rest_is_checked(odd_tree, jobs):
    start = time.monotonic()
    proc = run_cli("check", "--static-only", "-j", jobs, "--output-format", "json", ".", cwd=odd_tree, timeout=60)
    assert time.monotonic() - start < 60
    found = _by_file(_findings(proc))
    assert proc.returncode == 1
    for name in ("good.py", "pkg/inner.py", "folder.py/deep.py"):
        assert found.get(name) == ["HKL401"], (name, found)
    for name in ("gone.py", "a.py", "b.py", "pipe.py"):
        assert found.get(name) == ["HKL002"], (name, found)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr


def test_the_reasons_are_named(odd_tree):
    proc = run_cli("check", "--static-only", "--output-format", "json", "gone.py", "a.py", "pipe.py", "good.py",
                   cwd=odd_tree, timeout=60)
    messages = {Path(f["filename"]).name: f["message"] for f in _findings(proc)}
    assert messages["gone.py"] == "cannot read file: No such file or directory"
    assert messages["a.py"] == "cannot read file: Too many levels of symbolic links"
    assert messages["pipe.py"] == "cannot read file: it is a named pipe (FIFO), not a regular file"
    assert "HKL401" not in messages["good.py"] and "in place" in messages["good.py"]


@pytest.mark.parametrize("fmt", ["sarif", "github", "junit", "full"])
def test_every_format_survives_a_symlink_loop(odd_tree, fmt):
    proc = run_cli("check", "--static-only", "--output-format", fmt, "a.py", "good.py", cwd=odd_tree, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "a.py" in proc.stdout and "internal error" not in proc.stderr


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_file_deleted_during_the_run(tmp_path, monkeypatch, jobs):
    """The file is found by the walk and gone when it is read."""
    import hooklint.engine as engine

    for i in range(40):  # enough for -j 2 to use worker processes
        (tmp_path / f"m{i:02d}.py").write_text(BAD_HOOK)
    victim = tmp_path / "m17.py"
    real_discover = engine.discover

    def discover_then_delete(options, unreadable=None):
        files = real_discover(options, unreadable)
        victim.unlink()
        return files

    monkeypatch.setattr(engine, "discover", discover_then_delete)
    monkeypatch.chdir(tmp_path)
    config = Config(root=tmp_path)
    report = run_check(CheckOptions(paths=["."], config=config, codes=frozenset(config.enabled_codes()),
                                    static_only=True, jobs=jobs))
    by_file = {}
    for f in report.findings:
        by_file.setdefault(f.path, []).append((f.code, f.message))
    assert report.files_checked == 40
    assert by_file.pop("m17.py") == [("HKL002", "cannot read file: No such file or directory")]
    assert len(by_file) == 39 and all(codes == [("HKL401", codes[0][1])] for codes in by_file.values())


def _generated(size: int, with_hook: bool) -> str:
    block = "def f{i}(x):\n    return [x * {i}, x + 1]\n\n"
    parts, total, i = [], 0, 0
    while total < size:
        part = block.format(i=i)
        parts.append(part)
        total += len(part)
        i += 1
    return "".join(parts) + (BAD_HOOK if with_hook else "")


def test_a_50_mb_generated_file(tmp_path):
    """Parsing 50 MB of Python takes a minute and 12 GB of memory: a file that
    big is skipped with a notice when it would need parsing, and costs no
    more than reading it when its text rules findings out."""
    (tmp_path / "huge_hooked.py").write_text(_generated(50 * 2 ** 20, with_hook=True))
    (tmp_path / "huge_plain.py").write_text(_generated(50 * 2 ** 20, with_hook=False))
    (tmp_path / "small.py").write_text(BAD_HOOK)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", MEASURED, "check", "--static-only", "--no-cache", "-j", "2",
                           "--output-format", "json", "."], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    elapsed = time.monotonic() - start
    found = _by_file(_findings(proc))
    assert found == {"small.py": ["HKL401"]}
    assert "huge_hooked.py: the file has 50.0 M characters, more than the 4 M hooklint parses" in proc.stderr
    assert "huge_plain.py" not in proc.stderr
    assert elapsed < 60, elapsed
    peak_mib = json.loads(proc.stderr.strip().splitlines()[-1])["peak_mib"]
    assert peak_mib < 1024, f"a process peaked at {peak_mib:.0f} MiB"


# hooklint's CLI in this process, then the peak resident memory of this
# process and of its largest worker (MiB on Linux) on the last stderr line
MEASURED = """
import json, resource, sys
from hooklint.cli import main
code = main(sys.argv[1:])
peak = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
print(json.dumps({"peak_mib": peak / 1024}), file=sys.stderr)
sys.exit(code)
"""


DYING_WORKER = """
import json, os
from pathlib import Path

import hooklint.parallel as parallel
from hooklint.config import Config
from hooklint.engine import CheckOptions, run_check

real_task = parallel.check_task


def task_that_dies(index, path, *args, **kwargs):
    if path.endswith("killer.py"):
        os._exit(9)  # as the out-of-memory killer would end it
    return real_task(index, path, *args, **kwargs)


parallel.check_task = task_that_dies
assert parallel._context().get_start_method() == "fork", "the injected crash reaches forked workers only"
config = Config(root=Path.cwd())
report = run_check(CheckOptions(paths=["."], config=config, codes=frozenset(config.enabled_codes()),
                                static_only=True, jobs=2))
print(json.dumps({"findings": sorted({f.path for f in report.findings}),
                  "errors": [[n.path, n.message] for n in report.notices if n.level.value == "error"]}))
"""


def test_a_static_worker_that_dies_costs_one_file(tmp_path):
    """A crash in a worker process (the out-of-memory killer, an interpreter
    bug) breaks the pool; the file that kills its process is named and every
    other file is checked.  Run in a fresh interpreter: workers are forked
    only from a process without other threads, and the test process may
    have some."""
    for i in range(40):
        (tmp_path / f"m{i:02d}.py").write_text(BAD_HOOK)
    (tmp_path / "m05_killer.py").write_text(BAD_HOOK)
    proc = subprocess.run([sys.executable, "-c", DYING_WORKER], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["findings"] == sorted(f"m{i:02d}.py" for i in range(40))
    assert [path for path, _message in result["errors"]] == ["m05_killer.py"]
    assert "ended its process abruptly" in result["errors"][0][1]


MODEL = """
import torch
import torch.nn as nn


class {name}(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        {init}

    def forward(self, x):
        return self.fc(x)
"""


@pytest.mark.torch
@pytest.mark.slow
def test_misbehaving_model_files_in_a_full_run(tmp_path):
    """The graph layer imports model files (tests/graph/test_worker_safety.py
    covers each misbehaviour on its own); here, one `hooklint check` run with
    both layers and -j 2 over files that exit, fork, grow their memory until
    the limit stops them, or are killed outright (SIGKILL, as the
    out-of-memory killer does), next to files with real findings: a notice
    for each, and every finding is still reported."""
    pytest.importorskip("torch")
    files = {
        "exits.py": MODEL.format(name="Exits", init="import os; os._exit(3)"),
        "forks.py": MODEL.format(name="Forks", init="import os; os.fork()"),
        "grows.py": MODEL.format(name="Grows", init="self.blocks = [torch.ones(2 ** 24) for _ in range(10 ** 6)]"),
        "killed.py": MODEL.format(name="Killed", init="import ctypes, os; ctypes.CDLL(None).kill(os.getpid(), 9)"),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text + BAD_HOOK.split("\n", 1)[1])
    (tmp_path / "pyproject.toml").write_text("[tool.hooklint]\nmemory-limit = 1024\ntimeout = 60\n")
    proc = run_cli("check", "-j", "2", "--no-cache", "--output-format", "json", ".", cwd=tmp_path, timeout=600)
    found = _by_file(_findings(proc))
    assert found == {name: ["HKL401"] for name in files}, found
    notes = proc.stderr
    assert "Exits() failed: Blocked: hooklint does not let model code end the process" in notes, notes
    assert "Forks() failed: Blocked: hooklint does not let model code fork the process" in notes, notes
    assert "raise `memory-limit` in [tool.hooklint] if the model needs more" in notes, notes
    assert "killed by SIGKILL" in notes, notes
    assert "Traceback" not in notes
