"""Explainers that clean up: GradCAM registers its hooks per call and removes
them in `finally`; Saliency is a context manager."""
import torch


class GradCAM:
    def __init__(self, model, target_layer):
        self.model = model
        self.target_layer = target_layer
        self.activations = None
        self.gradients = None

    def _save_activation(self, module, inputs, output):
        self.activations = output.detach()

    def _save_gradient(self, module, grad_input, grad_output):
        self.gradients = grad_output[0].detach()

    def __call__(self, image, class_index=None):
        handles = [
            self.target_layer.register_forward_hook(self._save_activation),
            self.target_layer.register_full_backward_hook(self._save_gradient),
        ]
        try:
            self.model.zero_grad()
            scores = self.model(image)
            if class_index is None:
                class_index = int(scores.argmax(dim=1)[0])
            scores[0, class_index].backward()
        finally:
            for handle in handles:
                handle.remove()
        weights = self.gradients.mean(dim=(2, 3), keepdim=True)
        cam = torch.relu((weights * self.activations).sum(dim=1))
        return cam / (cam.max() + 1e-8)


class Saliency:
    """Records the input layer's activation while in a `with` block."""

    def __init__(self, model, target_layer):
        self.model = model
        self.target_layer = target_layer
        self.handle = None
        self.output = None

    def _hook(self, module, inputs, output):
        self.output = output.detach()

    def __enter__(self):
        self.handle = self.target_layer.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        self.handle = None
        return False

    def __call__(self, image):
        image = image.clone().requires_grad_(True)
        scores = self.model(image)
        scores.max().backward()
        return image.grad.abs().amax(dim=1)
