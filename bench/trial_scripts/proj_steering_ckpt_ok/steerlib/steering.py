"""Activation steering as intervention libraries write it: a context manager
adds a vector to a module's output while the block is active."""
import torch


class Steering:
    def __init__(self, module, vector, scale=1.0):
        self.module = module
        self.vector = vector
        self.scale = scale
        self.handle = None

    def add_vector(self, module, inputs, output):
        return output + self.scale * self.vector

    def __enter__(self):
        self.handle = self.module.register_forward_hook(self.add_vector)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False


def steering_norm(vector: torch.Tensor) -> float:
    return float(vector.norm())
