"""Hook bugs that only show under DDP and FSDP2, in the shape of a training script.

Run on 2 ranks by tests/distributed/test_cli.py with `hooklint run --nproc 2`;
each marked line is where a finding is expected.  Exits 3 on purpose (the exit
status is kept).
"""

import sys
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

warnings.simplefilter("ignore")
dist.init_process_group("gloo")
RANK = dist.get_rank()


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def batches(n, requires_grad=False):
    for step in range(n):
        torch.manual_seed(1000 * RANK + step)  # each rank its own data
        yield torch.rand(4, 8, requires_grad=requires_grad), torch.rand(4, 2)


# 1. DDP: a module backward hook zeroes a row of `.grad` (a pruning mask): DDP overwrites it
def zero_first_row(module, grad_input, grad_output):
    if module.weight.grad is not None:
        module.weight.grad[0] = 0


model = make_model()
model[0].register_full_backward_hook(zero_first_row)  # EXPECT HKL602 ddp-write
ddp = DDP(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
for x, y in batches(3, requires_grad=True):
    nn.functional.mse_loss(ddp(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)


# 2. a hand-written gradient sync that all-reduces the parameter instead of its gradient
def sync(param):
    dist.all_reduce(param)


model = make_model()
for param in model.parameters():
    param.register_post_accumulate_grad_hook(sync)  # EXPECT HKL601 HKL203
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in batches(2):
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()


# 3. FSDP2: a pruning mask as a parameter tensor hook, before and after fully_shard
def prune(grad):
    return grad * (torch.arange(grad.shape[0]) > 0).float().unsqueeze(1)


model = make_model()
model[0].weight.register_hook(prune)  # EXPECT HKL603 before
fully_shard(model[0])
fully_shard(model)
model[2].weight.register_hook(prune)  # EXPECT HKL603 after
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in batches(2):
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad()


# 4. DDP: an optimizer step fused into backward, with the local gradient
def sgd_in_backward(param, lr=0.1):
    with torch.no_grad():
        param.add_(param.grad, alpha=-lr)
    param.grad = None


model = make_model()
for param in model.parameters():
    param.register_post_accumulate_grad_hook(sgd_in_backward)  # EXPECT HKL602 ddp-update
ddp = DDP(model)
for x, y in batches(2):
    nn.functional.mse_loss(ddp(x), y).backward()


# 5. FSDP2: a module hook on the first layer reads `.grad` before FSDP gathered the layer
norms = []


def log_grad_norm(module, grad_input, grad_output):
    grad = module.weight.grad
    norms.append(None if grad is None else grad.to_local().norm())


model = make_model()
model[0].register_full_backward_hook(log_grad_norm)  # EXPECT HKL602 fsdp-read
fully_shard(model[0])
fully_shard(model)
for x, y in batches(2):
    nn.functional.mse_loss(model(x), y).backward()

print(f"rank {RANK} trained")
dist.destroy_process_group()
sys.exit(3)
