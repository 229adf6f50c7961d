"""Jupyter notebooks: found when walking folders, checked cell by cell as one
namespace, IPython syntax masked without false syntax errors, findings placed
in cells in every output format, noqa per cell, fixes written back into the
notebook's JSON with nothing else changed.  The realistic case is
fixtures/notebooks/gradcam_debugging.ipynb (model in one cell, the legacy hook
in another)."""

from __future__ import annotations

import json
import os
import stat
from xml.etree import ElementTree

import pytest

from conftest import FIXTURES, run_cli
from hooklint.config import resolve_codes
from hooklint.static.output_grad_hook import helper_source
from hooklint.findings import Applicability, Edit, Finding, Fix, Location, Severity
from hooklint.static.checker import check_file, check_text, read_checkable
from hooklint.static.notebook import CELL_BOUNDARY, mask_ipython, read_notebook

ALL = frozenset(resolve_codes(["ALL"], [], []))
GRADCAM = FIXTURES / "notebooks" / "gradcam_debugging.ipynb"


def code_cell(source: str, outputs=None, count=None) -> dict:
    return {"cell_type": "code", "execution_count": count, "metadata": {}, "outputs": outputs or [],
            "source": source.splitlines(True)}


def markdown_cell(source: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": source.splitlines(True)}


def notebook_json(cells, indent=1, language="python", trailing_newline=True) -> str:
    nb = {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": language,
                                                      "name": "python3"}},
          "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=indent, ensure_ascii=False) + ("\n" if trailing_newline else "")


MODEL_CELL = "import torch\nimport torch.nn as nn\nmodel = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))\n"
HOOK_CELL = ("def show(module, grad_input, grad_output):\n    print(grad_output[0].norm())\n\n"
             "model.register_backward_hook(show)\n")


def findings_of(path) -> list[tuple[int | None, int, int, str]]:
    result = check_file(str(path), ALL)
    return sorted((f.cell, f.location.row, f.location.column, f.code) for f in result.findings)


# ---------------------------------------------------------------- reading and cells


def test_later_cells_see_earlier_cells_names(tmp_path):
    """The hook in cell 4 is on the Sequential built in cell 2: only the joined
    cells show that the module is a Sequential whose legacy hook misbinds."""
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([markdown_cell("# Debugging\n"), code_cell(MODEL_CELL), markdown_cell("hook:"),
                                   code_cell(HOOK_CELL)]))
    result = check_file(str(path), ALL)
    assert [(f.cell, f.location.row, f.location.column, f.code) for f in result.findings] == [
        (4, 4, 7, "HKL101")]
    assert "Sequential" in result.findings[0].message
    alone = lint_alone(HOOK_CELL)
    assert alone and "Sequential" not in alone[0].message  # the cell alone cannot tell what `model` is


def lint_alone(source):
    return check_text("cell.py", source, ALL).findings


def test_cells_are_numbered_as_the_notebook_shows_them(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([markdown_cell("a"), markdown_cell("b"), code_cell(MODEL_CELL + HOOK_CELL)]))
    assert {f.cell for f in check_file(str(path), ALL).findings} == {3}


def test_realistic_debugging_notebook():
    got = findings_of(GRADCAM)
    assert (6, 10, 14, "HKL101") in got and (6, 10, 14, "HKL102") in got
    assert (11, 3, 1, "HKL301") in got
    # cell 12's legacy hook has `# noqa: HKL101, HKL102`, in its own cell
    assert not [g for g in got if g[0] == 12]


def test_messages_name_cells_not_rows_of_the_joined_text():
    result = check_file(str(GRADCAM), ALL)
    hkl102 = next(f for f in result.findings if f.code == "HKL102")
    assert "cell 3, line 8" in hkl102.message  # ConvBlock.forward's return, where the hook binds
    hkl301 = next(f for f in result.findings if f.code == "HKL301")
    assert "cell 11, line 2" in hkl301.message and "cell 11, line 4" in hkl301.message


@pytest.mark.parametrize("line", [
    "%matplotlib inline", "%load_ext autoreload", "!pip install torch", "!ls -la | head", "model?", "?model",
    "model.register_hook??", "%time out = model(x)", "%pip install -q hooklint",
])
def test_line_magics_are_masked_not_syntax_errors(tmp_path, line):
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell(MODEL_CELL + line + "\n" + HOOK_CELL)]))
    assert findings_of(path) == [(1, 8, 7, "HKL101")]


def test_assignment_and_indented_magics_keep_the_code_valid():
    lines = ["files = !ls", "for i in range(3):", "    !echo {i}", "    %time f(i)", "x = (1", "% 2)",
             "y = '''", "!not a magic inside a string", "'''", "!cmd \\", "  continued"]
    masked, originals = mask_ipython(lines)
    assert masked[0].startswith("files = None")
    assert masked[2].startswith("    pass") and masked[3].startswith("    pass")
    assert masked[5] == "% 2)"  # modulo inside brackets is Python
    assert masked[7] == lines[7]  # inside a string
    assert masked[9].startswith("pass") and masked[10].startswith("  #")
    assert sorted(originals) == [0, 2, 3, 9, 10]
    compile("\n".join(masked) + "\n", "nb", "exec")


def test_cell_magics():
    bash, bash_masked = mask_ipython(["%%bash", "for f in *; do", "  echo $f", "done"])
    assert all(line.startswith("#") for line in bash) and len(bash_masked) == 4
    timed, timed_masked = mask_ipython(["%%time", "y = model(x)"])
    assert timed[1] == "y = model(x)" and list(timed_masked) == [0]


def test_future_import_in_a_later_cell_is_not_a_syntax_error(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell("from __future__ import annotations\n"), code_cell(MODEL_CELL),
                                   code_cell("from __future__ import annotations\n" + HOOK_CELL)]))
    assert findings_of(path) == [(3, 5, 7, "HKL101")]


def test_a_broken_cell_is_reported_and_the_others_are_still_checked(tmp_path):
    """Jupyter compiles each cell alone: a syntax error in a scratch cell does
    not stop the rest from running, nor from being checked."""
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell(MODEL_CELL), code_cell("def broken(:\n    pass\n"),
                                   code_cell(HOOK_CELL)]))
    got = findings_of(path)
    assert (2, 1, 12, "HKL001") in got
    assert (3, 4, 7, "HKL101") in got


def test_notebook_that_is_not_json_is_one_hkl001(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text('{"cells": [\n  {"cell_type": "code",,}\n]}\n')
    result = check_file(str(path), ALL)
    assert [(f.code, f.cell, f.location.row) for f in result.findings] == [("HKL001", None, 2)]
    assert "invalid JSON" in result.findings[0].message


@pytest.mark.parametrize("content, words", [
    ('["not", "a", "notebook"]', "not a Jupyter notebook"),
    ('{"metadata": {}}', "no `cells` list"),
    ('{"worksheets": [], "nbformat": 3}', "nbformat 3"),
    ('{"cells": [{"cell_type": "code", "source": 3}]}', "`source` of cell 1"),
    ("", "invalid JSON"),
])
def test_not_a_notebook_is_one_line(tmp_path, content, words):
    path = tmp_path / "nb.ipynb"
    path.write_text(content)
    result = check_file(str(path), ALL)
    assert [f.code for f in result.findings] == ["HKL001"] and words in result.findings[0].message


def test_bad_notebook_on_the_command_line_has_no_traceback(tmp_path):
    (tmp_path / "bad.ipynb").write_bytes(b"\xff\xfe{garbage")
    r = run_cli("check", "--static-only", "bad.ipynb", cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stdout.startswith("bad.ipynb:1:1: HKL001 not a valid notebook: not utf-8 text")


def test_a_notebook_in_another_language_is_skipped(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell("library(torch)\nx <- 1 %>% f\n")], language="R"))
    result = check_file(str(path), ALL)
    assert not result.findings
    assert [n.message for n in result.notices] == ["a R notebook, not Python: not checked"]


def test_string_sources_and_empty_cells(tmp_path):
    nb = json.loads(notebook_json([code_cell(""), code_cell(MODEL_CELL), code_cell(HOOK_CELL)]))
    for cell in nb["cells"]:
        cell["source"] = "".join(cell["source"])  # nbformat allows one string
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    assert findings_of(path) == [(3, 4, 7, "HKL101")]


# ---------------------------------------------------------------- noqa


def test_noqa_is_per_cell_line(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell(MODEL_CELL), code_cell(HOOK_CELL.replace(
        "(show)\n", "(show)  # noqa: HKL101\n")), code_cell(HOOK_CELL)]))
    assert findings_of(path) == [(3, 4, 7, "HKL101")]


def test_file_level_noqa_in_any_cell(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell(MODEL_CELL), code_cell(HOOK_CELL),
                                   code_cell("# hooklint: noqa: HKL101\n")]))
    assert findings_of(path) == []


# ---------------------------------------------------------------- files, prefilter, cache


def test_walking_finds_notebooks_and_skips_checkpoints(tmp_path):
    (tmp_path / "nb.ipynb").write_text(notebook_json([code_cell(MODEL_CELL + HOOK_CELL)]))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "other.ipynb").write_text(notebook_json([code_cell(MODEL_CELL)]))
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "nb-checkpoint.ipynb").write_text(
        notebook_json([code_cell(MODEL_CELL + HOOK_CELL)]))
    r = run_cli("check", "--show-files", ".", cwd=tmp_path)
    assert r.stdout.splitlines() == ["nb.ipynb", "sub/other.ipynb"], r.stderr
    r = run_cli("check", "--static-only", "--output-format", "concise", ".", cwd=tmp_path)
    assert r.stdout.startswith("nb.ipynb:cell 1:") and r.stdout.count("HKL101") == 1


def test_prefilter_reads_the_cells_not_the_json(tmp_path):
    """A notebook whose outputs mention a hook API but whose code does not is
    not parsed; one whose code does is."""
    quiet = tmp_path / "quiet.ipynb"
    quiet.write_text(notebook_json([code_cell("x = 1\n", outputs=[{"name": "stdout", "output_type": "stream",
                                                                    "text": ["register_backward_hook\n"]}])]))
    assert not check_file(str(quiet), ALL).parsed
    loud = tmp_path / "loud.ipynb"
    loud.write_text(notebook_json([code_cell(MODEL_CELL + HOOK_CELL)]))
    assert check_file(str(loud), ALL).parsed


def test_cache_and_parallel_runs_keep_the_cells(tmp_path):
    for i in range(20):  # enough files for -j 2 to use worker processes
        (tmp_path / f"nb{i:02}.ipynb").write_text(notebook_json([code_cell(MODEL_CELL), code_cell(HOOK_CELL)]))
    outputs = []
    for args in (["-j", "2"], ["-j", "2"], ["-j", "1", "--no-cache"]):
        r = run_cli("check", "--static-only", "--output-format", "json", *args, ".", cwd=tmp_path)
        assert r.returncode == 1, r.stderr
        outputs.append(r.stdout)
    assert outputs[0] == outputs[1] == outputs[2]  # cold cache, warm cache, no cache
    found = json.loads(outputs[0])
    assert len(found) == 20 and {(f["cell"], f["location"]["row"]) for f in found} == {(2, 4)}
    assert any((tmp_path / ".hooklint_cache" / "static").iterdir())


# ---------------------------------------------------------------- output formats


@pytest.fixture
def nb_project(tmp_path):
    (tmp_path / ".git").mkdir()  # the repository root for sarif and github paths
    (tmp_path / "nb.ipynb").write_text(notebook_json([markdown_cell("# t"), code_cell(MODEL_CELL),
                                                      code_cell(HOOK_CELL)]))
    return tmp_path


def json_line_of(project, text: str) -> int:
    """The line of the .ipynb file holding ``text``."""
    lines = (project / "nb.ipynb").read_text().splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def test_full_and_concise_print_cell_line_column(nb_project):
    r = run_cli("check", "--static-only", "--output-format", "concise", cwd=nb_project)
    assert r.stdout.startswith("nb.ipynb:cell 3:4:7: HKL101 "), r.stdout
    r = run_cli("check", "--static-only", cwd=nb_project)
    assert "nb.ipynb:cell 3:4:7: HKL101" in r.stdout
    assert "4 | model.register_backward_hook(show)" in r.stdout  # the frame is the cell's own text


def test_json_formats_have_the_cell(nb_project):
    r = run_cli("check", "--static-only", "--output-format", "json", cwd=nb_project)
    [finding] = json.loads(r.stdout)
    assert finding["cell"] == 3 and finding["location"] == {"row": 4, "column": 7}
    # edits are in the cell too: the helper HKL101's fix writes goes into the
    # registration's cell (a fix that crosses cells would not be applied)
    assert finding["fix"]["applicability"] == "unsafe"
    assert {"row": 4, "column": 7} in [e["location"] for e in finding["fix"]["edits"]]
    assert finding["fix"]["edits"][0]["location"] == {"row": 1, "column": 1}
    r = run_cli("check", "--static-only", "--output-format", "json-lines", cwd=nb_project)
    assert json.loads(r.stdout)["cell"] == 3


def test_github_annotation_is_on_the_notebook_json_line(nb_project):
    r = run_cli("check", "--static-only", "--output-format", "github", cwd=nb_project)
    line = json_line_of(nb_project, "model.register_backward_hook(show)")
    col = (nb_project / "nb.ipynb").read_text().splitlines()[line - 1].index("register_backward_hook") + 1
    assert f"file=nb.ipynb,line={line},col={col}," in r.stdout, r.stdout
    assert "(cell 3%2C line 4%2C column 7)" in r.stdout and "::cell 3:4:7: " in r.stdout


def test_sarif_region_is_in_the_json_and_properties_name_the_cell(nb_project):
    r = run_cli("check", "--static-only", "--output-format", "sarif", cwd=nb_project)
    result = json.loads(r.stdout)["runs"][0]["results"][0]
    line = json_line_of(nb_project, "model.register_backward_hook(show)")
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == line
    assert result["properties"]["cell"] == 3 and result["properties"]["cellLine"] == 4
    assert "fixes" not in result  # SARIF fixes would have to be edits of the JSON text


def test_junit_names_the_cell(nb_project):
    r = run_cli("check", "--static-only", "--output-format", "junit", cwd=nb_project)
    case = ElementTree.fromstring(r.stdout).find(".//testcase")
    assert case.get("name") == "HKL101 legacy-backward-hook at cell 3:4:7"
    assert case.get("line") == str(json_line_of(nb_project, "model.register_backward_hook(show)"))
    assert "nb.ipynb:cell 3:4:7: HKL101" in case.find("failure").text


def test_html_report_names_the_cell(nb_project):
    r = run_cli("report", "--static-only", "-o", "r.html", cwd=nb_project)
    page = (nb_project / "r.html").read_text()
    assert r.returncode == 1 and "nb.ipynb:cell 3:4:7" in page
    assert "register_backward_hook(show)" in page  # the cell's code frame


def test_finding_round_trips_with_its_cell():
    f = Finding("HKL101", "legacy-backward-hook", "m", "nb.ipynb", Location(4, 7), Location(4, 29),
                Severity.WARNING, fix=Fix("f", (Edit("x", Location(4, 7), Location(4, 29)),), Applicability.SAFE),
                cell=3)
    assert Finding.from_dict(f.to_dict()) == f


# ---------------------------------------------------------------- fixes


def _fixable_cells(hook_cell: str = HOOK_CELL) -> list[dict]:
    return [markdown_cell("# Debugging\n"), code_cell("%matplotlib inline\n" + MODEL_CELL, count=1),
            code_cell(hook_cell + "!nvidia-smi\nout = model(torch.randn(2, 4))", count=2,
                      outputs=[{"name": "stdout", "output_type": "stream", "text": ["tensor(0.5)\n"]}])]


def _fixable_notebook(tmp_path, indent=1, trailing_newline=True):
    text = notebook_json(_fixable_cells(), indent=indent, trailing_newline=trailing_newline)
    path = tmp_path / "nb.ipynb"
    path.write_text(text)
    return path, text


# HKL101's fix without graph facts (unsafe): the hook moves to the module's
# output tensor, through a helper written into the registration's cell.
FIXED_HOOK_CELL = (helper_source() + "\n\n" + HOOK_CELL).replace(
    "model.register_backward_hook(show)", "model.register_forward_hook(output_grad_hook(show))")


@pytest.mark.parametrize("indent, trailing_newline", [(1, True), (2, False), (None, True)])
def test_fix_writes_the_cell_back_and_nothing_else(tmp_path, indent, trailing_newline):
    path, before = _fixable_notebook(tmp_path, indent, trailing_newline)
    os.chmod(path, 0o640)
    r = run_cli("check", "--static-only", "--fix", "--unsafe-fixes", "nb.ipynb", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    after = path.read_text()
    assert after == notebook_json(_fixable_cells(FIXED_HOOK_CELL), indent=indent, trailing_newline=trailing_newline)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert "!nvidia-smi" in after and "%matplotlib inline" in after  # magics restored
    assert not [p for p in tmp_path.iterdir() if "hooklint-tmp" in p.name]
    r = run_cli("check", "--static-only", "--fix", "--unsafe-fixes", "nb.ipynb", cwd=tmp_path)
    assert path.read_text() == after  # idempotent


def test_diff_is_per_cell_and_changes_nothing(tmp_path):
    path, before = _fixable_notebook(tmp_path)
    r = run_cli("check", "--static-only", "--diff", "--unsafe-fixes", "nb.ipynb", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stdout.startswith("--- nb.ipynb:cell 3\n+++ nb.ipynb:cell 3\n"), r.stdout
    assert "-model.register_backward_hook(show)\n+model.register_forward_hook(output_grad_hook(show))\n" in r.stdout
    assert path.read_text() == before


def test_a_diff_of_a_cells_last_line_has_no_end_of_file_marker(tmp_path):
    """nbformat stores a cell's last line without a line break: in a cell's
    diff that is the norm, not news ("No newline at end of file")."""
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell("import torch.nn as nn\nnet = nn.Linear(4, 2)\n"
                                             "net.register_backward_hook(lambda m, gi, go: None)")]))
    assert not json.loads(path.read_text())["cells"][0]["source"][-1].endswith("\n")
    r = run_cli("check", "--static-only", "--diff", "--unsafe-fixes", "nb.ipynb", cwd=tmp_path)
    assert r.returncode == 1 and "+net.register_forward_hook(output_grad_hook(" in r.stdout, r.stdout + r.stderr
    assert "No newline" not in r.stdout, r.stdout


def test_a_fix_that_moves_lines_around_a_magic_restores_it(tmp_path):
    """HKL301's fix moves `handle.remove()` after the backward, across a masked
    `%time` line: the magic comes back as it was."""
    source = ("import torch\nx = torch.ones(2, requires_grad=True)\nh = x.register_hook(lambda g: g * 2)\n"
              "h.remove()\n%time y = (x * 3).sum()\ny.backward()\n")
    path = tmp_path / "nb.ipynb"
    path.write_text(notebook_json([code_cell(source)]))
    r = run_cli("check", "--static-only", "--fix", "--unsafe-fixes", "nb.ipynb", cwd=tmp_path)
    cells = json.loads(path.read_text())["cells"]
    new = "".join(cells[0]["source"])
    assert "%time y = (x * 3).sum()" in new, r.stderr
    assert new.index("y.backward()") < new.index("h.remove()"), new


def test_fix_crossing_cells_is_never_applied():
    from hooklint.fix.files import _fix_in_one_cell

    text = f"a\n{CELL_BOUNDARY}\nb\n{CELL_BOUNDARY}\n"
    boundaries = [2, 4]
    inside = Fix("m", (Edit("x", Location(3, 1), Location(3, 2)),), Applicability.SAFE)
    across = Fix("m", (Edit("x", Location(1, 1), Location(3, 2)),), Applicability.SAFE)
    two_cells = Fix("m", (Edit("x", Location(1, 1), Location(1, 2)), Edit("y", Location(3, 1), Location(3, 2))),
                    Applicability.SAFE)
    base = Finding("HKL101", "n", "m", "nb.ipynb", Location(1, 1), Location(1, 1), Severity.WARNING)
    assert text.count(CELL_BOUNDARY) == 2
    assert _fix_in_one_cell(base.with_changes(fix=inside), boundaries)
    assert not _fix_in_one_cell(base.with_changes(fix=across), boundaries)
    assert not _fix_in_one_cell(base.with_changes(fix=two_cells), boundaries)


def test_notebook_round_trip_keeps_the_json_byte_for_byte():
    text, notebook = read_checkable(str(GRADCAM))
    assert notebook.with_sources(notebook.split(text)) == GRADCAM.read_text()


def test_add_noqa_in_a_notebook(tmp_path):
    path, _before = _fixable_notebook(tmp_path)
    r = run_cli("check", "--static-only", "--add-noqa", "nb.ipynb", cwd=tmp_path)
    assert r.returncode == 0 and "Added 1 noqa directive." in r.stderr, r.stderr
    cell = "".join(json.loads(path.read_text())["cells"][2]["source"])
    assert "model.register_backward_hook(show)  # noqa: HKL101\n" in cell and "!nvidia-smi" in cell
    r = run_cli("check", "--static-only", "nb.ipynb", cwd=tmp_path)
    assert r.returncode == 0, r.stdout


def test_fix_keeps_crlf_and_ascii_escapes(tmp_path):
    """A notebook written with CRLF line breaks and \\u escapes (ensure_ascii)
    keeps both; only the fixed line changes."""
    # a hook reading grad_input on a single-op layer: HKL101's fix is the
    # rename to a full hook (unsafe without graph facts), one changed line
    model_cell = "import torch.nn as nn\nmodel = nn.Conv2d(3, 1, 3)\n"
    hook_cell = HOOK_CELL.replace("print(grad_output[0].norm())", "print('é', grad_input[0].norm())")
    nb = json.loads(notebook_json([code_cell("# café\n" + model_cell), code_cell(hook_cell)]))
    text = json.dumps(nb, indent=2, ensure_ascii=True).replace("\n", "\r\n") + "\r\n"
    path = tmp_path / "nb.ipynb"
    path.write_bytes(text.encode())
    r = run_cli("check", "--static-only", "--fix", "--unsafe-fixes", "nb.ipynb", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert path.read_bytes().decode() == text.replace("register_backward_hook", "register_full_backward_hook")
    assert "\\u00e9" in text
