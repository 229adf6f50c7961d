"""Grad-CAM explainer: hooks on the target layer are registered in
`__init__`; `remove()` exists but the caller has to remember it."""
import torch


class GradCAM:
    def __init__(self, model, target_layer):
        self.model = model
        self.activations = None
        self.gradients = None
        self.handles = [
            target_layer.register_forward_hook(self._save_activation),  # expect: HKL304@run
            target_layer.register_full_backward_hook(self._save_gradient),  # expect: HKL304@run
        ]

    def _save_activation(self, module, inputs, output):
        self.activations = output.detach()

    def _save_gradient(self, module, grad_input, grad_output):
        self.gradients = grad_output[0].detach()

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def __call__(self, image, class_index=None):
        self.model.zero_grad()
        scores = self.model(image)
        if class_index is None:
            class_index = int(scores.argmax(dim=1)[0])
        scores[0, class_index].backward()
        weights = self.gradients.mean(dim=(2, 3), keepdim=True)
        cam = torch.relu((weights * self.activations).sum(dim=1))
        return cam / (cam.max() + 1e-8)
