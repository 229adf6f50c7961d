"""Grad-CAM as tutorials write it: a class taking (model, target_layer), a
forward hook keeping the activations, a full backward hook keeping
grad_output[0], handles removed by release() and __del__ (correct)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

# expect: (none)


class GradCAM:
    def __init__(self, model, target_layer):
        self.model = model
        self.activations = None
        self.gradients = None
        self.handles = [
            target_layer.register_forward_hook(self._save_activation),
            target_layer.register_full_backward_hook(self._save_gradient),
        ]

    def _save_activation(self, module, inputs, output):
        self.activations = output.detach()

    def _save_gradient(self, module, grad_input, grad_output):
        self.gradients = grad_output[0].detach()

    def __call__(self, x, class_idx=None):
        self.model.zero_grad()
        logits = self.model(x)
        if class_idx is None:
            class_idx = logits.argmax(dim=1)
        score = logits.gather(1, class_idx.view(-1, 1)).sum()
        score.backward()
        weights = self.gradients.mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * self.activations).sum(dim=1))
        cam = cam / (cam.amax(dim=(1, 2), keepdim=True) + 1e-8)
        return cam

    def release(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def __del__(self):
        self.release()


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )


def main():
    torch.manual_seed(0)
    model = build_model().eval()
    cam = GradCAM(model, target_layer=model[2])
    for _ in range(3):
        heatmap = cam(torch.randn(2, 3, 32, 32))
    print("cam", tuple(heatmap.shape), float(heatmap.max()))
    cam.release()


if __name__ == "__main__":
    main()
