"""Guided backpropagation on a model whose ReLUs are in place (buggy: a full
backward hook on nn.ReLU(inplace=True) raises 'Output 0 of
BackwardHookFunctionBackward is a view and is being modified inplace')."""
import torch
import torch.nn as nn


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.pool(self.features(x)).flatten(1))


def relu_hook(module, grad_input, grad_output):
    return (torch.clamp(grad_input[0], min=0.0),)


def guided_saliency(model, image, target):
    handles = []
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_full_backward_hook(relu_hook))  # expect: HKL403
    try:
        image = image.clone().requires_grad_(True)
        model.zero_grad()
        model(image)[:, target].sum().backward()
        return image.grad.abs().amax(dim=1)
    finally:
        for h in handles:
            h.remove()


if __name__ == "__main__":
    torch.manual_seed(0)
    net = ConvNet().eval()
    sal = guided_saliency(net, torch.randn(1, 3, 16, 16), target=0)
    print("saliency", tuple(sal.shape))
