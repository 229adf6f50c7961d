"""Real torch: how `forward` is reached, replaced or bound decides which
hooks run (HKL303's fresh objects, HKL322-HKL325).  Each test runs the
fixture's own code, buggy spelling and good twin."""

from __future__ import annotations

import copy
import runpy

import pytest
from conftest import FIXTURES

from hooklint.static.checker import check_file

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"


def _load(name):
    return runpy.run_path(str(RULES / name))


def _codes(name):
    codes = frozenset({"HKL303", "HKL322", "HKL323", "HKL324", "HKL325"})
    return sorted({f.code for f in check_file(str(RULES / name), codes).findings})


# --- HKL322 -------------------------------------------------------------------

def test_helper_returning_forward_skips_the_hooks_the_module_call_runs():
    ns = _load("hkl322_helper_bypasses_own_hooks.py")
    policy, fired = ns["Policy"](), []
    policy.register_forward_pre_hook(lambda m, args: fired.append("pre"))
    policy.register_forward_hook(lambda m, args, out: fired.append("post"))
    x = torch.randn(3, 4)
    policy(x)
    assert fired == ["pre", "post"]  # the module call runs them
    fired.clear()
    best = policy.best_action(x)
    action, _log_prob = policy.sample_with_log_prob(x)
    assert fired == []  # the helpers return the same computation with no hook
    assert torch.allclose(best, policy(x))
    assert "HKL322" in _codes("hkl322_helper_bypasses_own_hooks.py")


def test_helper_calling_the_module_runs_its_hooks():
    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, deterministic=False):
            return self.fc(x)

        def __call__(self, x, deterministic=False):
            return super().__call__(x, deterministic=deterministic)

        def best_action(self, x):
            return self(x, deterministic=True)

    policy, fired = Policy(), []
    policy.register_forward_hook(lambda m, args, out: fired.append("post"))
    policy.best_action(torch.randn(1, 4))
    assert fired == ["post"]


def test_one_method_runs_the_hooks_and_the_other_does_not():
    ns = _load("hkl322_helper_bypasses_own_hooks.py")
    critic, fired = ns["Critic"](), []
    critic.register_forward_pre_hook(lambda m, args: fired.append("pre"))
    x = torch.randn(2, 4)
    critic.value(x)
    assert fired == []
    critic.td_error(x, 0.0)
    assert fired == ["pre"]


# --- HKL323 -------------------------------------------------------------------

class _Hook:
    no_grad = False

    def init_hook(self, module):
        return module

    def pre_forward(self, module, *args, **kwargs):
        return args, kwargs

    def post_forward(self, module, output):
        return output


def test_deepcopy_of_a_closure_forward_runs_the_original_module():
    ns = _load("hkl323_instance_forward_closure.py")
    original = nn.Linear(3, 3)
    ns["add_hook_to_module"](original, _Hook())
    clone = copy.deepcopy(original)
    with torch.no_grad():
        clone.weight.zero_()
        clone.bias.zero_()
    x = torch.randn(2, 3)
    # the copy has zero weights but computes the original's output
    assert torch.allclose(clone(x), original(x))
    assert not torch.allclose(clone(x), torch.zeros(2, 3))
    assert "HKL323" in _codes("hkl323_instance_forward_closure.py")


def test_deepcopy_of_a_partial_forward_runs_the_copy():
    ns = _load("hkl323_instance_forward_closure.py")
    original = nn.Linear(3, 3)
    ns["add_hook_partial"](original)
    clone = copy.deepcopy(original)
    with torch.no_grad():
        clone.weight.zero_()
        clone.bias.zero_()
    x = torch.randn(2, 3)
    assert torch.allclose(clone(x), torch.zeros(2, 3))
    assert not torch.allclose(original(x), torch.zeros(2, 3))


def test_deepcopy_of_a_method_type_forward_runs_the_copy():
    ns = _load("hkl323_instance_forward_closure.py")
    original = nn.Linear(3, 3)
    original._old_forward = original.forward
    ns["add_hook_method"](original)
    clone = copy.deepcopy(original)
    with torch.no_grad():
        clone.weight.zero_()
        clone.bias.zero_()
    assert torch.allclose(clone(torch.randn(2, 3)), torch.zeros(2, 3))


# --- HKL324 -------------------------------------------------------------------

class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.scale = 2.0

    def forward(self, x):
        return self.fc(x) * self.scale


def test_traced_copy_has_no_hooks_and_the_underscore_filter_keeps_it_so():
    ns = _load("hkl324_hook_dicts_not_copied.py")
    model, fired = _Net(), []
    model.register_forward_hook(lambda m, args, out: fired.append("hook"))
    traced = torch.fx.symbolic_trace(model)
    assert len(traced._forward_hooks) == 0  # a new module: none of the original's hooks
    ns["append_attr"](traced, model)
    traced(torch.randn(1, 3))
    assert fired == []  # the hook stays on the original, which no longer runs
    model(torch.randn(1, 3))
    assert fired == ["hook"]


def test_copying_the_hook_dicts_keeps_the_hooks():
    ns = _load("hkl324_hook_dicts_not_copied.py")
    model, fired = _Net(), []
    model.register_forward_hook(lambda m, args, out: fired.append("hook"))
    traced = torch.fx.symbolic_trace(model)
    ns["carry_with_hooks"](traced, model)
    traced(torch.randn(1, 3))
    assert fired == ["hook"]
    assert "HKL324" in _codes("hkl324_hook_dicts_not_copied.py")


# --- HKL325 -------------------------------------------------------------------

def _depth(fn):
    depth = 0
    while hasattr(fn, "__wrapped__"):
        fn, depth = fn.__wrapped__, depth + 1
    return depth


def test_wrapping_the_class_forward_per_object_nests_the_wrappers():
    ns = _load("hkl325_forward_rewrapped_per_object.py")

    class Loss(ns["LossModule"]):
        def forward(self, x):
            return x

    for _ in range(5):
        Loss()
    assert _depth(Loss.forward) == 5  # every object wrapped the previous wrapper
    assert Loss()(torch.ones(1)).item() == 1.0  # still works, one level deeper
    assert _depth(Loss.forward) == 6
    assert "HKL325" in _codes("hkl325_forward_rewrapped_per_object.py")


def test_deep_nesting_ends_in_recursion_error():
    ns = _load("hkl325_forward_rewrapped_per_object.py")

    class Loss(ns["LossModule"]):
        def forward(self, x):
            return x

    import sys

    for _ in range(sys.getrecursionlimit()):
        Loss()
    with pytest.raises(RecursionError):
        Loss()(torch.ones(1))


def test_wrapping_once_per_class_does_not_nest():
    ns = _load("hkl325_forward_rewrapped_per_object.py")

    class Loss(ns["Subclassed"]):
        def forward(self, x):
            return x

    for _ in range(5):
        Loss()
    assert _depth(Loss.forward) == 1


# --- HKL303: an object made in the same expression ---------------------------

def test_an_object_made_in_the_expression_has_no_hooks_to_skip():
    ns = _load("regressions_hkl303.py")
    fresh = ns["Search"](2)
    assert not fresh._forward_hooks and not fresh._forward_pre_hooks and not fresh._backward_hooks
    hooked = ns["SelfNormed"]()
    assert len(hooked._forward_pre_hooks) == 1  # its constructor hooks it: still reported
