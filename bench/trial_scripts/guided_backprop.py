"""Guided backpropagation: full backward hooks on every nn.ReLU that return a
clamped gradient (correct: the ReLUs are not in place)."""
import torch
import torch.nn as nn

# expect: (none)


def build_model():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=False),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=False),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3),
    )


class GuidedBackprop:
    def __init__(self, model):
        self.model = model
        self.handles = []
        for module in model.modules():
            if isinstance(module, nn.ReLU):
                self.handles.append(module.register_full_backward_hook(self._clamp))

    @staticmethod
    def _clamp(module, grad_input, grad_output):
        return (grad_input[0].clamp(min=0.0),)

    def saliency(self, image, target):
        image = image.clone().requires_grad_(True)
        self.model.zero_grad()
        self.model(image)[:, target].sum().backward()
        return image.grad.abs().amax(dim=1)

    def close(self):
        for h in self.handles:
            h.remove()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = build_model().eval()
    gb = GuidedBackprop(model)
    try:
        sal = gb.saliency(torch.randn(1, 3, 16, 16), target=1)
        print("saliency", tuple(sal.shape), float(sal.max()))
    finally:
        gb.close()
