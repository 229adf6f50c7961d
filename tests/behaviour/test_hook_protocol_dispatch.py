"""Real torch (HKL336), on the fixture's own registry: a hook that overrides
the protocol's template (`new_forward`) to replace the module's computation
runs while it is the module's only hook, and is silently skipped once a
second hook joins (the dispatcher inlines the default steps); a registry
that tracks the overriding hook and runs it between the others' steps keeps it."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def protocol():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl336_hook_protocol_template_inlined.py"))


def _hooked(protocol, registry_name):
    layer = nn.Linear(2, 2)
    registry = protocol[registry_name](layer)
    layer._original_forward = layer.forward
    layer.forward = registry.dispatch
    ModelHook = protocol["ModelHook"]

    class Cache(ModelHook):
        """Replaces the computation: returns a fixed cached output."""

        def new_forward(self, module, *args, **kwargs):
            return torch.zeros(1, 2)

    class Count(ModelHook):
        calls = 0

        def pre_forward(self, module, *args, **kwargs):
            Count.calls += 1
            return args, kwargs

    return layer, registry, Cache(), Count()


def test_override_runs_alone_and_is_skipped_with_a_second_hook(protocol):
    layer, registry, cache, count = _hooked(protocol, "HookRegistry")
    x = torch.ones(1, 2)
    registry.register("a-cache", cache)
    assert torch.equal(layer(x), torch.zeros(1, 2))  # the override replaced the computation
    registry.register("b-count", count)
    out = layer(x)
    assert not torch.equal(out, torch.zeros(1, 2))  # the cache's new_forward never ran
    assert torch.allclose(out, nn.Linear.forward(layer, x))


def test_tracking_registry_keeps_the_override_with_a_second_hook(protocol):
    layer, registry, cache, count = _hooked(protocol, "TrackingRegistry")
    x = torch.ones(1, 2)
    registry.register("b-count", count)
    registry.register("a-cache", cache)
    before = type(count).calls
    out = layer(x)
    assert type(count).calls == before + 1
    assert torch.equal(out, torch.zeros(1, 2))
