"""Grad-CAM on the package's model, as a user script run from the project root."""

import torch

from camlib import SmallResNet

gradients = []


def save_gradient(module, grad_input, grad_output):
    gradients.append(grad_input[0])


def main():
    model = SmallResNet(num_classes=5)
    model.layer4.register_backward_hook(save_gradient)  # HKL101, HKL102
    model(torch.randn(1, 3, 16, 16)).max().backward()
    cam = (model.activations * gradients[0].mean((2, 3), keepdim=True)).sum(1)
    print(cam.shape)


if __name__ == "__main__":
    main()
