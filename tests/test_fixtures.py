"""Every fixture file, checked against its inline ``# HKLxxx`` expectations:
each expected finding is reported on its line, and nothing else is.  In a
notebook fixture the comments are in its code cells, and a finding's place is
(cell, line).

Files under ``fixtures/projects/<name>/`` are checked together, as one
project (their findings depend on each other's call sites)."""

from __future__ import annotations

from collections import Counter

import pytest

from conftest import FIXTURES
from hooklint.config import resolve_codes
from hooklint.rules import all_rules
from hooklint.rules.base import Rule, expected_findings
from hooklint.static.checker import check_file

ALL_FIXTURE_FILES = sorted([*FIXTURES.rglob("*.py"), *FIXTURES.rglob("*.ipynb")])
PROJECTS = FIXTURES / "projects"
FIXTURE_FILES = [p for p in ALL_FIXTURE_FILES if PROJECTS not in p.parents]
PROJECT_FOLDERS = sorted(p for p in PROJECTS.iterdir() if p.is_dir()) if PROJECTS.is_dir() else []
STATIC_CODES = frozenset(r.code for r in all_rules() if r.check is not Rule.check or r.code.startswith("HKL0"))


def all_expectations(path) -> list[tuple[int | None, int, str]]:
    """(cell, line, code) of each expectation comment; cell None outside notebooks."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return [(None, row, code) for row, code in expected_findings(text)]
    from hooklint.static.notebook import read_notebook

    notebook = read_notebook(text)
    return [(cell.number, row, code) for cell in notebook.cells for row, code in expected_findings(cell.source)]


def _static_expectations(path) -> list[tuple]:
    """Expectations for rules the static pass reports (graph- or runtime-only
    rules are checked by their own layers' tests)."""
    return sorted(_place(cell, row, code) for cell, row, code in all_expectations(path) if code in STATIC_CODES)


def _place(cell, row, code) -> tuple:
    return (row, code) if cell is None else (cell, row, code)


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture(path):
    codes = frozenset(resolve_codes(["ALL"], [], []))
    result = check_file(str(path), codes)
    assert not result.notices, result.notices
    got = sorted(_place(f.cell, f.location.row, f.code) for f in result.findings)
    want = _static_expectations(path)
    missing = sorted((Counter(want) - Counter(got)).elements())
    extra = sorted((Counter(got) - Counter(want)).elements())
    detail = "\n".join(f"  {_place(f.cell, f.location.row, f.code)}: {f.message}" for f in result.findings)
    assert not missing and not extra, f"missing {missing}, unexpected {extra}\nreported:\n{detail}"


@pytest.mark.parametrize("folder", PROJECT_FOLDERS, ids=lambda p: p.name)
def test_project_fixture(folder, monkeypatch):
    from hooklint.config import Config
    from hooklint.engine import CheckOptions, run_check

    monkeypatch.chdir(folder)
    config = Config(root=folder, cache=False)
    report = run_check(CheckOptions(paths=["."], config=config, codes=frozenset(resolve_codes(["ALL"], [], [])),
                                    static_only=True))
    assert not report.notices, report.notices
    got = sorted((f.path, f.location.row, f.code) for f in report.findings)
    want = sorted((str(p.relative_to(folder)), row, code) for p in sorted(folder.rglob("*.py"))
                  for row, code in _static_expectations(p))
    missing = sorted((Counter(want) - Counter(got)).elements())
    extra = sorted((Counter(got) - Counter(want)).elements())
    detail = "\n".join(f"  {f.path}:{f.location.row}: {f.code} {f.message}" for f in report.findings)
    assert not missing and not extra, f"missing {missing}, unexpected {extra}\nreported:\n{detail}"


def test_fixture_codes_are_real_rules():
    known = {r.code for r in all_rules()}
    used = set()
    for path in ALL_FIXTURE_FILES:
        used |= {code for _cell, _row, code in all_expectations(path)}
    assert used <= known, f"fixtures expect unknown codes: {sorted(used - known)}"


def test_every_rule_has_a_fixture():
    """Each static rule is exercised by at least one fixture expectation."""
    used = set()
    for path in ALL_FIXTURE_FILES:
        used |= {code for _cell, _row, code in all_expectations(path)}
    missing = sorted(code for code in STATIC_CODES if code not in used and code != "HKL002")
    assert not missing, f"static rules with no fixture expectation: {missing}"
