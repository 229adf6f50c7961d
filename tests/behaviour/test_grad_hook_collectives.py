"""Real torch: a per-parameter gradient hook does not fire for a parameter
the forward did not use (HKL327), so a reducer that launches its all-reduces
only from those hooks never launches one for it; the covering twin does.
Run on the fixture's own classes, in a one-process gloo group."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def reducers(tmp_path_factory):
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    owned = not dist.is_initialized()
    if owned:
        store = dist.FileStore(str(tmp_path_factory.mktemp("gloo") / "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield runpy.run_path(str(FIXTURES / "rules" / "hkl327_grad_hook_collective_skips_unused.py"))
    if owned:
        dist.destroy_process_group()


class TwoHeads(nn.Module):
    """`head_b` is used only when asked: an unused branch on this step."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(3, 3)
        self.head_a = nn.Linear(3, 1)
        self.head_b = nn.Linear(3, 1)

    def forward(self, x, use_b=False):
        h = self.trunk(x)
        return self.head_b(h) if use_b else self.head_a(h)


def _trainable(model):
    return sum(1 for p in model.parameters() if p.requires_grad)


def test_hook_of_an_unused_parameter_does_not_fire():
    model = TwoHeads()
    fired = []
    for p in model.head_b.parameters():
        p.register_post_accumulate_grad_hook(fired.append)
    model(torch.ones(2, 3)).sum().backward()
    assert fired == [] and model.head_b.weight.grad is None


def test_hook_only_reducers_skip_the_unused_head(reducers):
    model = TwoHeads()
    averager = reducers["HookedAverager"](model)
    model(torch.ones(2, 3)).sum().backward()
    assert averager.step() == _trainable(model) - 2  # head_b's weight and bias: never reduced
    averager.close()

    model = TwoHeads()
    opt = reducers["NodeHookOptimizer"](model.parameters())
    model(torch.ones(2, 3)).sum().backward()
    assert opt.step() == _trainable(model) - 2


def test_covering_reducer_reduces_every_parameter(reducers):
    model = TwoHeads()
    averager = reducers["CoveringAverager"](model)
    model(torch.ones(2, 3)).sum().backward()
    assert averager.step() == _trainable(model)
    assert torch.equal(model.head_b.weight.grad, torch.zeros_like(model.head_b.weight))
    averager.close()
