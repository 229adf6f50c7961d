"""Real torch, 2 ranks, gloo on loopback: what hooks do under DDP and FSDP2.

These are the facts HKL601, HKL602 and HKL603 rest on, and those behind the
engine-aware help of HKL201 and HKL203 (docs/distributed.md cites each test).
One launch of `programs/facts.py` runs every scenario on both ranks, without
hooklint; each test reads what the ranks saw.
"""

from __future__ import annotations

import json

import pytest

from .helpers import PROGRAMS, new_marker, torchrun, wait_for_no_survivors

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    out = tmp_path_factory.mktemp("facts")
    marker = new_marker()
    result = torchrun(PROGRAMS / "facts.py", str(out), marker=marker)
    assert result.returncode == 0, result.stderr[-3000:]
    assert wait_for_no_survivors(marker) == []
    ranks = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    return ranks


def each_rank(facts, name):
    return [rank[name] for rank in facts]


# -- FSDP2 (HKL603, and HKL201's help under FSDP) --------------------------------


def test_fsdp2_replaces_the_parameter_by_a_sharded_dtensor(facts):
    for seen in each_rank(facts, "fsdp_tensor_hook_after"):
        assert seen["param_type"] == "DTensor"


@pytest.mark.parametrize("when", ["before", "after"])
def test_fsdp2_parameter_tensor_hook_never_fires(facts, when):
    """`param.register_hook` before or after `fully_shard`: the counter stays at 0 on
    both ranks, and the pruning mask it applies is not applied (row 0 keeps its gradient)."""
    for seen in each_rank(facts, f"fsdp_tensor_hook_{when}"):
        assert seen["calls"] == 0
        assert any(v != 0 for v in seen["row0"])


def test_fsdp2_post_accumulate_hook_registered_before_fully_shard_never_fires(facts):
    for seen in each_rank(facts, "fsdp_post_accumulate_before"):
        assert seen["calls"] == 0
        assert any(v != 0 for v in seen["row0"])


def test_fsdp2_post_accumulate_hook_on_the_sharded_parameter_fires_with_a_dtensor_gradient(facts):
    """The fix: `register_post_accumulate_grad_hook` after `fully_shard`.  It runs once
    per backward with the sharded parameter; `.grad` is a DTensor of the full shape
    whose local part is this rank's rows; a mask distributed the same way applies."""
    for seen in each_rank(facts, "fsdp_post_accumulate_after"):
        assert seen["calls"] == 1
        assert seen["seen"] == [{"param": "DTensor", "grad": "DTensor", "grad_shape": [4, 4], "local_shape": [2, 4]}]
        assert seen["row0"] == [0.0, 0.0, 0.0, 0.0]
        assert seen["row1_nonzero"]
        assert seen["full_grad_same_on_all_ranks"]


def test_fsdp2_module_hook_before_the_unshard_sees_the_sharded_parameter(facts):
    """A full backward hook on a layer fed plain data runs before FSDP gathers the
    layer's parameters: `module.weight` is the sharded DTensor, its `.grad` None on the
    first step and the previous step's sharded gradient on the next."""
    for seen in each_rank(facts, "fsdp_module_hook_reads_grad"):
        assert seen["seen"] == [{"param": "DTensor", "grad": None}, {"param": "DTensor", "grad": "DTensor"}]


def test_fsdp2_module_hook_after_accumulation_edits_the_unsharded_gradient(facts):
    """The same kind of hook on a layer whose input requires grad runs after the
    unsharded parameter's AccumulateGrad and before FSDP's reduce-scatter: it sees
    the unsharded local gradient, and its edit is reduced with it (no finding)."""
    for seen in each_rank(facts, "fsdp_module_hook_edits_grad_after_accumulation"):
        assert seen["seen"] == [{"param": "Parameter", "grad": "Tensor"}]
        assert seen["row0"] == [0.0, 0.0, 0.0, 0.0]


# -- DDP (HKL602, HKL601) ---------------------------------------------------------------


def test_module_hook_edit_of_grad_holds_without_ddp(facts):
    """The twin without DDP: the hook runs after AccumulateGrad (its input requires
    grad) and its edit holds."""
    for seen in each_rank(facts, "local_module_hook_edits_grad"):
        assert seen["grad_present_when_hook_ran"] == [True, True]
        assert seen["row0"] == [0.0, 0.0, 0.0, 0.0]


def test_ddp_overwrites_a_module_hook_edit_of_grad(facts):
    """The same hook under DDP: it still runs after AccumulateGrad, but DDP has copied
    the gradient into its bucket already and writes the all-reduced bucket back into
    `.grad` at the end of backward: row 0 holds the unedited mean gradient."""
    for seen in each_rank(facts, "ddp_module_hook_edits_grad"):
        assert seen["grad_present_when_hook_ran"] == [True, True]
        assert any(v != 0 for v in seen["row0"])
        assert seen["row0_is_the_unedited_mean"]
        assert seen["grads_same_on_all_ranks"]


def test_ddp_parameter_tensor_hook_applies_before_the_all_reduce(facts):
    for seen in each_rank(facts, "ddp_tensor_hook"):
        assert seen["calls"] == 1
        assert seen["row0"] == [0.0, 0.0, 0.0, 0.0]
        assert seen["other_rows_match_reference"]
        assert seen["grads_same_on_all_ranks"]


def test_ddp_post_accumulate_edit_of_grad_applies_before_the_all_reduce(facts):
    """A post-accumulate-grad hook runs inside AccumulateGrad, before DDP's hook on
    that node copies the gradient into its bucket: its edit of `.grad` is all-reduced."""
    for seen in each_rank(facts, "ddp_post_accumulate_edits_grad"):
        assert seen["row0"] == [0.0, 0.0, 0.0, 0.0]
        assert seen["grads_same_on_all_ranks"]


def test_ddp_optimizer_in_backward_steps_with_the_local_gradient(facts):
    """An optimizer step in a post-accumulate-grad hook runs before DDP's all-reduce:
    each rank updates its weights with its own gradient and the replicas drift apart."""
    for seen in each_rank(facts, "ddp_optimizer_in_backward"):
        assert not seen["params_same_on_all_ranks"]


# -- gradients synchronised by hand (HKL601, HKL203) --------------------------------------


def test_post_accumulate_all_reduce_of_the_parameter_leaves_gradients_different(facts):
    for seen in each_rank(facts, "hand_sync_all_reduce_param"):
        assert not seen["grads_same_on_all_ranks"]
        assert not seen["first_weight_grad_matches_ddp"]
        assert seen["params_scaled_by_world"]  # the weights were summed instead


def test_post_accumulate_all_reduce_of_the_gradient_synchronises(facts):
    for seen in each_rank(facts, "hand_sync_all_reduce_grad"):
        assert seen["grads_same_on_all_ranks"]
        assert seen["first_weight_grad_matches_ddp"]
        assert not seen["params_scaled_by_world"]
