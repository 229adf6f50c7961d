"""A training script that logs gradients with hooks on the model it imports."""

import argparse

import torch
import torch.nn.functional as F

from models import ConvNet

grad_norms = {}


def log_grad(module, grad_input, grad_output):
    grad_norms[type(module).__name__] = grad_input[0].norm().item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    model = ConvNet(args.num_classes)
    model.features.register_backward_hook(log_grad)  # HKL101, HKL102
    model.classifier.register_backward_hook(log_grad)  # HKL101, HKL102
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.epochs):
        x, y = torch.randn(8, 3, 16, 16), torch.randint(0, args.num_classes, (8,))
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
