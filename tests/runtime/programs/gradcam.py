"""Grad-CAM: a forward hook on the target stage saves its activations and
hooks the output tensor for its gradient; both handles are removed after each
explanation.  Clean."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


class TinyResNet(nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True))
        self.layer1 = nn.Sequential(BasicBlock(16), BasicBlock(16))
        self.layer2 = nn.Sequential(BasicBlock(16), BasicBlock(16))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class GradCAM:
    def __init__(self, model: nn.Module, target_layer: nn.Module):
        self.model = model
        self.target_layer = target_layer
        self.activations = None
        self.gradients = None

    def _save_activation(self, module, inputs, output):
        self.activations = output.detach()

        def save_gradient(grad):
            self.gradients = grad.detach()

        self.tensor_handle = output.register_hook(save_gradient)

    def __call__(self, image: torch.Tensor, class_index: int) -> torch.Tensor:
        handle = self.target_layer.register_forward_hook(self._save_activation)
        try:
            self.model.zero_grad()
            scores = self.model(image)
            scores[:, class_index].sum().backward()
        finally:
            handle.remove()
            self.tensor_handle.remove()
        weights = self.gradients.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * self.activations).sum(dim=1))
        return cam / (cam.amax(dim=(1, 2), keepdim=True) + 1e-8)


def main() -> None:
    torch.manual_seed(0)
    model = TinyResNet().eval()
    cam = GradCAM(model, model.layer2)
    maps = [cam(torch.rand(1, 3, 32, 32), class_index=k % 5) for k in range(4)]
    print("maps:", [tuple(m.shape) for m in maps])


if __name__ == "__main__":
    main()
