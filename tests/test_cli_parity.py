"""What ruff users reach for, in hooklint: --add-noqa, --show-settings,
--show-files, reading stdin for editors, a warning for `noqa` codes that do
not exist, the summary printed once, `-q` that never hides an error, and the
commands that need torch saying so in one line where it is not installed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hooklint.static.output_grad_hook import helper_source

from conftest import ROOT, run_cli

BAD = """\
import torch.nn as nn

def log(module, grad_input, grad_output):
    print(grad_output[0].norm())

layer = nn.Linear(4, 2)
layer.register_backward_hook(log)
"""

def fixed(text: str) -> str:
    """BAD after HKL101's fix without graph facts (unsafe): the hook moves to
    the module's output tensor, through a helper written after the imports."""
    head, _, rest = text.partition("\n\n")
    return (head + "\n\n\n" + helper_source() + "\n\n" + rest).replace(
        "layer.register_backward_hook(log)", "layer.register_forward_hook(output_grad_hook(log))")


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


def check(cwd, *args, **kw):
    return run_cli("check", "--static-only", *args, cwd=cwd, **kw)


# ---------------------------------------------------------------- --add-noqa


NOQA_CASES = """\
import torch.nn as nn

layer = nn.Linear(4, 2)
layer.register_backward_hook(lambda m, gi, go: None)
layer.register_backward_hook(lambda m, gi, go: None)  # noqa: E501
layer.register_backward_hook(lambda m, gi, go: None)  # keep this note
layer.register_backward_hook(lambda m, gi, go: None)   \t
"""


def test_add_noqa_appends_merges_and_is_idempotent(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(NOQA_CASES)
    os.chmod(path, 0o640)
    r = check(tmp_path, "--add-noqa", "a.py")
    assert r.returncode == 0, r.stderr
    assert "Added 4 noqa directives." in r.stderr
    lines = path.read_text().splitlines()
    assert lines[3].endswith("None)  # noqa: HKL101")
    assert lines[4].endswith("None)  # noqa: E501, HKL101")  # flake8's code kept, ours added
    assert lines[5].endswith("None)  # keep this note  # noqa: HKL101")
    assert lines[6].endswith("None)  # noqa: HKL101")  # trailing whitespace gone
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert check(tmp_path, "a.py").returncode == 0  # every finding is silenced
    before = path.read_text()
    r = check(tmp_path, "--add-noqa", "a.py")
    assert path.read_text() == before and "Added 0 noqa directives." in r.stderr


@pytest.mark.parametrize("newline", ["\r", "\r\n"])
def test_add_noqa_on_old_mac_and_windows_line_ends(tmp_path, newline):
    """Python splits lines on CR too: the comment goes on the finding's own
    line, never into the string two lines down, and a second run adds
    nothing."""
    lines = ["import torch.nn as nn", "layer = nn.Linear(4, 2)",
             "layer.register_backward_hook(lambda m, gi, go: None)", 's = """a', 'b"""', ""]
    path = tmp_path / "cr.py"
    path.write_bytes(newline.join(lines).encode())
    r = check(tmp_path, "--add-noqa", "cr.py")
    assert "Added 1 noqa directive." in r.stderr, r.stderr
    fixed = path.read_bytes().decode().split(newline)
    assert fixed[2] == "layer.register_backward_hook(lambda m, gi, go: None)  # noqa: HKL101"
    assert fixed[3:] == lines[3:]
    before = path.read_bytes()
    r = check(tmp_path, "--add-noqa", "cr.py")
    assert path.read_bytes() == before and "Added 0 noqa directives." in r.stderr
    assert check(tmp_path, "cr.py").returncode == 0


def test_add_noqa_merges_codes_of_one_line(project):
    (project / "gi.py").write_text(BAD.replace("grad_output[0]", "grad_input[0]"))
    r = check(project, "--add-noqa", "gi.py")
    assert r.returncode == 0
    assert (project / "gi.py").read_text().splitlines()[6] == \
        "layer.register_backward_hook(log)  # noqa: HKL101, HKL102"


def test_add_noqa_skips_a_line_that_ends_inside_a_string(tmp_path):
    source = 'import torch.nn as nn\nlayer = nn.Linear(4, 2)\nlayer.register_backward_hook(print); doc = """\nend"""\n'
    (tmp_path / "s.py").write_text(source)
    r = check(tmp_path, "--add-noqa", "s.py")
    assert (tmp_path / "s.py").read_text() == source
    assert "no noqa comment added for line 3" in r.stderr


@pytest.mark.parametrize("extra", [["--fix"], ["--diff"], ["-"]])
def test_add_noqa_with_fix_diff_or_stdin_is_a_usage_error(project, extra):
    r = check(project, "--add-noqa", *extra, input=BAD)
    assert r.returncode == 2 and "--add-noqa edits files in place" in r.stderr
    assert (project / "bad.py").read_text() == BAD


# ---------------------------------------------------------------- --show-settings / --show-files


def test_show_settings(tmp_path):
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""\
        [project]
        name = "demo"
        requires-python = ">=3.10"

        [tool.hooklint]
        ignore = ["HKL304"]
        per-file-ignores = { "tests/*" = ["HKL101"] }
        timeout = 12
        """))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text(BAD)
    r = run_cli("check", "--show-settings", "--ignore", "HKL303", "tests/t.py",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"Configuration file: {tmp_path / 'pyproject.toml'}" in out
    assert 'ignore = ["HKL304", "HKL303"]' in out  # the command line applied
    assert "timeout = 12.0" in out and 'target-version = "py310"' in out
    assert "  HKL101  legacy-backward-hook" in out and "HKL304" not in out.split("Enabled rules")[1]
    assert "Ignored for tests/t.py by per-file-ignores: HKL101" in out


def test_show_files_after_excludes_and_gitignore(tmp_path):
    for name in ("a.py", "b.pyi", "nb.ipynb", "skip/c.py", "build/d.py", "notes.txt", "ignored.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("ignored.py\n")
    r = run_cli("check", "--show-files", "--extend-exclude", "skip", cwd=tmp_path)
    assert r.returncode == 0
    assert r.stdout.splitlines() == ["a.py", "b.pyi", "nb.ipynb"]


# ---------------------------------------------------------------- stdin


def test_stdin_is_checked_under_its_name(project):
    r = check(project, "-", "--stdin-filename", "pkg/model.py", "--output-format", "concise", input=BAD)
    assert r.returncode == 1 and r.stdout.startswith("pkg/model.py:7:7: HKL101"), r.stdout + r.stderr
    r = check(project, "-", "--output-format", "concise", input=BAD)
    assert r.stdout.startswith("-:7:7: HKL101")
    r = check(project, "--stdin-filename", "x.py", input=CLEAN)  # no path: stdin as well
    assert r.returncode == 0 and "All checks passed (1 file checked)." in r.stderr


def test_stdin_uses_the_configuration_of_its_name(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.hooklint]\nper-file-ignores = { "legacy/*" = ["HKL1"] }\n')
    (tmp_path / "legacy").mkdir()
    r = check(tmp_path, "-", "--stdin-filename", "legacy/old.py", input=BAD)
    assert r.returncode == 0 and r.stdout == "", r.stdout
    r = check(tmp_path, "-", "--stdin-filename", "new.py", input=BAD)
    assert r.returncode == 1


def test_stdin_force_exclude(tmp_path):
    r = check(tmp_path, "-", "--stdin-filename", "build/gen.py", "--force-exclude", input=BAD)
    assert r.returncode == 0 and r.stdout == ""
    r = check(tmp_path, "-", "--stdin-filename", "build/gen.py", "--force-exclude", "--fix", input=BAD)
    assert r.stdout == BAD  # an editor gets its text back unchanged
    r = check(tmp_path, "-", "--stdin-filename", "build/gen.py", input=BAD)
    assert r.returncode == 1  # without --force-exclude the name does not exclude, as in ruff


def test_stdin_fix_prints_the_fixed_source(project):
    r = check(project, "-", "--stdin-filename", "m.py", "--fix", "--unsafe-fixes", input=BAD)
    assert r.returncode == 0, r.stderr
    assert r.stdout == fixed(BAD)
    assert "Fixed 1 finding." in r.stderr
    r = check(project, "-", "--fix", input=CLEAN)
    assert r.stdout == CLEAN and r.returncode == 0
    reads_input = BAD.replace("grad_output[0]", "grad_input[0]")
    r = check(project, "-", "--fix", "--select", "HKL102", input=reads_input)  # HKL102 has no fix
    assert r.stdout == reads_input and r.returncode == 1 and "-:7:7: HKL102" in r.stderr  # it goes to stderr


def test_stdin_diff(project):
    r = check(project, "-", "--stdin-filename", "m.py", "--diff", "--unsafe-fixes", input=BAD)
    assert r.returncode == 1
    assert "-layer.register_backward_hook(log)\n+layer.register_forward_hook(output_grad_hook(log))\n" in r.stdout
    assert not (project / "m.py").exists()


def test_stdin_notebook(project):
    from test_notebooks import FIXED_HOOK_CELL, HOOK_CELL, MODEL_CELL, code_cell, notebook_json

    text = notebook_json([code_cell(MODEL_CELL), code_cell(HOOK_CELL)])
    r = check(project, "-", "--stdin-filename", "nb.ipynb", "--output-format", "concise", input=text)
    assert r.stdout.startswith("nb.ipynb:cell 2:4:7: HKL101"), r.stdout + r.stderr
    r = check(project, "-", "--stdin-filename", "nb.ipynb", "--fix", "--unsafe-fixes", input=text)
    assert r.stdout == notebook_json([code_cell(MODEL_CELL), code_cell(FIXED_HOOK_CELL)]), r.stderr


def test_stdin_with_other_paths_is_a_usage_error(project):
    r = check(project, "-", "bad.py", input=BAD)
    assert r.returncode == 2 and r.stderr.strip() == \
        "hooklint: error: `-` (read stdin) cannot be combined with other paths"


# ---------------------------------------------------------------- unknown noqa codes


def test_unknown_noqa_code_warns_once_per_code(tmp_path):
    """In the files hooklint parses: those that mention a hook API (a file the
    text prefilter rules out has no finding for a noqa to silence)."""
    hook = "t.register_hook(print)\n"
    (tmp_path / "a.py").write_text("x = 1  # noqa: HKL999\ny = 2  # noqa: E501, HKL998\n" + hook)
    (tmp_path / "b.py").write_text("z = 3  # noqa: HKL999\ns = '# noqa: HKL997'  # in a string: not a comment\n"
                                   "# hooklint: noqa: HKL996\n" + hook)
    (tmp_path / "c.py").write_text("x = 1  # noqa: HKL995\n")  # no hook API: not parsed, not scanned
    r = check(tmp_path, ".")
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "hooklint: warning: a.py: line 1: `# noqa` names HKL999, which is not a hooklint rule (`hooklint rule "
        "--all` lists them), so it suppresses nothing",
        "hooklint: warning: a.py: line 2: `# noqa` names HKL998, which is not a hooklint rule (`hooklint rule "
        "--all` lists them), so it suppresses nothing",
        "hooklint: warning: b.py: line 3: `# noqa` names HKL996, which is not a hooklint rule (`hooklint rule "
        "--all` lists them), so it suppresses nothing",
    ], r.stderr
    assert r.returncode == 0  # a warning, not a finding
    assert "E501" not in r.stderr
    again = check(tmp_path, ".")  # from the cache: the same warnings
    assert [line for line in again.stderr.splitlines() if "warning" in line] == warnings
    quiet = check(tmp_path, "-q", ".")
    assert "warning" not in quiet.stderr


# ---------------------------------------------------------------- the summary, once


def _summary_count(stderr: str) -> int:
    return sum(stderr.count(s) for s in ("All checks passed", "Found ", "No findings"))


@pytest.mark.parametrize("args", [
    [], ["--output-format", "concise"], ["--statistics"], ["-j", "2"], ["--output-format", "concise", "-j", "2"],
    ["--statistics", "--no-cache"], ["-o", "out.txt"],
])
@pytest.mark.parametrize("target", ["bad.py", "clean.py", "."])
def test_summary_printed_once(project, args, target):
    r = check(project, *args, target)
    assert _summary_count(r.stderr) == 1, r.stderr
    assert r.stderr.count("code    rule") <= 1
    if "--statistics" in args:
        assert "code    rule" not in r.stderr  # the statistics are the table


def test_summary_once_with_notices_and_fixes(project, tmp_path):
    (project / "pyproject.toml").write_text('[project]\nname = "x"\nrequires-python = ">=3.14"\n')
    (project / "new.py").write_text("import torch.nn as nn\nlayer = nn.Linear(1, 1)\n"
                                    "layer.register_backward_hook(print)\n" + "type X = 1\n" * (sys.version_info < (3, 12))
                                    + "def f(:\n")  # does not parse anywhere
    r = check(project, ".")
    assert _summary_count(r.stderr) == 1 and "not checked" in r.stderr, r.stderr
    r = check(project, "--fix", "--unsafe-fixes", ".")
    assert _summary_count(r.stderr) == 1 and "Fixed 1 finding." in r.stderr, r.stderr


# ---------------------------------------------------------------- -q never hides an error


def test_quiet_hides_the_summary_and_info_not_findings(project):
    r = check(project, "-q", "bad.py")
    assert r.returncode == 1 and "HKL101" in r.stdout and r.stderr == ""


@pytest.mark.torch
@pytest.mark.slow
def test_graph_error_is_shown_with_quiet_and_never_all_checks_passed(tmp_path):
    """The reported case: a graph-layer error.  With -q the run used to exit 1
    silently; without -q it printed the error, then "All checks passed"."""
    (tmp_path / "model.py").write_text(textwrap.dedent("""\
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 2)
                while True:
                    pass

            def forward(self, x):
                return self.fc(x)
        """))
    for quiet in ([], ["-q"]):
        r = run_cli("check", "--timeout", "3", "--no-cache", *quiet, "model.py", cwd=tmp_path)
        assert r.returncode == 1, r.stderr
        errors = [line for line in r.stderr.splitlines() if line.startswith("hooklint: error: model.py:")]
        assert len(errors) == 1 and "timed out" in errors[0], r.stderr
        assert "All checks passed" not in r.stderr
        if quiet:
            assert r.stderr.splitlines() == errors
        else:
            assert "No findings, but the results are incomplete: 1 error in the analysis" in r.stderr


def test_html_report_with_an_error_does_not_say_all_checks_passed():
    from hooklint.findings import Notice, NoticeLevel, Report
    from hooklint.report.html import render_html

    page = render_html(Report(notices=[Notice("m.py", "graph analysis timed out", NoticeLevel.ERROR)],
                              files_checked=1), sources=lambda p: None, catalog={})
    assert "All checks passed" not in page and "results are incomplete" in page


# ---------------------------------------------------------------- without torch


@pytest.fixture(scope="module")
def venv_without_torch(tmp_path_factory) -> Path:
    """A virtual environment with hooklint and tabulate but no torch, as
    `pip install hooklint` makes it (built from the base interpreter, whose
    site-packages have no torch)."""
    import tabulate

    base = Path(getattr(sys, "_base_executable", sys.executable))
    probe = subprocess.run([str(base), "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("the base interpreter has torch")
    folder = tmp_path_factory.mktemp("no-torch")
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
    extra = folder / "extra"
    extra.mkdir()
    os.symlink(Path(tabulate.__file__).parent, extra / "tabulate")
    site = next((folder / "venv" / "lib").glob("python3*/site-packages"))
    (site / "hooklint-dev.pth").write_text(f"{ROOT}\n{extra}\n")
    return folder / "venv" / "bin" / "python"


def _run_without_torch(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HOOKLINT_STRICT")}
    env["NO_COLOR"] = "1"
    return subprocess.run([str(python), "-m", "hooklint", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_environment_really_has_no_torch(venv_without_torch, tmp_path):
    r = subprocess.run([str(venv_without_torch), "-c", "import hooklint, tabulate; import torch"],
                       capture_output=True, text=True)
    assert "No module named 'torch'" in r.stderr


def test_run_without_torch_is_one_line_exit_2(venv_without_torch, tmp_path):
    (tmp_path / "train.py").write_text("print('training')\n")
    r = _run_without_torch(venv_without_torch, tmp_path, "run", "train.py")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "hooklint: error: `hooklint run` needs torch, which is not installed (No module named 'torch'): "
        "pip install 'hooklint[torch]'"]
    assert "training" not in r.stdout


def test_graph_without_torch_is_one_line_exit_2(venv_without_torch, tmp_path):
    (tmp_path / "m.py").write_text("import torch.nn as nn\nclass Net(nn.Module):\n    pass\n")
    r = _run_without_torch(venv_without_torch, tmp_path, "graph", "m.py")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "needs torch" in r.stderr and "internal error" not in r.stderr


def test_check_without_torch_runs_the_static_rules(venv_without_torch, tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    r = _run_without_torch(venv_without_torch, tmp_path, "check", "bad.py")
    assert r.returncode == 1 and "bad.py:7:7: HKL101" in r.stdout, r.stderr
    assert "torch is not installed" in r.stderr and "internal error" not in r.stderr
