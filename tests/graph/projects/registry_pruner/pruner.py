class InputSaliencyPruner:
    """Keeps the gradient of the model's input, read in a legacy hook on its first layer."""

    def __init__(self, model):
        self.model = model
        self.input_grad = None
        first = list(model.features.children())[0]
        self.handle = first.register_backward_hook(self.save)

    def save(self, module, grad_input, grad_output):
        self.input_grad = grad_input[0]
