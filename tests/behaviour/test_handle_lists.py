"""Real torch: hook handles removed but never taken out of their list
(HKL316), run on the fixtures' own classes for several cycles.

- `RemovableHandle.remove()` takes the hook off the module but the handle
  stays in the list; the next cycle appends new ones behind it.
- After N cycles the list holds N sets of handles, and each removal calls
  `remove()` on every earlier one again (a no-op on a removed hook).
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"


@pytest.fixture(scope="module")
def lists():
    return runpy.run_path(str(RULES / "hkl316_handle_list_never_emptied.py"))


def test_context_manager_entered_per_step_keeps_every_handle(lists):
    layers = [nn.Linear(3, 3), nn.Linear(3, 3)]
    collector = lists["GradientCollector"](layers)
    for _ in range(5):
        with collector:
            for layer in layers:
                layer(torch.randn(2, 3))
        assert all(len(layer._forward_hooks) == 0 for layer in layers)  # the hooks themselves are gone
    assert len(collector._fwd_hooks) == 10  # but the list holds every step's handles
    assert len(collector.inputs) == 10  # and each step still recorded once per layer

    clearing = lists["ClearingCollector"](layers)
    for _ in range(5):
        with clearing:
            layers[0](torch.randn(2, 3))
    assert clearing._fwd_hooks == []


def test_remove_on_an_already_removed_handle_is_a_silent_no_op():
    layer = nn.Linear(3, 3)
    handle = layer.register_forward_hook(lambda m, i, o: None)
    handle.remove()
    handle.remove()  # what every later cycle does for every stale handle
    assert len(layer._forward_hooks) == 0


def test_explainer_set_grows_per_call_and_the_popping_twin_does_not(lists):
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    explainer = lists["Explainer"](model)
    for _ in range(4):
        explainer.explain(torch.randn(2, 3))
    assert len(explainer.handles) == 8
    assert all(len(m._forward_pre_hooks) == 0 for m in model)
    popping = lists["PoppingExplainer"](model)
    for _ in range(4):
        popping.explain(torch.randn(2, 3))
    assert popping.handles == []


def test_handles_joined_with_plus_equals_grow_per_call_and_the_emptied_twin_does_not(lists):
    """`self._handles += helper(self.layers.values(), hook)`: each call adds one
    handle per layer behind the removed ones (nngeometry's Jacobian backend)."""
    layers = {"a": nn.Linear(3, 3), "b": nn.Linear(3, 3)}
    model = nn.Sequential(*layers.values())
    stats = lists["ViewStatistics"](model, layers)
    for _ in range(3):
        stats.measure(torch.randn(2, 3))
        assert all(len(layer._forward_hooks) == 0 for layer in layers.values())
    assert len(stats._handles) == 6
    emptied = lists["ViewStatisticsEmptied"](model, layers)
    for _ in range(3):
        emptied.measure(torch.randn(2, 3))
    assert emptied._handles == []


def test_an_already_installed_test_on_a_stale_list_never_installs_again(lists):
    """The list keeps the removed handles, so `if self.installed: return` skips
    every later install: the second run records nothing."""
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    tracer = lists["GuardedTracer"](model)
    tracer.install()
    model(torch.randn(1, 3))
    assert len(tracer.entered) == 2
    tracer.uninstall()
    tracer.install()
    model(torch.randn(1, 3))
    assert len(tracer.entered) == 2, "the second install registered nothing"
    assert all(not m._forward_pre_hooks for m in model.children())


def test_a_concatenated_list_grows_and_a_name_keyed_dict_does_not(lists):
    """`self.hooks = self.hooks + [...]` keeps every earlier handle; a dict keyed by
    child name (`update({name: handle})`) replaces them."""
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    probe = lists["ConcatenatingProbe"](model)
    for _ in range(3):
        probe.probe(torch.randn(1, 3))
    assert len(probe.hooks) == 6
    assert all(not m._forward_hooks for m in model.children())
    keyed = lists["KeyedUpdateProbe"](model)
    for _ in range(3):
        with keyed:
            model(torch.randn(1, 3))
    assert len(keyed.by_name) == 2
    assert all(not m._forward_hooks for m in model.children())
