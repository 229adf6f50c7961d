"""Real torch: what HKL343 claims, and that the fix it suggests works.

A module full backward hook that updates a load-balancing bias from counts
its forward gathered, then resets the counts (torchtitan's MoE before the
fix), runs in every backward.  Under gradient accumulation over four
micro-batches (one optimizer step intended) the bias moves four times, the
counts are reset three times before the step, and micro-batches 2-4 of the
step run with a bias the first ones changed.  The same update in an
optimizer step pre-hook runs once per step, over the counts of all four.
"""

from __future__ import annotations

import pytest

from conftest import lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

ACCUM = 4
EXPERTS = 3


class Router(nn.Module):
    def __init__(self, in_hook: bool):
        super().__init__()
        torch.manual_seed(0)
        self.gate = nn.Linear(5, EXPERTS)
        self.register_buffer("bias", torch.zeros(EXPERTS))
        self.register_buffer("counts", torch.zeros(EXPERTS))
        self.updates = 0
        self.counts_at_update: list[float] = []
        self.biases_seen: list[torch.Tensor] = []
        if in_hook:
            self.register_full_backward_hook(self._rebalance_hook)

    def rebalance(self):
        with torch.no_grad():
            self.counts_at_update.append(float(self.counts.sum()))
            self.bias.add_(0.1 * torch.sign(self.counts.mean() - self.counts))
            self.counts.zero_()
        self.updates += 1

    def _rebalance_hook(self, module, grad_input, grad_output):
        self.rebalance()

    def forward(self, x):
        self.biases_seen.append(self.bias.clone())
        scores = self.gate(x)
        choice = (scores.detach() + self.bias).argmax(-1)
        self.counts += torch.bincount(choice, minlength=EXPERTS).float()
        return scores


def _train(in_hook: bool, steps: int = 1):
    router = Router(in_hook)
    optimizer = torch.optim.SGD(router.parameters(), lr=0.1)
    if not in_hook:
        optimizer.register_step_pre_hook(lambda opt, args, kwargs: router.rebalance())
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for _ in range(ACCUM):
            x = torch.randn(8, 5, generator=generator, requires_grad=True)
            (router(x).pow(2).mean() / ACCUM).backward()
        optimizer.step()
        optimizer.zero_grad()
    return router


def test_backward_hook_updates_once_per_micro_batch():
    router = _train(in_hook=True)
    assert router.updates == ACCUM  # four updates for one optimizer step
    # each update saw one micro-batch's 8 tokens, not the step's 32
    assert router.counts_at_update == [8.0] * ACCUM
    # the later micro-batches of the same step ran with a bias the earlier ones changed
    assert not torch.equal(router.biases_seen[0], router.biases_seen[-1])


def test_step_pre_hook_updates_once_per_step():
    router = _train(in_hook=False, steps=2)
    assert router.updates == 2
    assert router.counts_at_update == [8.0 * ACCUM] * 2
    # within a step, every micro-batch ran with the same bias
    first_step = router.biases_seen[:ACCUM]
    assert all(torch.equal(first_step[0], b) for b in first_step)


BUGGY = '''
import torch
from torch import nn

class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(5, 3)
        self.register_buffer("bias", torch.zeros(3))
        self.register_buffer("counts", torch.zeros(3))
        self.register_full_backward_hook(self._rebalance_hook)

    def rebalance(self):
        with torch.no_grad():
            self.bias.add_(0.1 * torch.sign(self.counts.mean() - self.counts))
            self.counts.zero_()

    def _rebalance_hook(self, module, grad_input, grad_output):
        self.rebalance()

    def forward(self, x):
        scores = self.gate(x)
        self.counts += torch.bincount((scores.detach() + self.bias).argmax(-1), minlength=3).float()
        return scores
'''

FIXED = BUGGY.replace("        self.register_full_backward_hook(self._rebalance_hook)\n", "")


def test_rule_reports_the_hook_and_not_the_step_pre_hook_twin():
    found = lint(BUGGY, "HKL343")
    assert [(f.code, f.location.row) for f in found] == [("HKL343", 15), ("HKL343", 16)]
    assert "once per backward pass" in found[0].message
    assert lint(FIXED, "HKL343") == []
