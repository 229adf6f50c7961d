"""Real torch: load-state-dict hooks and lazy tensors (HKL901, HKL902), run
on the fixtures' own classes.

- A load pre-hook that re-registers a tensor with the checkpoint's tensor
  leaves the optimizer built before the load holding the old parameter, and
  the module's tensor aliases the state dict; the good twins keep the object.
- A module's own UninitializedParameter cannot be loaded into before its
  first forward unless something materializes it first.
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
def replacing():
    return runpy.run_path(str(RULES / "hkl901_load_hook_replaces_tensor.py"))


@pytest.fixture(scope="module")
def lazy():
    return runpy.run_path(str(RULES / "hkl902_lazy_tensor_without_load_hook.py"))


def _in_optimizer(opt, tensor) -> bool:
    return any(p is tensor for group in opt.param_groups for p in group["params"])


def _checkpoint(module):
    return {k: torch.randn_like(v) for k, v in module.state_dict().items()}


@pytest.mark.parametrize("make, name", [
    ("ReplacingLinear", "weight"),
    ("make_adopting_linear", "weight"),
    ("OverrideSwap", "bias"),
])
def test_replacing_hook_leaves_the_optimizer_on_the_old_parameter(replacing, make, name):
    module = replacing[make]() if make != "OverrideSwap" else replacing[make](3, 2)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    before = getattr(module, name)
    module.load_state_dict(_checkpoint(module))
    after = getattr(module, name)
    assert after is not before
    assert not _in_optimizer(opt, after)  # the optimizer updates a tensor the forward no longer uses
    module(torch.ones(1, 3)).sum().backward()
    assert after.grad is not None and before.grad is None
    opt.step()  # changes nothing the module computes with


def test_replacing_hook_aliases_the_state_dict(replacing):
    module = replacing["ReplacingLinear"]()
    checkpoint = _checkpoint(module)
    module.load_state_dict(checkpoint)
    assert module.running.data_ptr() == checkpoint["running"].data_ptr()
    table = replacing["TableFromCheckpoint"]()
    checkpoint = {"table": torch.arange(4.0)}
    table.load_state_dict(checkpoint)
    checkpoint["table"].add_(1)  # editing the loaded dict edits the module
    assert torch.equal(table.table, torch.arange(4.0) + 1)


@pytest.mark.parametrize("make", ["InPlaceLinear", "make_renaming_linear", "ResizeThenCopy"])
def test_good_twins_keep_their_tensors(replacing, make):
    module = replacing[make]()
    if make == "InPlaceLinear":
        checkpoint = {"weight": torch.randn(2, 3), "bias": torch.randn(2), "running": torch.randn(2)}
    elif make == "ResizeThenCopy":
        checkpoint = {"table": torch.randn(5)}
    else:
        checkpoint = {"w": torch.randn(2, 3), "bias": torch.randn(2)}
    before = {n: t for n, t in list(module.named_parameters()) + list(module.named_buffers())}
    module.load_state_dict(checkpoint)
    for name, tensor in before.items():
        if make == "ResizeThenCopy":
            continue  # resized on purpose: a new, empty buffer the copy then fills
        assert getattr(module, name) is tensor
    for key, value in checkpoint.items():
        key = "weight" if key == "w" else key
        assert torch.equal(getattr(module, key), value)
        assert getattr(module, key).data_ptr() != value.data_ptr()


@pytest.mark.parametrize("make", ["PreHookLinear", "LazyStats"])
def test_own_lazy_tensor_cannot_be_loaded_before_the_first_forward(lazy, make):
    module = lazy[make](-1, 2) if make == "PreHookLinear" else lazy[make]()
    trained = lazy[make](-1, 2) if make == "PreHookLinear" else lazy[make]()
    trained(torch.ones(1, 3))  # materialized by the first forward
    with pytest.raises(RuntimeError, match="While copying"):
        module.load_state_dict(trained.state_dict())


@pytest.mark.parametrize("make", ["OverrideLinear", "OwnHookStats", "MixinScale"])
def test_handled_lazy_tensors_load(lazy, make):
    module = lazy[make](-1, 2) if make == "OverrideLinear" else lazy[make]()
    if make == "OverrideLinear":
        checkpoint = {"weight": torch.randn(2, 3)}
    elif make == "OwnHookStats":
        checkpoint = {"mean": torch.randn(3)}
    else:
        checkpoint = {"scale": torch.randn(3)}
    module.load_state_dict(checkpoint)
    for key, value in checkpoint.items():
        assert torch.equal(getattr(module, key), value)
    if make == "OverrideLinear":
        assert not module._forward_pre_hooks  # the initialising hook is gone too


def test_buffer_registered_as_none_loads_only_by_assignment():
    """HKL901's valid None-buffer example (diffsynth's FP8 scale): a buffer
    registered as None is not in the state dict's copy targets, so the
    default load leaves it None and calls the key unexpected; an override
    that sets it is the only way to load it, and there is no old tensor an
    optimizer or a hook could still hold."""

    class Plain(nn.Linear):
        def __init__(self):
            super().__init__(2, 2)
            self.register_buffer("input_scale", None)

    class Loading(Plain):
        def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
            scale = state_dict.pop(prefix + "input_scale", None)
            if scale is not None:
                self.input_scale = scale
            super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    source = Plain()
    state = dict(source.state_dict(), input_scale=torch.tensor(0.5))
    plain = Plain()
    result = plain.load_state_dict(dict(state), strict=False)
    assert plain.input_scale is None and "input_scale" in result.unexpected_keys
    loading = Loading()
    loading.load_state_dict(dict(state), strict=False)  # the popped key is "missing" to a strict load
    assert loading.input_scale.item() == 0.5 and "input_scale" in dict(loading.named_buffers())
