"""An evaluation script that compiles the classifier for speed, benchmarks
it, then explains a few predictions with Grad-CAM on the compiled model.
The Grad-CAM hooks are registered after the compiled model ran: the compiled
graph never calls them, so no map comes out (HKL701)."""
import time

import torch
import torch.nn as nn

from camkit import GradCAM


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )


def main():
    torch.manual_seed(0)
    model = build_model().eval()
    compiled = torch.compile(model, backend="aot_eager")
    images = torch.randn(4, 3, 16, 16)
    start = time.perf_counter()
    for image in images:  # one image at a time, as the service will get them
        compiled(image.unsqueeze(0))
    print(f"compiled inference: {time.perf_counter() - start:.3f} s")
    cam = GradCAM(compiled, target_layers=[model[2]])  # expect: HKL701
    maps = [cam(image.unsqueeze(0), target_class=1) for image in images]
    print("Grad-CAM maps computed:", sum(m is not None for m in maps), "of", len(maps))
    cam.remove()


if __name__ == "__main__":
    main()
