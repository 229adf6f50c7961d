class Explainer:
    """Keeps the gradient of the output of the layer it is given."""

    def __init__(self, model, target_layer):
        self.model = model
        self.gradient = None
        self.handle = target_layer.register_full_backward_hook(self.save)

    def save(self, module, grad_input, grad_output):
        self.gradient = grad_output[0]

    def remove(self):
        self.handle.remove()
