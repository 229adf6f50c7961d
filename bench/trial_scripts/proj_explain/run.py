"""Explains a batch of images one by one, building a new GradCAM for each
image and never calling remove(): every image adds two more hooks."""
import torch
import torch.nn as nn

from explain import GradCAM


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
    maps = []
    for image in images:
        explainer = GradCAM(model, model[2])  # no-rule: static HKL304 does not see that remove() is never called on this object
        maps.append(explainer(image))
    print("maps", len(maps), "forward hooks on layer:", len(model[2]._forward_hooks))


if __name__ == "__main__":
    main()
