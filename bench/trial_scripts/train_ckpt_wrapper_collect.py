"""A training loop that saves memory by wrapping every transformer-style block
with `checkpoint_wrapper`, and logs per-layer activation statistics with a
collector hooked on each block's attention layer.  Every forward of a block
runs again during backward (the recompute), so the collector stores each
activation twice and its step counter advances twice per step (HKL703)."""
import torch
import torch.nn as nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.attn = nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))

    def forward(self, x):
        x = x + torch.tanh(self.attn(x))
        return x + self.mlp(x)


class Encoder(nn.Module):
    def __init__(self, width=16, depth=4):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=1))


class ActivationLogger:
    """Keeps the mean activation of every call, and counts calls."""

    def __init__(self):
        self.means = []
        self.calls = 0

    def __call__(self, module, inputs, output):
        self.means.append(output.detach().mean().item())
        self.calls += 1


def main():
    torch.manual_seed(0)
    model = Encoder()
    for i, block in enumerate(model.blocks):
        model.blocks[i] = checkpoint_wrapper(block)
    logger = ActivationLogger()
    for block in model.blocks:
        block.attn.register_forward_hook(logger)  # expect: HKL703
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = 3
    for _ in range(steps):
        x, y = torch.randn(8, 5, 16), torch.randint(0, 2, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"{steps} steps x {len(model.blocks)} blocks: logger saw {logger.calls} calls, {len(logger.means)} means")


if __name__ == "__main__":
    main()
