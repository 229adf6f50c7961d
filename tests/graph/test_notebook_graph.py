"""Graph facts for notebooks: the models a notebook's code cells define are
built from the cells' definitions only (sanitized as a file's are: no
top-level effect runs, IPython lines are masked), so HKL102 and HKL403 name the
bound or in-place op in a notebook as in a .py file, with every position given
as a cell and a line in it."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, run_cli
from test_notebooks import code_cell, markdown_cell, notebook_json

torch = pytest.importorskip("torch")
nn = torch.nn
pytestmark = pytest.mark.torch

IMPORTS = "%matplotlib inline\nimport torch\nimport torch.nn as nn\n"
MODEL = """\
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True))
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))
"""
# top-level effects the graph layer must never run: a shell line, a file written, a training loop
EFFECTS = """\
model = Net()
!touch shell_ran
open("top_level_ran", "w").write("ran")
for step in range(2):
    model(torch.rand(2, 3, 8, 8)).sum().backward()
    open("loop_ran", "w").write(str(step))
"""
HOOK = """\
def log(module, grad_input, grad_output):
    print(grad_output[0].norm())

model.features[0].register_full_backward_hook(log)
"""


def _check(folder, name, *extra):
    proc = run_cli("check", name, "--output-format", "json", *extra, cwd=folder, timeout=240)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout), proc.stderr


def test_hkl403_in_a_notebook_names_the_in_place_op_by_cell(tmp_path):
    (tmp_path / "analysis.ipynb").write_text(notebook_json([
        code_cell(IMPORTS), markdown_cell("# the model\n"), code_cell(MODEL), code_cell(EFFECTS), code_cell(HOOK)]))
    findings, stderr = _check(tmp_path, "analysis.ipynb")
    assert "internal error" not in stderr and "graph analysis failed" not in stderr, stderr
    (finding,) = [f for f in findings if f["code"] == "HKL403"]
    assert (finding["cell"], finding["location"]["row"]) == (5, 4)
    assert finding["origin"] == "graph"
    message = finding["message"]
    assert "module `features.0` of Net" in message, message
    # the in-place op is a module of the Sequential: the graph names it, at its place in cell 3
    assert "ReLU" in message and "cell 3, line 8 in Net.forward" in message, message
    assert "line 1" not in message.replace("cell 3, line 8", "")  # no row of the joined text leaks out
    # nothing of the notebook's top-level code ran in the worker
    for marker in ("shell_ran", "top_level_ran", "loop_ran"):
        assert not (tmp_path / marker).exists(), marker
    # the static pass alone cannot see into the Sequential
    static, _ = _check(tmp_path, "analysis.ipynb", "--static-only")
    assert [f for f in static if f["code"] == "HKL403"] == []


def test_the_reported_hook_really_breaks_the_forward():
    namespace = {"torch": torch, "nn": nn}
    exec(MODEL, namespace)  # noqa: S102 - the test's own cell
    model = namespace["Net"]()
    model.features[0].register_full_backward_hook(lambda m, gi, go: None)
    with pytest.raises(RuntimeError, match="BackwardHookFunction is a view and is being modified inplace"):
        model(torch.rand(2, 3, 8, 8))


def test_gradcam_notebook_hkl102_names_the_bound_op_in_its_cell(tmp_path):
    (tmp_path / "gradcam.ipynb").write_text((FIXTURES / "notebooks" / "gradcam_debugging.ipynb").read_text())
    findings, stderr = _check(tmp_path, "gradcam.ipynb")
    (finding,) = [f for f in findings if f["code"] == "HKL102"]
    assert (finding["cell"], finding["location"]["row"]) == (6, 10)
    assert finding["origin"] == "graph", finding
    assert "binds to ReluBackward0 (`return F.relu(self.bn(self.conv(x)))`, cell 3, line 8 in ConvBlock.forward)" \
        in finding["message"], finding["message"]
    assert "skips `block2.conv` (Conv2d), `block2.bn` (BatchNorm2d)" in finding["message"]
    # what a real legacy hook on block2 is attached to: the grad_fn of its output
    import torch.nn.functional as F

    class ConvBlock(nn.Module):
        def __init__(self, cin, cout):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, 3, padding=1)
            self.bn = nn.BatchNorm2d(cout)

        def forward(self, x):
            return F.relu(self.bn(self.conv(x)))

    out = ConvBlock(16, 32)(torch.rand(1, 16, 8, 8, requires_grad=True))
    assert type(out.grad_fn).__name__ == "ReluBackward0"


def test_a_cell_that_does_not_parse_leaves_the_others_their_graph_facts(tmp_path):
    (tmp_path / "broken.ipynb").write_text(notebook_json([
        code_cell(IMPORTS), code_cell(MODEL), code_cell("def broken(:\n    pass\n"), code_cell(EFFECTS),
        code_cell(HOOK)]))
    findings, _stderr = _check(tmp_path, "broken.ipynb")
    codes = sorted((f["cell"], f["code"]) for f in findings)
    assert (3, "HKL001") in codes and (5, "HKL403") in codes, codes


def test_second_run_is_answered_from_the_cache(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.hooklint]\n")
    (tmp_path / "cached.ipynb").write_text(notebook_json([code_cell(IMPORTS), code_cell(MODEL), code_cell(HOOK
                                                          .replace("model.", "Net()."))]))
    first, _ = _check(tmp_path, "cached.ipynb")
    assert [f["code"] for f in first] == ["HKL403"]
    proc = run_cli("graph", "cached.ipynb", cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "Net" in proc.stdout and "features.0" in proc.stdout
    second, _ = _check(tmp_path, "cached.ipynb")
    assert second == first
    assert any((tmp_path / ".hooklint_cache" / "graph").iterdir())
