class FactorStats:
    """K-FAC-like statistics: the output gradient of every Linear and Conv2d layer."""

    def __init__(self, model):
        self.model = model
        self.known = {"Linear", "Conv2d"}
        self.grads = {}
        self.handles = []
        for module in self.model.modules():
            classname = module.__class__.__name__
            if classname in self.known:
                self.handles.append(module.register_backward_hook(self.save_grad_output))

    def save_grad_output(self, module, grad_input, grad_output):
        self.grads[module] = grad_output[0].detach()

    def remove(self):
        for handle in self.handles:
            handle.remove()
