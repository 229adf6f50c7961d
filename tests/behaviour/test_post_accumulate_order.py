"""Real torch: what HKL418 claims about post-accumulate-grad hooks.

The hooks of one tensor run in registration order; a hook that steps an
optimizer and calls `zero_grad()` (set_to_none=True by default) or sets
`.grad = None` leaves None to every hook after it.  The fixtures' functions
and classes are run as written.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FUNCTIONS = FIXTURES / "rules" / "hkl418_post_accumulate_hook_after_grad_cleared.py"
METHODS = FIXTURES / "rules" / "hkl418_post_accumulate_order_methods.py"


def _namespace(path) -> dict:
    namespace: dict = {"__name__": "hkl418_fixture"}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def test_scheduler_after_zero_grad_never_steps():
    ns = _namespace(FUNCTIONS)
    model = nn.Linear(3, 1)
    optimizers = ns["create_optimizers"](list(model.parameters()), 0.1)
    schedulers = ns["create_schedulers"](optimizers)
    before = [p.detach().clone() for p in model.parameters()]
    for _ in range(3):
        model(torch.randn(4, 3)).sum().backward()
    # the optimizers stepped (the weights moved, the grads are gone); the schedulers never did
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert all(p.grad is None for p in model.parameters())
    assert {s.last_epoch for s in schedulers.values()} == {0}
    assert {o.param_groups[0]["lr"] for o in optimizers.values()} == {0.1}


def test_zero_grad_keeping_zeros_leaves_grad_to_later_hooks():
    ns = _namespace(FUNCTIONS)
    model = nn.Linear(3, 1)
    seen = ns["keep_grads"](list(model.parameters()), 0.1)
    model(torch.randn(4, 3)).sum().backward()
    assert seen == [True, True]


def test_hook_after_grad_set_to_none_raises_and_twin_runs():
    ns = _namespace(METHODS)
    model = nn.Linear(3, 1)
    ns["InBackwardClipper"](model)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'norm'"):
        model(torch.randn(4, 3)).sum().backward()

    model = nn.Linear(3, 1)
    twin = ns["LogThenStep"](model)
    model(torch.randn(4, 3)).sum().backward()
    assert len(twin.norms) == 2 and all(n > 0 for n in twin.norms)
    assert all(p.grad is None for p in model.parameters())  # the step hook ran after the log
