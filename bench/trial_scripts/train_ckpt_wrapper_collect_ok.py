"""train_ckpt_wrapper_collect.py, fixed: each logger keeps the latest
statistic of its layer (keyed by name, overwritten), so the second call the
checkpoint's recompute makes during backward changes nothing."""
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
    """Keeps the latest mean activation of each layer."""

    def __init__(self, name):
        self.name = name
        self.latest = {}

    def __call__(self, module, inputs, output):
        self.latest[self.name] = output.detach().mean().item()


def main():
    torch.manual_seed(0)
    model = Encoder()
    for i, block in enumerate(model.blocks):
        model.blocks[i] = checkpoint_wrapper(block)
    loggers = [ActivationLogger(f"blocks.{i}.attn") for i in range(len(model.blocks))]
    for block, logger in zip(model.blocks, loggers):
        block.attn.register_forward_hook(logger)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = 3
    for _ in range(steps):
        x, y = torch.randn(8, 5, 16), torch.randint(0, 2, (8,))
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"{steps} steps: latest means", {k: round(v, 4) for lg in loggers for k, v in lg.latest.items()})


if __name__ == "__main__":
    main()
