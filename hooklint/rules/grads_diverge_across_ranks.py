"""HKL601: gradients that should be synchronised differ across ranks (run time only)."""

from __future__ import annotations

from typing import ClassVar

from hooklint.findings import Origin, Severity
from hooklint.rules.base import Rule


class GradsDivergeAcrossRanks(Rule):
    """
    ## What it does
    Reports, at run time on several ranks (`hooklint run --nproc N`,
    `hooklint.testing.assert_hooks_ok_distributed`, or `hooklint.instrument()`
    in a program you launch yourself), a parameter whose gradient differs across
    ranks at the end of a backward that was meant to synchronise it: a backward
    through a `DistributedDataParallel` forward (not under `no_sync()`), or one
    in which a hook called a `torch.distributed` collective on the parameter or
    its gradient (a hand-written sync).  The message names the parameters and
    the hooks that touched them, with each rank's sum and norm.

    The check runs when `backward()` returns: DDP's all-reduce and the hooks'
    collectives have finished, and no optimizer step has used the gradients
    yet.  A cheap checksum of each such gradient (a sum of its bits, its sum,
    its squared norm) is compared across ranks with one all-reduce (two when
    the parameters were chosen by what hooks did), over the default group when
    it is gloo, else over a gloo group hooklint creates once; on a mismatch the
    ranks' values are all-gathered for the message.

    ## Why is this bad?
    Data parallelism rests on every rank applying the same update.  With
    different gradients the optimizer step moves each replica differently and
    the copies of the model drift apart, silently: the loss still goes down on
    each rank.  A hand-written sync whose post-accumulate-grad callback
    all-reduces the *parameter* instead of its gradient does exactly this (a
    public training framework shipped it): the weights are summed across ranks
    and the gradients stay local (tests/distributed/test_behaviour.py).

    ## Known problems
    Gradients equal but for the last bits (summed in another order) are not
    reported: a difference of the sums below 1e-6 of sqrt(numel) times the
    norm, and of the squared norms below 1e-6 of it, is taken for rounding (a
    single element of a million-element gradient zeroed on one rank may go
    unseen).  Under FSDP2 each rank holds a different shard of
    each gradient: there is nothing to compare, and FSDP-managed parameters are
    not checked.  A gradient synchronised by hand after `backward()` returns
    (`for p in model.parameters(): dist.all_reduce(p.grad)`) is not checked; a
    parameter whose `.grad` is None on a rank (an optimizer fused into backward
    clears it) is not compared.  Every rank must run the backward (as DDP
    requires anyway).

    ## Example
    ```python
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    dist.init_process_group("gloo")  # torchrun --nproc-per-node 2, or hooklint run --nproc 2
    torch.manual_seed(0)
    model = nn.Linear(4, 2)

    def sync(param):
        dist.all_reduce(param)  # the parameter, not its gradient

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(sync)

    torch.manual_seed(dist.get_rank())  # each rank its own batch
    model(torch.rand(8, 4)).sum().backward()
    dist.destroy_process_group()
    ```

    ## Use instead
    ```python
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    dist.init_process_group("gloo")  # torchrun --nproc-per-node 2, or hooklint run --nproc 2
    torch.manual_seed(0)
    model = nn.Linear(4, 2)

    def sync(param):
        dist.all_reduce(param.grad)
        param.grad /= dist.get_world_size()

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(sync)

    torch.manual_seed(dist.get_rank())  # each rank its own batch
    model(torch.rand(8, 4)).sum().backward()
    dist.destroy_process_group()
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`DistributedDataParallel`](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    - [`torch.distributed.all_reduce`](https://pytorch.org/docs/stable/distributed.html#torch.distributed.all_reduce)
    - [hooklint: hooks under DDP and FSDP2](https://github.com/hooklint/hooklint/blob/main/docs/distributed.md)
    """

    code = "HKL601"
    name = "grads-diverge-across-ranks"
    summary = "A gradient that DDP or a hook's collective synchronises differs across ranks after backward"
    severity = Severity.ERROR
    origins = (Origin.RUNTIME,)
    # Its docs examples need this many ranks to show anything (tests/distributed runs them
    # with `hooklint run --nproc 2`; the one-process test of run-time examples skips them).
    min_ranks: ClassVar[int] = 2
