"""The real `hooklint check` command in a subprocess: exit codes, noqa,
configuration, output formats, bad input.  What users and pre-commit see."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import run_cli

BAD = """\
import torch.nn as nn

def log(module, grad_input, grad_output):
    print(grad_output[0].norm())

layer = nn.Linear(4, 2)
layer.register_backward_hook(log)
"""

CLEAN = """\
import torch.nn as nn

layer = nn.Linear(4, 2)
layer.register_full_backward_hook(lambda m, gi, go: None)
"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def check(project, *args, **kw):
    return run_cli("check", "--static-only", *args, cwd=project, **kw)


class TestExitCodes:
    def test_findings_exit_1(self, project):
        r = check(project, "bad.py")
        assert r.returncode == 1, r.stderr
        assert "bad.py:7:7: HKL101" in r.stdout

    def test_clean_exit_0(self, project):
        r = check(project, "clean.py")
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout == ""
        assert "All checks passed" in r.stderr

    def test_exit_zero(self, project):
        r = check(project, "bad.py", "--exit-zero")
        assert r.returncode == 0
        assert "HKL101" in r.stdout

    def test_missing_path_exit_2_one_line(self, project):
        r = check(project, "nope.py")
        assert r.returncode == 2
        assert r.stderr.strip().splitlines() == ["hooklint: error: nope.py: no such file or directory"]
        assert "Traceback" not in r.stderr

    def test_unknown_rule_exit_2(self, project):
        r = check(project, "--select", "HKL999", "bad.py")
        assert r.returncode == 2
        assert len(r.stderr.strip().splitlines()) == 1
        assert "HKL999" in r.stderr and "Traceback" not in r.stderr

    def test_unknown_option_exit_2(self, project):
        r = check(project, "--frobnicate")
        assert r.returncode == 2
        assert "Traceback" not in r.stderr

    def test_no_python_files_is_clean(self, tmp_path):
        (tmp_path / "notes.txt").write_text("nothing here")
        r = run_cli("check", "--static-only", ".", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "0 files checked" in r.stderr

    def test_default_path_is_cwd(self, project):
        r = check(project)
        assert r.returncode == 1
        assert "bad.py" in r.stdout and "clean.py" not in r.stdout


class TestBadInput:
    def test_syntax_error_is_a_finding_and_others_still_checked(self, project):
        (project / "broken.py").write_text("import torch\nx.register_backward_hook(lambda g: g\n")
        r = check(project, ".")
        assert r.returncode == 1
        assert "broken.py:2:25: HKL001" in r.stdout
        assert "bad.py:7:7: HKL101" in r.stdout

    def test_binary_file(self, project):
        (project / "blob.py").write_bytes(b"\x00\x01register_backward_hook\xff\xfe")
        r = check(project, "blob.py")
        assert r.returncode == 1
        assert "HKL001" in r.stdout and "null bytes" in r.stdout
        assert "Traceback" not in r.stderr

    def test_latin1_without_declaration(self, project):
        (project / "latin.py").write_bytes("# caf\xe9\nx.register_backward_hook(print)\n".encode("latin-1"))
        r = check(project, "latin.py")
        assert r.returncode == 1
        assert "latin.py:1:6: HKL001" in r.stdout and "utf-8" in r.stdout

    def test_declared_encoding_is_honoured(self, project):
        src = "# -*- coding: latin-1 -*-\n# caf\xe9\nimport torch.nn as nn\nnn.ReLU().register_backward_hook(print)\n"
        (project / "declared.py").write_bytes(src.encode("latin-1"))
        r = check(project, "declared.py")
        assert "declared.py:4:11: HKL101" in r.stdout, r.stdout

    @pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
    def test_unreadable_file(self, project):
        path = project / "secret.py"
        path.write_text(BAD)
        path.chmod(0)
        r = check(project, ".")
        assert "secret.py:1:1: HKL002" in r.stdout
        assert "bad.py:7:7: HKL101" in r.stdout

    def test_bad_config_exit_2(self, project):
        (project / "pyproject.toml").write_text("[tool.hooklint\nselect = [")
        r = check(project, "bad.py")
        assert r.returncode == 2
        assert "invalid TOML" in r.stderr and len(r.stderr.strip().splitlines()) == 1

    def test_unknown_config_key_exit_2(self, project):
        (project / "pyproject.toml").write_text("[tool.hooklint]\nselec = ['HKL1']\n")
        r = check(project, "bad.py")
        assert r.returncode == 2
        assert "unknown key `selec`" in r.stderr


class TestNoqa:
    def test_bare_noqa(self, project):
        (project / "bad.py").write_text(BAD.replace("register_backward_hook(log)",
                                                    "register_backward_hook(log)  # noqa"))
        assert check(project, "bad.py").returncode == 0

    def test_noqa_with_code_case_insensitive(self, project):
        (project / "bad.py").write_text(BAD.replace("register_backward_hook(log)",
                                                    "register_backward_hook(log)  # NoQA: hkl101"))
        assert check(project, "bad.py").returncode == 0

    def test_noqa_other_code_does_not_suppress(self, project):
        (project / "bad.py").write_text(BAD.replace("register_backward_hook(log)",
                                                    "register_backward_hook(log)  # noqa: E501"))
        r = check(project, "bad.py")
        assert r.returncode == 1 and "HKL101" in r.stdout

    def test_noqa_in_a_string_does_not_count(self, project):
        (project / "bad.py").write_text(BAD.replace("register_backward_hook(log)",
                                                    "register_backward_hook(log); note = '# noqa'"))
        assert check(project, "bad.py").returncode == 1

    def test_file_level_noqa(self, project):
        (project / "bad.py").write_text("# hooklint: noqa\n" + BAD)
        assert check(project, "bad.py").returncode == 0

    def test_file_level_noqa_with_codes(self, project):
        (project / "bad.py").write_text("# hooklint: noqa: HKL102\n" + BAD)
        assert check(project, "bad.py").returncode == 1
        (project / "bad.py").write_text("# hooklint: noqa: HKL101\n" + BAD)
        assert check(project, "bad.py").returncode == 0


class TestConfig:
    def test_ignore_in_pyproject(self, project):
        (project / "pyproject.toml").write_text("[tool.hooklint]\nignore = ['HKL101']\n")
        assert check(project, "bad.py").returncode == 0

    def test_cli_select_wins_over_config(self, project):
        (project / "pyproject.toml").write_text("[tool.hooklint]\nselect = ['HKL2']\n")
        assert check(project, "bad.py").returncode == 0
        assert check(project, "--select", "HKL1", "bad.py").returncode == 1

    def test_extend_select_and_specificity(self, project):
        (project / "pyproject.toml").write_text("[tool.hooklint]\nignore = ['HKL1']\nextend-select = ['HKL101']\n")
        r = check(project, "bad.py")
        assert r.returncode == 1 and "HKL101" in r.stdout

    def test_rule_names_as_selectors(self, project):
        assert check(project, "--ignore", "legacy-backward-hook", "bad.py").returncode == 0

    def test_per_file_ignores(self, project):
        (project / "pyproject.toml").write_text("[tool.hooklint.per-file-ignores]\n'bad.py' = ['HKL101']\n")
        assert check(project, "bad.py").returncode == 0

    def test_exclude_and_force_exclude(self, project):
        (project / "pyproject.toml").write_text("[tool.hooklint]\nextend-exclude = ['bad.py']\n")
        assert check(project, ".").returncode == 0  # excluded while walking
        assert check(project, "bad.py").returncode == 1  # explicit paths are checked...
        assert check(project, "--force-exclude", "bad.py").returncode == 0  # ...unless forced

    def test_gitignore_respected(self, project):
        (project / ".gitignore").write_text("bad.py\n")
        assert check(project, ".").returncode == 0
        assert check(project, "--no-respect-gitignore", ".").returncode == 1

    def test_default_excludes(self, project):
        venv = project / ".venv" / "lib"
        venv.mkdir(parents=True)
        (venv / "bad_dep.py").write_text(BAD)
        r = check(project, ".")
        assert ".venv" not in r.stdout

    def test_explicit_config_file(self, project):
        cfg = project / "custom.toml"
        cfg.write_text("ignore = ['HKL101']\n")
        assert check(project, "--config", "custom.toml", "bad.py").returncode == 0

    def test_hooklint_toml(self, project):
        (project / "hooklint.toml").write_text("ignore = ['HKL1']\n")
        assert check(project, "bad.py").returncode == 0


class TestFormats:
    def test_full_has_frame_help_and_summary(self, project):
        r = check(project, "bad.py")
        assert "7 | layer.register_backward_hook(log)" in r.stdout
        assert "^^^^^^^^^^^^^^^^^^^^^^ HKL101" in r.stdout
        assert "= help:" in r.stdout
        assert "legacy-backward-hook" in r.stderr and "count" in r.stderr  # summary table on stderr
        assert "Found 1 finding in 1 file" in r.stderr

    def test_concise(self, project):
        r = check(project, "--output-format", "concise", "bad.py")
        lines = r.stdout.splitlines()
        assert len(lines) == 1
        # [-]: an unsafe fix (statically, nothing shows whether an in-place op follows the layer)
        assert lines[0].startswith("bad.py:7:7: HKL101 [-] `register_backward_hook` on `layer` (Linear)")

    def test_json(self, project):
        r = check(project, "--output-format", "json", "bad.py", "clean.py")
        data = json.loads(r.stdout)
        assert isinstance(data, list) and len(data) == 1
        item = data[0]
        for key in ("code", "message", "filename", "location", "end_location", "fix", "url"):
            assert key in item
        assert item["code"] == "HKL101"
        assert item["location"] == {"row": 7, "column": 7}
        assert item["end_location"] == {"row": 7, "column": 29}
        assert item["fix"]["applicability"] == "unsafe"
        assert [e["content"] for e in item["fix"]["edits"]][1:] == ["register_forward_hook", "output_grad_hook(", ")"]
        assert item["url"].endswith("HKL101.md")

    def test_json_lines(self, project):
        r = check(project, "--output-format", "json-lines", "bad.py")
        assert [json.loads(line)["code"] for line in r.stdout.splitlines()] == ["HKL101"]

    def test_output_file(self, project):
        r = check(project, "--output-format", "json", "-o", "out.json", "bad.py")
        assert r.returncode == 1 and r.stdout == ""
        assert json.loads((project / "out.json").read_text())[0]["code"] == "HKL101"

    def test_statistics(self, project):
        r = check(project, "--statistics", "bad.py")
        assert r.stdout.split() == ["1", "HKL101", "legacy-backward-hook"]  # its fix is unsafe: no [*]

    def test_output_format_from_config(self, project):
        (project / "pyproject.toml").write_text("[tool.hooklint]\noutput-format = 'concise'\n")
        r = check(project, "bad.py")
        assert r.stdout.startswith("bad.py:7:7: HKL101")

    def test_sorted_by_path_line_column_code(self, project):
        (project / "a.py").write_text(BAD)
        r = check(project, "--output-format", "concise", "bad.py", "a.py")
        paths = [line.split(":")[0] for line in r.stdout.splitlines()]
        assert paths == sorted(paths)


def test_rule_command_prints_docs():
    r = run_cli("rule", "HKL101")
    assert r.returncode == 0
    headings = [line for line in r.stdout.splitlines() if line.startswith("## ")]
    assert headings[:4] == ["## What it does", "## Why is this bad?", "## Known problems", "## Example"]
    assert "## Fix safety" in headings


def test_rule_command_by_name_and_all():
    assert "HKL101" in run_cli("rule", "legacy-backward-hook").stdout
    listing = run_cli("rule", "--all").stdout
    assert "HKL001" in listing and "HKL102" in listing
    r = run_cli("rule", "HKL999")
    assert r.returncode == 2 and "unknown rule" in r.stderr


def test_python_dash_m_and_version():
    r = run_cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("hooklint ")


def test_unreadable_paths_give_hkl002(project):
    """A broken symlink and a folder named like a module: read errors, even as root."""
    (project / "dangling.py").symlink_to(project / "gone.py")
    (project / "pkg.py").mkdir()
    r = check(project, "dangling.py", "pkg.py", "bad.py")
    assert "dangling.py:1:1: HKL002" in r.stdout
    assert "bad.py:7:7: HKL101" in r.stdout
    assert "Traceback" not in r.stderr


def test_output_file_in_new_folder_is_world_readable(project):
    r = check(project, "--output-format", "json", "-o", "out/sub/findings.json", "bad.py")
    assert r.returncode == 1, r.stderr
    path = project / "out" / "sub" / "findings.json"
    assert json.loads(path.read_text())[0]["code"] == "HKL101"
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # what open() would have made


def test_columns_count_python_line_breaks_only(project):
    """A form feed is not a line break for Python: rows and columns must not shift."""
    (project / "ff.py").write_text("import torch.nn as nn  # \x0c\nm = nn.Linear(2, 2)\n"
                                   "s = 'é'; m.register_backward_hook(lambda mod, gi, go: None)\n")
    r = check(project, "--output-format", "concise", "ff.py")
    assert r.stdout.startswith("ff.py:3:12: HKL101"), r.stdout


UNLISTABLE = """
import os, sys
from hooklint.cli import main

real = os.scandir


def scandir(path="."):
    if os.path.basename(os.fspath(path)) == "locked":
        raise PermissionError(13, "Permission denied", os.fspath(path))
    return real(path)


os.scandir = scandir
sys.exit(main(sys.argv[1:]))
"""


def test_a_folder_that_cannot_be_listed_is_hkl002_not_a_crash(project):
    """As a user who may not list a sub-folder (root may list any, so the
    refusal is made by the kernel's answer, EACCES, standing in): the folder
    is reported, its files are named as not checked, the others are checked."""
    locked = project / "locked"
    locked.mkdir()
    (locked / "inside.py").write_text(BAD)
    (locked / ".gitignore").write_text("*.tmp\n")
    r = subprocess.run([sys.executable, "-c", UNLISTABLE, "check", "--static-only", "--no-cache",
                        "--output-format", "concise", "."], cwd=project, capture_output=True, text=True,
                       env={**os.environ, "NO_COLOR": "1"})
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr
    assert "locked:1:1: HKL002 cannot read folder: Permission denied; the files in it were not checked" in r.stdout
    assert "bad.py:7:7: HKL101" in r.stdout
    assert r.returncode == 1
