"""The rules the graph sharpens (HKL102) or enables (HKL403), fed with real graph
facts, and the fixtures' expectations with the graph analysis on.

In fixtures/models, ``# graph: HKL101`` on a line says what is reported there
when the graph analysis ran (it replaces the line's static ``# HKLxxx``
expectation); lines without it expect the same as the static pass.
"""

from __future__ import annotations

import re
import textwrap
import warnings
from collections import Counter

import pytest

from conftest import FIXTURES, codes_at
from graph.helpers import MODEL_FIXTURES, file_facts_in_process
from hooklint.config import resolve_codes
from hooklint.rules.base import expected_findings
from hooklint.static.checker import check_file

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

ALL = frozenset(resolve_codes(["ALL"], [], []))
_GRAPH_RE = re.compile(r"#\s*graph:\s*(HKL\d{3}(?:\s*,\s*HKL\d{3})*|none)\s*(#|$)")


def graph_expectations(text: str) -> list[tuple[int, str]]:
    static = expected_findings(text)
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        match = _GRAPH_RE.search(line)
        if match is None:
            out.extend((row, code) for row, code in static if row == lineno)
        elif match.group(1) != "none":
            out.extend((lineno, code.strip()) for code in match.group(1).split(","))
    return sorted(out)


def check_with_graph(path, codes=ALL):
    facts = file_facts_in_process(path)
    return check_file(str(path), codes, graph=facts)


@pytest.mark.parametrize("path", MODEL_FIXTURES, ids=lambda p: p.name)
def test_model_fixture_with_graph(path):
    result = check_with_graph(path)
    got = codes_at(result.findings)
    want = graph_expectations(path.read_text(encoding="utf-8"))
    missing = sorted((Counter(want) - Counter(got)).elements())
    extra = sorted((Counter(got) - Counter(want)).elements())
    detail = "\n".join(f"  {f.location.row}: {f.code} {f.message}" for f in result.findings)
    assert not missing and not extra, f"missing {missing}, unexpected {extra}\nreported:\n{detail}"


def _finding(path, code, row):
    found = [f for f in check_with_graph(path).findings if f.code == code and f.location.row == row]
    assert len(found) == 1, [f"{f.location.row}: {f.code}" for f in check_with_graph(path).findings]
    return found[0]


# -- HKL102 ------------------------------------------------------------------------


def test_hkl102_names_the_op_its_line_the_module_and_what_it_skips():
    finding = _finding(FIXTURES / "seeds" / "seed004_autograd_and_hooks.py", "HKL102", 90)
    assert finding.origin.value == "graph"
    message = finding.message
    assert "on `net` (MyNet) it binds to DivBackward0" in message
    assert "`out = input / 4`, line 27 in MyMean.forward" in message
    assert "of shapes (2, 1), None for an input float32[2, 4]" in message
    assert "not the gradient of MyNet's input" in message
    assert message.endswith("it skips `f1` (Linear)")


def test_hkl102_does_not_count_the_submodule_it_lands_in_as_skipped():
    message = _finding(FIXTURES / "seeds" / "seed004_autograd_and_hooks.py", "HKL102", 100).message
    assert "on `swapped` (MyNetSwapped) it binds to AddmmBackward0" in message
    assert message.endswith("it skips `f2` (MyMean)")


def test_hkl102_names_the_module_path_inside_a_model():
    message = _finding(FIXTURES / "models" / "linear_layers.py", "HKL102", 39).message
    assert "on `net.with_bias` (Linear, module `with_bias` of TwoLayers) it binds to AddmmBackward0" in message
    assert "of shapes (3,), (2, 4), (4, 3) for an input" in message


def test_hkl102_without_graph_keeps_its_static_message():
    path = FIXTURES / "seeds" / "seed004_autograd_and_hooks.py"
    static = [f for f in check_file(str(path), ALL).findings if f.code == "HKL102"]
    assert static and all(f.origin.value == "static" for f in static)
    assert "it is bound to the last autograd op, `input / 4` (div)" in static[0].message


def test_hkl102_quiet_on_a_verified_single_op_module(tmp_path):
    path = tmp_path / "mean.py"
    path.write_text(textwrap.dedent("""\
        import torch.nn as nn

        class Halve(nn.Module):
            def forward(self, x):
                return x / 2

        def clip(module, grad_input, grad_output):
            return (grad_input[0].clamp(-1, 1),) + grad_input[1:]

        halve = Halve()
        halve.register_backward_hook(clip)
    """), encoding="utf-8")
    static = [f.code for f in check_file(str(path), ALL).findings]
    assert static.count("HKL102") == 1, "statically hooklint cannot know Halve is one op"
    with_graph = [f.code for f in check_with_graph(path).findings]
    assert "HKL102" not in with_graph and "HKL101" in with_graph


# -- HKL403 ------------------------------------------------------------------------


def test_hkl403_graph_sees_an_inplace_relu_in_a_sequential():
    path = FIXTURES / "models" / "residual.py"
    assert not [f for f in check_file(str(path), ALL).findings if f.location.row == 66], \
        "the static pass cannot see through nn.Sequential"
    finding = _finding(path, "HKL403", 66)
    assert finding.origin.value == "graph"
    assert "`stem.features[0]` (Conv2d, module `features.0` of Stem)" in finding.message
    assert "modified in place after it by ReLU(inplace=True)" in finding.message
    assert "Output 0 of BackwardHookFunction is a view and is being modified inplace" in finding.message


def test_hkl403_graph_sees_a_module_that_modifies_its_input(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent("""\
        import torch.nn as nn

        class AddOne(nn.Module):
            def forward(self, x):
                x += 1
                return x

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)
                self.add = AddOne()

            def forward(self, x):
                return self.add(self.fc(x))

        net = Net()
        net.add.register_full_backward_hook(lambda m, gi, go: None)
        first = Net()
        first.fc.register_full_backward_hook(lambda m, gi, go: None)
    """), encoding="utf-8")
    findings = [f for f in check_with_graph(path).findings if f.code == "HKL403"]
    rows = sorted(f.location.row for f in findings)
    # net.add modifies its input in place; first.fc's output is modified by AddOne
    assert rows == [18, 20], [f.message for f in findings]
    by_row = {f.location.row: f.message for f in findings}
    assert "it modifies its input (which requires grad) in place with `+=` (`x += 1`, line 5" in by_row[18]
    assert "its output is modified in place after it by `+=` (`x += 1`, line 5 in AddOne.forward)" in by_row[20]


def test_hkl403_quiet_when_the_graph_shows_no_inplace_op():
    path = FIXTURES / "models" / "residual.py"
    rows = {f.location.row for f in check_with_graph(path).findings if f.code == "HKL403"}
    assert 67 not in rows and 70 not in rows  # stem.block.conv2 and residual.fc2 feed out-of-place ops


# -- the behaviour HKL403 claims, on real torch --------------------------------------

from hooklint.static.inplace import FULL_HOOK_INPLACE_ERROR as RUNTIME_ERROR  # noqa: E402

nn = torch.nn


class _Then(nn.Module):
    def __init__(self, first, then):
        super().__init__()
        self.first, self.then = first, then

    def forward(self, x):
        return self.then(self.first(x))


class _CloneThen(_Then):
    def forward(self, x):
        return self.then(self.first(x).clone())


class _AugAdd(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        y += x
        return y


@pytest.mark.parametrize("register", ["register_full_backward_hook", "register_full_backward_pre_hook"])
@pytest.mark.parametrize("build", [
    lambda: _Then(nn.Linear(4, 4), nn.ReLU(inplace=True)),
    lambda: _Then(nn.Linear(4, 4), _Relu_()),
])
def test_real_full_hook_then_inplace_op_fails_in_the_forward(register, build):
    model = build()
    getattr(model.first, register)(lambda *args: None)
    with pytest.raises(RuntimeError, match=RUNTIME_ERROR):
        model(torch.rand(2, 4))


class _Relu_(nn.Module):
    def forward(self, x):
        return x.relu_()


def test_real_full_hook_then_augmented_assignment_fails():
    model = _AugAdd()
    model.fc.register_full_backward_hook(lambda *args: None)
    with pytest.raises(RuntimeError, match=RUNTIME_ERROR):
        model(torch.rand(2, 4))


def test_real_inplace_module_with_full_hook_fails_only_when_its_input_needs_grad():
    relu = nn.ReLU(inplace=True)
    relu.register_full_backward_hook(lambda *args: None)
    relu(torch.rand(2, 4))  # plain data: nothing to wrap, no error
    with pytest.raises(RuntimeError, match=RUNTIME_ERROR):
        relu(torch.rand(2, 4, requires_grad=True) * 1)


def test_the_fixes_work_and_a_legacy_hook_is_not_affected():
    fired = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "full backward hook is firing ... no inputs require gradients"
        fixed = _Then(nn.Linear(4, 4), nn.ReLU())
        fixed.first.register_full_backward_hook(lambda m, gi, go: fired.append("out-of-place"))
        fixed(torch.rand(2, 4)).sum().backward()
        cloned = _CloneThen(nn.Linear(4, 4), nn.ReLU(inplace=True))
        cloned.first.register_full_backward_hook(lambda m, gi, go: fired.append("cloned"))
        cloned(torch.rand(2, 4)).sum().backward()
        legacy = _Then(nn.Linear(4, 4), nn.ReLU(inplace=True))
        legacy.first.register_backward_hook(lambda m, gi, go: fired.append("legacy"))
        legacy(torch.rand(2, 4)).sum().backward()
    assert fired == ["out-of-place", "cloned", "legacy"]
