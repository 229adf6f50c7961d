"""Real torch: hooks that travel, module identity, dead fallbacks, and full
backward hooks on modules a caller supplies (hooklint/static/travel.py,
identity.py, fallbacks.py; HKL101/102, HKL201, HKL203, HKL401, HKL403, HKL405).

Each test runs the code of a fixture (or the same shape written out) and shows
that the registration reached through a helper, a wrapper, a dict or
`getattr` really registers torch's hook, and that what the rule then claims
happens.  The static side of each case is checked next to it.
"""

from __future__ import annotations

import copy
import runpy
import warnings

import pytest

from conftest import FIXTURES, codes_at, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def _recorder(store):
    def hook(module, grad_input, grad_output):
        store.append(tuple(None if g is None else g.detach().clone() for g in grad_input))
    return hook


# ------------------------------------------------------------ through helpers

_TRAVEL = runpy.run_path(str(FIXTURES / "rules" / "travel_hooks.py"))


def test_a_helpers_legacy_hook_on_a_linear_gets_the_bias_gradient_first():
    """travel_hooks.py's `add_hook(module, fn)`: through the helper, a legacy hook
    on nn.Linear receives (grad of bias, grad of input, grad of weight.T)."""
    add_hook = _TRAVEL["add_hook"]
    layer = nn.Linear(4, 2)
    seen: list = []
    _quiet(add_hook, layer, _recorder(seen))
    x = torch.rand(3, 4, requires_grad=True)
    _quiet(lambda: layer(x).pow(2).sum().backward())
    assert len(seen[0]) == 3
    assert seen[0][0].shape == layer.bias.shape  # what the hook reads as grad_input[0]
    assert torch.allclose(seen[0][1], x.grad)


def test_the_same_helper_on_a_convolution_gives_the_input_gradient():
    add_hook = _TRAVEL["add_hook"]
    conv = nn.Conv2d(3, 2, 3)
    seen: list = []
    _quiet(add_hook, conv, _recorder(seen))
    x = torch.rand(1, 3, 6, 6, requires_grad=True)
    _quiet(lambda: conv(x).pow(2).sum().backward())
    assert torch.allclose(seen[0][0], x.grad)


def test_two_calls_deep_and_the_wrapper_method_reach_torch():
    hook_layer, Hooked, Net = _TRAVEL["hook_layer"], _TRAVEL["Hooked"], _TRAVEL["Net"]
    for register in (lambda net, fn: hook_layer(net, fn), lambda net, fn: Hooked(net.fc).register_backward_hook(fn)):
        net = Net()
        seen: list = []
        _quiet(register, net, _recorder(seen))
        _quiet(lambda: net(torch.rand(2, 3, 5, 5)).sum().backward())
        assert len(seen) == 1 and seen[0][0].shape == net.fc.bias.shape


def test_a_dict_of_handlers_and_getattr_by_key_register_both_hooks():
    Net = _TRAVEL["Net"]
    net = Net()
    fired: list = []
    handlers = {"forward": lambda m, i, o: fired.append("forward"),
                "backward": lambda m, gi, go: fired.append(("backward", len(gi)))}
    for kind, handler in handlers.items():
        _quiet(getattr(net.fc, f"register_{kind}_hook"), handler)
    _quiet(lambda: net(torch.rand(2, 3, 5, 5)).sum().backward())
    assert fired == ["forward", ("backward", 3)]  # the legacy hook: addmm's three inputs


def test_a_factory_passed_to_a_helper_runs_its_hooks_and_edits_a_missing_grad():
    """travel_hooks.py's `hook_all(net, freezer)` (HKL201): on the first step
    the hooked module's `.grad` is None when the hook runs."""
    hook_all, freezer, Net = _TRAVEL["hook_all"], _TRAVEL["freezer"], _TRAVEL["Net"]
    net = Net()
    _quiet(hook_all, net, freezer)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'zero_'"):
        _quiet(lambda: net(torch.rand(2, 3, 5, 5)).sum().backward())


def test_an_in_place_tensor_hook_through_a_helper_changes_another_gradient():
    """travel_hooks.py's `watch(tensor, fn)` with `double_in_place` (HKL401)."""
    watch, double_in_place = _TRAVEL["watch"], _TRAVEL["double_in_place"]
    a = torch.ones(3, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    s = a + b
    watch(a, double_in_place)
    (s * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.equal(b.grad, torch.tensor([2.0, 4.0, 6.0]))  # b's gradient doubled too


def test_a_post_accumulate_hook_through_a_helper_halves_the_weights():
    """travel_hooks.py's `on_accumulated(param, halve)` (HKL203)."""
    on_accumulated, halve = _TRAVEL["on_accumulated"], _TRAVEL["halve"]
    layer = nn.Linear(2, 1)
    before = layer.weight.detach().clone()
    on_accumulated(layer.weight, halve)
    layer(torch.rand(4, 2)).sum().backward()
    assert torch.allclose(layer.weight.detach(), before * 0.5)
    assert layer.weight.grad.abs().sum() > 0  # the gradient is untouched


def test_the_travel_fixture_is_reported_at_the_helpers():
    source = (FIXTURES / "rules" / "travel_hooks.py").read_text(encoding="utf-8")
    got = codes_at(lint(source, ["HKL101", "HKL102"]))
    helper_line = source.splitlines().index("    return module.register_backward_hook(fn)  # HKL101, HKL102") + 1
    assert (helper_line, "HKL102") in got


# ------------------------------------------------------------ module identity

def test_a_legacy_hook_on_relu_sees_the_input_gradient_even_in_place():
    """Guided backprop narrows to nn.ReLU: its legacy grad_input[0] is the
    ReLU input's gradient, as a full hook on an out-of-place twin shows, for
    the in-place ReLUs of VGG-style feature stacks too."""
    torch.manual_seed(0)
    for inplace in (False, True):
        features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=inplace), nn.Conv2d(4, 2, 3))
        twin = copy.deepcopy(features)
        twin[1] = nn.ReLU()
        legacy: list = []
        full: list = []
        _quiet(features[1].register_backward_hook, _recorder(legacy))
        twin[1].register_full_backward_hook(_recorder(full))
        x = torch.rand(1, 3, 8, 8)
        weights = torch.rand(1, 2, 4, 4)
        _quiet(lambda: (features(x) * weights).sum().backward())
        (twin(x) * weights).sum().backward()
        assert torch.allclose(legacy[0][0], full[0][0])


def test_guided_backprop_fixture_runs_and_is_not_reported_as_wrong():
    guided = runpy.run_path(str(FIXTURES / "library" / "guided_backprop.py"))

    class Vgg(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Conv2d(4, 4, 3),
                                          nn.ReLU(inplace=True))
            self.head = nn.Linear(4, 3)

        def forward(self, x):
            return self.head(self.features(x).mean((2, 3)))

    explainer = _quiet(guided["GuidedBackprop"], Vgg())
    image = torch.rand(1, 3, 8, 8, requires_grad=True)
    gradients = _quiet(explainer.generate_gradients, image, 1)
    assert gradients.shape == image.shape  # the first conv's grad_in[0]: the image gradient
    source = (FIXTURES / "library" / "guided_backprop.py").read_text(encoding="utf-8")
    findings = lint(source, "HKL102")
    relu_line = next(i for i, line in enumerate(source.splitlines(), 1) if "relu_backward_hook_function)" in line)
    assert relu_line not in {f.location.row for f in findings}  # narrowed to nn.ReLU: right values
    # the first layer's class cannot be seen: a warning, not an error
    assert findings and all(f.severity.value == "warning" for f in findings)


def test_a_linear_admitted_by_isinstance_gives_the_wrong_tensor():
    """pruning.py's `_score` reads grad_input[0] on Conv2d or Linear: on the
    Linear it is the bias gradient, not the input's (HKL102)."""
    pruning = runpy.run_path(str(FIXTURES / "library" / "pruning.py"))
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 4 * 4, 5))
    pruner = pruning["TaylorPruner"](model)
    _quiet(pruner.install)
    x = torch.rand(2, 3, 6, 6, requires_grad=True)
    _quiet(lambda: model(x).pow(2).sum().backward())
    assert torch.allclose(pruner.scores["0"], x.grad.abs().mean(0))  # the conv: its input's gradient
    # the Linear: the mean of the bias gradient (5 values), not of its 64 inputs' gradients
    assert pruner.scores["2"].shape == ()
    assert torch.allclose(pruner.scores["2"], model[2].bias.grad.abs().mean(0))


# ------------------------------------------------------------ dead fallbacks

def test_fallbacks_for_old_torch_never_run_here():
    dead = runpy.run_path(str(FIXTURES / "rules" / "dead_fallbacks.py"))
    assert hasattr(nn.Module, "register_full_backward_hook")
    assert dead["TORCH_VERSION"] >= (1, 8) and dead["HAS_FULL_HOOKS"]
    for name in ("by_hasattr", "by_early_return", "by_exception", "by_flag", "by_version_string",
                 "by_parsed_version", "by_loose_version", "by_version_tuple", "by_getattr_default"):
        layer = nn.Linear(2, 2)
        _quiet(dead[name], layer)
        assert layer._is_full_backward_hook is True, name  # the full hook, not the fallback
    for name in ("swapped_branches", "wide_except"):
        layer = nn.Linear(2, 2)
        _quiet(dead[name], layer)
    layer = nn.Linear(2, 2)
    _quiet(dead["swapped_branches"], layer)
    assert layer._is_full_backward_hook is False  # the legacy hook runs: reported


def test_a_wide_except_fallback_can_run_on_new_torch():
    """`register_full_backward_hook` raises RuntimeError on a module that has a
    legacy hook already, so `except Exception:` falls back (reported)."""
    dead = runpy.run_path(str(FIXTURES / "rules" / "dead_fallbacks.py"))
    layer = nn.Linear(2, 2)
    _quiet(layer.register_backward_hook, lambda m, gi, go: None)
    _quiet(dead["wide_except"], layer)
    assert len(layer._backward_hooks) == 2 and layer._is_full_backward_hook is False


# ------------------------------------------------ full hooks on caller-supplied modules

ERROR = "Output 0 of BackwardHookFunction is a view and is being modified inplace"


@pytest.mark.parametrize("register", ["register_full_backward_hook", "register_full_backward_pre_hook"])
def test_a_full_hook_on_a_layer_an_in_place_relu_follows_breaks_the_forward(register):
    """gradcam.py's FullHookCAM on `model.stem` (HKL403 at the call), and HKL405's
    risk for a pre-hook too."""
    gradcam = runpy.run_path(str(FIXTURES / "library" / "gradcam.py"))
    model = gradcam["CamNet"]()
    args = (lambda m, gi, go: None) if register == "register_full_backward_hook" else (lambda m, go: None)
    getattr(model.stem, register)(args)
    with pytest.raises(RuntimeError, match=ERROR):
        model(torch.rand(1, 3, 8, 8))


def test_the_forward_hook_pattern_gives_the_output_gradient_before_the_in_place_op():
    fixed = runpy.run_path(str(FIXTURES / "rules" / "hkl405_full_hook_on_caller_module.py"))
    gradcam = runpy.run_path(str(FIXTURES / "library" / "gradcam.py"))
    torch.manual_seed(0)
    model = gradcam["CamNet"]()
    twin = copy.deepcopy(model)
    twin.act = nn.ReLU()  # out of place: a full hook works there and is the reference
    saliency = fixed["SaliencyMapFixed"](model, model.stem)
    reference: list = []
    twin.stem.register_full_backward_hook(lambda m, gi, go: reference.append(go[0]))
    x = torch.rand(1, 3, 8, 8)
    model(x)[:, 3].sum().backward()
    twin(x)[:, 3].sum().backward()
    assert saliency.gradient.abs().sum() > 0
    assert torch.allclose(saliency.gradient, reference[0])


def test_a_function_that_runs_the_callers_model_fails_in_that_very_forward():
    """HKL405's message for `explain(model, layer, x)`, which registers the full hook
    and runs the model itself: a model with an in-place op after the layer fails
    inside `explain`, on its first call; the same model without it works."""
    fixture = FIXTURES / "rules" / "hkl405_full_hook_on_caller_module.py"
    explain = runpy.run_path(str(fixture))["explain"]
    torch.manual_seed(0)
    in_place = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    x = torch.rand(2, 3, 8, 8)
    with pytest.raises(RuntimeError, match=ERROR) as info:
        explain(in_place, in_place[0], x)
    frames = [f.name for f in info.traceback]
    assert "explain" in frames  # raised by the forward `explain` runs, not by the caller's code
    assert not in_place[0]._backward_hooks  # its `finally` removed the hook
    out_of_place = copy.deepcopy(in_place)
    out_of_place[1] = nn.ReLU()
    gradient = explain(out_of_place, out_of_place[0], x)
    assert gradient.shape == (2, 4, 6, 6)
    source = fixture.read_text(encoding="utf-8")
    line = next(n for n, text in enumerate(source.splitlines(), start=1) if "handle = layer.register_full_backward_hook" in text)
    (finding,) = [f for f in lint(source, "HKL405") if f.location.row == line]
    assert "`explain` then runs the caller's model itself (`model(x)`" in finding.message
    assert "that very forward fails" in finding.message


def test_gradcam_fixture_full_hook_is_reported_at_the_call():
    source = (FIXTURES / "library" / "gradcam.py").read_text(encoding="utf-8")
    line = source.splitlines().index("broken = FullHookCAM(model, model.stem)  # HKL403") + 1
    assert (line, "HKL403") in codes_at(lint(source, "HKL403"))


# ------------------------------------------------------------ wrapped modules (HKL303)

def test_a_wrapper_calling_forward_skips_the_wrapped_modules_hooks():
    identity = runpy.run_path(str(FIXTURES / "rules" / "module_identity.py"))
    layer = nn.Linear(2, 2)
    fired: list = []
    layer.register_forward_hook(lambda m, i, o: fired.append("hook"))
    identity["Pruner"](layer)(torch.rand(1, 2))
    assert fired == []
    identity["FrameworkAdapter"](layer).call(torch.rand(1, 2))
    assert fired == []
    layer(torch.rand(1, 2))
    assert fired == ["hook"]
