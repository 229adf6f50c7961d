"""Grad-CAM in the shape published implementations use: the model and the
target layers come from the caller, the hooks are registered in the
constructor, activations and gradients are kept on the object."""
import torch


class GradCAM:
    def __init__(self, model, target_layers):
        self.model = model
        self.activations = []
        self.gradients = []
        self.handles = []
        for layer in target_layers:
            self.handles.append(layer.register_forward_hook(self.save_activation))
            self.handles.append(layer.register_full_backward_hook(self.save_gradient))

    def save_activation(self, module, inputs, output):
        self.activations.append(output.detach())

    def save_gradient(self, module, grad_input, grad_output):
        self.gradients.insert(0, grad_output[0].detach())

    def __call__(self, image, target_class):
        self.activations.clear()
        self.gradients.clear()
        scores = self.model(image)
        self.model.zero_grad()
        scores[:, target_class].sum().backward()
        if not self.activations or not self.gradients:
            return None  # the hooks did not fire
        activation, gradient = self.activations[-1], self.gradients[-1]
        weights = gradient.mean(dim=(2, 3), keepdim=True)
        return torch.relu((weights * activation).sum(dim=1))

    def remove(self):
        for handle in self.handles:
            handle.remove()
