"""A Grad-CAM helper class and a helper function that receive the layer to hook
as an argument, as real attribution code does; the calls at the bottom show
which layers."""

import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3), nn.ReLU())
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


class GradCam:
    def __init__(self, model, target_layer):
        self.model = model
        target_layer.register_backward_hook(self.save_gradient)

    def save_gradient(self, module, grad_input, grad_output):
        self.grads = grad_input[0]


def attach(layer):
    layer.register_backward_hook(lambda m, gi, go: print(gi[0].shape))


net = Net()
cam = GradCam(net, target_layer=net.features)
attach(net.features[2])
