"""A script-shaped model file: the constructor needs arguments, and the only
place that shows them is the `__main__` block, through a local variable."""

import torch
import torch.nn as nn


class VGGish(nn.Module):
    def __init__(self, in_channels, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(inplace=True),
        )
        self.head = nn.Linear(32, num_classes)
        self.feature_grads = None
        self.features[3].register_backward_hook(self.save)  # HKL101; static only: HKL102

    def save(self, module, grad_input, grad_output):
        self.feature_grads = grad_input[0]

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


if __name__ == "__main__":
    classes = 7
    net = VGGish(3, classes)
    net(torch.randn(2, 3, 32, 32)).sum().backward()
    print(net.feature_grads.shape)
