"""The static layer's built-in tables (hooklint/static/forward.py), checked
against real torch: a layer listed as legacy-hook-safe must run one autograd
node whose first grad_input is the gradient of the layer's input."""

from __future__ import annotations

import warnings

import pytest

from hooklint.static.forward import LEGACY_BUILTIN_BINDING, LEGACY_SAFE_BUILTINS

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

_CONSTRUCT = {
    "Conv1d": (lambda: nn.Conv1d(2, 3, 3), (1, 2, 8)),
    "Conv2d": (lambda: nn.Conv2d(2, 3, 3), (1, 2, 6, 6)),
    "Conv3d": (lambda: nn.Conv3d(2, 3, 3), (1, 2, 5, 5, 5)),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(2, 3, 3), (1, 2, 8)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(2, 3, 3), (1, 2, 6, 6)),
    "ConvTranspose3d": (lambda: nn.ConvTranspose3d(2, 3, 3), (1, 2, 4, 4, 4)),
    "MaxPool2d": (lambda: nn.MaxPool2d(2), (1, 1, 4, 4)),
    "MaxPool3d": (lambda: nn.MaxPool3d(2), (1, 1, 4, 4, 4)),
    "AvgPool2d": (lambda: nn.AvgPool2d(2), (1, 1, 4, 4)),
    "AvgPool3d": (lambda: nn.AvgPool3d(2), (1, 1, 4, 4, 4)),
    "Softmax": (lambda: nn.Softmax(dim=-1), (3, 4)),
    "LogSoftmax": (lambda: nn.LogSoftmax(dim=-1), (3, 4)),
    "BatchNorm1d": (lambda: nn.BatchNorm1d(4), (3, 4)),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(2), (2, 2, 3, 3)),
    "BatchNorm3d": (lambda: nn.BatchNorm3d(2), (2, 2, 3, 3, 3)),
    "LayerNorm": (lambda: nn.LayerNorm(4), (3, 4)),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), (2, 4, 3)),
    "AdaptiveAvgPool2d": (lambda: nn.AdaptiveAvgPool2d(2), (1, 2, 5, 5)),
    "AdaptiveAvgPool3d": (lambda: nn.AdaptiveAvgPool3d(2), (1, 2, 5, 5, 5)),
    "AdaptiveMaxPool2d": (lambda: nn.AdaptiveMaxPool2d(2), (1, 2, 5, 5)),
    "Threshold": (lambda: nn.Threshold(0.1, 0.0), (3, 4)),
    "Upsample": (lambda: nn.Upsample(scale_factor=2), (1, 2, 3, 3)),
    "UpsamplingBilinear2d": (lambda: nn.UpsamplingBilinear2d(scale_factor=2), (1, 2, 3, 3)),
    "UpsamplingNearest2d": (lambda: nn.UpsamplingNearest2d(scale_factor=2), (1, 2, 3, 3)),
    "ZeroPad2d": (lambda: nn.ZeroPad2d(1), (1, 2, 3, 3)),
}


def _layer(name):
    if name in _CONSTRUCT:
        make, shape = _CONSTRUCT[name]
        return make(), shape
    return getattr(nn, name)(), (3, 4)


@pytest.mark.parametrize("name", sorted(LEGACY_SAFE_BUILTINS))
def test_legacy_safe_layers_are_one_node_with_the_input_first(name):
    layer, shape = _layer(name)
    x = torch.rand(*shape, requires_grad=True)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer.register_backward_hook(lambda m, gi, go: seen.append(gi))
        out = layer(x)
        # one node: it feeds straight from the input's AccumulateGrad
        feeds = [fn for fn, _ in out.grad_fn.next_functions if fn is not None]
        assert any(type(fn).__name__ == "AccumulateGrad" and fn.variable is x for fn in feeds), \
            f"{name}: {out.grad_fn.name()} does not take the input directly"
        out.sum().backward()
    assert len(seen) == 1
    assert seen[0][0] is not None and seen[0][0].shape == x.shape


@pytest.mark.parametrize("name", sorted(LEGACY_SAFE_BUILTINS))
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_legacy_safe_layers_give_the_full_hooks_input_gradient(name, mode):
    """Stricter: the output's node is the only node the layer makes (every edge
    goes to a leaf), and the legacy grad_input[0] equals the full hook's, for a
    gradient that is not uniform (Softsign, x / (1 + |x|), fails both)."""
    import copy

    torch.manual_seed(0)
    layer, shape = _layer(name)
    layer.train(mode == "train")
    twin = copy.deepcopy(layer)
    x = torch.rand(*shape, requires_grad=True)
    legacy, full = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer.register_backward_hook(lambda m, gi, go: legacy.append(gi[0]))
        out = layer(x)
        edges = [fn for fn, _ in out.grad_fn.next_functions if fn is not None]
        assert all(type(fn).__name__ == "AccumulateGrad" for fn in edges), \
            f"{name}: {out.grad_fn.name()} is not the only node ({[type(fn).__name__ for fn in edges]})"
        weights = torch.rand_like(out)
        (out * weights).sum().backward()
        twin.register_full_backward_hook(lambda m, gi, go: full.append(gi[0]))
        (twin(x.detach().clone().requires_grad_()) * weights).sum().backward()
    assert torch.allclose(legacy[0], full[0])


def test_a_two_op_layer_fails_the_strict_check():
    """The check above can fail: Softsign divides x by 1 + |x|, and the legacy
    hook then sees the division's first input gradient only."""
    x = torch.rand(3, 4, requires_grad=True)
    out = nn.Softsign()(x)
    edges = [fn for fn, _ in out.grad_fn.next_functions if fn is not None]
    assert not all(type(fn).__name__ == "AccumulateGrad" for fn in edges)


@pytest.mark.parametrize(
    ("name", "make", "shape", "node"),
    [
        ("Linear", lambda: nn.Linear(4, 2), (3, 4), "AddmmBackward0"),
        ("MaxPool1d", lambda: nn.MaxPool1d(2), (1, 1, 4), "SqueezeBackward1"),
        ("Dropout", lambda: nn.Dropout(0.5), (3, 4), "MulBackward0"),
    ],
)
def test_documented_bindings_of_other_layers(name, make, shape, node):
    assert name in LEGACY_BUILTIN_BINDING
    layer = make()
    out = layer(torch.rand(*shape, requires_grad=True))
    assert out.grad_fn.name() == node
    assert node.split("Backward")[0].lower() in LEGACY_BUILTIN_BINDING[name][0].lower()


def test_linear_without_bias_binds_to_mm():
    import ast

    from hooklint.static.forward import ForwardAnalysis
    from hooklint.static.semantic import SemanticModel
    from hooklint.static.values import Inference

    tree = ast.parse("import torch.nn as nn\nlayer = nn.Linear(4, 2, bias=False)\n")
    model = SemanticModel(tree)
    inference = Inference(model)
    op = ForwardAnalysis(model, inference).last_op(inference.infer(tree.body[1].value))
    out = nn.Linear(4, 2, bias=False)(torch.rand(3, 4, requires_grad=True))
    assert out.grad_fn.name() == "MmBackward0" and "MmBackward0" in op.description
