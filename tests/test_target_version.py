"""Which syntax is valid: `target-version` / --target-version, defaulting to the
lower bound of the project's `requires-python`.

Both directions, on the Python running the tests (3.11 in CI):

* a target newer than the running Python: a file that does not parse here may
  be valid for the target (PEP 695, nested same-quote f-strings of 3.12).  It
  is not reported as a syntax error: one skip notice says it was not checked
  and why, and the exit code is that of the other files;
* a target older than the running Python: syntax newer than the target
  (walrus before 3.8, `match` before 3.10) is HKL001, naming the target.
"""

from __future__ import annotations

import json
import sys

import pytest

from conftest import run_cli
from hooklint.config import ConfigError, load_config, requires_python_floor, resolve_codes
from hooklint.findings import NoticeLevel
from hooklint.static.checker import check_text

RUNNING = sys.version_info[:2]
ALL = frozenset(resolve_codes(None, [], []))

PEP695 = """\
import torch.nn as nn

type Hook = object

def first[T](items: list[T]) -> T:
    return items[0]

layer = nn.Linear(4, 2)
layer.register_backward_hook(lambda m, gi, go: None)
"""

NESTED_FSTRING = """\
import torch.nn as nn

def log(module, grad_input, grad_output):
    print(f"{"grad"}: {grad_output[0].norm()}")

layer = nn.Linear(4, 2)
layer.register_backward_hook(log)
"""

WALRUS = """\
import torch.nn as nn
layer = nn.Linear(4, 2)
if (handle := layer.register_full_backward_hook(lambda m, gi, go: None)):
    pass
"""

MATCH = """\
import torch.nn as nn
layer = nn.Linear(4, 2)
handle = layer.register_full_backward_hook(lambda m, gi, go: None)
match handle:
    case _:
        pass
"""

needs_old_python = pytest.mark.skipif(RUNNING >= (3, 12), reason="3.12 syntax parses on this Python")


@pytest.mark.parametrize("spec, floor", [
    (">=3.12", (3, 12)), (">= 3.9, <4", (3, 9)), ("~=3.10", (3, 10)), ("==3.11.*", (3, 11)), (">3.8", (3, 8)),
    (">=3.8.1,!=3.9.0", (3, 8)), ("<3.13", None), ("", None), (">=2.7", None), (">=4", None),
])
def test_requires_python_floor(spec, floor):
    assert requires_python_floor(spec) == floor


def project(tmp_path, requires: str | None = None, table: str = ""):
    lines = ["[project]", 'name = "demo"'] + ([f'requires-python = "{requires}"'] if requires else [])
    if table:
        lines += ["", "[tool.hooklint]", table]
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_target_defaults_to_requires_python(tmp_path):
    cfg = load_config(start=project(tmp_path, ">=3.12"))
    assert cfg.target_version == "py312" and cfg.target() == (3, 12)
    assert "requires-python" in cfg.target_version_origin


def test_target_version_key_wins_and_is_validated(tmp_path):
    cfg = load_config(start=project(tmp_path, ">=3.12", 'target-version = "py39"'))
    assert cfg.target() == (3, 9)
    with pytest.raises(ConfigError, match="target-version"):
        load_config(start=project(tmp_path, None, 'target-version = "3.12"'))


def test_requires_python_of_a_pyproject_above_a_hooklint_toml(tmp_path):
    project(tmp_path, ">=3.10")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "hooklint.toml").write_text("ignore = []\n")
    assert load_config(start=tmp_path / "sub").target() == (3, 10)


@needs_old_python
@pytest.mark.parametrize("source", [PEP695, NESTED_FSTRING], ids=["pep695", "nested-fstring"])
def test_newer_target_syntax_is_a_notice_not_hkl001(source):
    result = check_text("new.py", source, ALL, target=(3, 12))
    assert result.findings == []
    [notice] = result.notices
    assert notice.level is NoticeLevel.SKIP
    assert f"Python {RUNNING[0]}.{RUNNING[1]}" in notice.message and "Python 3.12" in notice.message


@needs_old_python
@pytest.mark.parametrize("source", [PEP695, NESTED_FSTRING], ids=["pep695", "nested-fstring"])
def test_without_a_newer_target_it_is_a_syntax_error(source):
    assert [f.code for f in check_text("new.py", source, ALL).findings] == ["HKL001"]


@pytest.mark.parametrize("source, target, words", [
    (WALRUS, (3, 7), "Assignment expressions are only supported in Python 3.8"),
    (MATCH, (3, 9), "Pattern matching is only supported in Python 3.10"),
], ids=["walrus-py37", "match-py39"])
def test_syntax_newer_than_an_older_target_is_hkl001_naming_it(source, target, words):
    [finding] = check_text("old.py", source, ALL, target=target).findings
    assert finding.code == "HKL001"
    assert words in finding.message and f"Python {target[0]}.{target[1]}" in finding.message


def test_syntax_the_target_has_is_clean():
    assert check_text("ok.py", MATCH, ALL, target=(3, 10)).findings == []
    assert check_text("ok.py", WALRUS, ALL, target=(3, 8)).findings == []


def test_a_real_syntax_error_is_reported_as_such_whatever_the_target():
    [finding] = check_text("bad.py", "x.register_hook(lambda g: g\n", ALL, target=(3, 8)).findings
    assert finding.code == "HKL001" and "target" not in finding.message


@needs_old_python
def test_cli_pep695_with_requires_python_312(tmp_path):
    project(tmp_path, ">=3.12")
    (tmp_path / "new.py").write_text(PEP695)
    (tmp_path / "fstr.py").write_text(NESTED_FSTRING)
    r = run_cli("check", "--static-only", ".", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "HKL001" not in r.stdout
    skips = [line for line in r.stderr.splitlines() if line.startswith("hooklint: skip:")]
    assert len(skips) == 2 and all("run hooklint on Python 3.12 or later" in s for s in skips)
    assert "All checks passed" not in r.stderr and "2 not checked" in r.stderr
    # the same files on an explicit older target are syntax errors
    r = run_cli("check", "--static-only", "--target-version", "py311", "--output-format", "concise", ".",
                cwd=tmp_path)
    assert r.returncode == 1 and r.stdout.count("HKL001") == 2


def test_cli_old_target_from_the_command_line(tmp_path):
    project(tmp_path, ">=3.7")
    (tmp_path / "walrus.py").write_text(WALRUS)
    r = run_cli("check", "--static-only", "--output-format", "json", "walrus.py", cwd=tmp_path)
    [finding] = json.loads(r.stdout)
    assert r.returncode == 1 and finding["code"] == "HKL001" and "Python 3.7" in finding["message"]
    r = run_cli("check", "--static-only", "--target-version", "py38", "walrus.py", cwd=tmp_path)
    assert r.returncode == 0, r.stdout


def test_cache_keeps_results_per_target(tmp_path):
    (tmp_path / "walrus.py").write_text(WALRUS)
    first = run_cli("check", "--static-only", "--target-version", "py37", "walrus.py", cwd=tmp_path)
    second = run_cli("check", "--static-only", "--target-version", "py38", "walrus.py", cwd=tmp_path)
    third = run_cli("check", "--static-only", "--target-version", "py37", "walrus.py", cwd=tmp_path)
    assert (first.returncode, second.returncode, third.returncode) == (1, 0, 1)


def test_show_settings_says_where_the_target_comes_from(tmp_path):
    project(tmp_path, ">=3.12")
    r = run_cli("check", "--show-settings", cwd=tmp_path)
    assert 'target-version = "py312"  # from requires-python = \'>=3.12\'' in r.stdout, r.stdout


def test_bad_target_version_flag_is_a_usage_error(tmp_path):
    r = run_cli("check", "--target-version", "py2", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


@needs_old_python
def test_a_notebook_cell_with_newer_syntax_is_skipped_alone(tmp_path):
    """A cell that needs the target's syntax gets the notice; the other cells
    are still checked."""
    from test_notebooks import HOOK_CELL, MODEL_CELL, code_cell, notebook_json

    project(tmp_path, ">=3.12")
    (tmp_path / "nb.ipynb").write_text(notebook_json([code_cell(MODEL_CELL), code_cell("type Grad = object\n"),
                                                      code_cell(HOOK_CELL)]))
    r = run_cli("check", "--static-only", "--output-format", "concise", "nb.ipynb", cwd=tmp_path)
    assert r.stdout.startswith("nb.ipynb:cell 3:4:7: HKL101"), r.stdout + r.stderr
    assert "HKL001" not in r.stdout
    assert "hooklint: skip: nb.ipynb: cell 2 not checked (the other cells are): it does not parse on Python 3." \
        in r.stderr and "(line 1: invalid syntax)" in r.stderr
