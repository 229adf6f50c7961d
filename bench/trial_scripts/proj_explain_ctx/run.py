"""Explains images one by one with explainers that remove their hooks."""
import torch
import torch.nn as nn

from explain import GradCAM, Saliency


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )


def main():
    torch.manual_seed(0)
    model = build_model().eval()
    images = torch.randn(5, 1, 3, 16, 16)
    cams, saliencies = [], []
    for image in images:
        cams.append(GradCAM(model, model[2])(image))
        with Saliency(model, model[0]) as saliency:
            saliencies.append(saliency(image))
    assert not model[2]._forward_hooks and not model[2]._backward_hooks
    assert not model[0]._forward_hooks
    print("cams", len(cams), "saliency maps", len(saliencies))


if __name__ == "__main__":
    main()
