"""What hooks do under DDP and FSDP2, observed on real 2-process gloo groups.

Launched by tests/distributed/test_behaviour.py with
`python -m torch.distributed.run --standalone --nproc-per-node 2 facts.py OUT`;
every rank runs every scenario and writes what it saw to OUT/rank<N>.json.
No hooklint here: this is plain torch, the facts the rules rest on.
"""

import json
import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.nn.parallel import DistributedDataParallel as DDP

warnings.simplefilter("ignore")
dist.init_process_group("gloo")
RANK = dist.get_rank()
WORLD = dist.get_world_size()
facts: dict = {}


def make():
    torch.manual_seed(0)  # the same initial weights on every rank, as DDP and FSDP expect
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def batch(step=0, requires_grad=False):
    torch.manual_seed(100 + 10 * step + RANK)  # different data on each rank
    return torch.rand(3, 4, requires_grad=requires_grad)


def same_on_all_ranks(tensor):
    tensor = tensor.detach().contiguous()
    gathered = [torch.empty_like(tensor) for _ in range(WORLD)]
    dist.all_gather(gathered, tensor)
    return all(torch.equal(gathered[0], t) for t in gathered[1:])


def flat_grads(params):
    return torch.cat([p.grad.flatten() for p in params])


def mask_row0(grad):
    grad = grad.clone()
    grad[0] = 0
    return grad


def row0(tensor):
    return [float(v) for v in tensor[0]]


def reference_grad_of_first_weight(steps=1, requires_grad=False):
    """The gradient DDP should produce: the mean over ranks of each rank's local gradient."""
    model = make()
    for step in range(steps):
        parts = []
        for rank in range(WORLD):
            torch.manual_seed(100 + 10 * step + rank)
            parts.append(torch.rand(3, 4))
        (sum(model(x).sum() for x in parts) / WORLD).backward()
    return model[0].weight.grad


# -- FSDP2 --------------------------------------------------------------------

def fsdp_tensor_hook(when):
    model = make()
    calls = [0]

    def prune(grad):
        calls[0] += 1
        return mask_row0(grad)

    if when == "before":
        model[0].weight.register_hook(prune)
    fully_shard(model[0])
    fully_shard(model)
    if when == "after":
        model[0].weight.register_hook(prune)
    model(batch()).sum().backward()
    full = model[0].weight.grad.full_tensor()
    return {"calls": calls[0], "row0": row0(full), "param_type": type(model[0].weight).__name__}


facts["fsdp_tensor_hook_before"] = fsdp_tensor_hook("before")
facts["fsdp_tensor_hook_after"] = fsdp_tensor_hook("after")


def fsdp_post_accumulate(when):
    model = make()
    seen = []

    def prune(param):
        seen.append({"param": type(param).__name__, "grad": type(param.grad).__name__,
                     "grad_shape": list(param.grad.shape),
                     "local_shape": list(param.grad.to_local().shape) if isinstance(param.grad, DTensor) else None})
        if isinstance(param.grad, DTensor):
            mask = torch.ones(param.grad.shape)
            mask[0] = 0
            param.grad.mul_(distribute_tensor(mask, param.grad.device_mesh, param.grad.placements))

    if when == "before":
        model[0].weight.register_post_accumulate_grad_hook(prune)
    fully_shard(model[0])
    fully_shard(model)
    if when == "after":
        model[0].weight.register_post_accumulate_grad_hook(prune)
    model(batch()).sum().backward()
    full = model[0].weight.grad.full_tensor()
    return {"calls": len(seen), "seen": seen, "row0": row0(full), "row1_nonzero": bool(full[1].abs().sum() > 0),
            "full_grad_same_on_all_ranks": same_on_all_ranks(full)}


facts["fsdp_post_accumulate_before"] = fsdp_post_accumulate("before")
facts["fsdp_post_accumulate_after"] = fsdp_post_accumulate("after")


def fsdp_module_hook_reads_grad():
    """A full backward hook on the first layer (its input needs no grad) reading `.grad`."""
    model = make()
    seen = []

    def read(module, grad_input, grad_output):
        grad = module.weight.grad
        seen.append({"param": type(module.weight).__name__, "grad": None if grad is None else type(grad).__name__})

    model[0].register_full_backward_hook(read)
    fully_shard(model[0])
    fully_shard(model)
    for step in range(2):
        model(batch(step)).sum().backward()
    return {"seen": seen}


facts["fsdp_module_hook_reads_grad"] = fsdp_module_hook_reads_grad()


def fsdp_module_hook_edits_grad_after_accumulation():
    """A full backward hook on a layer whose input requires grad: it runs after the
    unsharded parameter's AccumulateGrad, before FSDP's reduce-scatter."""
    model = make()
    seen = []

    def zero_row(module, grad_input, grad_output):
        grad = module.weight.grad
        seen.append({"param": type(module.weight).__name__, "grad": None if grad is None else type(grad).__name__})
        if grad is not None and not isinstance(grad, DTensor):
            grad[0] = 0

    model[2].register_full_backward_hook(zero_row)
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    model(batch()).sum().backward()
    return {"seen": seen, "row0": row0(model[2].weight.grad.full_tensor())}


facts["fsdp_module_hook_edits_grad_after_accumulation"] = fsdp_module_hook_edits_grad_after_accumulation()


# -- DDP ----------------------------------------------------------------------

def ddp_module_hook_edits_grad(wrap):
    """A full backward hook that zeroes row 0 of `weight.grad`, on a layer whose input
    requires grad: without DDP it runs after AccumulateGrad and its edit holds."""
    model = make()
    seen = []

    def zero_row(module, grad_input, grad_output):
        seen.append(module.weight.grad is not None)
        if module.weight.grad is not None:
            module.weight.grad[0] = 0

    model[0].register_full_backward_hook(zero_row)
    run = DDP(model) if wrap else model
    for step in range(2):
        run(batch(step, requires_grad=True)).sum().backward()
    reference = reference_grad_of_first_weight(steps=2)
    return {"grad_present_when_hook_ran": seen, "row0": row0(model[0].weight.grad),
            "row0_is_the_unedited_mean": bool(torch.allclose(model[0].weight.grad[0], reference[0])),
            "grads_same_on_all_ranks": same_on_all_ranks(flat_grads(model.parameters()))}


facts["local_module_hook_edits_grad"] = ddp_module_hook_edits_grad(wrap=False)
facts["ddp_module_hook_edits_grad"] = ddp_module_hook_edits_grad(wrap=True)


def ddp_tensor_hook():
    model = make()
    calls = [0]

    def prune(grad):
        calls[0] += 1
        return mask_row0(grad)

    model[0].weight.register_hook(prune)
    ddp = DDP(model)
    ddp(batch()).sum().backward()
    reference = reference_grad_of_first_weight()
    return {"calls": calls[0], "row0": row0(model[0].weight.grad),
            "other_rows_match_reference": bool(torch.allclose(model[0].weight.grad[1:], reference[1:])),
            "grads_same_on_all_ranks": same_on_all_ranks(flat_grads(model.parameters()))}


facts["ddp_tensor_hook"] = ddp_tensor_hook()


def ddp_post_accumulate_edits_grad():
    model = make()

    def prune(param):
        param.grad[0] = 0

    model[0].weight.register_post_accumulate_grad_hook(prune)
    ddp = DDP(model)
    ddp(batch()).sum().backward()
    return {"row0": row0(model[0].weight.grad),
            "grads_same_on_all_ranks": same_on_all_ranks(flat_grads(model.parameters()))}


facts["ddp_post_accumulate_edits_grad"] = ddp_post_accumulate_edits_grad()


def ddp_optimizer_in_backward():
    """Optimizer step fused into backward with post-accumulate hooks, under DDP."""
    model = make()

    def sgd_step(param, lr=0.1):
        with torch.no_grad():
            param.add_(param.grad, alpha=-lr)
        param.grad = None

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(sgd_step)
    ddp = DDP(model)
    ddp(batch()).sum().backward()
    return {"params_same_on_all_ranks": same_on_all_ranks(torch.cat([p.detach().flatten() for p in model.parameters()]))}


facts["ddp_optimizer_in_backward"] = ddp_optimizer_in_backward()


# -- gradients synchronised by hand ----------------------------------------------

def hand_sync(reduce_gradient):
    model = make()
    initial = [p.detach().clone() for p in model.parameters()]

    def sync_param(param):
        dist.all_reduce(param)  # the bug: the parameter, not its gradient

    def sync_grad(param):
        dist.all_reduce(param.grad)
        param.grad /= WORLD

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(sync_grad if reduce_gradient else sync_param)
    model(batch()).sum().backward()
    reference = reference_grad_of_first_weight()
    return {"grads_same_on_all_ranks": same_on_all_ranks(flat_grads(model.parameters())),
            "first_weight_grad_matches_ddp": bool(torch.allclose(model[0].weight.grad, reference)),
            "params_scaled_by_world": all(torch.allclose(p.detach(), WORLD * w)
                                          for p, w in zip(model.parameters(), initial))}


facts["hand_sync_all_reduce_param"] = hand_sync(reduce_gradient=False)
facts["hand_sync_all_reduce_grad"] = hand_sync(reduce_gradient=True)

out = sys.argv[1]
with open(os.path.join(out, f"rank{RANK}.json"), "w") as f:
    json.dump(facts, f, indent=1)
dist.destroy_process_group()
