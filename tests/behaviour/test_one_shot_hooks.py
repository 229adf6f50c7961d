"""Real torch: a hook that removes its own registration when it runs does not
stack and is not lost by accident (why HKL304 and HKL306 stay quiet on it),
while the same registrations of a hook that stays do stack (HKL304).

The shapes are those of fixtures/rules/one_shot_hooks.py and
fixtures/projects/one_shot: a hook object whose ``__call__`` deletes itself
from the module's ``_forward_pre_hooks``, a hook function deleting itself from
``_forward_hooks``, a lazy layer whose initialising pre-hook removes its own
handle.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

from hooklint.static.checker import check_file

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


class CountOnce:
    """The fixture's AddBatchDimOnce, counting its calls."""

    calls = 0

    def __call__(self, mod, args, kwargs):
        type(self).calls += 1
        for key, hook in list(mod._forward_pre_hooks.items()):
            if hook is self:
                del mod._forward_pre_hooks[key]
                break
        return None


class CountAlways:
    calls = 0

    def __call__(self, mod, args, kwargs):
        type(self).calls += 1
        return None


def test_self_deleting_hook_object_runs_once_per_registration_and_is_gone():
    layer = nn.Linear(3, 3)
    CountOnce.calls = 0
    for _ in range(4):  # registered again and again, the handle dropped
        layer.register_forward_pre_hook(CountOnce(), with_kwargs=True)
    layer(torch.ones(1, 3))
    assert CountOnce.calls == 4  # each registration ran once
    assert len(layer._forward_pre_hooks) == 0  # and all are gone
    for _ in range(3):
        layer(torch.ones(1, 3))
    assert CountOnce.calls == 4  # later passes run none: nothing stacked


def test_the_same_registrations_of_a_hook_that_stays_stack_up():
    layer = nn.Linear(3, 3)
    CountAlways.calls = 0
    for _ in range(4):
        layer.register_forward_pre_hook(CountAlways(), with_kwargs=True)
    for _ in range(3):
        layer(torch.ones(1, 3))
    assert CountAlways.calls == 12  # 4 hooks on every one of 3 passes
    assert len(layer._forward_pre_hooks) == 4


def test_hook_function_popping_itself_through_an_alias():
    calls = []

    def drop_after_first(module, inputs, output):
        calls.append(1)
        hooks = module._forward_hooks
        for key in [k for k, h in hooks.items() if h is drop_after_first]:
            hooks.pop(key)
        return output

    layer = nn.Linear(2, 2)
    for _ in range(5):
        layer.register_forward_hook(drop_after_first)
        layer(torch.ones(1, 2))
    assert len(calls) == 5  # one run per pass, never more: the previous registration is already gone
    assert len(layer._forward_hooks) == 0


def test_lazy_layer_removing_its_init_hook_keeps_working():
    class LazyScale(nn.Module):  # the fixture's shape
        def __init__(self, out_features):
            super().__init__()
            self.out_features = out_features
            self.weight = nn.parameter.UninitializedParameter()
            self._init_handle = self.register_forward_pre_hook(self.materialize)

        def materialize(self, module, args):
            self.weight.materialize((self.out_features, args[0].shape[-1]))
            nn.init.ones_(self.weight)
            self._init_handle.remove()
            del self._init_handle

        def forward(self, x):
            return x @ self.weight.t()

    layer = LazyScale(2)
    first = layer(torch.ones(1, 3))
    assert len(layer._forward_pre_hooks) == 0  # the initialiser took itself off
    second = layer(torch.ones(1, 3))  # and later calls do not need it
    assert torch.equal(first, second) and first.shape == (1, 2)


def test_closure_removing_the_handle_its_call_bound():
    layer = nn.Linear(2, 2)
    calls = []

    def warm_up(layer, x):  # the fixture's shape: one handle per call
        handle = None

        def once(module, args):
            calls.append(1)
            handle.remove()
            return None

        handle = layer.register_forward_pre_hook(once)
        return layer(x)

    for _ in range(3):
        warm_up(layer, torch.ones(1, 2))
    assert len(calls) == 3 and len(layer._forward_pre_hooks) == 0  # each call's hook ran once and left


def test_closure_in_a_loop_removes_only_the_last_handle():
    layer = nn.Linear(2, 2)
    handle = None

    def once(module, args):
        handle.remove()
        return None

    for _ in range(3):
        handle = layer.register_forward_pre_hook(once)
    layer(torch.ones(1, 2))
    # every closure reads the name when it runs: the last handle, so two registrations stay.  This is
    # why the core does not call a registration in a loop one-shot through a closure's handle.
    assert len(layer._forward_pre_hooks) == 2


def test_linter_agrees_with_the_runs():
    path = FIXTURES / "rules" / "one_shot_hooks.py"
    result = check_file(str(path), frozenset({"HKL304", "HKL306"}))
    rows = sorted((f.location.row, f.code) for f in result.findings)
    text = path.read_text().splitlines()
    # the quiet shapes: no finding inside the lazy layers, the self-deleting object, the alias popper
    quiet = {i + 1 for i, line in enumerate(text) if "register_forward" in line and "# HKL" not in line}
    assert quiet and not {row for row, _code in rows} & quiet
    assert any(code == "HKL304" for _row, code in rows) and any(code == "HKL306" for _row, code in rows)
    assert lint("import torch.nn as nn\n"
                "class Once:\n"
                "    def __call__(self, mod, args):\n"
                "        del mod._forward_pre_hooks[next(iter(mod._forward_pre_hooks))]\n"
                "def attach(layers, layer):\n"
                "    for _ in layers:\n"
                "        layer.register_forward_pre_hook(Once())\n", "HKL304") == []
