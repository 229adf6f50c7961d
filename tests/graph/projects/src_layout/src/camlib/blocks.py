import torch.nn as nn
from packaging import version
import torch

from ._registry import register_block

MIN_TORCH = version.parse("1.8")
HAS_NEW_TORCH = version.parse(torch.__version__.split("+")[0]) >= MIN_TORCH


@register_block
class Residual(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)) + x)
