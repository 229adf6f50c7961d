"""Real torch: a saved-tensors-hooks context popped from inside its own pack
or unpack hook (HKL321), run on the fixture's own classes.

- Popped from an unpack hook: the pop lands on the copy of the hooks stack
  that autograd uses during backward() and puts back afterwards, so the
  hooks stay installed and pack every later forward; a second pop in the
  same backward fails with an internal assert once the copy is empty.
- Popped from a pack hook: the operation that is saving its tensors loses
  the hooks halfway, its other saved tensors are never packed.
- Popped from any other code that runs during backward() (a tensor hook,
  a custom Function's backward): the same copy, the same leak.  Entered in
  a module backward pre-hook and exited in the backward hook: autograd puts
  the stack back before each node, the exit fails with the internal assert.
- The good twins (the exit deferred to the caller, the switched-off exit, a
  nested `with`) leave the stack as the code expects.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl321_saved_tensors_hooks_exited_in_hook.py"


@pytest.fixture(scope="module")
def fixture():
    return runpy.run_path(str(FIXTURE))


def _packed_by(scope_class_instance, method_name: str):
    """Count the calls of one of the object's hook methods, through the
    saved_tensors_hooks the object already built around its bound methods."""
    calls = []
    ctx = scope_class_instance.hooks_scope
    original = ctx.pack_hook if method_name == "pack" else ctx.unpack_hook

    def counting(t):
        calls.append(tuple(t.shape))
        return original(t)

    if method_name == "pack":
        ctx.pack_hook = counting
    else:
        ctx.unpack_hook = counting
    return calls


def _later_forward_packs(scope) -> int:
    """How many tensors a forward run after backward() is packed by the scope's hooks."""
    packs = _packed_by(scope, "pack")
    scope.enter()
    a = torch.ones(3, requires_grad=True)
    y = (a * a).sum()
    y.backward()
    if hasattr(scope, "exit_if_pending"):
        scope.exit_if_pending()
    before = len(packs)
    b = torch.ones(3, requires_grad=True)
    (b * b).sum()
    return len(packs) - before


def _drain():
    """Pop whatever a test left on this thread's stack (the bad twins leave their hooks installed)."""
    while torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
        torch._C._autograd._pop_saved_tensors_default_hooks()


def test_exit_in_unpack_hook_leaves_the_hooks_installed(fixture):
    try:
        bad = fixture["LingeringScope"]()
        assert _later_forward_packs(bad) == 2  # `b * b` saves b twice: both still packed by the "exited" scope
        assert bad.exited  # ... although the object believes it exited
        assert torch._C._autograd._top_saved_tensors_default_hooks(True) is not None
    finally:
        _drain()
    good = fixture["DeferredScope"]()
    assert _later_forward_packs(good) == 0
    assert good.exited
    assert torch._C._autograd._top_saved_tensors_default_hooks(True) is None


def test_switched_off_exit_keeps_the_scope_until_the_caller_exits(fixture):
    scope = fixture["SwitchedOffScope"]()
    scope.enter()
    a = torch.ones(3, requires_grad=True)
    (a * a).sum().backward()
    assert not scope.exited
    scope._exit_hooks()  # the caller's exit, outside any hook
    assert torch._C._autograd._top_saved_tensors_default_hooks(True) is None


def test_second_pop_in_one_backward_hits_torchs_internal_assert(fixture):
    fixture["push_popping_unpack"]()
    try:
        a = torch.ones(3, requires_grad=True)
        y = (a * a).sum()  # saves `a` twice: two unpacks in one backward
        with pytest.raises(RuntimeError, match=r"!tls\.stack\.empty\(\) INTERNAL ASSERT FAILED"):
            y.backward()
    finally:
        _drain()
    # the good twin: a nested `with` in the unpack hook pushes and pops in order
    with fixture["nested_ok"]:
        b = torch.ones(3, requires_grad=True)
        z = (b * b).sum()
    z.backward()
    assert torch.equal(b.grad, 2 * b.detach())
    assert torch._C._autograd._top_saved_tensors_default_hooks(True) is None


def test_exit_in_pack_hook_leaves_the_rest_of_the_operation_unpacked(fixture):
    def packs(offloader_class) -> int:
        offloader = offloader_class(budget=1)
        seen = []
        original = offloader.pack_hook

        def counting(t):
            seen.append(tuple(t.shape))
            return original(t)

        offloader.pack_hook = counting
        offloader.__enter__()
        try:
            a = torch.ones(3, requires_grad=True)
            b = torch.full((3,), 2.0, requires_grad=True)
            y = (a * b).sum()  # MulBackward0 saves a and b
        finally:
            if torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
                offloader.__exit__(None, None, None)
        y.backward()
        assert torch.equal(a.grad, b.detach()) and torch.equal(b.grad, a.detach())
        return len(seen)

    assert packs(fixture["BudgetOffloader"]) == 1  # the pop inside the first pack: `b` was never packed
    assert packs(fixture["BudgetOffloaderFixed"]) == 2
    assert torch._C._autograd._top_saved_tensors_default_hooks(True) is None


def _top():
    return torch._C._autograd._top_saved_tensors_default_hooks(True)


def test_exit_in_a_tensor_hook_during_backward_leaves_the_hooks_installed(fixture):
    try:
        bad = fixture["OffloadUntilBackward"]()
        out = bad.run(lambda x: x * 2, torch.ones(3, requires_grad=True))
        out.sum().backward()
        assert _top() is not None  # save_on_cpu still packs every later forward
    finally:
        _drain()
    good = fixture["OffloadForwardOnly"]()
    out = good.run(lambda x: x * 2, torch.ones(3, requires_grad=True))
    out.sum().backward()
    assert _top() is None


def test_exit_in_a_function_backward_leaves_the_hooks_installed(fixture):
    try:
        fixture["_function_scope"].__enter__()
        x = torch.ones(3, requires_grad=True)
        fixture["ExitInBackward"].apply(x).sum().backward()
        assert torch.equal(x.grad, torch.full((3,), 2.0))
        assert _top() is not None
    finally:
        _drain()


def test_enter_in_backward_pre_hook_is_gone_when_the_backward_hook_exits(fixture):
    bad = fixture["RecomputeScopeAcrossBackwardHooks"]()
    try:
        with pytest.raises(RuntimeError, match=r"!tls\.stack\.empty\(\) INTERNAL ASSERT FAILED"):
            bad.layer(torch.ones(1, 3, requires_grad=True)).sum().backward()
    finally:
        bad.remove()
        _drain()
    good = fixture["RecomputeInOneHook"]()
    x = torch.ones(1, 3, requires_grad=True)
    good.layer(x).sum().backward()
    good.remove()
    assert x.grad is not None and len(good.recomputed) == 1 and _top() is None


def test_hkl321_reports_the_bad_twins_only():
    text = FIXTURE.read_text()
    findings = lint(text, "HKL321")
    expected = [row for row, line in enumerate(text.splitlines(), 1) if line.endswith("# HKL321")]
    assert [f.location.row for f in findings] == expected and len(expected) == 7
    messages = " ".join(f.message for f in findings)
    assert "unpack hook `_unpack`" in messages and "pack hook `pack_to_cpu`" in messages
    assert "tensor hook `_on_backward_start`" in messages and "autograd.Function backward" in messages
