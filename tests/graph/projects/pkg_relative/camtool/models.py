import torch.nn as nn

from .layers import Block


class Net(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.block = Block(width)
        self.head = nn.Linear(width, 10)

    def forward(self, x):
        x = self.block(self.stem(x))
        return self.head(x.mean(dim=(2, 3)))
