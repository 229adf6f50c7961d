"""`hooklint.testing.assert_hooks_ok_distributed`: real ranks, spawned by the helper.

The model builders are module-level functions of this test module: the ranks
import them (by `module:function`), as the helper's docs say they must.
"""

from __future__ import annotations

import pytest

from .helpers import new_marker, wait_for_no_survivors

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def _model():
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def zero_first_row(module, grad_input, grad_output):
    if module.weight.grad is not None:
        module.weight.grad[0] = 0


def ddp_model_with_module_hook_editing_grad():
    model = _model()
    model[2].register_full_backward_hook(zero_first_row)  # its input (ReLU's output) requires grad
    return model


def mask_first_row(grad):
    mask = torch.ones_like(grad)
    mask[0] = 0
    return grad * mask


def fsdp_model_with_parameter_tensor_hook():
    model = _model()
    model[0].weight.register_hook(mask_first_row)  # lost when fully_shard replaces the parameter
    return model


def mask_shard(param):
    from torch.distributed.tensor import distribute_tensor

    mask = torch.ones(param.grad.shape)
    mask[0] = 0
    param.grad.mul_(distribute_tensor(mask, param.grad.device_mesh, param.grad.placements))


def fsdp_model_with_post_accumulate_hook():
    from torch.distributed.fsdp import fully_shard

    model = _model()
    fully_shard(model[0])
    fully_shard(model)
    model[0].weight.register_post_accumulate_grad_hook(mask_shard)  # on the sharded parameter
    return model


BATCH = (torch.rand(8, 8),)


def test_ddp_module_hook_editing_grad_fails(monkeypatch):
    from hooklint.testing import assert_hooks_ok_distributed

    marker = new_marker()
    monkeypatch.setenv("HOOKLINT_TEST_MARKER", marker)
    with pytest.raises(AssertionError) as info:
        assert_hooks_ok_distributed(ddp_model_with_module_hook_editing_grad, BATCH, world_size=2, wrap="ddp")
    message = str(info.value)
    assert message.startswith("hooks of `ddp_model_with_module_hook_editing_grad()` under DDP on 2 ranks are not OK")
    assert "HKL602 grad-edit-races-allreduce: full backward hook `zero_first_row`" in message
    assert "the edit was lost" in message and "[every rank: 0, 1]" in message
    assert "test_helper.py" in message  # at: the registration line
    assert wait_for_no_survivors(marker) == []


def test_fsdp2_parameter_tensor_hook_fails(monkeypatch):
    from hooklint.testing import assert_hooks_ok_distributed

    marker = new_marker()
    monkeypatch.setenv("HOOKLINT_TEST_MARKER", marker)
    with pytest.raises(AssertionError) as info:
        assert_hooks_ok_distributed(fsdp_model_with_parameter_tensor_hook, BATCH, wrap="fsdp2")
    message = str(info.value)
    assert "HKL603 param-hook-under-fsdp: tensor hook `mask_first_row`" in message
    assert "registered before `fully_shard`" in message
    assert wait_for_no_survivors(marker) == []


def test_fsdp2_post_accumulate_hook_on_the_sharded_parameter_passes(monkeypatch):
    from hooklint.testing import assert_hooks_ok_distributed

    marker = new_marker()
    monkeypatch.setenv("HOOKLINT_TEST_MARKER", marker)
    assert_hooks_ok_distributed(f"{__name__}:fsdp_model_with_post_accumulate_hook", BATCH, wrap=None, steps=3)
    assert wait_for_no_survivors(marker) == []


@pytest.mark.parametrize("bad", [lambda: None, _model.__get__])
def test_build_model_must_be_importable(bad):
    from hooklint.testing import assert_hooks_ok_distributed

    with pytest.raises(TypeError, match="importable by the ranks|top level of a module"):
        assert_hooks_ok_distributed(bad, BATCH)


def test_arguments_are_checked_before_anything_runs():
    from hooklint.testing import assert_hooks_ok_distributed

    with pytest.raises(ValueError, match='wrap must be "ddp", "fsdp2" or None'):
        assert_hooks_ok_distributed(_model, BATCH, wrap="fsdp")
    if torch.cuda.device_count() < 2:
        with pytest.raises(ValueError, match="backend='nccl' needs 2 GPUs"):
            assert_hooks_ok_distributed(_model, BATCH, backend="nccl")
    with pytest.raises(ValueError, match="package.module:function"):
        assert_hooks_ok_distributed("no_colon_here", BATCH)
