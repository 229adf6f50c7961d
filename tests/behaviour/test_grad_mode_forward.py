"""Real torch: what HKL350 claims about forwards that register tensor hooks or run backward.

Under `torch.no_grad()` (how modules are evaluated) a tensor the forward
computes has no graph: `register_hook` and `backward` / `autograd.grad` on it
raise.  The fixed twins check the grad mode and run under `no_grad` too.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.forward_needs_grad_mode import ForwardNeedsGradMode

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl350_forward_needs_grad_mode.py"


def _namespace() -> dict:
    ns: dict = {"__name__": "hkl350_fixture"}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), ns)  # noqa: S102
    return ns


def test_rule_reports_the_three_fixture_forwards():
    rows = sorted(f.location.row for f in lint(FIXTURE.read_text(encoding="utf-8"), ForwardNeedsGradMode.code))
    assert rows == [27, 55, 78]


def test_attention_hook_raises_under_no_grad_only():
    ns = _namespace()
    torch.manual_seed(0)
    block = ns["AttentionWithGrads"](4)
    x = torch.randn(2, 3, 4)
    block(x).sum().backward()  # training: fine, the gradient is kept
    assert block.attn_grad is not None
    with torch.no_grad(), pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require"):
        block(x)
    fixed = ns["AttentionWithGradsFixed"](4)
    with torch.no_grad():
        assert fixed(x).shape == (2, 3, 4)
    with torch.inference_mode():
        assert fixed(x).shape == (2, 3, 4)


def test_grad_cache_loss_backward_raises_under_no_grad():
    ns = _namespace()
    torch.manual_seed(0)
    loss = ns["GradCacheLoss"](4)
    left, right = torch.randn(5, 4), torch.randn(5, 4)
    loss(left, right)
    assert loss.cache[0].shape == (5, 4)
    with torch.no_grad(), pytest.raises(RuntimeError, match="does not require grad"):
        loss(left, right)
    fixed = ns["GradCacheLossFixed"](4)
    with torch.no_grad():
        assert fixed(left, right).ndim == 0


def test_forces_raise_under_no_grad_unless_grad_is_enabled_inside():
    ns = _namespace()
    torch.manual_seed(0)
    pos = torch.randn(6, 3, requires_grad=True)
    assert ns["Potential"]()(pos).shape == (6, 3)
    with torch.no_grad(), pytest.raises(RuntimeError, match="does not require grad"):
        ns["Potential"]()(pos)
    with torch.no_grad():
        assert ns["PotentialFixed"]()(torch.randn(6, 3)).shape == (6, 3)
