"""proj_steering_ckpt, fixed: the backward runs inside the steering block, so
the checkpoint's recompute runs with the steering vector too, and the
gradients are those of the steered forward."""
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


def steered_step(model, x, y, vector):
    with Steering(model.blocks[1].attn, vector):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
    return loss


def main():
    torch.manual_seed(0)
    model = TinyModel()
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    vector = torch.randn(16)
    steered_step(model, x, y, vector)
    got = model.blocks[0].attn.weight.grad.clone()
    model.zero_grad()
    with Steering(model.blocks[1].attn, vector):
        nn.functional.mse_loss(model(x), y).backward()  # the steered forward's real gradient
    print("max gradient error:", (got - model.blocks[0].attn.weight.grad).abs().max().item())


if __name__ == "__main__":
    main()
