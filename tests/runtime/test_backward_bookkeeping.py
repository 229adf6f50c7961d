"""The shortcuts the run-time layer takes on every instrumented backward (issue 17)
give what the slower forms gave: the call's arguments as `Signature.bind` reads
them, the graph's parameters walked after the backward as before it, HKL503's
walk as the full walk filtered, a call site built later as at the call."""

from __future__ import annotations

import inspect
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from torch import nn  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from hooklint.runtime import core, frames  # noqa: E402

_MISSING = object()


def _bound(signature: inspect.Signature, args: tuple, kwargs: dict):
    try:
        return signature.bind(*args, **kwargs).arguments
    except TypeError:
        return _MISSING


def _read(reader, args: tuple, kwargs: dict):
    try:
        return reader(args, kwargs)
    except TypeError:
        return _MISSING


CALLS = [
    ((), {}),
    (("t",), {}),
    ((), {"tensors": "t", "outputs": "t"}),
    (("t", "g"), {}),
    (("t", None, True, False), {"inputs": ["i"]}),  # how Tensor.backward calls torch.autograd.backward
    (("t",), {"inputs": "i", "retain_graph": True}),
    (("t", "i"), {"grad_outputs": None}),
    (("t",), {"tensors": "t"}),  # given twice
    (("t",), {"outputs": "t"}),
    (("t",), {"no_such_argument": 1}),
    (tuple(range(12)), {}),  # too many
    ((), {"inputs": "i"}),  # the roots missing
]


@pytest.mark.parametrize("function", [torch.autograd.backward, torch.autograd.grad], ids=["backward", "grad"])
def test_argument_reader_agrees_with_signature_bind(function):
    original = getattr(function, "__wrapped__", function)  # a session may be active in this process
    signature = inspect.signature(original)
    reader = core._argument_reader(signature)
    for args, kwargs in CALLS:
        expected = _bound(signature, args, kwargs)
        given = _read(reader, args, kwargs)
        if expected is _MISSING:
            assert given is _MISSING, (args, kwargs)
            continue
        assert given is not _MISSING, (args, kwargs)
        for name in signature.parameters:
            assert given(name) == expected.get(name), (args, kwargs, name)


def test_argument_reader_falls_back_to_bind_for_other_signatures():
    def backward(tensors, *, inputs=None):
        return None

    signature = inspect.signature(backward)
    reader = core._argument_reader(signature)
    assert reader(("t",), {"inputs": "i"})("inputs") == "i"
    with pytest.raises(TypeError):
        reader(("t", "i"), {})


class DropsWeightGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(weight)
        return x * weight

    @staticmethod
    def backward(ctx, grad):
        (weight,) = ctx.saved_tensors
        return grad * weight, None


def _graphs():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 1))
    frozen = nn.Linear(6, 6)
    frozen.weight.requires_grad_(False)
    shared = nn.Linear(6, 6)
    scale = nn.Parameter(torch.ones(6))
    block = nn.Linear(6, 6)
    plain_leaf = torch.ones(6, requires_grad=True)
    compiled = torch.compile(nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 1)), backend="aot_eager")
    x = torch.rand(3, 6)
    return {
        "eager": lambda: mlp(x).sum(),
        "frozen weight, plain leaf": lambda: (frozen(x) * plain_leaf).sum(),
        "a layer used twice": lambda: shared(torch.tanh(shared(x))).sum(),
        "custom Function dropping a gradient": lambda: DropsWeightGrad.apply(block(x), scale).sum(),
        "non-reentrant checkpoint": lambda: checkpoint(block, x.requires_grad_(), use_reentrant=False).sum(),
        "torch.compile (aot_eager)": lambda: compiled(x).sum(),
    }


def _entries(leaves):
    return sorted((id(param), id(node), slot, seq) for param, node, slot, seq in leaves)


@pytest.mark.parametrize("name", list(_graphs()))
def test_a_graph_keeps_its_parameters_after_its_backward(name):
    """`BackwardInfo.leaves` is walked after the backward: running it must leave
    the graph's edges (and the nodes' sequence numbers) as they were."""
    torch._dynamo.reset()
    make = _graphs()[name]
    make().backward()  # compiled: compile and run once first
    loss = make()
    before = core._parameters_in_graph([loss.grad_fn])
    assert before, "the graph has parameters"
    loss.backward()
    assert _entries(core._parameters_in_graph([loss.grad_fn])) == _entries(before)


@pytest.mark.parametrize("name", list(_graphs()))
def test_hkl503_walk_is_the_full_walk_without_the_parameters_that_have_a_gradient(name):
    torch._dynamo.reset()
    make = _graphs()[name]
    loss = make()
    loss.backward()
    roots = [loss.grad_fn]
    full = [(param, node, slot) for param, node, slot, _seq in core._parameters_in_graph(roots)
            if param.grad is None]
    lean = [(param, node, slot) for param, node, slot, _seq in core._parameters_without_grad_in_graph(roots)]
    assert [tuple(map(id, entry[:2])) + entry[2:] for entry in lean] == \
        [tuple(map(id, entry[:2])) + entry[2:] for entry in full]
    expected_missing = 1 if name == "custom Function dropping a gradient" else 0
    assert len(lean) == expected_missing


def _noted_by_a_callee():
    """What the backward entry point notes of its caller, and the site the caller's
    frame gives at that moment (it is executing the call)."""
    frame = sys._getframe(1)
    info = core.BackwardInfo([], frame, True)
    return info, frames.site_of(frame)


def test_a_backward_site_built_later_is_the_site_at_the_call():
    info, at_call = _noted_by_a_callee()
    moved_on = [1, 2, 3]  # the frame has moved on when the site is asked for
    assert moved_on and info.site == at_call
    assert frames.site_at(*info._call) == at_call
    assert at_call.line == test_a_backward_site_built_later_is_the_site_at_the_call.__code__.co_firstlineno + 1
    assert at_call.column == len("    info, at_call = ") + 1  # the span of the call, as site_of gives it
