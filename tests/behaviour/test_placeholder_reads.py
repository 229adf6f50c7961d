"""Real torch: what HKL427 claims about hooks that use a placeholder they replace later.

On its first call the hook sees the enclosing function's placeholder: a
0-dim tensor has no dimension 1 (`flatten(0, 1)`, `size(0)` raise
IndexError), `None` has no arithmetic (TypeError).  The fixed twins run.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.hook_uses_placeholder_it_replaces import HookUsesPlaceholderItReplaces

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl427_hook_uses_placeholder_it_replaces.py"


def _namespace() -> dict:
    ns: dict = {"__name__": "hkl427_fixture"}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), ns)  # noqa: S102
    return ns


def test_rule_reports_the_three_fixture_uses():
    rows = sorted(f.location.row for f in lint(FIXTURE.read_text(encoding="utf-8"), HookUsesPlaceholderItReplaces.code))
    assert rows == [19, 57, 81]


def test_zero_dim_placeholder_has_no_dimensions():
    placeholder = torch.empty([], dtype=torch.bool)
    assert placeholder.dim() == 0
    for use in (lambda: placeholder.flatten(0, 1), lambda: placeholder.size(0), lambda: placeholder.shape[1],
                lambda: placeholder.transpose(0, 1)):
        with pytest.raises(IndexError):
            use()
    assert placeholder.flatten(0, -1).shape == (1,)  # 0 and -1 exist


def _batches():
    torch.manual_seed(0)
    return [torch.randn(2, 3, 4) for _ in range(2)]


def test_first_step_fails_only_with_the_placeholder_branch():
    ns = _namespace()
    model = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(IndexError, match="Dimension out of range"):
        ns["fit_sae"](model, _batches())
    assert not model[0]._forward_hooks  # removed in `finally`
    # with tokens excluded the mask is real from the first step
    kept = ns["fit_sae"](model, _batches(), exclude=100.0)
    assert len(kept) == 2
    assert len(ns["fit_sae_fixed"](model, _batches())) == 2


def test_none_placeholder_fails_on_the_first_forward():
    ns = _namespace()
    layer = nn.Linear(4, 4)
    handle = ns["track_drift"](layer)
    with pytest.raises(TypeError):
        layer(torch.randn(2, 4))
    handle.remove()
    fixed = ns["track_drift_fixed"](layer)
    layer(torch.randn(2, 4))
    layer(torch.randn(2, 4))
    assert layer.drift.ndim == 0
    fixed.remove()


def test_tensor_hook_reads_the_size_of_its_placeholder():
    ns = _namespace()
    weight = torch.randn(3, 4, requires_grad=True)
    ns["normalize_grads"](weight)
    with pytest.raises(IndexError):
        weight.sum().backward()
