"""Activation statistics collected by forward hooks on the layers inside
blocks run under non-reentrant activation checkpointing: a hook on a layer
inside the block runs at the forward and again at the recompute during
backward (a hook on the checkpointed block itself runs once: the recompute
stops early, before the block's forward returns).  The statistics are
written the safe way (keyed by name, overwritten), but the list of calls
grows twice per step for the inner layers: HKL703."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(3))
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x)


def main():
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stats, calls = {}, []

    def record(name):
        def hook(module, inputs, output):
            stats[name] = output.detach().std().item()
            calls.append(name)
        return hook

    handles = [b[0].register_forward_hook(record(f"block{i}.0")) for i, b in enumerate(model.blocks)]  # expect: HKL703
    handles.append(model.blocks[0].register_forward_hook(record("block0")))
    x, y = torch.randn(8, 16), torch.randint(0, 2, (8,))
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    for handle in handles:
        handle.remove()
    print("hook calls", len(calls), "(3 inner layers at forward and at recompute, block0 once)", stats)


if __name__ == "__main__":
    main()
