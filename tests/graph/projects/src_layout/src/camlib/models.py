"""The model: relative imports, a registry the blocks fill at import time, and
a constructor whose arguments the project's test fixture provides."""

import torch.nn as nn

from . import _registry
from .blocks import HAS_NEW_TORCH

STAGES = tuple(sorted(_registry.BLOCKS))


class SmallResNet(nn.Module):
    def __init__(self, num_classes, width=8, block="Residual"):
        super().__init__()
        assert HAS_NEW_TORCH
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.layer4 = nn.Sequential(_registry.BLOCKS[block](width), _registry.BLOCKS[block](width))
        self.fc = nn.Linear(width, num_classes)
        self.activations = None
        self.layer4.register_forward_hook(self.keep_activations)

    def keep_activations(self, module, inputs, output):
        self.activations = output

    def forward(self, x):
        return self.fc(self.layer4(self.stem(x)).mean((2, 3)))
