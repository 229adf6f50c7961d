"""Real torch: what HKL204 claims, and that the fixes it suggests work.

A tensor hook on a parameter is a pre-hook of its AccumulateGrad node: it runs
before this step's gradient is accumulated into `.grad` (hook-semantics.md,
section 2, for the module-hook form of the same fact, HKL201).
"""

from __future__ import annotations

import pytest

from conftest import lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

X = torch.arange(12.0).reshape(3, 4) / 10


def _layer():
    torch.manual_seed(0)
    return nn.Linear(4, 2)


def _clean_grad(x=X):
    layer = _layer()
    layer(x).sum().backward()
    return layer.weight.grad.clone()


def test_grad_is_none_inside_the_hook_after_zero_grad_set_to_none():
    layer = _layer()
    layer(X).sum().backward()  # step 1: .grad exists
    layer.zero_grad(set_to_none=True)  # the default of zero_grad since torch 2.0
    seen = []
    layer.weight.register_hook(lambda g: seen.append(layer.weight.grad))
    layer(X).sum().backward()
    assert seen == [None]
    assert layer.weight.grad is not None  # accumulated after the hook ran


def test_grad_is_the_previous_steps_inside_the_hook_when_kept():
    layer = _layer()
    layer(X).sum().backward()
    step1 = layer.weight.grad.clone()
    seen = []
    layer.weight.register_hook(lambda g: seen.append(layer.weight.grad.clone()))
    layer(X * 2).sum().backward()  # gradient accumulation: no zero_grad in between
    (inside,) = seen
    assert torch.equal(inside, step1)
    assert torch.allclose(layer.weight.grad, step1 + _clean_grad(X * 2))


def add_gradient_noise(model, noise):  # the trial script's hook, with a fixed "noise"
    for p in model.parameters():
        def hook(grad, p=p):
            if p.grad is not None:
                p.grad.add_(noise(p))
        p.register_hook(hook)


def test_guarded_noise_edit_never_runs_after_zero_grad():
    layer = _layer()
    add_gradient_noise(layer, lambda p: torch.full_like(p, 100.0))
    for _ in range(3):
        layer.zero_grad()  # set_to_none=True
        layer(X).sum().backward()
        assert torch.equal(layer.weight.grad, _clean_grad())  # no noise, ever


def test_unguarded_edit_raises_on_none():
    layer = _layer()
    layer.weight.register_hook(lambda g, p=layer.weight: p.grad.mul_(0.5))
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'mul_'"):
        layer(X).sum().backward()


def test_scaling_edit_acts_on_the_stale_gradient_and_is_lost():
    layer = _layer()
    layer(X).sum().backward()
    layer.zero_grad(set_to_none=False)  # .grad kept as zeros

    def halve(grad, p=layer.weight):  # returns None: the gradient passes on unchanged
        p.grad.mul_(0.5)

    layer.weight.register_hook(halve)
    layer(X).sum().backward()
    # halving the zeros did nothing; this step's gradient was added unscaled
    assert torch.equal(layer.weight.grad, _clean_grad())


def test_lambda_editing_grad_in_place_returns_it_and_replaces_the_gradient():
    layer = _layer()
    layer(X).sum().backward()
    layer.zero_grad(set_to_none=False)
    layer.weight.register_hook(lambda g, p=layer.weight: p.grad.mul_(0.5))  # returns the zeroed .grad
    layer(X).sum().backward()
    assert torch.equal(layer.weight.grad, torch.zeros_like(layer.weight))


def test_assigning_grad_in_the_hook_has_this_steps_gradient_added_on_top():
    p = nn.Parameter(torch.ones(3))

    def replace(grad, p=p):  # meant to set this step's gradient to 5
        p.grad = torch.full_like(grad, 5.0)
        return p.grad

    p.register_hook(replace)
    (p * 2).sum().backward()
    assert torch.equal(p.grad, torch.full((3,), 10.0))  # 5 assigned, then the returned 5 accumulated


def test_clip_sees_the_previous_steps_gradient_and_this_one_goes_in_unclipped():
    layer = _layer()
    layer(X).sum().backward()
    step1 = layer.weight.grad.clone()
    calls = []

    def clip_accumulated(grad, p=layer.weight):  # meant to clip this step's gradient
        calls.append(p.grad.abs().max().item())
        p.grad.clamp_(-0.01, 0.01)

    layer.weight.register_hook(clip_accumulated)
    layer(X).sum().backward()
    assert calls == [step1.abs().max().item()]  # it saw step 1's gradient
    assert layer.weight.grad.abs().max() > 0.01  # this step's gradient went in unclipped


def test_closure_over_the_loop_variable_sees_the_last_parameter():
    layer = _layer()
    seen = []
    for p in layer.parameters():
        p.register_hook(lambda g: seen.append(p))
    layer(X).sum().backward()
    assert len(seen) == 2 and all(t is layer.bias for t in seen)


# ------------------------------------------------------------------ the fixes


def test_returning_the_new_gradient_applies_the_noise_every_step():
    layer = _layer()
    for p in layer.parameters():
        p.register_hook(lambda grad: grad + 100.0)
    for _ in range(2):
        layer.zero_grad()
        layer(X).sum().backward()
        assert torch.equal(layer.weight.grad, _clean_grad() + 100.0)


def test_post_accumulate_hook_edits_this_steps_gradient():
    layer = _layer()

    def add_noise(p):  # must return None (a lambda would return the edited .grad: RuntimeError)
        p.grad.add_(100.0)

    for p in layer.parameters():
        p.register_post_accumulate_grad_hook(add_noise)
    for _ in range(2):
        layer.zero_grad()
        layer(X).sum().backward()
        assert torch.equal(layer.weight.grad, _clean_grad() + 100.0)


# ------------------------------------------------------------------ the rule on these shapes

BUGGY = """
import torch

def add_gradient_noise(model, std):
    for p in model.parameters():
        def noise(grad, p=p):
            if p.grad is not None:
                p.grad.add_(torch.randn_like(p.grad) * std)
        p.register_hook(noise)
"""

FIXED = """
import torch

def add_gradient_noise(model, std):
    for p in model.parameters():
        if p.requires_grad:  # a frozen parameter cannot be hooked (HKL206)
            p.register_hook(lambda grad: grad + torch.randn_like(grad) * std)

def add_gradient_noise_after(model, std):
    def noise(p):
        p.grad.add_(torch.randn_like(p.grad) * std)
    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(noise)
"""


def test_rule_reports_the_buggy_shape_and_not_the_fixes():
    (finding,) = lint(BUGGY, "HKL204")
    assert finding.location.row == 7
    assert "None after `zero_grad()`" in finding.message
    assert lint(FIXED) == []  # no rule at all: HKL203 would flag a post-accumulate lambda's return
