"""Training loop with gradient clipping, an LR scheduler and a pruning mask
applied to the gradient by a parameter hook (correct)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# expect: (none)


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def prune_by_magnitude(layer, amount=0.5):
    with torch.no_grad():
        threshold = layer.weight.abs().flatten().kthvalue(int(amount * layer.weight.numel())).values
        mask = (layer.weight.abs() > threshold).float()
        layer.weight.mul_(mask)
    # keep pruned weights at zero: mask the gradient before it accumulates
    return layer.weight.register_hook(lambda grad: grad * mask)


def main():
    torch.manual_seed(0)
    model = SmallNet()
    mask_handle = prune_by_magnitude(model.fc1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    data = torch.randn(64, 16)
    target = torch.randint(0, 4, (64,))
    for step in range(10):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", enabled=False):
            loss = F.cross_entropy(model(data), target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        opt.step()
        sched.step()
    pruned = (model.fc1.weight == 0).sum().item()
    print(f"loss {loss.item():.3f}, pruned weights still zero: {pruned}")
    mask_handle.remove()


if __name__ == "__main__":
    main()
