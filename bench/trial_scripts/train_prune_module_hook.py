"""Training loop that 'freezes' pruned weights by zeroing .grad from a full
backward hook on the first layer (buggy: on the first layer the hook fires
before the weight's gradient accumulates)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def make_mask_hook(mask):
    def hook(module, grad_input, grad_output):
        if module.weight.grad is not None:  # expect: HKL202, HKL201
            module.weight.grad.mul_(mask)
    return hook


def main():
    torch.manual_seed(0)
    model = SmallNet()
    with torch.no_grad():
        mask = (model.fc1.weight.abs() > 0.1).float()
        model.fc1.weight.mul_(mask)
    handle = model.fc1.register_full_backward_hook(make_mask_hook(mask))  # expect: HKL201@run
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    data = torch.randn(64, 16)
    target = torch.randint(0, 4, (64,))
    for step in range(10):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    leaked = ((model.fc1.weight != 0) & (mask == 0)).sum().item()
    print(f"pruned weights that moved: {leaked}")
    handle.remove()


if __name__ == "__main__":
    main()
