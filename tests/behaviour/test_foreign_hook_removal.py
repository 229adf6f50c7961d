"""Real torch and accelerate (HKL333), on the fixture's own functions: a
module carrying an accelerate hook of a kind the loader does not know is
stripped of it by the buggy `disable_offloading` (its kind tests say "no
offload", so nothing re-applies a hook) and keeps it with the fixed twin.

accelerate is not a test dependency of hooklint: without it the test skips."""

from __future__ import annotations

import runpy
from types import SimpleNamespace

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
hooks = pytest.importorskip("accelerate.hooks")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def loaders():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl333_foreign_hook_removed_whatever_kind.py"))


class Doubling(hooks.ModelHook):
    """Someone else's hook: doubles the module's output."""

    def post_forward(self, module, output):
        return output * 2


def _pipeline():
    torch.manual_seed(0)
    component = nn.Linear(2, 2)
    hooks.add_hook_to_module(component, Doubling())
    return SimpleNamespace(components={"unet": component}), component


def test_buggy_loader_strips_a_hook_it_does_not_know_and_reports_no_offload(loaders):
    pipeline, component = _pipeline()
    x = torch.ones(1, 2)
    hooked = component(x)
    assert torch.allclose(hooked, 2 * nn.Linear.forward(component, x))
    flags = loaders["disable_offloading"](pipeline)
    assert flags == (False, False)  # the caller re-applies offloading only for these: nothing is put back
    assert not hasattr(component, "_hf_hook")
    assert torch.allclose(component(x), hooked / 2)  # the other party's hook is gone for good


def test_fixed_loader_keeps_a_hook_of_another_kind(loaders):
    pipeline, component = _pipeline()
    x = torch.ones(1, 2)
    hooked = component(x)
    assert loaders["disable_offloading_fixed"](pipeline) == (False, False)
    assert isinstance(component._hf_hook, Doubling)
    assert torch.equal(component(x), hooked)


def test_fixed_loader_still_removes_the_offload_hook_it_re_applies(loaders):
    torch.manual_seed(0)
    component = nn.Linear(2, 2)
    hooks.add_hook_to_module(component, hooks.CpuOffload(execution_device="cpu"))
    pipeline = SimpleNamespace(components={"unet": component})
    assert loaders["disable_offloading_fixed"](pipeline) == (True, False)
    assert not hasattr(component, "_hf_hook")
