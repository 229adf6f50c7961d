"""Real torch: what HKL101's fixes claim, on models with in-place ops after
the hooked module (hook-semantics.md sections 1 and 5).

* `register_full_backward_hook` (the rename) breaks the forward when an
  in-place op follows the module; with out-of-place ops it gives the legacy
  hook's grad_output.
* The output tensor hook that the fix writes (``output_grad_hook``, run here
  from the very source text the fix inserts) runs with in-place ops after the
  module and gives the hook the gradient of the module's output, which is the
  legacy hook's grad_output, on Conv2d+ReLU(inplace=True), VGG-like and
  ResNet-like blocks.
* Its handle behaves as the legacy hook's: removed after the forward, the hook
  still fires for that graph; removed before the forward, it does not.
* The one-line lambda form (a forward hook returning `output.register_hook(...)`)
  replaces the module's output with the handle: why the fix writes a function.
"""

from __future__ import annotations

import runpy
import warnings
from pathlib import Path

import pytest

from hooklint.static.output_grad_hook import helper_source

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

INPLACE_ERROR = "is a view and is being modified inplace"


def output_grad_hook():
    """The helper exactly as the fix writes it into the user's file."""
    namespace: dict = {}
    exec(compile(helper_source(), "<hooklint fix>", "exec"), namespace)  # noqa: S102 - hooklint's own code
    return namespace["output_grad_hook"]


class ConvReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.conv(x))


def vgg_like():
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 5),
    )


# torchvision's ResNet BasicBlock, small: `out += identity` after bn2, in-place ReLUs
BasicBlock = runpy.run_path(str(Path(__file__).parents[2] / "fixtures" / "models" / "residual.py"))["BasicBlock"]


def resnet_like():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
                         BasicBlock(), BasicBlock(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))


# (model factory, path of the hooked module, input shape): each hooked module's
# output is modified in place right after it
CASES = {
    "conv+relu_inplace": (ConvReLU, "conv", (2, 3, 8, 8)),
    "vgg_conv": (vgg_like, "2", (2, 3, 8, 8)),
    "resnet_bn2_then_add_inplace": (resnet_like, "3.bn2", (2, 3, 8, 8)),
    "resnet_stem_bn": (resnet_like, "1", (2, 3, 8, 8)),
}


def build(factory):
    torch.manual_seed(0)
    return factory()


def loss_of(output):
    weight = torch.randn(output.shape, generator=torch.Generator().manual_seed(7))
    return (output * weight).sum()


def true_output_grad(factory, path, shape):
    """d loss / d (module output), with the output captured before anything
    downstream can modify it in place (the module returns a clone)."""
    model = build(factory)
    kept = {}

    def keep(module, inputs, output):
        kept["out"] = output
        return output.clone()

    model.get_submodule(path).register_forward_hook(keep)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    grad, = torch.autograd.grad(loss_of(model(x)), kept["out"])
    return grad


def run_with(factory, path, shape, register):
    model = build(factory)
    seen = []

    def hook(module, grad_input, grad_output):
        seen.append(grad_output[0].detach().clone())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy API's FutureWarning
        handle = register(model.get_submodule(path), hook)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
        loss_of(model(x)).backward()
    return seen, handle


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_rename_breaks_the_forward(case):
    factory, path, shape = CASES[case]
    with pytest.raises(RuntimeError, match=INPLACE_ERROR):
        run_with(factory, path, shape, lambda m, h: m.register_full_backward_hook(h))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_output_tensor_hook_runs_and_sees_the_module_output_gradient(case):
    factory, path, shape = CASES[case]
    truth = true_output_grad(factory, path, shape)
    helper = output_grad_hook()
    fixed, _ = run_with(factory, path, shape, lambda m, h: m.register_forward_hook(helper(h)))
    legacy, _ = run_with(factory, path, shape, lambda m, h: m.register_backward_hook(h))
    assert len(fixed) == len(legacy) == 1
    assert torch.equal(fixed[0], legacy[0])  # what the legacy hook meant, to the bit
    assert torch.allclose(fixed[0], truth, atol=1e-6)
    assert (fixed[0] == 0).any()  # the zeros of the ReLU that follows: the gradient went through it


def out_of_place():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 3))


@pytest.mark.parametrize(("factory", "path"), [(out_of_place, "0"), (resnet_like, "4.conv1")],
                         ids=["conv+relu", "resnet_conv1_then_bn"])
def test_without_inplace_ops_after_it_both_fixes_give_the_legacy_grad_output(factory, path):
    truth = true_output_grad(factory, path, (2, 3, 8, 8))
    helper = output_grad_hook()
    full, _ = run_with(factory, path, (2, 3, 8, 8), lambda m, h: m.register_full_backward_hook(h))
    fixed, _ = run_with(factory, path, (2, 3, 8, 8), lambda m, h: m.register_forward_hook(helper(h)))
    legacy, _ = run_with(factory, path, (2, 3, 8, 8), lambda m, h: m.register_backward_hook(h))
    for grad in (full[0], fixed[0]):
        assert torch.allclose(grad, legacy[0], atol=1e-6) and torch.allclose(grad, truth, atol=1e-6)


def test_module_called_twice_gets_one_call_per_forward_call():
    conv = nn.Conv2d(2, 2, 1)
    seen = {"legacy": [], "fixed": []}
    conv.register_backward_hook(lambda m, gi, go: seen["legacy"].append(go[0].clone()))
    conv.register_forward_hook(output_grad_hook()(lambda m, gi, go: seen["fixed"].append(go[0].clone())))
    x = torch.randn(1, 2, 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (torch.relu_(conv(x)) * 2 + torch.relu_(conv(x)) * 3).sum().backward()
    assert len(seen["fixed"]) == len(seen["legacy"]) == 2
    for fixed, legacy in zip(sorted(seen["fixed"], key=torch.sum), sorted(seen["legacy"], key=torch.sum)):
        assert torch.equal(fixed, legacy)


def test_handle_removal_matches_the_legacy_hook():
    """Removed between forward and backward, module backward hooks still fire
    for that graph (hook-semantics.md, 3); removed before the forward, not."""
    helper = output_grad_hook()
    for register in (lambda m, h: m.register_backward_hook(h), lambda m, h: m.register_forward_hook(helper(h))):
        model = build(ConvReLU)
        fired = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            handle = register(model.conv, lambda m, gi, go: fired.append(1))
            out = model(torch.randn(1, 3, 4, 4))
            handle.remove()
            out.sum().backward()
            assert fired == [1]
            model(torch.randn(1, 3, 4, 4)).sum().backward()
        assert fired == [1]


def test_no_grad_forward_registers_nothing():
    model = build(ConvReLU)
    model.conv.register_forward_hook(output_grad_hook()(lambda m, gi, go: pytest.fail("must not run")))
    with torch.no_grad():
        model(torch.randn(1, 3, 4, 4))  # no tensor to hook: no error either


def test_tuple_output_hooks_the_first_tensor_as_the_legacy_hook_does():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            y = self.fc(x)
            return y * 2, y.sum()

    seen = {"legacy": [], "fixed": []}
    pair = Pair()
    pair.register_backward_hook(lambda m, gi, go: seen["legacy"].append(go[0].clone()))
    pair.register_forward_hook(output_grad_hook()(lambda m, gi, go: seen["fixed"].append(go[0].clone())))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first, second = pair(torch.randn(2, 3))
        (first.relu_().sum() + second).backward()
    assert len(seen["fixed"]) == len(seen["legacy"]) == 1
    assert torch.equal(seen["fixed"][0], seen["legacy"][0])


def test_the_one_line_lambda_form_replaces_the_output_with_the_handle():
    """`register_forward_hook(lambda m, i, out: out.register_hook(...))` returns the
    handle from the forward hook, and a forward hook's return value replaces the
    module's output: the next layer receives a RemovableHandle."""
    model = build(ConvReLU)
    model.conv.register_forward_hook(lambda m, inputs, out: out.register_hook(lambda g: None))
    with pytest.raises(TypeError, match="RemovableHandle"):
        model(torch.randn(1, 3, 4, 4))
