"""hooklint.testing: the assertion helpers fail on the buggy models with a
message that stands alone, pass on the fixed ones, and leave the model as it
was."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from hooklint.testing import (  # noqa: E402
    assert_grad_edits_take_effect,
    assert_hooks_ok,
    assert_no_legacy_hooks,
)

pytestmark = pytest.mark.torch


def zero_element_if_present(module, grad_input, grad_output):  # DEFINITION
    if module.weight.grad is not None:
        module.weight.grad[0, 1, 2, 1] = 0.0


def first_layer_net():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 1, 3), nn.Flatten(), nn.Linear(64, 2))
    net[0].register_full_backward_hook(zero_element_if_present)
    return net


def _definition_line() -> int:
    return next(n for n, line in enumerate(open(__file__), start=1) if "# DEFINITION" in line)


def test_assert_hooks_ok_reports_stale_edit():
    net = first_layer_net()
    with pytest.raises(AssertionError) as info:
        assert_hooks_ok(net, torch.rand(2, 3, 10, 10))
    message = str(info.value)
    # the first pass finds `.grad` None (the hook does nothing), the second a stale one
    assert message.startswith("hooks of Sequential are not OK: 2 findings in 2 forward and backward passes.")
    assert "HKL201 grad-edit-in-module-hook: full backward hook `zero_element_if_present` on `net.0` (Conv2d)" \
        in message
    assert "stale" in message and "the edit was lost" in message
    assert re.search(rf"  at: \S*test_testing_helpers.py:{_definition_line()}: def zero_element_if_present", message)
    for part in ("  expected: ", "  observed: ", "  fix: Edit the gradient from a hook on the parameter",
                 "  docs: https://"):
        assert part in message


def test_assert_hooks_ok_hook_raising_is_reported_with_the_error():
    net = nn.Sequential(nn.Conv2d(3, 1, 3))

    def freeze(module, grad_input, grad_output):
        module.weight.grad.data[0, 1, 2, 1] = 0

    net[0].register_full_backward_hook(freeze)
    with pytest.raises(AssertionError) as info:
        assert_hooks_ok(net, torch.rand(1, 3, 10, 10))
    assert "`.grad` was None" in str(info.value) and "The run stopped with AttributeError" in str(info.value)
    assert isinstance(info.value.__cause__, AttributeError)


def test_assert_hooks_ok_passes_and_restores_the_model():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 1, 3), nn.BatchNorm2d(1), nn.Flatten(), nn.Linear(64, 2))
    mask = torch.ones_like(net[0].weight)
    mask[0, 1, 2, 1] = 0
    net[0].weight.register_hook(lambda g: g * mask)
    net(torch.rand(2, 3, 10, 10)).sum().backward()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    grads = [p.grad.clone() for p in net.parameters()]
    hooks = list(net[0].weight._backward_hooks.values())
    assert_hooks_ok(net, torch.rand(2, 3, 10, 10))
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in state.items())
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, net.parameters()))
    assert list(net[0].weight._backward_hooks.values()) == hooks


def test_assert_hooks_ok_select_and_loss_fn():
    net = first_layer_net()
    assert_hooks_ok(net, torch.rand(2, 3, 10, 10), ignore=["HKL2"])
    with pytest.raises(AssertionError):
        assert_hooks_ok(net, torch.rand(2, 3, 10, 10), loss_fn=lambda out: out.pow(2).mean())


def test_assert_no_legacy_hooks():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.f1 = nn.Linear(4, 1)

        def forward(self, x):
            return self.f1(x) / 4

        def my_hook(self, module, grad_input, grad_output):
            return grad_input

    net = Net()
    assert_no_legacy_hooks(net)
    net.f1.register_full_backward_hook(lambda m, gi, go: None)
    assert_no_legacy_hooks(net)
    net.register_backward_hook(net.my_hook)
    with pytest.raises(AssertionError) as info:
        assert_no_legacy_hooks(net)
    message = str(info.value)
    assert "HKL101 legacy-backward-hook: `net` (Net): `test_assert_no_legacy_hooks.Net.my_hook`" in message
    assert "test_testing_helpers.py" in message and "fix: use `register_full_backward_hook`" in message


def test_assert_grad_edits_take_effect():
    with pytest.raises(AssertionError, match="HKL201"):
        assert_grad_edits_take_effect(first_layer_net(), torch.rand(2, 3, 10, 10))

    layer = nn.Linear(4, 2)

    def halve_the_weight(p):
        p.mul_(0.5)

    layer.weight.register_post_accumulate_grad_hook(halve_the_weight)
    with pytest.raises(AssertionError, match="HKL203"):
        assert_grad_edits_take_effect(layer, torch.rand(3, 4))

    fixed = nn.Linear(4, 2)

    def halve(p):
        p.grad.mul_(0.5)

    fixed.weight.register_post_accumulate_grad_hook(halve)
    assert_grad_edits_take_effect(fixed, torch.rand(3, 4))
