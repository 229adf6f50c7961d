"""Shared test helpers.  Tests run with HOOKLINT_STRICT=1 so that an exception
inside a rule fails the test instead of becoming an "internal error" notice."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("HOOKLINT_STRICT", "1")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def lint(source: str, select: str | list[str] | None = None, *, prefilter: bool = True, path: str = "example.py"):
    """Findings of the static pass on a snippet (dedented), sorted."""
    from hooklint.config import resolve_codes
    from hooklint.static.checker import check_text

    if isinstance(select, str):
        select = [select]
    codes = frozenset(resolve_codes(select, [], []))
    result = check_text(path, textwrap.dedent(source), codes, prefilter=prefilter)
    return sorted(result.findings, key=lambda f: f.sort_key())


def codes_at(findings) -> list[tuple[int, str]]:
    return sorted((f.location.row, f.code) for f in findings)


def run_cli(*args: str, cwd: Path | str | None = None, env: dict | None = None, input: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess, as users and pre-commit run it."""
    full_env = dict(os.environ)
    full_env.pop("FORCE_COLOR", None)
    full_env["NO_COLOR"] = "1"
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "hooklint", *args], cwd=cwd, env=full_env, input=input,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def write(tmp_path):
    """write("a.py", source) creates a dedented file under tmp_path and returns its path."""

    def _write(name: str, source: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    return _write
