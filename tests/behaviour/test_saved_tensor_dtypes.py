"""Real torch: what HKL802 claims about saved-tensor hooks that change a saved
tensor's dtype and do not change it back, run on the fixture's own hook pairs
(fixtures/rules/hkl802_saved_tensor_dtype_not_restored.py).

- A matrix product's backward combines the unpacked tensor with the float32
  gradient: a bfloat16, float16 or float64 tensor handed back makes it fail
  with "expected m1 and m2 to have the same dtype" (or "... to have the same
  dtype" in its other spelling).
- An element-wise op's backward promotes silently: no error, and the
  gradient is computed from the rounded values (float16 / bfloat16) and
  differs from the run without hooks.
- The good twins (the dtype kept and restored; a move to the host and back)
  run both, with the gradients of a run without hooks (to the precision they
  store), and hooklint says nothing about them; it reports every bad one.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl802_saved_tensor_dtype_not_restored.py"
BAD = ["host_bf16", "half_lambdas", "HalfActivations", "double_default_hooks"]
GOOD = ["host_bf16_restored", "HalfActivationsRestored", "host_only"]


@pytest.fixture(scope="module")
def hooks():
    return runpy.run_path(str(FIXTURE))


def _leaves():
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(3, 8, requires_grad=True)
    return x, w


def linear_grads(context=None):
    x, w = _leaves()
    if context is None:
        out = torch.nn.functional.linear(x * 1.0, w * 1.0)
    else:
        with context:
            out = torch.nn.functional.linear(x * 1.0, w * 1.0)
    out.sum().backward()
    return x.grad, w.grad


def elementwise_grad(context=None):
    x, _ = _leaves()
    x = x * 3.0 + 0.1
    x.retain_grad()
    if context is None:
        out = (x.sin() * x).sum()
    else:
        with context:
            out = (x.sin() * x).sum()
    out.backward()
    return x.grad


def test_fixture_lists_match(hooks):
    assert [f.__name__ for f in hooks["BAD"]] == BAD
    assert [f.__name__ for f in hooks["GOOD"]] == GOOD


@pytest.mark.parametrize("name", BAD)
def test_matrix_product_backward_fails_on_the_other_dtype(hooks, name):
    with pytest.raises(RuntimeError, match="same dtype"):
        linear_grads(hooks[name]())


@pytest.mark.parametrize("name", ["host_bf16", "half_lambdas", "HalfActivations"])
def test_elementwise_backward_silently_uses_rounded_values(hooks, name):
    reference = elementwise_grad()
    grad = elementwise_grad(hooks[name]())
    assert grad.dtype == torch.float32          # promoted: nothing says the dtype changed
    assert not torch.equal(grad, reference)
    assert (grad - reference).abs().max() > 1e-3


@pytest.mark.parametrize("name", GOOD)
def test_restored_dtype_runs_with_the_reference_gradients(hooks, name):
    ref_x, ref_w = linear_grads()
    gx, gw = linear_grads(hooks[name]())
    assert gx.dtype == torch.float32 and gw.dtype == torch.float32
    assert torch.allclose(gx, ref_x, atol=0.1, rtol=0.02) and torch.allclose(gw, ref_w, atol=0.1, rtol=0.02)


def test_hooklint_reports_the_bad_pairs_only(hooks):
    source = FIXTURE.read_text()
    findings = [f for f in lint(source, "HKL802") if f.code == "HKL802"]
    lines = source.splitlines()
    good_start = next(i for i, line in enumerate(lines, 1) if line.startswith("# --- good"))
    assert len(findings) == len(BAD)
    assert all(f.location.row < good_start for f in findings)
