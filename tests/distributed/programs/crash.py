"""Rank 1 fails at once; rank 0 then waits for it in a collective, for ever."""

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ValueError("rank 1 fails on purpose")
dist.barrier()
