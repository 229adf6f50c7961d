"""Each rule the run-time layer observes: a buggy program run under
instrumentation gives the finding, at the registration (or removal) line,
with the facts the message states checked against real torch; the fixed
program stays clean; the cases a precise tool must stay quiet on stay quiet."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

nn = torch.nn

pytestmark = pytest.mark.torch


# -- HKL201: module backward hook edits `.grad` before accumulation ---------------------

FIRST_LAYER_FREEZE = """
import torch
import torch.nn as nn

def freeze_single(index):
    def callback(module, grad_input, grad_output):
        module.weight.grad.data[index] = 0  # EDIT
    return callback

conv = nn.Conv2d(3, 1, 3)
conv.register_full_backward_hook(freeze_single((0, 1, 2, 1)))  # REGISTER
x = torch.rand(1, 3, 10, 10)  # plain data: the conv is a first layer
conv(x).mean().backward()
"""


def test_hkl201_grad_none_first_step(observe):
    run = observe(FIRST_LAYER_FREEZE, expect_error=AttributeError)
    finding = run.only("HKL201")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "`conv.weight`" in finding.message and "`.grad` was None" in finding.message
    assert "raised `AttributeError" in finding.message
    assert "because none of its inputs requires grad" in finding.message
    assert finding.related[0].location.row == run.line_of("# EDIT")
    assert finding.origin.value == "runtime"


STALE_EDIT = """
import torch
import torch.nn as nn

torch.manual_seed(0)
conv = nn.Conv2d(3, 1, 3)
x = torch.rand(1, 3, 10, 10)
conv(x).mean().backward()  # a first step, before the hook

def zero_element(module, grad_input, grad_output):
    module.weight.grad[0, 1, 2, 1] = 0.0

conv.register_full_backward_hook(zero_element)  # REGISTER
conv(x).mean().backward()
frozen = conv.weight.grad[0, 1, 2, 1].item()
"""


def test_hkl201_stale_grad_edit_lost(observe):
    run = observe(STALE_EDIT)
    # the real behaviour: the "frozen" element received this step's gradient
    assert run.namespace["frozen"] != 0.0
    finding = run.only("HKL201")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "stale" in finding.message
    assert "the edit was lost" in finding.message and "at 1 element it changed" in finding.message


PARAMETER_HOOKS = """
import torch
import torch.nn as nn

torch.manual_seed(0)
conv = nn.Conv2d(3, 1, 3)
mask = torch.ones_like(conv.weight)
mask[0, 1, 2, 1] = 0
conv.weight.register_hook(lambda g: g * mask)

conv2 = nn.Conv2d(3, 1, 3)
def zero_element(param):
    param.grad[0, 1, 2, 1] = 0.0
conv2.weight.register_post_accumulate_grad_hook(zero_element)

for step in range(3):
    x = torch.rand(1, 3, 10, 10)
    conv(x).mean().backward()
    conv2(x).mean().backward()
values = (conv.weight.grad[0, 1, 2, 1].item(), conv2.weight.grad[0, 1, 2, 1].item())
"""


def test_hkl201_fixed_parameter_hooks_clean(observe):
    run = observe(PARAMETER_HOOKS)
    assert run.namespace["values"] == (0.0, 0.0)
    assert run.findings == []


def test_hkl201_quiet_when_the_hook_runs_after_accumulation(observe):
    """Seed 003's answer: the input requires grad, so the hook runs after the
    weight's AccumulateGrad and the edit holds.  Nothing to report at run time."""
    run = observe("""
        import torch
        import torch.nn as nn

        def callback(module, grad_input, grad_output):
            module.weight.grad.data[0, 1, 2, 1] = 0

        conv = nn.Conv2d(3, 1, 3)
        conv.register_full_backward_hook(callback)
        for _ in range(2):
            conv(torch.rand(1, 3, 10, 10, requires_grad=True)).mean().backward()
        value = conv.weight.grad[0, 1, 2, 1].item()
    """)
    assert run.namespace["value"] == 0.0
    assert run.findings == []


def test_hkl201_backward_pre_hook_reading_grad(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        layer = nn.Linear(3, 2)
        seen = []
        def log(module, grad_output):
            seen.append(module.weight.grad is None)
        layer.register_full_backward_pre_hook(log)  # REGISTER
        x = torch.rand(4, 3, requires_grad=True)
        layer(x).sum().backward()
    """)
    assert run.namespace["seen"] == [True]
    finding = run.only("HKL201")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "full backward pre-hook `log`" in finding.message and "saw no gradient of this step" in finding.message


# -- HKL203: post-accumulate-grad hook treats the parameter as the gradient -----------


def test_hkl203_mutates_parameter(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        torch.manual_seed(0)
        layer = nn.Linear(4, 2)
        before = layer.weight.detach().clone()
        def halve_grad(p):
            p.mul_(0.5)
        layer.weight.register_post_accumulate_grad_hook(halve_grad)  # REGISTER
        layer(torch.rand(3, 4)).sum().backward()
        weights_halved = torch.equal(layer.weight.detach(), before * 0.5)
    """)
    assert run.namespace["weights_halved"], "the hook changed the weights, not the gradient"
    finding = run.only("HKL203")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "without reading `.grad`" in finding.message


def test_hkl203_returns_value(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        layer = nn.Linear(4, 2)
        layer.weight.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(0.5))  # REGISTER
        layer(torch.rand(3, 4)).sum().backward()
    """, expect_error=RuntimeError)
    assert "post accumulate grad hooks should return None" in str(run.error)
    finding = run.only("HKL203")
    assert finding.location.row == run.line_of("# REGISTER") and "returned a `Tensor`" in finding.message


def test_hkl203_fixed_and_optimizer_in_backward_clean(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        torch.manual_seed(0)
        layer = nn.Linear(4, 2)
        def halve_grad(p):
            p.grad.mul_(0.5)
        layer.weight.register_post_accumulate_grad_hook(halve_grad)

        model = nn.Linear(4, 2)
        def sgd_step(p, lr=0.1):
            with torch.no_grad():
                p.add_(p.grad, alpha=-lr)
            p.grad = None
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(sgd_step)
        x = torch.rand(3, 4)
        layer(x).sum().backward()
        model(x).sum().backward()
        cleared = all(p.grad is None for p in model.parameters())
    """)
    assert run.namespace["cleared"]
    assert run.findings == []  # HKL503 stays quiet too: the hook cleared `.grad` on purpose


# -- HKL301: tensor hook removed before its backward ----------------------------------------


def test_hkl301_removed_before_backward(observe):
    run = observe("""
        import torch

        x = torch.ones(4, requires_grad=True)
        fired = []
        h = x.register_hook(lambda grad: fired.append(True))  # REGISTER
        z = torch.sum(torch.pow(x, 2))
        h.remove()  # REMOVE
        z.backward()
    """)
    assert run.namespace["fired"] == []
    finding = run.only("HKL301")
    assert finding.location.row == run.line_of("# REMOVE")
    assert [r.location.row for r in finding.related][0] == run.line_of("# REGISTER")


def test_hkl301_fixed_and_graph_built_after_removal_clean(observe):
    run = observe("""
        import torch

        x = torch.ones(4, requires_grad=True)
        h = x.register_hook(lambda grad: grad * 1.6)
        z = torch.sum(torch.pow(x, 2))
        z.backward()
        h.remove()

        y = torch.ones(4, requires_grad=True)
        h = y.register_hook(lambda grad: grad * 2)
        h.remove()          # removed on purpose before any graph used it
        torch.sum(y * 3).backward()
    """)
    assert run.findings == []


# -- HKL302: module backward hook registered after the forward ---------------------------------

LATE_HOOK = """
import torch
import torch.nn as nn

net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
fired = []
{first}
def hook(module, grad_input, grad_output):
    fired.append(True)
{second}
loss.backward()
"""


def test_hkl302_registered_after_forward(observe):
    run = observe(LATE_HOOK.format(first="loss = net(torch.rand(5, 4)).sum()",
                                   second="net[0].register_full_backward_hook(hook)  # REGISTER"))
    assert run.namespace["fired"] == []
    finding = run.only("HKL302")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "`net.0` (Linear)" in finding.message


def test_hkl302_fixed_clean(observe):
    run = observe(LATE_HOOK.format(first="",
                                   second="net[0].register_full_backward_hook(hook)\n"
                                          "loss = net(torch.rand(5, 4)).sum()"))
    assert run.namespace["fired"] == [True]
    assert run.findings == []


def test_hkl302_quiet_for_forward_hook_after_forward(observe):
    run = observe(LATE_HOOK.format(first="loss = net(torch.rand(5, 4)).sum()",
                                   second="net[0].register_forward_hook(lambda m, i, o: None)"))
    assert run.findings == []


# -- HKL304: the same hook registered again and again --------------------------------------


def test_hkl304_registered_in_a_function_called_repeatedly(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        net = nn.Linear(4, 2)
        calls = []
        def log(module, grad_input, grad_output):
            calls.append(1)
        def saliency(x):
            net.register_full_backward_hook(log)  # REGISTER
            net(x).sum().backward()
        for _ in range(3):
            saliency(torch.rand(2, 4, requires_grad=True))
    """)
    assert run.namespace["calls"] == [1] * (1 + 2 + 3)  # the hook stacks up
    finding = run.only("HKL304")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "registered 3 times" in finding.message and "from the same line" in finding.message


def test_hkl304_fixed_and_distinct_closures_clean(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        net = nn.Linear(4, 2)
        def log(module, grad_input, grad_output):
            pass
        def saliency(x):
            handle = net.register_full_backward_hook(log)
            net(x).sum().backward()
            handle.remove()
        for _ in range(3):
            saliency(torch.rand(2, 4, requires_grad=True))

        def scale_by(k):
            def hook(grad):
                return grad * k
            return hook
        w = torch.ones(3, requires_grad=True)
        w.register_hook(scale_by(2.0))
        w.register_hook(scale_by(3.0))   # same code, different closures: two different hooks
        (w * 2).sum().backward()

        again = net.register_full_backward_hook(log)
        twice = net.register_full_backward_hook(log)
        twice.remove()                   # a duplicate removed at once is no leak
        net(torch.rand(2, 4, requires_grad=True)).sum().backward()
    """)
    assert run.findings == []


# -- HKL401: hook modifies its gradient argument in place ------------------------------------


def test_hkl401_inplace_edit_of_grad(observe):
    run = observe("""
        import torch

        def grad_hook(grad):
            grad *= 1.6

        x = torch.tensor([1., 1., 1., 1.], requires_grad=True)
        z = torch.sum(torch.pow(x, 2))
        h = x.register_hook(grad_hook)  # REGISTER
        z.backward()
    """)
    finding = run.only("HKL401")
    assert finding.location.row == run.line_of("# REGISTER") and "`grad` in place" in finding.message


def test_hkl401_shared_buffer_fact_and_finding(observe):
    """hook-semantics section 4: an in-place edit of one edge's gradient also changes
    another tensor's gradient; returning a new tensor does not."""
    source = """
        import torch

        a = torch.ones(3, requires_grad=True)
        b = torch.ones(3, requires_grad=True)
        s = a + b
        a.register_hook({hook})  # REGISTER
        (s * torch.tensor([1., 2., 3.])).sum().backward()
        grads = (a.grad.tolist(), b.grad.tolist())
    """
    bad = observe(source.format(hook="lambda g: g.mul_(0)"))
    assert bad.namespace["grads"] == ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert bad.only("HKL401").location.row == bad.line_of("# REGISTER")
    good = observe(source.format(hook="lambda g: g * 0"))
    assert good.namespace["grads"] == ([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])
    assert good.findings == []


def test_hkl401_inplace_on_expanded_gradient_raises(observe):
    run = observe("""
        import torch

        x = torch.ones(4, requires_grad=True)
        x.register_hook(lambda g: g.mul_(2))  # REGISTER
        x.sum().backward()
    """, expect_error=RuntimeError)
    finding = run.only("HKL401")
    assert finding.location.row == run.line_of("# REGISTER") and "expanded view" in finding.message


# -- HKL101 / HKL102: legacy backward hooks ---------------------------------------------------

LEGACY = """
import torch
import torch.nn as nn

class MyMean(nn.Module):
    def forward(self, x):
        return x / 4

class MyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.f1 = nn.Linear(4, 1)
        self.f2 = MyMean()
    def forward(self, x):
        return self.f2(self.f1(x))

seen = []
def hook(module, grad_input, grad_output):
    seen.append([None if g is None else tuple(g.shape) for g in grad_input])

net = MyNet()
net.{method}(hook)  # REGISTER
net(torch.tensor([1., 2, 3, 4], requires_grad=True)).backward()
"""


def test_hkl101_hkl102_legacy_hook_bound_to_last_op(observe):
    run = observe(LEGACY.format(method="register_backward_hook"))
    assert run.namespace["seen"] == [[(1,), None]]
    assert run.codes() == [(run.line_of("# REGISTER"), "HKL101"), (run.line_of("# REGISTER"), "HKL102")]
    hkl102 = run.only("HKL102")
    assert "`DivBackward0`" in hkl102.message and "[(1,), None]" in hkl102.message and "[(4,)]" in hkl102.message
    assert "PyTorch warned" in run.only("HKL101").message


def test_legacy_fixed_full_hook_clean(observe):
    run = observe(LEGACY.format(method="register_full_backward_hook"))
    assert run.namespace["seen"] == [[(4,)]]
    assert run.findings == []


def test_hkl102_quiet_when_grad_input_unused_or_single_op(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        def log_output(module, grad_input, grad_output):
            print(grad_output[0].shape)
        def clip(module, grad_input, grad_output):
            return (grad_input[0].clamp(-1, 1),)

        lin = nn.Linear(4, 2)
        lin.register_backward_hook(log_output)
        act = nn.ReLU()
        act.register_backward_hook(clip)
        h = torch.rand(3, 4, requires_grad=True) * 1.0
        act(lin(h)).sum().backward()
    """)
    assert [f.code for f in run.findings if f.code == "HKL102"] == []


# -- HKL402 (return arity, PyTorch's error) --------------------------------------------------


def test_hkl402_full_hook_returns_wrong_arity(observe):
    source = """
        import torch
        import torch.nn as nn

        lin = nn.Linear(4, 2)
        lin.register_full_backward_hook(lambda m, gi, go: {ret})  # REGISTER
        lin(torch.rand(3, 4, requires_grad=True)).sum().backward()
    """
    bad = observe(source.format(ret="(gi[0], gi[0])"), expect_error=RuntimeError)
    assert "invalid number of grad_input" in str(bad.error)
    assert bad.only("HKL402").location.row == bad.line_of("# REGISTER")
    good = observe(source.format(ret="(gi[0] * 2,)"))
    assert good.findings == []


# -- HKL403 (PyTorch's in-place error on a hooked module's output) ------------------------------

INPLACE = """
import torch
import torch.nn as nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.relu = nn.ReLU(inplace={inplace})
    def forward(self, x):
        return self.relu(self.conv(x))

block = Block()
block.conv.register_full_backward_hook(lambda m, gi, go: None)  # REGISTER
block(torch.rand(1, 3, 8, 8, requires_grad=True)).sum().backward()
"""


def test_hkl403_inplace_after_hooked_module(observe):
    run = observe(INPLACE.format(inplace=True), expect_error=RuntimeError)
    assert "BackwardHookFunction" in str(run.error)
    finding = run.only("HKL403")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "`block.conv` (Conv2d)" in finding.message and "output was then modified in place" in finding.message


def test_hkl403_fixed_clean(observe):
    assert observe(INPLACE.format(inplace=False)).findings == []


GUIDED_BACKPROP_FINALLY = """
import torch
import torch.nn as nn

def relu_hook(module, grad_input, grad_output):
    return (torch.clamp(grad_input[0], min=0.0),)

def guided(model, image):
    handles = []
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            handles.append(module.register_full_backward_hook(relu_hook))  # REGISTER
    try:
        image = image.clone().requires_grad_(True)
        model(image).sum().backward()
        return image.grad
    finally:
        for h in handles:
            h.remove()

model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace={inplace}), nn.Conv2d(4, 2, 3))
grad = guided(model, torch.rand(1, 3, 8, 8))
"""


def test_hkl403_hooks_removed_in_finally_while_the_error_propagates(observe):
    # the handles are gone (`finally`) by the time the error is explained: the
    # in-place ReLU still has to be reported, at the registration
    run = observe(GUIDED_BACKPROP_FINALLY.format(inplace=True), expect_error=RuntimeError)
    assert "Output 0 of BackwardHookFunction is a view" in str(run.error)
    finding = run.only("HKL403")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "`model.1` (ReLU)" in finding.message and "input was then modified in place" in finding.message


def test_hkl403_hooks_removed_in_finally_fixed_clean(observe):
    run = observe(GUIDED_BACKPROP_FINALLY.format(inplace=False))
    assert run.namespace["grad"].shape == (1, 3, 8, 8)
    assert run.findings == []


# -- HKL503: a parameter that never receives a gradient ---------------------------------------

FUNCTION = """
import torch
import torch.nn as nn

class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return x * weight + bias

    @staticmethod
    def backward(ctx, grad):  # BACKWARD
        x, weight = ctx.saved_tensors
        grad_bias = grad.sum(0) if ctx.needs_input_grad[{index}] else None
        return grad * weight, (grad * x).sum(0), {bias_slot}

weight = nn.Parameter(torch.ones(3))
bias = nn.Parameter(torch.zeros(3))
Scale.apply(torch.rand(2, 3), weight, bias).sum().backward()
has_grad = bias.grad is not None
"""


def test_hkl503_custom_function_drops_bias_grad(observe):
    run = observe(FUNCTION.format(index=1, bias_slot="None"))
    assert run.namespace["has_grad"] is False
    finding = run.only("HKL503")
    assert finding.location.row == run.line_of("# BACKWARD")
    assert "parameter `bias`" in finding.message
    assert "`Scale.backward` returned None for `bias` (return value 2" in finding.message


def test_hkl503_fixed_clean(observe):
    run = observe(FUNCTION.format(index=2, bias_slot="grad_bias"))
    assert run.namespace["has_grad"] is True
    assert run.findings == []


def test_hkl503_quiet_with_backward_inputs(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        lin = nn.Linear(3, 2)
        torch.autograd.backward(lin(torch.rand(4, 3)).sum(), inputs=[lin.weight])
        assert lin.bias.grad is None
    """)
    assert run.findings == []


def test_hkl503_also_through_torch_autograd_backward(observe):
    run = observe(FUNCTION.format(index=1, bias_slot="None").replace(
        "Scale.apply(torch.rand(2, 3), weight, bias).sum().backward()",
        "torch.autograd.backward([Scale.apply(torch.rand(2, 3), weight, bias).sum()])"))
    assert run.only("HKL503")


def test_exception_leaving_the_instrument_block_is_explained(tmp_path):
    """PyTorch's in-place error raised inside `with hooklint.instrument()` is
    mapped when it leaves the block, and still propagates."""
    import hooklint

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x)
            y += 1  # in place on the hooked module's output
            return y

    with pytest.raises(RuntimeError, match="BackwardHookFunction"):
        with hooklint.instrument() as session:
            block = Block()
            block.conv.register_full_backward_hook(lambda m, gi, go: None)
            block(torch.rand(1, 3, 8, 8, requires_grad=True))
    finding = next(f for f in session.findings if f.code == "HKL403")
    assert "`block.conv` (Conv2d)" in finding.message
    assert finding.related and finding.related[0].message == "the in-place operation"


@pytest.mark.parametrize("section", ["Example", "Use instead"])
def test_runtime_only_rule_docs_examples(observe, section):
    """The documentation of the rules only instrumentation reports: the Example
    gives the finding when run, the Use instead block does not."""
    from hooklint.findings import Origin
    from hooklint.rules import all_rules

    checked = 0
    for rule in all_rules():
        if rule.origins != (Origin.RUNTIME,):
            continue
        if getattr(rule, "min_ranks", 1) > 1:
            continue  # several ranks: tests/distributed/test_cli.py runs them with `hooklint run --nproc`
        for block in rule.code_blocks(section):
            codes = [f.code for f in observe(block).findings]
            assert (rule.code in codes) == (section == "Example"), (rule.code, section, codes)
            checked += 1
    assert checked, "no runtime-only rule documents an example"
