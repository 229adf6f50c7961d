"""Real torch: a backward() run only to make a library's hooks fire also
accumulates into the caller's .grad (HKL208); torch.autograd.grad fires the
same hooks and leaves .grad alone.  Run on the fixture's own classes.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def stats():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl208_backward_only_for_hooks.py"))


def _mid_training_step():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    x, y = torch.randn(8, 3), torch.randn(8, 2)
    nn.functional.mse_loss(model(x), y).backward()  # the caller's backward, before optimizer.step()
    return model, x, y, [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("name, changes_grads", [("OutputGradientStats", True), ("FixedOutputGradientStats", False)])
def test_statistics_backward_and_the_callers_gradients(stats, name, changes_grads):
    model, x, y, before = _mid_training_step()
    tool = stats[name](model, [model[0], model[2]])
    moments = tool.compute(nn.functional.mse_loss, x, y)
    assert set(moments) == {0, 1} and all(m > 0 for m in moments.values())  # the hooks fired either way
    same = all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), before))
    assert same is not changes_grads
    if changes_grads:  # the library's backward doubled what the caller was about to step with
        for p, g in zip(model.parameters(), before):
            torch.testing.assert_close(p.grad, 2 * g)


def test_both_compute_the_same_statistics(stats):
    model, x, y, _ = _mid_training_step()
    bad = stats["OutputGradientStats"](model, [model[0], model[2]]).compute(nn.functional.mse_loss, x, y)
    good = stats["FixedOutputGradientStats"](model, [model[0], model[2]]).compute(nn.functional.mse_loss, x, y)
    for key in bad:
        torch.testing.assert_close(bad[key], good[key])
