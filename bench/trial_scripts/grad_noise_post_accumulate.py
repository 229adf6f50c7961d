"""Gradient accumulation over micro-batches, Gaussian gradient noise added
once the gradient has accumulated (register_post_accumulate_grad_hook), and an
EMA of the weights (correct)."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

# expect: (none)


def add_gradient_noise(model, std):
    handles = []
    for p in model.parameters():
        if p.requires_grad:
            def noise(param, std=std):
                param.grad.add_(torch.randn_like(param.grad) * std)
            handles.append(p.register_post_accumulate_grad_hook(noise))
    return handles


@torch.no_grad()
def ema_update(ema_model, model, decay=0.99):
    for e, p in zip(ema_model.parameters(), model.parameters()):
        e.mul_(decay).add_(p, alpha=1 - decay)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1))
    ema = copy.deepcopy(model).requires_grad_(False)
    handles = add_gradient_noise(model, std=1e-3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    accum_steps = 4
    x, y = torch.randn(64, 10), torch.randn(64, 1)
    try:
        for step in range(8):
            opt.zero_grad(set_to_none=True)
            for chunk_x, chunk_y in zip(x.chunk(accum_steps), y.chunk(accum_steps)):
                loss = F.mse_loss(model(chunk_x), chunk_y) / accum_steps
                loss.backward()
            opt.step()
            ema_update(ema, model)
    finally:
        for h in handles:
            h.remove()
    print(f"loss {loss.item() * accum_steps:.4f}")


if __name__ == "__main__":
    main()
