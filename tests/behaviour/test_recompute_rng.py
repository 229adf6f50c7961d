"""Real torch: a hand-written checkpoint whose backward re-runs a dropout block
without restoring the generator state gets gradients of another mask (HKL516);
the twin that saves and restores `torch.get_rng_state()` matches the block run
without checkpointing."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"


@pytest.fixture(scope="module")
def bad():
    return runpy.run_path(str(RULES / "hkl516_recompute_without_rng_state.py"))


@pytest.fixture(scope="module")
def good():
    return runpy.run_path(str(RULES / "hkl516_recompute_restores_rng.py"))


def _block():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5))


def _reference_grad(x):
    """The gradient of the block run once, with the mask drawn after seed 1."""
    block = _block()
    x = x.clone().requires_grad_(True)
    torch.manual_seed(1)
    block(x).sum().backward()
    return x.grad


def _checkpointed_grad(function_class, x, *extra):
    block = _block()
    x = x.clone().requires_grad_(True)
    torch.manual_seed(1)
    out = function_class.apply(block, *extra, x)
    out.sum().backward()
    return x.grad


@pytest.mark.parametrize("name, extra", [("RecomputeBlock", ()), ("Rerun", ())])
def test_recompute_draws_another_dropout_mask(bad, name, extra):
    x = torch.rand(8, 16)
    assert not torch.allclose(_checkpointed_grad(bad[name], x, *extra), _reference_grad(x))


def test_recompute_with_restored_state_matches(good):
    x = torch.rand(8, 16)
    assert torch.allclose(_checkpointed_grad(good["RecomputeBlock"], x), _reference_grad(x))


def test_without_random_ops_the_recompute_is_exact(bad):
    # why the rule is a warning: a deterministic block recomputes exactly
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
    x = torch.rand(8, 16, requires_grad=True)
    bad["RecomputeBlock"].apply(block, x).sum().backward()
    got = x.grad.clone()
    x.grad = None
    block(x).sum().backward()
    assert torch.allclose(got, x.grad)
