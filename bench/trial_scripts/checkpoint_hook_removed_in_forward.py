"""An intervention (pyvene's shape): a forward hook that edits a layer's
output is registered for one forward and removed at the end of it, while
the model runs under non-reentrant checkpointing.  The recompute in
backward runs without the hook, so backward uses activations the forward
never produced: the gradients are silently wrong (no error)."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(8, 8)
        self.outer = nn.Linear(8, 8)

    def forward(self, x):
        return self.outer(torch.tanh(self.inner(x)))


class Intervened(nn.Module):
    def __init__(self, block, factor):
        super().__init__()
        self.block = block
        self.factor = factor

    def forward(self, x):
        handle = self.block.inner.register_forward_hook(lambda m, i, o: o * self.factor)
        try:
            return checkpoint(self.block, x, use_reentrant=False)
        finally:
            handle.remove()  # expect: HKL702


def main():
    torch.manual_seed(0)
    block = Block()
    model = Intervened(block, 3.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    wrong = block.outer.weight.grad.clone()
    # the gradient the forward actually computed: the same without checkpointing
    handle = block.inner.register_forward_hook(lambda m, i, o: o * 3.0)
    block.zero_grad()
    block(x).pow(2).mean().backward()
    handle.remove()
    print("max gradient error", (wrong - block.outer.weight.grad).abs().max().item())
    optimizer.step()


if __name__ == "__main__":
    main()
