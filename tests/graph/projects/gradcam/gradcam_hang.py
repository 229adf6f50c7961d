import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)) + x)


class CamNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.layer4 = nn.Sequential(Block(16), Block(16))
        self.fc = nn.Linear(16, 10)
        self.gradients = None
        self.layer4.register_backward_hook(self.save_gradient)

    def save_gradient(self, module, grad_input, grad_output):
        self.gradients = grad_input[0]

    def forward(self, x):
        x = self.layer4(self.stem(x))
        return self.fc(x.mean((2, 3)))
