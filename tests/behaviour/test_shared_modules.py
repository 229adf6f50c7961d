"""Real torch: a module shared by two parents, hooked by a hand-written
recursion over `children()` (HKL315), run on the fixtures' own functions.

- `named_modules()` / `modules()` keep a memo: the shared module is yielded once.
- A recursion over `children()` reaches it once per parent: it is hooked twice
  and each of its calls runs the hook twice.
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
def walks():
    return runpy.run_path(str(RULES / "hkl315_hook_per_parent_on_shared_module.py"))


def _shared_model():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(nn.Sequential(shared, nn.ReLU()), nn.Sequential(shared, nn.Tanh()))
    return model, shared


def test_modules_yields_a_shared_module_once_and_children_recursion_twice():
    model, shared = _shared_model()
    assert sum(m is shared for m in model.modules()) == 1
    reached = []

    def recurse(module):
        reached.append(module)
        for child in module.children():
            recurse(child)

    recurse(model)
    assert sum(m is shared for m in reached) == 2


def test_recursive_walk_hooks_the_shared_module_twice(walks):
    model, shared = _shared_model()
    calls = []
    walks["count_leaf_calls"](model, calls)
    assert len(shared._forward_hooks) == 2
    model(torch.randn(2, 4))
    # the shared Linear runs twice per forward, and each run fires both hooks
    assert calls.count("Linear") == 4

    model, shared = _shared_model()
    calls = []
    walks["count_leaf_calls_once"](model, calls)
    model(torch.randn(2, 4))
    assert len(shared._forward_hooks) == 1 and calls.count("Linear") == 2

    model, shared = _shared_model()
    calls = []
    walks["count_leaf_calls_visited"](model, calls)
    model(torch.randn(2, 4))
    assert len(shared._forward_hooks) == 1 and calls.count("Linear") == 2


def test_callback_walk_records_the_shared_module_once_per_parent_per_call(walks):
    model, shared = _shared_model()
    rows = []
    walks["crawl"](model, rows)
    model(torch.randn(2, 4))
    assert len(shared._forward_pre_hooks) == 2
    assert sum(1 for depth, name in rows if depth == 2 and name == "0") == 4  # two calls, two hooks each


def test_output_changing_hook_applies_twice_on_the_shared_module(walks):
    model, shared = _shared_model()
    x = torch.randn(2, 4)
    with torch.no_grad():
        expected = shared(x) * 0.5  # what one halving hook gives
    walks["HalvingTracer"]().attach(model)
    with torch.no_grad():
        got = model[0][0](x)  # the shared Linear, through its first parent's reference
    assert torch.allclose(got, expected * 0.5)  # halved twice


def test_overwriting_observer_is_unaffected(walks):
    model, shared = _shared_model()
    outputs = {}
    walks["last_outputs"](model, outputs)
    x = torch.randn(2, 4)
    model(x)
    assert len(shared._forward_hooks) == 2  # hooked twice all the same, but harmlessly
    assert torch.equal(outputs["0.0"], outputs["1.0"])  # both slots hold the shared module's last output


# --- a submodule stored again under another attribute (HKL315, alias) ------------------------


@pytest.fixture(scope="module")
def probes():
    return runpy.run_path(str(RULES / "hkl315_submodule_alias.py"))


def test_apply_visits_an_aliased_submodule_twice(probes):
    model = probes["make_model"]()
    probe = probes["LayerProbe"](model, "0")
    assert sum(m is model[0] for m in probe.modules()) == 1  # modules() keeps its memo
    visited = []
    probe.apply(visited.append)
    assert sum(m is model[0] for m in visited) == 2  # apply: once through model, once through the alias


def test_aliased_layer_is_hooked_twice_and_runs_its_hook_twice(probes):
    model = probes["make_model"]()
    probe = probes["LayerProbe"](model, "0")
    probe.instrument()
    probe(torch.ones(1, 3))
    probe.release()
    assert len(model[0]._forward_hooks) == 0
    assert model[0].calls == 2 and model[2].calls == 1


@pytest.mark.parametrize("name", ["HeldProbe", "NamedProbe"])
def test_layer_kept_out_of_the_tree_is_hooked_once(probes, name):
    model = probes["make_model"]()
    probe = probes[name](model, "0")
    probe.instrument()
    probe(torch.ones(1, 3))
    probe.release()
    assert model[0].calls == 1 and model[2].calls == 1
