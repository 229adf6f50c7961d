"""Grad-CAM in the other common tutorial form: the forward hook registers a
tensor hook on the layer's output to catch its gradient; hooks are registered
in __call__ for each image and removed at the end of it (correct)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# expect: (none)


class CAM:
    def __init__(self, model, layer):
        self.model = model
        self.layer = layer
        self.acts = None
        self.grads = None

    def _forward_hook(self, module, inputs, output):
        self.acts = output.detach()
        output.register_hook(self._save_grad)

    def _save_grad(self, grad):
        self.grads = grad.detach()

    def __call__(self, image, target):
        handle = self.layer.register_forward_hook(self._forward_hook)
        try:
            self.model.zero_grad()
            self.model(image)[0, target].backward()
        finally:
            handle.remove()
        weights = self.grads.mean(dim=(2, 3), keepdim=True)
        return F.relu((weights * self.acts).sum(dim=1))


def main():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    ).eval()
    cam = CAM(model, model[2])
    maps = [cam(torch.randn(1, 3, 16, 16), target=t) for t in range(4)]
    print("maps", len(maps), tuple(maps[0].shape), "hooks left:", len(model[2]._forward_hooks))


if __name__ == "__main__":
    main()
