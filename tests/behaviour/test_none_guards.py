"""Real torch: what HKL510 claims about custom autograd Functions.

A gradient a Function computes only when an input requires grad is None on
the other paths; guarding its use on another value (the bias exists) passes
there and raises.  The twins that test the value they use run on every path.
"""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl510_function_none_guard_mismatch.py"
NONE_ERROR = "'NoneType' object has no attribute"


@pytest.fixture(scope="module")
def fns():
    return runpy.run_path(str(FIXTURE))


def _linear(apply, x_requires_grad: bool):
    x = torch.randn(4, 3, requires_grad=x_requires_grad)
    w = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(2, requires_grad=True)
    return apply(x, w, b)


def test_saved_gradient_guarded_on_the_bias_raises_when_the_input_needs_no_grad(fns):
    _linear(fns["FusedLinearSum"].apply, True)  # training: fine
    with pytest.raises(AttributeError, match=NONE_ERROR):
        _linear(fns["FusedLinearSum"].apply, False)  # a frozen encoder's output: forward raises
    for requires in (True, False):
        _linear(fns["FixedFusedLinearSum"].apply, requires)


def _affine(apply, w_requires_grad: bool):
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(3, 2, requires_grad=w_requires_grad)
    b = torch.randn(2, requires_grad=True)
    apply(x, w, b).sum().backward()
    return b.grad


def test_bias_gradient_made_only_with_the_weight_gradient_raises_in_backward(fns):
    assert _affine(fns["Affine"].apply, True) is not None
    with pytest.raises(AttributeError, match=NONE_ERROR):
        _affine(fns["Affine"].apply, False)  # frozen weight, trained bias
    torch.testing.assert_close(_affine(fns["FixedAffine"].apply, False), torch.full((2,), 4.0))


def test_and_chain_guard_on_another_value_raises(fns):
    fns["Scaled"].apply(torch.randn(3, requires_grad=True), torch.tensor(2.0))
    with pytest.raises(AttributeError, match=NONE_ERROR):
        fns["Scaled"].apply(torch.randn(3), torch.tensor(2.0))


def test_value_none_only_with_the_guarded_one_is_fine(fns):
    fns["BiasGradInStep"].apply(torch.randn(3, requires_grad=True), None)
    fns["BiasGradInStep"].apply(torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True))


def test_hkl510_reports_the_fixture_lines():
    text = FIXTURE.read_text(encoding="utf-8")
    expected = [row for row, line in enumerate(text.splitlines(), 1) if line.endswith("# HKL510")]
    assert [f.location.row for f in lint(text, "HKL510")] == expected and len(expected) == 3
