"""Real torch: where a hook's handle ends up decides whether it can be
removed (HKL304), run on the fixtures' own code (fixtures/library/).

- `Module.apply(fn)` visits a submodule once per parent that holds it, so
  handles kept under the visited module (`d[m] = h`, `m.attr = h`) are
  overwritten for a shared submodule and its first hook stays for good;
  `modules()` yields it once.
- A hook that removes itself when it runs stays on a module the forward does
  not reach, one more per registration.
- Wrapper objects whose `close()` removes the hook, dropped without calling it,
  leave their hooks behind, one more per call.
- Hooks registered inside a forward pre-hook are registered on every forward;
  when their handles go to a variable the next forward overwrites, only the
  last forward's are removed.
"""

from __future__ import annotations

import runpy
import warnings

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

LIBRARY = FIXTURES / "library"


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def profiling():
    return runpy.run_path(str(LIBRARY / "profiling.py"))


@pytest.fixture(scope="module")
def visualization():
    return runpy.run_path(str(LIBRARY / "feature_visualization.py"))


@pytest.fixture(scope="module")
def capture():
    return runpy.run_path(str(LIBRARY / "feature_capture.py"))


def _shared_model():
    """One Linear held by two parents (as one activation instance reused across layers)."""
    torch.manual_seed(0)
    shared = nn.Linear(2, 2)
    shared.total_ops = 0
    model = nn.Sequential(nn.Sequential(shared, nn.Tanh()), nn.Sequential(shared))
    return model, shared


# ------------------------------------------------------------ Module.apply and shared submodules

def test_apply_visits_a_shared_submodule_once_per_parent_and_modules_once():
    model, shared = _shared_model()
    visits = []
    model.apply(visits.append)
    assert sum(m is shared for m in visits) == 2
    assert sum(m is shared for m in model.modules()) == 1


def test_a_handle_dict_keyed_by_module_loses_the_first_hook_of_a_shared_module(profiling):
    model, shared = _shared_model()
    profiling["profile"](model, (torch.rand(1, 2),))
    assert len(shared._forward_hooks) == 1, "the first registration's handle was overwritten: its hook stays"
    before = shared.total_ops
    model(torch.rand(1, 2))
    assert shared.total_ops > before, "and it keeps counting in the caller's later forwards"


@pytest.mark.parametrize("variant", ["profile_once_per_module", "profile_with_modules", "profile_into_list"])
def test_the_quiet_twins_remove_every_hook(profiling, variant):
    model, shared = _shared_model()
    profiling[variant](model, (torch.rand(1, 2),))
    assert not shared._forward_hooks


def test_handles_in_module_attributes_are_overwritten_too_and_a_check_of_another_name_does_not_help(profiling):
    model, shared = _shared_model()
    profiler = profiling["FlopsProfiler"](model)
    profiler.start_profile()
    profiler.stop_profile()
    assert len(shared._forward_pre_hooks) == 1, "`__pre_hook_handle__`: overwritten, one pre-hook left"
    hooks = list(shared._forward_hooks.values())
    assert hooks == [print], "`__post_hook_handle__` (checked as `__post_hook_handle`) left; the checked one is gone"


# ------------------------------------------------------------ a hook that only removes itself

class Encoded(nn.Module):
    def __init__(self, use_encoder):
        super().__init__()
        self.use_encoder = use_encoder
        self.encoder = nn.Linear(2, 2)
        self.head = nn.Linear(2, 1)

    def forward(self, x):
        return self.head(self.encoder(x) if self.use_encoder else x)


def test_a_self_removing_hook_stays_on_a_module_the_forward_does_not_reach(profiling):
    model = Encoded(use_encoder=False)
    profiling["summarize"](model, torch.rand(1, 2), 3)
    assert len(model.encoder._forward_hooks) == 3, "one more per summary; the detachable twin's are gone"


def test_a_self_removing_hook_on_a_module_that_runs_removes_itself(profiling):
    model = Encoded(use_encoder=True)
    profiling["summarize"](model, torch.rand(1, 2), 3)
    assert not model.encoder._forward_hooks


# ------------------------------------------------------------ wrapper objects nobody closes

def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 1)))


def test_wrappers_that_nobody_closes_leave_one_more_hook_per_call(visualization):
    model = _net()
    calls = []
    visualization["render"](model, calls.append, [torch.rand(1, 2) for _ in range(4)])
    assert all(len(m._forward_hooks) == 4 for m in model.modules() if m is not model)
    wrappers = {id(hook.__self__) for hook in model[0]._forward_hooks.values()}
    assert len(wrappers) == 4, "and every ModuleHook made stays alive through its hook"


def test_wrappers_that_are_closed_leave_nothing(capture):
    model = _net()
    capture["capture_all"](model, [[torch.rand(1, 2)] for _ in range(4)])
    assert not any(m._forward_hooks for m in model.modules())


# ------------------------------------------------------------ hooks registered inside a hook

class Scaled(nn.Linear):
    def forward(self, x, scalings=None):
        out = super().forward(x)
        return out if scalings is None else out * scalings


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = Scaled(2, 2)

    def forward(self, x):
        return self.layer(x)


def test_hooks_registered_inside_a_forward_pre_hook_pile_up_and_only_the_last_are_removed(visualization):
    torch.manual_seed(0)
    wrapper = visualization["ScaledModel"](Base())
    layer = wrapper.model.layer
    with wrapper.scalings(lambda *args: 2.0):
        for _ in range(3):  # generate(): several forwards in one context
            wrapper.model(torch.rand(1, 2))
        assert len(layer._forward_pre_hooks) == 3
    assert len(layer._forward_pre_hooks) == 2, "the first two forwards' hooks stay after the context"
    x = torch.rand(1, 2)
    plain = nn.functional.linear(x, layer.weight, layer.bias)
    assert torch.allclose(wrapper.model(x), plain * 2.0), "the stale hooks still inject scalings outside the context"


def test_hooks_removed_in_the_same_run_leave_nothing(visualization):
    wrapper = visualization["ScaledModel"](Base())
    with wrapper.scalings_once(lambda *args: 2.0):
        for _ in range(3):
            wrapper.model(torch.rand(1, 2))
    assert not wrapper.model.layer._forward_pre_hooks
