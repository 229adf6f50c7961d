"""Real torch (HKL335), on the fixture's own classes: two wrapper objects
on one module, the handles kept on the module's forward: the second
wrapper's re-wrap removes the first one's hooks, which then never fire.
Handles kept on the wrapper itself leave the other wrapper's hooks alone."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def classes():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl335_found_handle_removed.py"))


def test_second_wrapper_removes_the_first_ones_hooks(classes):
    layer = nn.Linear(2, 2)
    first, second = classes["Interleaver"](), classes["Interleaver"]()
    first.wrap_module(layer)
    layer(torch.ones(1, 2))
    assert first.seen == ["in", "out"]
    second.wrap_module(layer)
    layer(torch.ones(1, 2))
    assert second.seen == ["in", "out"]
    assert first.seen == ["in", "out"]  # nothing more: the first wrapper's hooks were removed by the second


def test_probe_on_a_shared_layer_removes_the_other_probes_hook(classes):
    layer = nn.Linear(2, 2)
    a, b = [], []
    classes["LayerProbe"](a).attach(layer)
    classes["LayerProbe"](b).attach(layer)
    layer(torch.ones(1, 2))
    assert len(a) == 0 and len(b) == 1


def test_handles_kept_by_each_wrapper_leave_the_other_alone(classes):
    layer = nn.Linear(2, 2)
    first, second = classes["OwnHandles"](), classes["OwnHandles"]()
    first.wrap_module(layer)
    second.wrap_module(layer)
    second.unwrap()
    layer(torch.ones(1, 2))
    assert first.seen == ["out"] and second.seen == []
    a, b = [], []
    classes["OwnerChecked"](a).attach(layer)
    classes["OwnerChecked"](b).attach(layer)
    layer(torch.ones(1, 2))
    assert len(a) == 1 and len(b) == 1
