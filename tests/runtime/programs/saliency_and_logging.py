"""Vanilla and SmoothGrad saliency on the input, gradient-norm logging with
full backward hooks registered once, gradient clipping with tensor hooks that
return a new gradient, and an optimizer step fused into backward as in the
PyTorch tutorial.  Clean."""

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))

    def forward(self, x):
        return self.net(x)


def saliency(model: nn.Module, x: torch.Tensor, target: int, samples: int = 1, noise: float = 0.0) -> torch.Tensor:
    total = torch.zeros_like(x)
    for _ in range(samples):
        probe = (x + noise * torch.randn_like(x)).requires_grad_(True)
        model(probe)[:, target].sum().backward()
        total += probe.grad.abs()
    return total / samples


class GradNormLogger:
    def __init__(self, model: nn.Module):
        self.norms = {}
        self.handles = [
            module.register_full_backward_hook(self._log(name))
            for name, module in model.named_modules() if isinstance(module, nn.Linear)
        ]

    def _log(self, name):
        def hook(module, grad_input, grad_output):
            self.norms.setdefault(name, []).append(grad_output[0].norm().item())
        return hook

    def close(self):
        for handle in self.handles:
            handle.remove()


def main() -> None:
    torch.manual_seed(0)
    model = MLP()
    x = torch.rand(4, 10)
    vanilla = saliency(model, x, target=0)
    smooth = saliency(model, x, target=0, samples=4, noise=0.1)

    logger = GradNormLogger(model)
    for p in model.parameters():
        p.register_hook(lambda grad: grad.clamp(-1.0, 1.0))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 2, 0])).backward()
        optimizer.step()
    logger.close()

    fused = MLP()
    optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in fused.parameters()}

    def optimizer_hook(parameter) -> None:
        optimizers[parameter].step()
        optimizers[parameter].zero_grad()

    for p in fused.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)
    for _ in range(3):
        nn.functional.cross_entropy(fused(x), torch.tensor([0, 1, 2, 0])).backward()
    print("saliency", tuple(vanilla.shape), tuple(smooth.shape), "logged", sorted(logger.norms))


if __name__ == "__main__":
    main()
