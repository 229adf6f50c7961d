import torch
import torch.nn as nn


class PlainNet(nn.Module):
    """Its last convolution feeds a batch norm: nothing modifies its output in place."""

    def __init__(self, width=8, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width),
        )
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x):
        x = torch.relu(self.features(x))
        return self.classifier(x.mean(dim=(2, 3)))


class InplaceNet(nn.Module):
    """Its last convolution's output goes straight into an in-place ReLU."""

    def __init__(self, width=8, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, padding=1), nn.ReLU(inplace=True),
        )
        self.classifier = nn.Linear(width, num_classes)

    def forward(self, x):
        x = self.features(x)
        return self.classifier(x.mean(dim=(2, 3)))
