"""Real torch: what HKL101/HKL102 claim about legacy backward hooks, and the fix.

hook-semantics.md section 1: the legacy hook binds to the last autograd node
of the module's forward; a full backward hook sees the module's real inputs.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


class MyMean(nn.Module):
    def forward(self, x):
        return x / 4


class MyNet(nn.Module):  # seed 004, first variant
    def __init__(self):
        super().__init__()
        self.f1 = nn.Linear(4, 1)
        self.f2 = MyMean()

    def forward(self, x):
        return self.f2(self.f1(x))


class MyNetSwapped(MyNet):
    def forward(self, x):
        return self.f1(self.f2(x))


class MyNetDivided(MyNet):
    def forward(self, x):
        return self.f1(self.f2(x)) / 4


def _grad_input_shapes(module, register, x):
    seen = []

    def hook(mod, grad_input, grad_output):
        seen.append([None if g is None else tuple(g.shape) for g in grad_input])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        getattr(module, register)(hook)
        module(x).sum().backward()
    assert len(seen) == 1, "the hook must fire exactly once"
    return seen[0]


@pytest.mark.parametrize(
    ("net_class", "legacy_shapes"),
    [
        # DivBackward0 of x / 4: the gradient of its (1,) input and None for the
        # constant 4, not the (4,) gradient of MyNet's input
        (MyNet, [(1,), None]),
        # Linear on a 1-D input ends in a view of addmm's (1, 1) result in torch
        # 2.13 (the post, on torch 0.4, saw addmm's two inputs)
        (MyNetSwapped, [(1, 1)]),
        (MyNetDivided, [(1,), None]),
    ],
)
def test_legacy_hook_binds_to_last_op_seed004(net_class, legacy_shapes):
    x = torch.tensor([1.0, 2, 3, 4], requires_grad=True)
    legacy = _grad_input_shapes(net_class(), "register_backward_hook", x)
    assert legacy == legacy_shapes
    full = _grad_input_shapes(net_class(), "register_full_backward_hook", x)
    assert full == [(4,)], "the fix: a full hook sees the gradient of MyNet's real input"


def test_legacy_hook_on_linear_gets_bias_grad_first():
    layer = nn.Linear(4, 2)
    x = torch.rand(3, 4, requires_grad=True)
    legacy = _grad_input_shapes(layer, "register_backward_hook", x)
    assert legacy == [(2,), (3, 4), (4, 2)]  # (bias, input, weight.T) from AddmmBackward0
    assert _grad_input_shapes(nn.Linear(4, 2), "register_full_backward_hook", x) == [(3, 4)]


def test_legacy_hook_changes_with_op_order():
    x = torch.tensor([1.0, 2, 3, 4], requires_grad=True)
    assert _grad_input_shapes(MyNet(), "register_backward_hook", x) != \
        _grad_input_shapes(MyNetSwapped(), "register_backward_hook", x)


def test_legacy_hook_return_rewrites_wrong_gradient():
    """Seed 001's pattern: doubling "gin[1]" of a legacy hook on Linear doubles
    the input gradient, but "gin[0]" (what users take for the input) is the bias."""
    torch.manual_seed(0)
    layer = nn.Linear(4, 2)
    x = torch.rand(3, 4, requires_grad=True)
    layer(x).sum().backward()
    bias_grad = layer.bias.grad.clone()
    layer.zero_grad()

    def double_first(module, grad_input, grad_output):
        return (grad_input[0] * 2,) + tuple(grad_input[1:])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer.register_backward_hook(double_first)
        x.grad = None
        layer(x).sum().backward()
    assert torch.equal(layer.bias.grad, bias_grad * 2), "the legacy hook's grad_input[0] was the bias gradient"


def test_legacy_hook_deprecation_is_only_a_runtime_warning():
    net = MyNet()
    net.register_backward_hook(lambda m, gi, go: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net(torch.rand(4, requires_grad=True)).sum().backward()
    messages = [str(w.message) for w in caught]
    assert any("non-full backward hook" in m for m in messages), messages


class TwoOps(nn.Module):
    """A forward of two ops: a legacy hook binds to the second (the `* 3`)."""

    def forward(self, x):
        return torch.tanh(x) * 3


def test_tensor_hook_on_the_input_sets_the_input_gradient_whatever_the_legacy_hook_binds_to():
    """HKL102's exemption (captum's DeepLift): the legacy hook's grad_input is the
    `* 3` node's input gradient, not the module's; a tensor hook put on the input
    by a forward pre-hook receives the real input gradient and its return value is
    what the input gets, so a library that rebuilds the gradient there is right."""
    layer = TwoOps()
    x = torch.randn(5, requires_grad=True)
    seen_legacy, seen_input = [], []

    def legacy(module, grad_input, grad_output):
        seen_legacy.append(grad_input[0].clone())

    def pre(module, inputs):
        inputs[0].register_hook(lambda g: (seen_input.append(g.clone()), torch.full_like(g, 7.0))[1])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer.register_backward_hook(legacy)
    layer.register_forward_pre_hook(pre)
    layer(x).sum().backward()
    true_input_grad = 3 * (1 - torch.tanh(x.detach()) ** 2)
    # the legacy hook's grad_input is the gradient at tanh's output (3 everywhere), not the module's input
    assert torch.allclose(seen_legacy[0], torch.full_like(x, 3.0))
    assert not torch.allclose(seen_legacy[0], true_input_grad)
    # the tensor hook on the input sees the real input gradient, and what it returns is what x gets
    assert torch.allclose(seen_input[0], true_input_grad)
    assert torch.equal(x.grad, torch.full_like(x, 7.0))


def test_tensor_hook_returning_nothing_leaves_the_input_gradient_alone():
    """The twin: a tensor hook on the input that returns None changes nothing, so
    it does not correct anything a legacy hook computed from the wrong grad_input."""
    layer = TwoOps()
    x = torch.randn(5, requires_grad=True)

    def legacy(module, grad_input, grad_output):
        return (grad_input[0] * 0.5,) + tuple(grad_input[1:])

    def pre(module, inputs):
        inputs[0].register_hook(lambda g: None)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer.register_backward_hook(legacy)
    layer.register_forward_pre_hook(pre)
    layer(x).sum().backward()
    # the legacy hook halved the gradient at the `* 3` node: the input gets half its true gradient
    assert torch.allclose(x.grad, 1.5 * (1 - torch.tanh(x.detach()) ** 2))


def test_shared_helper_never_reads_grad_input_when_told_it_runs_backward():
    """fairseq's NanDetector shape (HKL102 valid example): the legacy hook hands
    grad_input to a helper that reads it only for the forward.  The last op's
    grad_input differs from the module's input gradient, yet what the hook
    reports is the same as with a full backward hook: the value is never used."""
    seen: dict[str, list[str]] = {"legacy": [], "full": []}
    grad_inputs: dict[str, tuple] = {}

    def scan(log, inp, out, backward):
        if isinstance(inp, tuple) and len(inp) > 0:
            inp = inp[0]
        if torch.is_tensor(out) and not torch.isfinite(out).all():
            msg = "nan"
            if torch.is_tensor(inp) and not backward:
                msg += f" input max {inp.max().item()}"
            log.append(msg)

    def run(kind):
        net = MyNet()
        register = net.register_backward_hook if kind == "legacy" else net.register_full_backward_hook

        def hook(module, grad_input, grad_output):
            grad_inputs[kind] = grad_input
            scan(seen[kind], grad_input, grad_output[0], backward=True)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            register(hook)
        x = torch.ones(2, 4, requires_grad=True)
        net(x).sum().mul(float("nan")).backward()

    run("legacy")
    run("full")
    assert grad_inputs["legacy"][0].shape != grad_inputs["full"][0].shape  # the legacy value is the last op's
    assert seen["legacy"] == seen["full"] == ["nan"]
