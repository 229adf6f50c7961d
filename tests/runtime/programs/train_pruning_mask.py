"""Magnitude pruning during training: a mask per weight, applied to each
gradient as soon as it is accumulated (post-accumulate-grad hook) and to the
weights after each optimizer step.  Clean: the hook edits `param.grad`."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)), inplace=True)
        x = F.max_pool2d(x, 2)
        x = F.relu(self.bn2(self.conv2(x)), inplace=True)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def magnitude_masks(model: nn.Module, sparsity: float) -> dict:
    masks = {}
    for name, param in model.named_parameters():
        if param.dim() > 1:
            threshold = param.detach().abs().flatten().kthvalue(int(sparsity * param.numel())).values
            masks[param] = (param.detach().abs() > threshold).float()
    return masks


def install_gradient_masks(masks: dict) -> list:
    handles = []
    for param, mask in masks.items():
        def mask_gradient(p, mask=mask):
            p.grad.mul_(mask)
        handles.append(param.register_post_accumulate_grad_hook(mask_gradient))
    return handles


def main() -> None:
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    masks = magnitude_masks(model, sparsity=0.5)
    handles = install_gradient_masks(masks)
    data = torch.rand(6, 8, 3, 16, 16)
    labels = torch.randint(0, 10, (6, 8))
    for epoch in range(2):
        for images, target in zip(data, labels):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), target)
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                for param, mask in masks.items():
                    param.mul_(mask)
    for handle in handles:
        handle.remove()
    kept = sum(int(m.sum()) for m in masks.values())
    zeros = sum(int((p == 0).sum()) for p in masks)
    print(f"pruned weights stay zero: {zeros >= sum(m.numel() for m in masks.values()) - kept}")


if __name__ == "__main__":
    main()
