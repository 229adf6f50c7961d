"""Real torch: what HKL205 claims, and that the fixes it suggests work.

An optimizer stepped from a post-accumulate-grad hook (PyTorch's "optimizer
in backward" tutorial) runs in every backward.  Under gradient accumulation
(four micro-batches, each loss divided by four, one optimizer step intended)
it steps four times, each on one micro-batch's gradient: the weights end
elsewhere than after the accumulated step, with no error.
"""

from __future__ import annotations

import pytest

from conftest import lint

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.torch

ACCUM = 4
LR = 0.1


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 1))


def _micro_batches():
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(3, 6, generator=generator), torch.randn(3, 1, generator=generator)) for _ in range(ACCUM)]


def _flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def accumulated_step(optimizer_class=torch.optim.SGD, **kwargs):
    """The intended update: the micro-batches' gradients summed, one step."""
    model = _model()
    optimizer = optimizer_class(model.parameters(), lr=LR, **kwargs)
    for x, y in _micro_batches():
        (F.mse_loss(model(x), y) / ACCUM).backward()
    optimizer.step()
    optimizer.zero_grad()
    return _flat(model)


def step_in_hook(optimizer_class=torch.optim.SGD, gate=None, states=None, **kwargs):
    """The optimizer in backward, under the same accumulation loop.  ``gate``:
    a dict whose "now" the loop sets on the last micro-batch (the fix).
    ``states``: a list that receives each optimizer's state afterwards."""
    model = _model()
    optimizers = {p: optimizer_class([p], lr=LR, **kwargs) for p in model.parameters()}

    def optimizer_hook(param):
        if gate is not None and not gate["now"]:
            return
        optimizers[param].step()
        optimizers[param].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)
    for i, (x, y) in enumerate(_micro_batches()):
        if gate is not None:
            gate["now"] = (i + 1) % ACCUM == 0
        (F.mse_loss(model(x), y) / ACCUM).backward()
    if states is not None:
        states.extend(optimizers[p].state[p] for p in model.parameters())
    return _flat(model)


def one_sgd_step_per_micro_batch():
    """What the hook really does: a separate SGD step on each micro-batch's gradient."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in _micro_batches():
        (F.mse_loss(model(x), y) / ACCUM).backward()
        optimizer.step()
        optimizer.zero_grad()
    return _flat(model)


def test_the_hook_steps_on_every_micro_batch_and_the_update_is_wrong():
    intended = accumulated_step()
    got = step_in_hook()
    difference = (got - intended).abs().max().item()
    assert difference > 1e-3, difference  # measured: 0.0029 (lr 0.1, one intended step)
    # it is exactly four separate steps, one per micro-batch
    assert torch.allclose(got, one_sgd_step_per_micro_batch(), atol=1e-7)


def test_with_adam_the_state_advances_once_per_micro_batch():
    intended = accumulated_step(torch.optim.Adam)
    states: list = []
    got = step_in_hook(torch.optim.Adam, states=states)
    assert [int(state["step"]) for state in states] == [ACCUM] * len(states)  # 4 Adam steps, 1 intended
    difference = (got - intended).abs().max().item()
    assert difference > 0.05, difference  # measured: 0.25 at most, 0.10 on average (lr 0.1)


def test_a_zero_grad_in_the_hook_erases_the_accumulated_gradient():
    model = _model()
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(lambda param: setattr(param, "grad", None) if not last["now"] else None)
    last = {"now": False}
    batches = _micro_batches()
    for i, (x, y) in enumerate(batches):
        last["now"] = i == ACCUM - 1
        (F.mse_loss(model(x), y) / ACCUM).backward()
    only_last = _model()
    (F.mse_loss(only_last(batches[-1][0]), batches[-1][1]) / ACCUM).backward()
    for kept, alone in zip(model.parameters(), only_last.parameters()):
        assert torch.allclose(kept.grad, alone.grad)  # nothing of the first three micro-batches is left


def test_fix_step_in_the_hook_only_on_the_last_micro_batch():
    assert torch.allclose(step_in_hook(gate={"now": False}), accumulated_step(), atol=1e-7)
    assert torch.allclose(step_in_hook(torch.optim.Adam, gate={"now": False}), accumulated_step(torch.optim.Adam),
                          atol=1e-7)


def test_fix_no_accumulation():
    """One backward over the whole batch: the hook's single step is the intended one."""
    model = _model()
    optimizers = {p: torch.optim.SGD([p], lr=LR) for p in model.parameters()}

    def optimizer_hook(param):
        optimizers[param].step()
        optimizers[param].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)
    batches = _micro_batches()
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    F.mse_loss(model(x), y).backward()  # the mean over 12 rows = the mean of the 4 micro-batch means
    assert torch.allclose(_flat(model), accumulated_step(), atol=1e-6)


BUGGY = f"""
import torch
import torch.nn.functional as F

def train(model, micro_batches, accum_steps={ACCUM}):
    optimizers = {{p: torch.optim.SGD([p], lr={LR}) for p in model.parameters()}}

    def optimizer_hook(param):
        optimizers[param].step()  # HKL205
        optimizers[param].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)
    for i, (x, y) in enumerate(micro_batches):
        (F.mse_loss(model(x), y) / accum_steps).backward()
"""

FIXED = BUGGY.replace("    def optimizer_hook(param):\n", "    def optimizer_hook(param):\n"
                      "        if not last_micro_batch['now']:\n            return\n") \
    .replace("    for i, (x, y) in enumerate(micro_batches):\n",
             "    last_micro_batch = {'now': False}\n    for i, (x, y) in enumerate(micro_batches):\n"
             "        last_micro_batch['now'] = (i + 1) % accum_steps == 0\n") \
    .replace("  # HKL205", "")


def test_hooklint_reports_the_buggy_loop_and_not_the_fixed_one():
    found = [f for f in lint(BUGGY, "HKL205")]
    assert [(f.code, f.location.row) for f in found] == [("HKL205", 9)]
    assert "accumulates gradients over micro-batches" in found[0].message
    assert lint(FIXED, "HKL205") == []


def _run(source: str, model, micro_batches):
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)  # noqa: S102 - the test's own program
    namespace["train"](model, micro_batches)
    return _flat(model)


def test_the_linted_programs_compute_what_the_rule_says():
    assert not torch.allclose(_run(BUGGY, _model(), _micro_batches()), accumulated_step(), atol=1e-4)
    assert torch.allclose(_run(FIXED, _model(), _micro_batches()), accumulated_step(), atol=1e-7)


def _accumulate_with_hook(on_backward, steps=1):
    """Four micro-batches per optimizer step, ``on_backward`` run by a
    post-accumulate-grad hook on the first layer's weight."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    model[0].weight.register_post_accumulate_grad_hook(lambda p: on_backward(model, optimizer))
    for _ in range(steps):
        for x, y in _micro_batches():
            (F.mse_loss(model(x), y) / ACCUM).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def test_scheduler_stepped_from_a_hook_advances_per_micro_batch():
    schedulers = []

    def tick(model, optimizer):
        if not schedulers:
            schedulers.append(torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5))
        schedulers[0].step()

    _model_, optimizer = _accumulate_with_hook(tick)
    assert schedulers[0].last_epoch == ACCUM  # four schedule steps for one optimizer step
    assert optimizer.param_groups[0]["lr"] == pytest.approx(LR * 0.5 ** (ACCUM // 2))
    # the twin: the scheduler stepped after the optimizer, once per step
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    for x, y in _micro_batches():
        (F.mse_loss(model(x), y) / ACCUM).backward()
    optimizer.step()
    scheduler.step()
    assert scheduler.last_epoch == 1 and optimizer.param_groups[0]["lr"] == pytest.approx(LR)


def test_averaged_model_updated_from_a_hook_counts_every_micro_batch():
    averages = []

    def refresh(model, optimizer):
        if not averages:
            averages.append(torch.optim.swa_utils.AveragedModel(model))
        averages[0].update_parameters(model)

    _accumulate_with_hook(refresh, steps=2)
    assert int(averages[0].n_averaged) == 2 * ACCUM  # eight updates for two optimizer steps
    # the twin: an optimizer step post-hook updates the average once per step
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    average = torch.optim.swa_utils.AveragedModel(model)
    optimizer.register_step_post_hook(lambda opt, args, kwargs: average.update_parameters(model))
    for _ in range(2):
        for x, y in _micro_batches():
            (F.mse_loss(model(x), y) / ACCUM).backward()
        optimizer.step()
        optimizer.zero_grad()
    assert int(average.n_averaged) == 2
