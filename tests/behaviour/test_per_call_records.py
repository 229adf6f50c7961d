"""Real torch: a module called twice in one forward fires its forward hook
twice though `modules()` yields it once (HKL326), run on the fixture's own
summaries: the per-call ones count its parameters twice, the guarded ones
once."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def summaries():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl326_hook_counts_module_per_call.py"))


def _model(summaries):
    return summaries["Reused"]()


def test_modules_yields_the_reused_layer_once_but_its_hook_fires_twice(summaries):
    model = _model(summaries)
    assert sum(m is model.fc for m in model.modules()) == 1
    calls = []
    h = model.fc.register_forward_hook(lambda m, i, o: calls.append(m))
    model(torch.ones(1, 4))
    h.remove()
    assert len(calls) == 2


def test_per_call_summaries_count_the_reused_layer_twice(summaries):
    model = _model(summaries)
    real = sum(p.numel() for p in model.parameters())  # 20
    table = summaries["summary_by_apply"](model, torch.ones(1, 4))
    assert len(table) == 2 and sum(table.values()) == 2 * real
    assert sum(summaries["layer_sizes"](model, torch.ones(1, 4))) == 2 * real
    counter = summaries["ParamCounter"](model)
    model(torch.ones(1, 4))
    counter.close()
    assert counter.total() == 2 * real


@pytest.mark.parametrize("name", ["summary_seen", "summary_flagged", "summary_by_name"])
def test_guarded_summaries_count_it_once(summaries, name):
    model = _model(summaries)
    real = sum(p.numel() for p in model.parameters())
    result = summaries[name](model, torch.ones(1, 4))
    values = result.values() if isinstance(result, dict) else result
    assert sum(values) == real
