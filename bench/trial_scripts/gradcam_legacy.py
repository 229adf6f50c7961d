"""Grad-CAM written against the legacy backward hook, reading grad_input
(buggy: the legacy hook binds to the last autograd op of the module)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.block = Block()
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.block(F.relu(self.stem(x)))
        return self.head(x.mean(dim=(2, 3)))


class LegacyGradCAM:
    def __init__(self, model, target_layer):
        self.model = model
        self.fmap = None
        self.grad = None
        self.fwd = target_layer.register_forward_hook(self.forward_hook)
        self.bwd = target_layer.register_backward_hook(self.backward_hook)  # expect: HKL101, HKL102

    def forward_hook(self, module, inp, out):
        self.fmap = out.detach()

    def backward_hook(self, module, grad_input, grad_output):
        self.grad = grad_input[0].detach()

    def generate(self, x):
        self.model.zero_grad()
        out = self.model(x)
        out[:, out.argmax(1)[0]].sum().backward()
        w = self.grad.mean(dim=(2, 3), keepdim=True)
        return F.relu((w * self.fmap).sum(1))

    def remove(self):
        self.fwd.remove()
        self.bwd.remove()


if __name__ == "__main__":
    torch.manual_seed(0)
    net = Net().eval()
    cam = LegacyGradCAM(net, net.block)
    m = cam.generate(torch.randn(1, 3, 16, 16))
    print("grad shape", tuple(cam.grad.shape), "fmap shape", tuple(cam.fmap.shape), "cam", tuple(m.shape))
    cam.remove()
