"""The fixed twins of buggy_training.py: the hooks that work under DDP and FSDP2.

Run on 2 ranks by tests/distributed/test_cli.py with `hooklint run --nproc 2`:
no finding is expected.  The script checks itself that every pruning mask
took effect and that the gradients are the same on every rank (FSDP2: the full
gradient), and exits 4 if not.
"""

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
problems = []


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def batches(n, requires_grad=False):
    for step in range(n):
        torch.manual_seed(1000 * RANK + step)
        yield torch.rand(4, 8, requires_grad=requires_grad), torch.rand(4, 2)


def same_on_every_rank(name, tensors):
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    gathered = [torch.empty_like(flat) for _ in range(WORLD)]
    dist.all_gather(gathered, flat)
    if not all(torch.equal(gathered[0], g) for g in gathered[1:]):
        problems.append(f"{name}: gradients differ across ranks")


MASK = torch.ones(8, 8)
MASK[0] = 0

# 1. DDP: the pruning mask as a parameter tensor hook (runs before the all-reduce)
model = make_model()
model[0].weight.register_hook(lambda grad: grad * MASK)
ddp = DDP(model)
for x, y in batches(3, requires_grad=True):
    nn.functional.mse_loss(ddp(x), y).backward()
    same_on_every_rank("ddp tensor hook", [p.grad for p in model.parameters()])
    if model[0].weight.grad[0].abs().sum() != 0:
        problems.append("ddp tensor hook: the mask was not applied")
    ddp.zero_grad()


# 1b. DDP: the same mask as a post-accumulate-grad hook
def mask_row(param):
    param.grad.mul_(MASK)


model = make_model()
model[0].weight.register_post_accumulate_grad_hook(mask_row)
ddp = DDP(model)
for x, y in batches(2):
    nn.functional.mse_loss(ddp(x), y).backward()
    same_on_every_rank("ddp post-accumulate hook", [p.grad for p in model.parameters()])
    if model[0].weight.grad[0].abs().sum() != 0:
        problems.append("ddp post-accumulate hook: the mask was not applied")
    ddp.zero_grad()


# 2. a hand-written gradient sync that all-reduces the gradient
def sync(param):
    dist.all_reduce(param.grad)
    param.grad /= WORLD


model = make_model()
for param in model.parameters():
    param.register_post_accumulate_grad_hook(sync)
for x, y in batches(2):
    nn.functional.mse_loss(model(x), y).backward()
    same_on_every_rank("hand-written sync", [p.grad for p in model.parameters()])
    model.zero_grad()


# 3. FSDP2: the mask as a post-accumulate-grad hook on the sharded parameter, after fully_shard
def mask_shard(param):
    param.grad.mul_(distribute_tensor(MASK, param.grad.device_mesh, param.grad.placements))


model = make_model()
fully_shard(model[0])
fully_shard(model)
model[0].weight.register_post_accumulate_grad_hook(mask_shard)
for x, y in batches(2):
    nn.functional.mse_loss(model(x), y).backward()
    full = [p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad for p in model.parameters()]
    same_on_every_rank("fsdp2 post-accumulate hook", full)
    if full[0][0].abs().sum() != 0:
        problems.append("fsdp2 post-accumulate hook: the mask was not applied")
    model.zero_grad()

print(f"rank {RANK}: {problems or 'gradients as expected'}")
dist.destroy_process_group()
sys.exit(4 if problems else 0)
