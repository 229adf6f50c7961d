"""Real torch: `register_*hook` never checks whether the callable is registered
already, so carrying hooks from one module to another that shares or copied its
hook dicts runs them twice (HKL348), on the fixture's own functions; the guarded
twins run each hook once."""

from __future__ import annotations

import copy
import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def transfers():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl348_hook_transfer_duplicates.py"))


def _hooked_model(calls):
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    handle = model[0].register_forward_hook(lambda module, args, output: calls.append("fired"))
    return model, handle


def _runs(model, calls):
    calls.clear()
    model(torch.randn(1, 2))
    return len(calls)


def test_a_shallow_copy_shares_the_hook_dicts_and_the_submodules():
    calls = []
    model, _ = _hooked_model(calls)
    twin = copy.copy(model)
    assert twin._forward_hooks is model._forward_hooks
    assert twin[0] is model[0]


def test_a_deep_copy_carries_the_hooks():
    calls = []
    model, _ = _hooked_model(calls)
    assert _runs(copy.deepcopy(model), calls) == 1


def test_transfer_to_a_shallow_copy_doubles_the_hook_and_outlives_the_handle(transfers):
    calls = []
    model, handle = _hooked_model(calls)
    new_model = copy.copy(model)
    transfers["transfer_hooks"](model, new_model)
    assert _runs(model, calls) == 2
    transfers["transfer_hooks"](new_model, copy.copy(new_model))
    assert _runs(model, calls) == 4
    handle.remove()
    assert _runs(model, calls) == 3  # the user's handle removes only its own entry


def test_the_other_bad_spellings_double_the_hook(transfers):
    calls = []
    model, _ = _hooked_model(calls)
    assert _runs(transfers["clone_with_hooks"](model[0]), calls) == 2
    model, _ = _hooked_model(calls)
    transfers["reattach"](model)
    assert _runs(model, calls) == 2
    model = nn.Sequential(nn.Linear(2, 2))
    model[0].register_forward_pre_hook(lambda module, args: calls.append("pre"))
    manager = transfers["PhaseManager"](model)
    manager.switch(copy.copy(model))
    assert _runs(model, calls) == 2
    model, _ = _hooked_model(calls)
    transfers["Offloader"]().carry(model, copy.copy(model))
    assert _runs(model, calls) == 2


def test_the_guarded_twins_run_each_hook_once(transfers):
    calls = []
    model, _ = _hooked_model(calls)
    shallow = copy.copy(model)
    transfers["transfer_hooks_checked"](model, shallow)
    assert _runs(model, calls) == 1
    transfers["transfer_missing_only"](model[0], shallow[0])
    assert _runs(model, calls) == 1
    fresh = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    transfers["transfer_hooks_checked"](model, fresh)
    assert _runs(fresh, calls) == 1  # a module without the hooks gets them once


def test_a_fresh_module_gets_the_hooks_once(transfers):
    calls = []
    layer = nn.Linear(2, 2)
    layer.register_forward_pre_hook(lambda module, args: calls.append("pre"))

    class Sparse:
        @staticmethod
        def from_dense(mod):
            new = nn.Linear(2, 2)
            new.load_state_dict(mod.state_dict())
            return new

    assert _runs(transfers["swap_for_sparse"](layer, Sparse), calls) == 1
