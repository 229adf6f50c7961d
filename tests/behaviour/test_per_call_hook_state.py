"""Real torch: what HKL351 claims about tensor hooks that read per-call state of their object.

Two calls before one backward: the first call's hook runs at the backward
and reads the attribute the second call assigned.  The fixed twin hands the
hook its own call's value.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.tensor_hook_reads_per_call_state import TensorHookReadsPerCallState

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl351_tensor_hook_reads_per_call_state.py"


def _namespace() -> dict:
    ns: dict = {"__name__": "hkl351_fixture"}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), ns)  # noqa: S102
    return ns


def test_rule_reports_the_three_fixture_registrations():
    rows = sorted(f.location.row for f in lint(FIXTURE.read_text(encoding="utf-8"), TensorHookReadsPerCallState.code))
    assert rows == [23, 48, 65]


def _two_calls_one_backward(module):
    x1 = torch.ones(3, requires_grad=True)
    x2 = torch.ones(3, requires_grad=True)
    y1 = module(x1, torch.full((3,), 2.0))
    y2 = module(x2, torch.full((3,), 3.0))
    (y1.sum() + y2.sum()).backward()
    return x1.grad, x2.grad


def test_first_calls_hook_reads_the_second_calls_cache():
    ns = _namespace()
    g1, g2 = _two_calls_one_backward(ns["CachedScale"]())
    assert torch.equal(g1, torch.full((3,), 3.0))  # should be 2: the second call's cache
    assert torch.equal(g2, torch.full((3,), 3.0))
    g1, g2 = _two_calls_one_backward(ns["CachedScaleFixed"]())
    assert torch.equal(g1, torch.full((3,), 2.0))
    assert torch.equal(g2, torch.full((3,), 3.0))


def test_one_call_per_backward_is_right():
    ns = _namespace()
    module = ns["CachedScale"]()
    x = torch.ones(3, requires_grad=True)
    module(x, torch.full((3,), 2.0)).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_gradient_dropout_uses_the_later_mask():
    ns = _namespace()
    torch.manual_seed(0)
    drop = ns["GradDropout"]()
    x1 = torch.ones(64, requires_grad=True)
    x2 = torch.ones(64, requires_grad=True)
    y1 = drop(x1)
    first_mask = drop.keep.clone()
    y2 = drop(x2)
    second_mask = drop.keep.clone()
    assert not torch.equal(first_mask, second_mask)
    (y1.sum() + y2.sum()).backward()
    assert torch.equal(x1.grad, second_mask)
