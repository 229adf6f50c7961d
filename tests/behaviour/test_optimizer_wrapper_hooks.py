"""Real torch, on fixtures/projects/optimizer_wrappers (HKL304): an optimizer
wrapper whose constructor hooks the caller's parameters, gathered into
containers on the object, and keeps no handle, stacks one more hook per
wrapper built on the same optimizer; the wrapper that keeps and removes its
handles, the one that hooks its own copies and the singleton do not."""

from __future__ import annotations

import sys

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

PROJECT = FIXTURES / "projects" / "optimizer_wrappers"


@pytest.fixture(scope="module")
def sharded():
    sys.path.insert(0, str(PROJECT))
    try:
        import zero.sharded

        yield zero.sharded
    finally:
        sys.path.remove(str(PROJECT))
        for name in [n for n in sys.modules if n == "zero" or n.startswith("zero.")]:
            del sys.modules[name]


def _backward(model):
    model(torch.ones(1, 3)).sum().backward()


def test_each_new_wrapper_of_the_same_optimizer_hooks_the_parameters_again(sharded):
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    first = sharded.ShardedOptimizer(optimizer, overlap=True)
    _backward(model)
    assert len(first.reduced) == 2  # weight and bias, once each
    second = sharded.ShardedOptimizer(optimizer, overlap=True)  # a trainer re-initialised in the same process
    first.reduced.clear()
    _backward(model)
    assert len(first.reduced) == 2 and len(second.reduced) == 2  # the first wrapper's hooks still run
    assert len(model.weight._post_accumulate_grad_hooks) == 2  # one more per wrapper, none removable
    quiet = sharded.ShardedOptimizer(optimizer, overlap=False)  # the switch off: no hook
    _backward(model)
    assert quiet.reduced == []
    assert len(model.weight._post_accumulate_grad_hooks) == 2


def test_tensor_hooks_of_two_wrappers_both_scale_the_gradient(sharded):
    model = nn.Linear(3, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sharded.BucketedOptimizer(optimizer, scale=2.0)
    _backward(model)
    once = model.weight.grad.clone()
    model.weight.grad = None
    sharded.BucketedOptimizer(optimizer, scale=2.0)
    _backward(model)
    assert torch.allclose(model.weight.grad, once * 2)  # two stacked hooks: scaled twice


def test_frozen_parameter_makes_the_unfiltered_registration_raise(sharded):
    model = nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        sharded.KeyedOptimizer(optimizer)  # HKL206 on the same line


def test_the_quiet_twins(sharded):
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    kept = sharded.KeptHandles(optimizer)
    assert len(model.weight._post_accumulate_grad_hooks) == 1
    kept.remove_hooks()
    assert not model.weight._post_accumulate_grad_hooks  # every hook it added is gone
    copies = sharded.MasterCopies(optimizer)
    assert all(m is not p for m, p in zip(copies.masters, model.parameters()))
    assert not model.weight._backward_hooks  # the caller's parameters got no hook
    first = sharded.SharedReducer(optimizer)
    second = sharded.SharedReducer(optimizer)
    assert second is first
    assert len(model.weight._post_accumulate_grad_hooks) == 1  # hooked once, not per construction
