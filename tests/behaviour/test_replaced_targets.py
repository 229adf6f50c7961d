"""Real torch: a hook stays on the object it was registered on; refilling the module's slot
afterwards leaves it behind (HKL340, HKL342).  Each test runs the fixture's own functions, the
buggy spelling and its good twin, and checks what the rule says of them."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

from hooklint.static.checker import check_file

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"
P340 = RULES / "hkl340_hook_on_replaced_parameter.py"
P342 = RULES / "hkl342_module_hook_on_replaced_module.py"


def _rows(path, code):
    return sorted(f.location.row for f in check_file(str(path), frozenset({code})).findings)


def _fn_row(ns, name):
    return ns[name].__code__.co_firstlineno


def _flagged_in(path, code, ns, name):
    first = _fn_row(ns, name)
    last = max(first, *(ln for _, _, ln in ns[name].__code__.co_lines() if ln is not None))
    return any(first <= row <= last for row in _rows(path, code))


def _backward(layer):
    layer(torch.ones(1, layer.in_features)).sum().backward()


def test_parameter_replaced_after_register_hook_loses_the_hook():
    ns = runpy.run_path(str(P340))
    layer = nn.Linear(2, 2)
    ns["quantize"](layer)  # a clamping hook on the weight, then register_parameter(...half())
    layer.float()  # `_apply` keeps the new Parameter object
    layer(torch.full((1, 2), 5.0)).sum().backward()
    assert layer.weight.grad.abs().max() == 5.0  # unclamped: the hook stayed on the old tensor
    assert _flagged_in(P340, "HKL340", ns, "quantize")

    twin = nn.Linear(2, 2)  # the good order: replace, then register
    twin.register_parameter("weight", nn.Parameter(twin.weight.detach().half()))
    twin.weight.register_hook(lambda g: g.clamp(-1, 1))
    twin.float()
    twin(torch.full((1, 2), 5.0)).sum().backward()
    assert twin.weight.grad.abs().max() == 1.0


@pytest.mark.parametrize("replace", [
    lambda m: setattr(m, "weight", nn.Parameter(m.weight.detach().clone())),
    lambda m: m.register_parameter("weight", nn.Parameter(m.weight.detach().clone())),
    lambda m: m._parameters.__setitem__("weight", nn.Parameter(m.weight.detach().clone())),
    lambda m: m.load_state_dict(nn.Linear(2, 2).state_dict(), assign=True),
])
def test_each_replacement_drops_tensor_and_post_accumulate_hooks(replace):
    fired = []
    layer = nn.Linear(2, 2)
    layer.weight.register_hook(lambda g: fired.append("tensor"))
    layer.weight.register_post_accumulate_grad_hook(lambda p: fired.append("post"))
    replace(layer)
    _backward(layer)
    assert fired == []


@pytest.mark.parametrize("keep", [
    lambda m: setattr(m.weight, "data", torch.randn(2, 2)),
    lambda m: m.to(torch.float64),
    lambda m: m.to_empty(device="cpu"),
    lambda m: m.load_state_dict(nn.Linear(2, 2).state_dict()),
])
def test_what_keeps_the_parameter_object_keeps_the_hook(keep):
    fired = []
    layer = nn.Linear(2, 2)
    weight = layer.weight
    layer.weight.register_hook(lambda g: fired.append("tensor"))
    keep(layer)
    assert layer.weight is weight
    layer(torch.ones(1, 2, dtype=layer.weight.dtype)).sum().backward()
    assert fired == ["tensor"]


def test_good_twins_keep_their_hook_and_are_not_flagged():
    ns = runpy.run_path(str(P340))
    layer = nn.Linear(2, 2)
    ns["other_parameter"](layer)  # the bias replaced: the weight's hook stays where forward reads
    weight_grads = []
    layer.weight.register_hook(lambda g: weight_grads.append(g))
    _backward(layer)
    assert len(weight_grads) == 1  # the weight was not replaced: its hooks run
    for name in ("switch_to_ddp_fixed", "keeps_object", "removed_first", "other_parameter", "either_branch",
                 "tensor_attribute"):
        assert not _flagged_in(P340, "HKL340", ns, name), name


def test_module_replaced_in_parent_loses_its_hook():
    ns = runpy.run_path(str(P342))
    feats = []
    model = nn.Sequential()
    model.fc = nn.Linear(4, 3)
    ns["finetune"](model, 2, feats)
    model(torch.ones(1, 4))
    assert feats == []  # the hook is on the Linear no longer in the model
    assert _flagged_in(P342, "HKL342", ns, "finetune")

    record = []
    model = nn.Sequential()
    model.fc = nn.Linear(4, 4)
    ns["wrap_hooked"](model, lambda m, i, o: record.append(type(m).__name__))
    model(torch.ones(1, 4))
    assert record == ["Linear"]  # the wrapper calls the hooked module: its hook runs
    record.clear()
    model = nn.Sequential()
    model.fc = nn.Linear(4, 4)
    ns["replace_then_hook"](model, lambda m, i, o: record.append("fc"))
    model(torch.ones(1, 4))
    assert record == ["fc"]
    for name in ("wrap_hooked", "moved", "replace_then_hook", "removed", "per_index"):
        assert not _flagged_in(P342, "HKL342", ns, name), name


def test_fx_tracing_keeps_submodule_hooks_and_drops_the_roots():
    # the reason HKL342 does not report `symbolic_trace`: submodules are shared with the GraphModule
    fired = []

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(2, 2)

        def forward(self, x):
            return self.l(x)

    m = M()
    m.l.register_forward_hook(lambda *a: fired.append("sub"))
    m.register_forward_hook(lambda *a: fired.append("root"))
    torch.fx.symbolic_trace(m)(torch.ones(1, 2))
    assert fired == ["sub"]


def test_hooks_a_helper_registered_are_lost_by_assign_loading():
    ns = runpy.run_path(str(P340))
    state = nn.Linear(2, 2).state_dict()
    x = torch.full((1, 2), 3.0)

    model = nn.Linear(2, 2)
    ns["restore"](model, state)  # clip_all (hooks halving the gradient), then load_state_dict(assign=True)
    model(x).sum().backward()
    assert model.weight.grad.max() == 3.0  # not halved: the hooks stayed on the old Parameters

    twin = nn.Linear(2, 2)
    ns["restore_fixed"](twin, state)  # loaded first, hooked afterwards
    twin(x).sum().backward()
    assert twin.weight.grad.max() == 1.5
    assert _flagged_in(P340, "HKL340", ns, "restore") and _flagged_in(P340, "HKL340", ns, "from_meta")
    assert not _flagged_in(P340, "HKL340", ns, "restore_fixed")
    assert not _flagged_in(P340, "HKL340", ns, "other_model")


def test_traced_root_carries_none_of_the_modules_own_hooks():
    ns = runpy.run_path(str(P342))
    record = []
    model = nn.Sequential()
    model.fc = nn.Linear(2, 2)
    gm = ns["quantize_traced"](model, lambda m, args: record.append("root"))
    gm(torch.ones(1, 2))
    assert record == []  # the GraphModule does not run the original root's pre-hook
    model(torch.ones(1, 2))
    assert record == ["root"]  # (the original still does)
    record.clear()
    model = nn.Sequential()
    model.fc = nn.Linear(2, 2)
    ns["traced_keeps_children"](model, lambda m, i, o: record.append("fc"))(torch.ones(1, 2))
    assert record == ["fc"]
    record.clear()
    model = nn.Sequential()
    model.fc = nn.Linear(2, 2)
    ns["hook_after_trace"](model, lambda m, i, o: record.append("gm"))(torch.ones(1, 2))
    assert record == ["gm"]
    assert _flagged_in(P342, "HKL342", ns, "quantize_traced") and _flagged_in(P342, "HKL342", ns, "rebuild")
    assert not _flagged_in(P342, "HKL342", ns, "traced_keeps_children")
    assert not _flagged_in(P342, "HKL342", ns, "hook_after_trace")
