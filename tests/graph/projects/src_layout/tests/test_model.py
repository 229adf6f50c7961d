import torch


def test_logits(model):
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 3)
