"""Layer-wise gradient scaling for fine-tuning (smaller steps for the
backbone) with parameter hooks that scale the gradient in place (buggy:
hooks must return a new gradient, not modify their argument)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Finetune(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16))
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.backbone(x))


def scale_backbone_grads(model, factor):
    for p in model.backbone.parameters():
        p.register_hook(lambda g: g.mul_(factor))  # expect: HKL401


def main():
    torch.manual_seed(0)
    model = Finetune()
    scale_backbone_grads(model, 0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 8), torch.randint(0, 2, (32,))
    for _ in range(5):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    print("ok")


if __name__ == "__main__":
    main()
