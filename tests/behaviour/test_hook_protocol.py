"""Real torch: a hook chain on an nn.Module that threads the output and the
module through every hook (HKL410), on the fixture's own framework."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def hooks():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl410_hook_override_drops_return.py"))


def test_an_override_without_return_turns_the_output_into_none(hooks):
    layer = hooks["install"](nn.Linear(2, 2), hooks["HookChain"](hooks["CastOutput"]()))
    assert layer(torch.randn(1, 2)) is None  # the model's output is gone
    cast = hooks["install"](nn.Linear(2, 2), hooks["HookChain"](hooks["CastOutput"](torch.float64)))
    assert cast(torch.randn(1, 2)).dtype == torch.float64  # the branch that returns works


def test_an_override_without_return_breaks_the_detach_chain(hooks):
    chain = hooks["HookChain"](hooks["CountCalls"](), hooks["ModuleHook"]())
    layer = hooks["install"](nn.Linear(2, 2), chain)
    layer(torch.randn(1, 2))
    assert chain.hooks[0].calls == 1
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute"):
        hooks["uninstall"](layer)


def test_pass_through_hooks_keep_the_output_and_the_module(hooks):
    layer = nn.Linear(2, 2)
    x = torch.randn(1, 2)
    expected = layer(x)
    hooked = hooks["install"](layer, hooks["HookChain"](hooks["MoveToDevice"]("cpu"), hooks["ModuleHook"]()))
    assert torch.equal(hooked(x), expected)
    plain = hooks["install"](nn.Linear(2, 2), hooks["HookChain"](hooks["ModuleHook"]()))
    assert isinstance(hooks["uninstall"](plain), nn.Linear)
