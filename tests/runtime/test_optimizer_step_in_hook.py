"""HKL205 at run time: an optimizer step made from a backward hook while the
parameters' `.grad` still holds a gradient that an earlier step from a hook
already applied (the hook steps on every micro-batch, the loop zeroes every N).
What is certain is only that: a hook that steps and zeroes on every micro-batch
of an accumulation loop looks, at run time, like the optimizer-in-backward
pattern without accumulation, and is not reported here (the static rule
reports it where the file shows the loop)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

PROGRAM = """
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
optimizers = {{p: torch.optim.{optimizer}([p], lr=0.1) for p in model.parameters()}}
state = {{"last": False}}

def optimizer_hook(param):
{body}

for p in model.parameters():
    p.register_post_accumulate_grad_hook(optimizer_hook)  # REGISTER

accum_steps = {accum}
generator = torch.Generator().manual_seed(1)
for i in range(8):
    state["last"] = (i + 1) % accum_steps == 0
    x, y = torch.randn(3, 6, generator=generator), torch.randn(3, 1, generator=generator)
    (F.mse_loss(model(x), y) / accum_steps).backward()
    if (i + 1) % accum_steps == 0:
        for optimizer in optimizers.values():
            {reset}
"""

STEP_ONLY = "    optimizers[param].step()"
STEP_AND_ZERO = "    optimizers[param].step()\n    optimizers[param].zero_grad()"
GATED = "    if state['last']:\n        optimizers[param].step()"


def _program(body=STEP_ONLY, accum=4, optimizer="SGD", reset="optimizer.zero_grad()"):
    return PROGRAM.format(body=body, accum=accum, optimizer=optimizer, reset=reset)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_a_hook_that_steps_on_accumulating_gradients_is_reported(observe, optimizer):
    run = observe(_program(optimizer=optimizer))
    finding = run.only("HKL205")
    assert finding.location.row == run.line_of("# REGISTER")
    assert finding.message.startswith(f"post-accumulate-grad hook `optimizer_hook` calls `{optimizer}.step()` for "
                                      "`model.")
    assert "still holds the gradient an earlier step from this hook already applied" in finding.message
    # 2 windows of 4 micro-batches: the 2nd, 3rd and 4th step of each re-apply, for each of the 4 parameters
    assert "(observed 6 times)" in finding.message


def test_what_the_finding_claims_the_gradient_is_applied_again():
    """With plain SGD, stepping on the accumulating gradient after every micro-batch
    moves the weights by lr * (4 g1 + 3 g2 + 2 g3 + g4) instead of lr * (g1 + ... + g4)."""
    namespace: dict = {}
    exec(compile(_program(accum=4).replace("range(8)", "range(4)"), "<program>", "exec"), namespace)  # noqa: S102
    got = torch.cat([p.detach().reshape(-1) for p in namespace["model"].parameters()])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    for _ in range(4):
        x, y = torch.randn(3, 6, generator=generator), torch.randn(3, 1, generator=generator)
        (torch.nn.functional.mse_loss(model(x), y) / 4).backward()
        optimizer.step()  # the same as the hook: a step on what `.grad` holds after each micro-batch
    assert torch.allclose(got, torch.cat([p.detach().reshape(-1) for p in model.parameters()]), atol=1e-6)


@pytest.mark.parametrize("body, accum, reset", [
    (STEP_AND_ZERO, 4, "pass"),            # each micro-batch's gradient is stepped once (the static rule's case)
    (GATED, 4, "optimizer.zero_grad()"),   # the fix: one step on the accumulated gradient
    (STEP_AND_ZERO, 1, "pass"),            # optimizer in backward without accumulation
    (STEP_ONLY, 1, "optimizer.zero_grad()"),  # zeroed after every backward by the loop
    (STEP_ONLY, 1, "[p.grad.data.zero_() for p in optimizer.param_groups[0]['params']]"),  # reset behind autograd
])
def test_each_gradient_used_once_is_not_reported(observe, body, accum, reset):
    run = observe(_program(body=body, accum=accum, reset=reset))
    assert [f.code for f in run.findings if f.code == "HKL205"] == []


def test_a_step_outside_hooks_is_not_reported(observe):
    run = observe("""
        import torch
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(6):
            model(torch.ones(2, 4)).sum().backward()
            optimizer.step()  # deliberately never zeroed: a plain loop, no hook involved
    """)
    assert [f.code for f in run.findings if f.code == "HKL205"] == []
