"""Steering-aware fine-tuning of a small residual model whose blocks run
under activation checkpointing.  The steering block ends right after the
forward, so the backward recomputes the checkpointed blocks without the
steering vector: the gradients belong to a forward that never happened
(HKL702).  The script prints how far they are from the right ones."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from steerlib import Steering


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.attn = nn.Linear(width, width)
        self.mlp = nn.Linear(width, width)

    def forward(self, x):
        return x + self.mlp(torch.tanh(self.attn(x)))


class TinyModel(nn.Module):
    def __init__(self, width=16, depth=3):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x)


def steered_loss(model, x, y, vector):
    with Steering(model.blocks[1].attn, vector):  # expect: HKL702
        prediction = model(x)
    return nn.functional.mse_loss(prediction, y)


def main():
    torch.manual_seed(0)
    model = TinyModel()
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    vector = torch.randn(16)
    steered_loss(model, x, y, vector).backward()
    got = model.blocks[0].attn.weight.grad.clone()
    model.zero_grad()
    with Steering(model.blocks[1].attn, vector):
        nn.functional.mse_loss(model(x), y).backward()  # the steered forward's real gradient
    print("max gradient error:", (got - model.blocks[0].attn.weight.grad).abs().max().item())


if __name__ == "__main__":
    main()
