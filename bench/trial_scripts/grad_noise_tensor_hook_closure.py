"""Gradient noise added from a tensor hook that edits p.grad of the parameter
captured by its closure, instead of the gradient it is given (buggy: a
Tensor.register_hook hook runs before the gradient accumulates into p.grad, so
it edits last step's .grad, and after zero_grad(set_to_none=True) .grad is None
so the guarded edit never runs: no noise is ever added to this step's gradient)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


def add_gradient_noise(model, std):
    for p in model.parameters():
        def noise(grad, p=p):
            if p.grad is not None:  # expect: HKL204
                p.grad.add_(torch.randn_like(p.grad) * std)
        p.register_hook(noise)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.Tanh(), nn.Linear(32, 1))
    add_gradient_noise(model, std=1.0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    x, y = torch.randn(64, 10), torch.randn(64, 1)
    for step in range(4):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
