"""Real torch: what HKL511 claims about custom autograd Functions.

`Function.apply` takes only tensors passed as direct arguments as inputs.
Tensors inside a container that `forward` returns never reach the
Function's `backward` (the hook it fires): returned in a tuple, autograd
takes them for tensors made in `forward` and cuts the caller's tensors from
the graph; returned in a list, the gradient flows around the Function.
Flattened into direct arguments, they stay in the graph and the hook fires.
"""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl511_function_apply_on_container.py"


@pytest.fixture()
def fns():
    return runpy.run_path(str(FIXTURE))


def _pair():
    x = torch.ones(3, requires_grad=True)
    return x, x * 2, x * 3


def test_tensors_in_a_tuple_are_cut_from_the_graph_and_backward_never_runs(fns):
    for wrap in (fns["hook_pair"], lambda n, a, b: fns["OpHooks"].post_op(n, (a, b))):
        x, a, b = _pair()
        out = wrap("pre_backward", a, b)
        # the caller's own tensors lose their history: autograd took them for tensors made in forward
        assert out[0] is a and not a.requires_grad and a.grad_fn is None
        with pytest.raises(RuntimeError, match="does not require grad"):
            (out[0].sum() + out[1].sum()).backward()
        assert fns["FIRED"] == [] and x.grad is None


def test_tensors_in_a_list_bypass_the_function_and_backward_never_runs(fns):
    for wrap in (fns["hook_local"], lambda n, a, b: fns["hook_list"](n, [a, b])):
        x, a, b = _pair()
        out = wrap("pre_backward", a, b)
        (out[0].sum() + out[1].sum()).backward()
        torch.testing.assert_close(x.grad, torch.full((3,), 5.0))  # the gradient flows around the Function
        assert fns["FIRED"] == []  # and the hook it exists for never fires


def test_direct_arguments_stay_in_the_graph_and_the_hook_fires(fns):
    x, a, b = _pair()
    out = fns["FixedOpHooks"].post_op("pre_backward", (a, b))
    (out[0].sum() + out[1].sum()).backward()
    assert fns["FIRED"] == ["pre_backward"]
    torch.testing.assert_close(x.grad, torch.full((3,), 5.0))
    x, a, _ = _pair()
    fns["hook_tensor"]("single", a).sum().backward()
    assert fns["FIRED"][-1] == "single" and x.grad is not None


def test_hkl511_reports_the_fixture_lines():
    text = FIXTURE.read_text(encoding="utf-8")
    expected = [row for row, line in enumerate(text.splitlines(), 1) if line.endswith("# HKL511")]
    assert [f.location.row for f in lint(text, "HKL511")] == expected and len(expected) == 4
