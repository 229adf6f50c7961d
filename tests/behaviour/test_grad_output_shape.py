"""Real torch: what HKL509 claims about custom autograd Functions.

Autograd hands backward a gradient of the output's shape: one number for a
reduced loss, one per row for an unreduced one.  A backward that reads it as
one number is right on the reduced path and silently wrong on the unreduced
one (every row scaled by the first row's upstream gradient); the twins that
broadcast it, or tell the kernel its stride, match plain autograd on both.
"""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
F = torch.nn.functional

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl509_function_grad_output_read_as_scalar.py"


@pytest.fixture(scope="module")
def fns():
    return runpy.run_path(str(FIXTURE))


def _data():
    torch.manual_seed(0)
    logits = torch.randn(5, 7, requires_grad=True)
    target = torch.randint(0, 7, (5,))
    weights = torch.tensor([1.0, 0.0, 2.0, 0.5, 3.0])  # per-token weights applied after the loss
    return logits, target, weights


def _reference(logits, target, weights=None, mean=False):
    ref = logits.detach().clone().requires_grad_(True)
    rows = F.cross_entropy(ref, target, reduction="none")
    reduced = rows.mean() if mean else rows.sum()
    (rows * weights).sum().backward() if weights is not None else (2.5 * reduced).backward()
    return ref.grad


def _grad(apply, per_row: bool, *extra, mean=False):
    logits, target, weights = _data()
    out = apply(logits, target, *extra)
    if isinstance(out, tuple):
        out = out[1]
    (out * weights).sum().backward() if per_row else (2.5 * out).backward()
    return logits.grad, _reference(logits, target, weights if per_row else None, mean)


@pytest.mark.parametrize("name, per_row_args, reduced_args, mean", [
    ("RowCrossEntropy", ("none",), ("sum",), False),
    ("FusedRows", (False,), (), True),
])
def test_scalar_read_of_a_per_row_gradient_loses_the_weights(fns, name, per_row_args, reduced_args, mean):
    apply = fns[name].apply
    got, reference = _grad(apply, True, *per_row_args)
    assert not torch.allclose(got, reference, atol=1e-5)
    # the first row's weight scaled every row: row 1 (weight 0) still gets a gradient
    assert got[1].abs().sum() > 0 and reference[1].abs().sum() == 0
    got, reference = _grad(apply, False, *reduced_args, mean=mean)  # reduced: one upstream number, read right
    torch.testing.assert_close(got, reference)


def test_conversion_to_a_number_raises_on_the_per_row_path(fns):
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
        _grad(fns["TokenLoss"].apply, True, True)
    got, reference = _grad(fns["TokenLoss"].apply, False, False)
    torch.testing.assert_close(got, reference)


@pytest.mark.parametrize("name", ["FixedRowCrossEntropy", "StridedRowCrossEntropy"])
def test_twins_that_see_the_gradient_shape_match_autograd(fns, name):
    for per_row, args in ((True, ("none",)), (False, ("sum",))):
        got, reference = _grad(fns[name].apply, per_row, *args)
        torch.testing.assert_close(got, reference)


def test_reduced_on_every_path_is_right_with_a_scalar_read(fns):
    got, reference = _grad(fns["SummedCrossEntropy"].apply, False)
    torch.testing.assert_close(got, reference)


def test_hkl509_reports_the_fixture_lines():
    text = FIXTURE.read_text(encoding="utf-8")
    expected = [row for row, line in enumerate(text.splitlines(), 1) if line.endswith("# HKL509")]
    assert [f.location.row for f in lint(text, "HKL509")] == expected and len(expected) == 3
