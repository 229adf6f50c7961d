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
