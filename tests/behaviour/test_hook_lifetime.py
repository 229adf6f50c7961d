"""Real torch: what HKL301-HKL304 claim about hook lifetimes, and their fixes.

hook-semantics.md section 3: tensor hooks are looked up when backward runs;
module backward hooks are bound into the graph by the forward; hooks
registered again and again stack up.
"""

from __future__ import annotations

import warnings

import pytest

from conftest import lint
from hooklint.findings import Applicability
from hooklint.fix import fix_text
from hooklint.rules.base import strip_expectations
from hooklint.rules.forward_bypasses_hooks import ForwardBypassesHooks
from hooklint.rules.hook_leak import HookLeak
from hooklint.rules.tensor_hook_removed_before_backward import TensorHookRemovedBeforeBackward

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

BOTH = frozenset({Applicability.SAFE, Applicability.UNSAFE})


def _apply_fixes(source: str, code: str) -> str:
    """The snippet after ``--fix --unsafe-fixes`` for one rule."""
    outcome = fix_text(source, lint(source, code), allowed=BOTH, recheck=lambda text: lint(text, code))
    assert outcome.converged and not outcome.rejected, outcome.rejected
    return outcome.text


def _run(source: str) -> dict:
    namespace: dict = {}
    exec(compile(strip_expectations(source), "<snippet>", "exec"), namespace)  # noqa: S102 - our own snippet
    return namespace


# --------------------------------------------------------------------- HKL301

def test_tensor_hook_removed_before_backward_never_fires():
    fired = []
    x = torch.ones(4, requires_grad=True)
    handle = x.register_hook(lambda g: fired.append(g.clone()))
    loss = (x ** 2).sum()
    handle.remove()  # noqa: HKL301 - the bug under test
    loss.backward()
    assert fired == [], "the hook was removed before backward: it never fires"
    assert torch.equal(x.grad, torch.full((4,), 2.0))


def test_post_accumulate_hook_removed_before_backward_never_fires():
    fired = []
    p = nn.Parameter(torch.ones(3))
    handle = p.register_post_accumulate_grad_hook(lambda param: fired.append(param.grad.clone()))
    loss = (p * 2).sum()
    handle.remove()  # noqa: HKL301 - the bug under test
    loss.backward()
    assert fired == []


def test_tensor_hook_removed_before_autograd_grad_never_fires():
    fired = []
    x = torch.ones(3, requires_grad=True)
    handle = x.register_hook(lambda g: fired.append(1))
    y = (x * x).sum()
    handle.remove()
    torch.autograd.grad(y, x)
    assert fired == []
    handle = x.register_hook(lambda g: fired.append(1))
    torch.autograd.grad((x * x).sum(), x)
    handle.remove()
    assert fired == [1], "kept until after the backward, the same hook fires"


def test_tensor_hook_registered_after_forward_fires():
    """Why HKL301 looks at the remove(), not at where the forward is."""
    fired = []
    x = torch.ones(4, requires_grad=True)
    loss = (x ** 2).sum()
    x.register_hook(lambda g: fired.append(1))
    loss.backward()
    assert fired == [1]


def test_forward_hook_removed_before_backward_already_ran():
    """A forward hook removed right after the forward is correct: not reported."""
    seen = []
    net = nn.Linear(4, 2)
    handle = net.register_forward_hook(lambda m, i, o: seen.append(o.shape))
    out = net(torch.rand(3, 4))
    handle.remove()
    out.sum().backward()
    assert seen == [torch.Size([3, 2])]


def test_module_backward_hook_removed_between_forward_and_backward_still_fires():
    """The opposite of tensor hooks: removing a module backward hook after the
    forward does not stop it (so HKL301 must not report it)."""
    for register in ("register_backward_hook", "register_full_backward_hook", "register_full_backward_pre_hook"):
        fired = []
        net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            handle = getattr(net[0], register)(lambda *args: fired.append(1))
            loss = net(torch.rand(2, 4, requires_grad=True)).sum()
            handle.remove()
            loss.backward()
        assert fired == [1], register


def test_hkl301_fix_moves_remove_after_backward_and_the_hook_fires():
    invalid = TensorHookRemovedBeforeBackward.INVALID[0]
    fixed = _apply_fixes(invalid.code, "HKL301")
    assert fixed == invalid.fixed
    assert not [f for f in lint(fixed, "HKL301")], "the fixed snippet is clean"
    before, after = _run(invalid.code), _run(fixed)
    # the snippet's hook multiplies the gradient by 1.6: lost before, applied after
    assert torch.allclose(before["x"].grad, torch.full((4,), 2.0))
    assert torch.allclose(after["x"].grad, torch.full((4,), 3.2))


def test_hkl301_fix_inside_a_function_with_autograd_grad():
    invalid = TensorHookRemovedBeforeBackward.INVALID[1]
    fixed = _apply_fixes(invalid.code, "HKL301")
    assert fixed == invalid.fixed
    assert not lint(fixed, "HKL301")
    model = nn.Linear(4, 2)
    image = torch.rand(1, 4)
    assert _run(invalid.code)["saliency"](model, image.clone()) == []
    grads = _run(fixed)["saliency"](model, image.clone())
    assert len(grads) == 1 and grads[0].shape == (1, 4)


# --------------------------------------------------------------------- HKL302

@pytest.mark.parametrize("register", ["register_backward_hook", "register_full_backward_hook",
                                      "register_full_backward_pre_hook"])
def test_module_backward_hook_registered_after_forward_does_not_fire(register):
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    x = torch.rand(2, 4, requires_grad=True)
    fired = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = net(x).sum()
        getattr(net[0], register)(lambda *args: fired.append(1))
        loss.backward()
        assert fired == [], "registered after the forward: it does not fire for that graph"
        net(x).sum().backward()
    assert fired == [1], "the next forward binds it, and it fires"


def test_seed001_backward_hook_registered_after_the_loss_never_fires():
    """Seed 001: `loss = net(input).sum()`, then the legacy hook, then
    `loss.backward()`; registered before the forward (the fix), it fires."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer1 = nn.Linear(4, 3)
            self.layer2 = nn.Linear(3, 2)

        def forward(self, x):
            return self.layer2(torch.relu(self.layer1(x)))

    def run(register_first: bool) -> list:
        net, gouts = Net(), []
        x = torch.rand(5, 4, requires_grad=True)

        def backward_hook(module, gin, gout):
            gouts.append(gout[0])

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if register_first:
                net.layer1.register_full_backward_hook(backward_hook)
            loss = net(x).sum()
            if not register_first:
                net.layer1.register_backward_hook(backward_hook)  # noqa: HKL101 - seed 001 as written
            loss.backward()
        return gouts

    assert run(register_first=False) == []
    assert len(run(register_first=True)) == 1


# --------------------------------------------------------------------- HKL303

def test_forward_call_skips_every_module_hook():
    calls = []
    layer = nn.Linear(3, 2)
    layer.register_forward_pre_hook(lambda m, i: calls.append("pre"))
    layer.register_forward_hook(lambda m, i, o: calls.append("forward"))
    layer.register_full_backward_hook(lambda m, gi, go: calls.append("backward"))
    x = torch.rand(1, 3, requires_grad=True)
    layer.forward(x).sum().backward()
    assert calls == []
    layer(x).sum().backward()
    assert calls == ["pre", "forward", "backward"]


@pytest.mark.parametrize("wrap", ["weight_norm", "spectral_norm", "prune"])
def test_forward_call_uses_stale_weights_of_hook_based_reparametrizations(wrap):
    """weight_norm, spectral_norm and pruning recompute `weight` in a forward
    pre-hook: `.forward()` uses whatever the previous call left there."""
    torch.manual_seed(0)
    x = torch.ones(1, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # weight_norm is deprecated
        if wrap == "weight_norm":
            layer = nn.utils.weight_norm(nn.Linear(3, 2))
            original = layer.weight_g
        elif wrap == "spectral_norm":
            layer = nn.utils.spectral_norm(nn.Linear(3, 2))
            original = layer.weight_orig
        else:
            import torch.nn.utils.prune as prune

            layer = nn.Linear(3, 2)
            prune.l1_unstructured(layer, "weight", amount=0.5)
            original = layer.weight_orig
    assert layer._forward_pre_hooks, "the reparametrization lives in a forward pre-hook"
    with torch.no_grad():
        original.mul_(3.0)  # what an optimizer step does to the underlying parameter
    bypassed = layer.forward(x)
    called = layer(x)
    assert not torch.allclose(bypassed, called), ".forward() used the stale weight"
    assert torch.allclose(layer.forward(x), called), "the call refreshed it; .forward() sees it only now"


def test_parametrizations_are_not_bypassed():
    """The documented exception: torch.nn.utils.parametrizations compute the
    weight when it is read, not in a hook."""
    layer = nn.utils.parametrizations.weight_norm(nn.Linear(3, 2))
    assert not layer._forward_pre_hooks
    with torch.no_grad():
        layer.parametrizations.weight.original0.mul_(3.0)
    x = torch.ones(1, 3)
    assert torch.allclose(layer.forward(x), layer(x))


def test_hkl303_fix_calls_the_module_and_its_hooks_run():
    invalid = ForwardBypassesHooks.INVALID[0]
    fixed = _apply_fixes(invalid.code, "HKL303")
    assert fixed == invalid.fixed
    assert not lint(fixed, "HKL303")
    for source, expected in ((invalid.code, []), (fixed, ["hook"])):
        calls: list = []
        # the snippet with a forward hook on `net`: skipped by `.forward()`, run by the call
        hooked = "net = nn.Linear(4, 2)\nnet.register_forward_hook(lambda m, i, o: CALLS.append('hook'))\n"
        prepared = source.replace("net = nn.Linear(4, 2)\n", hooked)
        namespace = {"CALLS": calls}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the snippet's weight_norm is deprecated
            exec(compile(strip_expectations(prepared), "<snippet>", "exec"), namespace)  # noqa: S102
        assert calls == expected


# --------------------------------------------------------------------- HKL304

def test_tensor_hook_registered_every_iteration_stacks():
    """HKL304's first INVALID example: each iteration adds one more `g * 0.5`."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x = torch.rand(2, 4)
    model(x).sum().backward()
    plain = model.weight.grad.clone()
    scales = []
    for step in range(5):
        model.zero_grad()
        model.weight.register_hook(lambda g: g * 0.5)
        model(x).sum().backward()
        scales.append(round((model.weight.grad / plain).mean().item(), 6))
    assert scales == [0.5, 0.25, 0.125, 0.0625, 0.03125], "after k registrations the gradient is scaled k times"


def test_forward_hook_registered_on_every_forward_runs_n_times():
    """HKL304's third INVALID example: a forward that registers a hook."""
    class Probe(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)
            self.seen = []

        def forward(self, x):
            self.fc.register_forward_hook(lambda m, i, o: self.seen.append(o))
            return self.fc(x)

    probe = Probe()
    for n in range(1, 5):
        probe.seen.clear()
        probe(torch.rand(1, 2))
        assert len(probe.seen) == n, "the n-th forward runs the hook n times"


class _Saliency:
    """hook-semantics.md section 3: a "guided" mode that registers ReLU hooks
    on every call (and, fixed, one that removes them)."""

    def __init__(self, model, remove_handles: bool):
        self.model = model
        self.remove_handles = remove_handles

    def gradient(self, x):
        x = x.clone().requires_grad_()
        self.model(x).sum().backward()
        return x.grad

    def vanilla(self, x):
        return self.gradient(x)

    def guided(self, x):
        handles = [m.register_full_backward_hook(lambda mod, gi, go: (gi[0].clamp(min=0),))
                   for m in self.model.modules() if isinstance(m, nn.ReLU)]
        try:
            return self.gradient(x)
        finally:
            if self.remove_handles:
                for handle in handles:
                    handle.remove()


@pytest.mark.parametrize("remove_handles", [False, True])
def test_leaked_guided_hooks_change_vanilla_results(remove_handles):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(1, 6)
    explainer = _Saliency(model, remove_handles)
    vanilla_before = explainer.vanilla(x)
    guided = explainer.guided(x)
    vanilla_after = explainer.vanilla(x)
    assert not torch.allclose(vanilla_before, guided), "the example must tell the two modes apart"
    if remove_handles:
        assert torch.allclose(vanilla_after, vanilla_before), "fixed: vanilla is vanilla again"
    else:
        assert torch.allclose(vanilla_after, guided), "leaked: 'vanilla' now returns guided gradients"


def test_hkl304_saliency_example_is_reported_and_the_fix_is_not():
    """The rule flags the leaking shape of _Saliency.guided and not the once-guarded one."""
    leaking = HookLeak.INVALID[1].code
    assert [f.code for f in lint(leaking, "HKL304")] == ["HKL304"]
    guarded = HookLeak.VALID[3]
    assert not lint(guarded, "HKL304")


def test_once_guard_registers_a_single_hook():
    """The VALID once-guard really registers one hook, however often it runs."""
    namespace = _run(HookLeak.VALID[3])
    probe = namespace["p"]
    assert len(probe.model._forward_hooks) == 1


class _HalvedGrads(nn.Module):
    """Hooks its parameters from __init__ and from __setstate__ (fairseq 0.9's shape)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self._hook()

    def __setstate__(self, state):
        super().__setstate__(state)
        self._hook()

    def _hook(self):
        for p in self.parameters():
            p.register_hook(_halve)


def _halve(grad):
    return grad * 0.5


def test_hooks_from_init_and_setstate_do_not_stack_but_a_second_call_does():
    """HKL304's alternative initialisers (fairseq 0.9): __init__ and
    __setstate__ each hook the parameters, but a deepcopy or a pickle round
    trip runs only __setstate__ and carries no tensor hook over, so every
    object has one hook per parameter; calling the helper again on one object
    (a reset) stacks a second."""
    import copy
    import io

    def grad_of(module):
        module.weight.grad = None
        module.weight.sum().backward()
        return module.weight.grad.tolist()

    original = _HalvedGrads()
    assert grad_of(original) == [0.5, 0.5, 0.5]
    assert grad_of(copy.deepcopy(original)) == [0.5, 0.5, 0.5]
    buffer = io.BytesIO()
    torch.save(original, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert grad_of(loaded) == [0.5, 0.5, 0.5]
    original._hook()  # a second registration on the same object
    assert grad_of(original) == [0.25, 0.25, 0.25]
    valid = next(v for v in HookLeak.VALID if "__setstate__" in v)
    assert not lint(valid, "HKL304")
    assert lint(valid.replace("def __setstate__(self, state)", "def reset(self, state)"), "HKL304")
