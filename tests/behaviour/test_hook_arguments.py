"""Real torch: what HKL401, HKL402 and HKL404 claim, and that their fixes work.

hook-semantics.md section 4 (a hook must not modify its argument) and the
return-value checks torch makes only when backward runs.
"""

from __future__ import annotations

import runpy
import types
import warnings

import pytest

from conftest import FIXTURES, lint
from hooklint.findings import Applicability, Edit
from hooklint.rules import get_rule
from hooklint.rules.hook_mutates_argument import OUT_OF_PLACE_TWINS
from hooklint.rules.hook_return_arity import _LEGACY_LENGTHS, _LINEAR_LENGTHS, _SINGLE_IN_OUT

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def _apply(text: str, edits: tuple[Edit, ...]) -> str:
    """Apply non-overlapping edits (1-based rows and columns, end exclusive)."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(loc):
        return starts[loc.row - 1] + loc.column - 1

    for edit in sorted(edits, key=lambda e: (e.location, e.end_location), reverse=True):
        text = text[: offset(edit.location)] + edit.content + text[offset(edit.end_location):]
    return text


# ---------------------------------------------------------------- HKL401


def test_inplace_tensor_hook_freezes_the_other_input_too():
    a = torch.ones(3, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    s = a + b  # AddBackward hands one buffer to both edges
    a.register_hook(lambda g: g.mul_(0))
    (s * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.equal(a.grad, torch.zeros(3))
    assert torch.equal(b.grad, torch.zeros(3)), "b was frozen too"


def test_returning_a_new_tensor_freezes_only_a():
    a = torch.ones(3, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    s = a + b
    a.register_hook(lambda g: g.mul(0))  # the fix
    (s * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.equal(a.grad, torch.zeros(3))
    assert torch.equal(b.grad, torch.tensor([1.0, 2.0, 3.0]))


def _seed001_hook(grad):
    grad *= 1.6


def _seed001_fixed(grad):
    grad = grad * 1.6
    return grad


def test_seed001_inplace_hook_looks_right_on_pow_sum():
    """Why the post saw the expected numbers: x ** 2 gives the hook a fresh buffer."""
    x = torch.ones(4, requires_grad=True)
    x.register_hook(_seed001_hook)
    torch.sum(torch.pow(x, 2)).backward()
    assert torch.allclose(x.grad, torch.full((4,), 3.2))


def test_seed001_inplace_hook_raises_on_an_expanded_gradient():
    x = torch.ones(4, requires_grad=True)
    x.register_hook(_seed001_hook)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers to a single"):
        x.sum().backward()  # the gradient of sum() is an expanded view


def test_seed001_fixed_hook_works_on_an_expanded_gradient():
    x = torch.ones(4, requires_grad=True)
    x.register_hook(_seed001_fixed)
    x.sum().backward()
    assert torch.allclose(x.grad, torch.full((4,), 1.6))


def test_item_assignment_on_an_expanded_gradient_writes_every_element():
    def drop_first(grad):
        grad[0] = 0

    t = torch.ones(3, requires_grad=True)
    t.register_hook(drop_first)
    t.sum().backward()
    assert torch.equal(t.grad, torch.zeros(3)), "all three elements share one memory location"


class Add(nn.Module):
    def forward(self, x, y):
        return x + y


@pytest.mark.parametrize("mutate", [True, False])
def test_module_hook_editing_grad_input_changes_the_other_input(mutate):
    a = torch.ones(3, requires_grad=True)
    b = torch.ones(3, requires_grad=True)

    def zero_first(module, grad_input, grad_output):
        if mutate:
            grad_input[0].mul_(0)
            return None
        return (grad_input[0] * 0, grad_input[1])

    module = Add()
    module.register_full_backward_hook(zero_first)
    (module(a, b) * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.equal(a.grad, torch.zeros(3))
    expected_b = torch.zeros(3) if mutate else torch.tensor([1.0, 2.0, 3.0])
    assert torch.equal(b.grad, expected_b)


@pytest.mark.parametrize("pre", [False, True])
def test_module_hook_editing_grad_output_raises_on_an_expanded_gradient(pre):
    layer = nn.Linear(3, 2)
    if pre:
        layer.register_full_backward_pre_hook(lambda m, go: go[0].mul_(2) and None)
    else:
        layer.register_full_backward_hook(lambda m, gi, go: go[0].mul_(2) and None)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        layer(torch.rand(4, 3, requires_grad=True)).sum().backward()


def test_forward_pre_hook_editing_its_input_changes_the_callers_tensor():
    layer = nn.Linear(3, 2)

    def double_input(module, inp):
        inp[0].mul_(2)

    layer.register_forward_pre_hook(double_input)
    batch = torch.ones(1, 3)
    layer(batch)
    assert torch.equal(batch, torch.full((1, 3), 2.0)), "the caller's batch was changed"


def test_forward_pre_hook_returning_a_new_input_leaves_the_caller_alone():
    layer = nn.Linear(3, 2)
    layer.register_forward_pre_hook(lambda module, inp: (inp[0] * 2,))
    batch = torch.ones(1, 3)
    out = layer(batch)
    assert torch.equal(batch, torch.ones(1, 3))
    assert torch.allclose(out, nn.functional.linear(torch.full((1, 3), 2.0), layer.weight, layer.bias))


def test_forward_hook_editing_a_saved_input_breaks_backward():
    layer = nn.Linear(3, 2)

    def clamp_input(module, inp, out):
        inp[0].mul_(2)

    layer.register_forward_hook(clamp_input)
    x = torch.ones(1, 3, requires_grad=True) * 1  # a non-leaf the Linear saves for its weight gradient
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        layer(x).sum().backward()


def test_forward_pre_hook_editing_a_leaf_that_requires_grad_raises():
    layer = nn.Linear(3, 2)

    def double_input(module, inp):
        inp[0].mul_(2)

    layer.register_forward_pre_hook(double_input)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        layer(torch.ones(1, 3, requires_grad=True))


def test_out_of_place_twins_exist_and_do_not_write():
    for name in sorted(OUT_OF_PLACE_TWINS):
        assert hasattr(torch.Tensor, name), name
        assert hasattr(torch.Tensor, name[:-1]), f"no out-of-place twin for {name}"
    g = torch.tensor([1.0, -2.0, 3.0])
    before = g.clone()
    assert torch.equal(g.mul(2), g.clone().mul_(2)) and torch.equal(g, before)
    assert torch.equal(g.clamp(-1, 1), g.clone().clamp_(-1, 1)) and torch.equal(g, before)


HKL401_FIXED = [inv for inv in get_rule("HKL401").INVALID if inv.fixed is not None]


@pytest.mark.parametrize("invalid", HKL401_FIXED, ids=lambda inv: inv.code.splitlines()[1][:40])
def test_hkl401_fix_produces_the_documented_text(invalid):
    findings = [f for f in lint(invalid.code, "HKL401") if f.code == "HKL401"]
    assert findings and all(f.fix is not None and f.fix.edits for f in findings)
    fixed = invalid.code
    for finding in findings:  # one finding per hook in these examples
        fixed = _apply(fixed, finding.fix.edits)
    assert fixed == invalid.fixed
    assert not [f for f in lint(fixed, "HKL401") if f.code == "HKL401"], "the fixed text is clean"


def _hooks_defined_in(namespace: dict, filename: str):
    return [v for v in namespace.values()
            if isinstance(v, types.FunctionType) and v.__code__.co_filename == filename]


@pytest.mark.parametrize("invalid", HKL401_FIXED, ids=lambda inv: inv.code.splitlines()[1][:40])
def test_hkl401_fixed_hooks_run_on_an_expanded_gradient(invalid):
    """Each fixed hook leaves its argument alone and works where the original raised."""
    namespace: dict = {}
    exec(compile(invalid.fixed, "<fixed>", "exec"), namespace)
    original: dict = {}
    exec(compile(invalid.code, "<original>", "exec"), original)
    pairs = list(zip(_hooks_defined_in(original, "<original>"), _hooks_defined_in(namespace, "<fixed>")))
    for bad, good in pairs:
        arg = torch.tensor([1.0, -2.0, 3.0])
        result = good(arg.clone())
        assert result is not None
        unchanged = torch.tensor([1.0, -2.0, 3.0])
        good(unchanged)
        assert torch.equal(unchanged, torch.tensor([1.0, -2.0, 3.0])), "the fixed hook leaves its argument alone"
        t = torch.ones(3, requires_grad=True)
        t.register_hook(good)
        t.sum().backward()
        assert torch.equal(t.grad, good(torch.ones(3)))
        t = torch.ones(3, requires_grad=True)
        t.register_hook(bad)
        try:
            t.sum().backward()
        except RuntimeError as exc:
            assert "more than one element of the written-to tensor" in str(exc)
        else:  # item assignment "succeeds" on the expanded gradient, with the wrong result
            assert not torch.equal(t.grad, good(torch.ones(3)))
    if not pairs:  # the lambda example: `a` carries the fixed hook
        a = namespace["a"]
        a.sum().backward()
        assert torch.equal(a.grad, torch.zeros(3))


def test_hkl401_fix_on_seed001_matches_the_fixed_seed():
    path = FIXTURES / "seeds" / "seed001_four_hooks.py"
    text = path.read_text(encoding="utf-8")
    safe = [f for f in lint(text, "HKL401") if f.code == "HKL401"]
    assert len(safe) == 2 and all(f.fix.applicability is Applicability.SAFE for f in safe)
    fixed = text
    for finding in sorted(safe, key=lambda f: f.location, reverse=True):
        fixed = _apply(fixed, finding.fix.edits)
    assert "def grad_hook(grad):\n    grad = grad * 1.6  # HKL401\n    return grad\n" in fixed
    assert "def grad_hook_50(grad):\n    grad = grad * 50  # HKL401\n    return grad\n" in fixed
    namespace: dict = {}
    head = fixed.split("x = torch.tensor")[0]  # the imports and the fixed hook
    exec(compile(head, "<seed001-fixed>", "exec"), namespace)
    x = torch.ones(4, requires_grad=True)
    x.register_hook(namespace["grad_hook"])
    x.sum().backward()
    assert torch.allclose(x.grad, torch.full((4,), 1.6))


# ---------------------------------------------------------------- HKL402


def _backward(module, *inputs, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module(*inputs, **kwargs).sum().backward()


def test_full_hook_three_gradients_on_linear():
    layer = nn.Linear(4, 2)

    def double(module, grad_input, grad_output):
        gin0, gin1, gin2 = (grad_input[0],) * 3
        return gin0, gin1 * 2, gin2

    layer.register_full_backward_hook(double)
    with pytest.raises(RuntimeError, match=r"^Backward hook returned an invalid number of grad_input, got 3, "
                                           r"but expected 1$"):
        _backward(layer, torch.rand(3, 4, requires_grad=True))


def test_full_hook_tensor_is_taken_as_a_sequence_of_rows():
    layer = nn.Linear(4, 2)
    layer.register_full_backward_hook(lambda m, gi, go: gi[0] * 2)
    with pytest.raises(RuntimeError, match="invalid number of grad_input, got 3, but expected 1"):
        _backward(layer, torch.rand(3, 4, requires_grad=True))  # 3 rows
    one_row = nn.Linear(4, 2)
    one_row.register_full_backward_hook(lambda m, gi, go: gi[0] * 2)
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        _backward(one_row, torch.rand(1, 4, requires_grad=True))


def test_full_hook_one_gradient_for_two_inputs():
    module = Add()
    module.register_full_backward_hook(lambda m, gi, go: (gi[0] * 0.5,))
    with pytest.raises(RuntimeError, match="got 1, but expected 2"):
        _backward(module, torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True))


class Masked(nn.Module):
    def forward(self, x, mask=None):
        return x if mask is None else x * mask


@pytest.mark.parametrize("passed", [1, 2])
def test_full_hook_counts_the_positional_inputs_passed(passed):
    module = Masked()
    module.register_full_backward_hook(lambda m, gi, go: (gi[0], None, None))
    inputs = [torch.ones(3, requires_grad=True), torch.ones(3)][:passed]
    with pytest.raises(RuntimeError, match=f"got 3, but expected {passed}"):
        _backward(module, *inputs)


def test_full_hook_does_not_count_keyword_inputs():
    module = Masked()
    module.register_full_backward_hook(lambda m, gi, go: (gi[0], None))
    with pytest.raises(RuntimeError, match="got 2, but expected 1"):
        _backward(module, torch.ones(3, requires_grad=True), mask=torch.ones(3))


def test_full_hook_without_grad_inputs_may_only_return_nones():
    layer = nn.Linear(4, 2)
    layer.register_full_backward_hook(lambda m, gi, go: (None, None))  # ignored
    _backward(layer, torch.rand(3, 4))
    layer = nn.Linear(4, 2)
    layer.register_full_backward_hook(lambda m, gi, go: (torch.ones(3, 4),))
    with pytest.raises(RuntimeError, match="where no input requires gradient should always return None"):
        _backward(layer, torch.rand(3, 4))


def test_full_hook_accepts_a_list_and_the_fix():
    for hook in (lambda m, gi, go: [gi[0] * 2], lambda m, gi, go: (gi[0] * 2,)):
        layer = nn.Linear(4, 2)
        layer.register_full_backward_hook(hook)
        x = torch.rand(3, 4, requires_grad=True)
        _backward(layer, x)
        assert x.grad is not None


@pytest.mark.parametrize(
    ("hook", "module", "message"),
    [
        (lambda m, gi, go: [g * 2 for g in gi], nn.ReLU(), r"expected tuple, but hook returned 'list'"),
        (lambda m, gi, go: gi[0] * 2, nn.ReLU(), r"expected tuple, but hook returned 'Tensor'"),
    ],
)
def test_legacy_hook_must_return_a_tuple(hook, module, message):
    module.register_backward_hook(hook)
    with pytest.raises(TypeError, match=message):
        _backward(module, torch.rand(2, 3, requires_grad=True))


def test_legacy_hook_pair_on_linear_with_bias():
    layer = nn.Linear(4, 2)
    layer.register_backward_hook(lambda m, gi, go: (gi[0], gi[1]))
    with pytest.raises(RuntimeError, match=r"has returned an incorrect number of values \(got 2, but expected 3\)"):
        _backward(layer, torch.rand(3, 4, requires_grad=True))


def test_legacy_hook_seed001_three_gradients_on_linear_work():
    layer = nn.Linear(4, 3)

    def backward_hook(module, gin, gout):
        gin0, gin1, gin2 = gin
        return tuple([gin0, gin1 * 2, gin2 * 3])

    layer.register_backward_hook(backward_hook)
    x = torch.rand(5, 4, requires_grad=True)
    _backward(layer, x)
    assert x.grad is not None


def test_pre_hook_returns_one_gradient_per_output():
    layer = nn.Linear(4, 2)
    layer.register_full_backward_pre_hook(lambda m, go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match=r"^Backward pre hook returned an invalid number of grad_output, got 2, "
                                           r"but expected 1$"):
        _backward(layer, torch.rand(3, 4, requires_grad=True))
    fixed = nn.Linear(4, 2)
    fixed.register_full_backward_pre_hook(lambda m, go: (go[0] * 0.5,))
    _backward(fixed, torch.rand(3, 4, requires_grad=True))


@pytest.mark.parametrize(("value", "type_name"), [((1,), "tuple"), ([1], "list"), (0.0, "float")])
def test_tensor_hook_must_return_a_tensor(value, type_name):
    x = torch.ones(3, requires_grad=True)
    x.register_hook(lambda g: value if not isinstance(value, tuple) else (g,))
    with pytest.raises(TypeError, match=f"expected Variable, but hook returned '{type_name}'"):
        (x * 2).sum().backward()


_LEGACY_INPUTS = {
    1: (2, 3),  # activations: (batch, features)
    "Conv1d": (2, 3, 6), "Conv2d": (2, 3, 6, 6), "Conv3d": (2, 3, 4, 4, 4),
    "ConvTranspose1d": (2, 3, 6), "ConvTranspose2d": (2, 3, 6, 6),
    "MaxPool2d": (2, 3, 4, 4), "MaxPool3d": (2, 3, 4, 4, 4), "AvgPool2d": (2, 3, 4, 4), "AvgPool3d": (2, 3, 4, 4, 4),
}


def _legacy_module(name):
    if name.startswith("Conv"):
        return getattr(nn, name)(3, 2, 3)
    if name.endswith(("Pool2d", "Pool3d")):
        return getattr(nn, name)(2)
    if name in ("Softmax", "LogSoftmax"):
        return getattr(nn, name)(dim=-1)
    return getattr(nn, name)()


def _legacy_grad_input_length(module, shape):
    seen = []
    module.register_backward_hook(lambda m, gi, go: seen.append(len(gi)))
    _backward(module, torch.rand(*shape, requires_grad=True))
    return seen[0]


@pytest.mark.parametrize("name", sorted(_LEGACY_LENGTHS))
def test_legacy_length_table(name):
    lengths, usual, _when = _LEGACY_LENGTHS[name]
    batched = _LEGACY_INPUTS.get(name, _LEGACY_INPUTS[1])
    assert _legacy_grad_input_length(_legacy_module(name), batched) == usual
    assert _legacy_grad_input_length(_legacy_module(name), batched[1:]) in lengths  # unbatched


@pytest.mark.parametrize("bias", [True, False])
def test_legacy_length_table_linear(bias):
    lengths, usual, _when = _LINEAR_LENGTHS[bias]
    seen = {shape: _legacy_grad_input_length(nn.Linear(3, 2, bias=bias), shape) for shape in [(2, 3), (3,), (2, 4, 3)]}
    assert seen[(2, 3)] == usual
    assert set(seen.values()) == set(lengths)


_SINGLE_IN_OUT_CASES = {
    "Linear": (lambda: nn.Linear(4, 4), (2, 4)),
    "LazyLinear": (lambda: nn.LazyLinear(4), (2, 4)),
    "Conv1d": (lambda: nn.Conv1d(3, 3, 1), (1, 3, 5)),
    "Conv2d": (lambda: nn.Conv2d(3, 3, 1), (1, 3, 5, 5)),
    "Conv3d": (lambda: nn.Conv3d(3, 3, 1), (1, 3, 3, 3, 3)),
    "ConvTranspose1d": (lambda: nn.ConvTranspose1d(3, 3, 1), (1, 3, 5)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(3, 3, 1), (1, 3, 5, 5)),
    "ConvTranspose3d": (lambda: nn.ConvTranspose3d(3, 3, 1), (1, 3, 3, 3, 3)),
    "LazyConv1d": (lambda: nn.LazyConv1d(3, 1), (1, 3, 5)),
    "LazyConv2d": (lambda: nn.LazyConv2d(3, 1), (1, 3, 5, 5)),
    "LazyConv3d": (lambda: nn.LazyConv3d(3, 1), (1, 3, 3, 3, 3)),
    **{name: (lambda name=name: getattr(nn, name)(), (2, 4)) for name in (
        "ReLU", "ReLU6", "Sigmoid", "Tanh", "GELU", "SiLU", "ELU", "SELU", "CELU", "LeakyReLU", "PReLU", "Softplus",
        "Softsign", "Mish", "Hardswish", "Hardsigmoid", "Hardtanh", "LogSigmoid", "Tanhshrink", "GLU", "Dropout",
        "AlphaDropout", "Flatten", "Identity")},
    "Threshold": (lambda: nn.Threshold(0.1, 0.0), (2, 4)),
    **{name: (lambda name=name: getattr(nn, name)(dim=-1), (2, 4)) for name in ("Softmax", "LogSoftmax", "Softmin")},
    "BatchNorm1d": (lambda: nn.BatchNorm1d(4), (2, 4)),
    "BatchNorm2d": (lambda: nn.BatchNorm2d(3), (2, 3, 4, 4)),
    "BatchNorm3d": (lambda: nn.BatchNorm3d(3), (2, 3, 2, 2, 2)),
    "LayerNorm": (lambda: nn.LayerNorm(4), (2, 4)),
    "GroupNorm": (lambda: nn.GroupNorm(1, 3), (2, 3, 4, 4)),
    "InstanceNorm1d": (lambda: nn.InstanceNorm1d(3), (2, 3, 5)),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(3), (2, 3, 4, 4)),
    "InstanceNorm3d": (lambda: nn.InstanceNorm3d(3), (2, 3, 2, 2, 2)),
    "LocalResponseNorm": (lambda: nn.LocalResponseNorm(2), (2, 3, 4, 4)),
    "Dropout1d": (lambda: nn.Dropout1d(), (2, 3, 5)),
    "Dropout2d": (lambda: nn.Dropout2d(), (2, 3, 4, 4)),
    "Dropout3d": (lambda: nn.Dropout3d(), (2, 3, 2, 2, 2)),
    **{f"{kind}Pool{d}d": (lambda kind=kind, d=d: getattr(nn, f"{kind}Pool{d}d")(2), (1, 3) + (4,) * d)
       for kind in ("Max", "Avg") for d in (1, 2, 3)},
    **{f"Adaptive{kind}Pool{d}d": (lambda kind=kind, d=d: getattr(nn, f"Adaptive{kind}Pool{d}d")(2),
                                   (1, 3) + (4,) * d)
       for kind in ("Max", "Avg") for d in (1, 2, 3)},
    "Unflatten": (lambda: nn.Unflatten(1, (2, 2)), (2, 4)),
    "Sequential": (lambda: nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (2, 4)),
    "Upsample": (lambda: nn.Upsample(scale_factor=2), (1, 3, 4, 4)),
    "PixelShuffle": (lambda: nn.PixelShuffle(2), (1, 4, 2, 2)),
    "PixelUnshuffle": (lambda: nn.PixelUnshuffle(2), (1, 3, 4, 4)),
}


def test_single_in_out_table_is_fully_covered():
    assert set(_SINGLE_IN_OUT_CASES) == set(_SINGLE_IN_OUT)


@pytest.mark.parametrize("name", sorted(_SINGLE_IN_OUT_CASES))
def test_single_in_out_table(name):
    factory, shape = _SINGLE_IN_OUT_CASES[name]
    module = factory()
    module(torch.rand(*shape))  # materialize lazy layers
    seen = []
    module.register_full_backward_hook(lambda m, gi, go: seen.append((len(gi), len(go))))
    _backward(module, torch.rand(*shape, requires_grad=True))
    assert seen == [(1, 1)]


# ---------------------------------------------------------------- HKL404


# The fixture's own classes: the torch behaviour is shown on the very code the
# rule flags (GradReverse) and the code it accepts (the view and Function twins).
_HKL404 = runpy.run_path(str(FIXTURES / "rules" / "hkl404_hook_on_shared_input.py"))
GradReverse = _HKL404["GradReverse"]
GradReverseView = _HKL404["GradReverseView"]
GradReverseClone = _HKL404["GradReverseClone"]
GradReverseFunction = _HKL404["GradReverseFunction"]


def _two_branches(reverse):
    """Features feed a reversal branch (weight 1) and a classifier branch (weight 3)."""
    w = torch.ones(3, requires_grad=True)
    features = w * 2
    loss = reverse(features).sum() + (features * 3).sum()
    loss.backward()
    return w.grad


def test_hook_on_the_input_flips_the_other_branch_too():
    # correct: d/dw [-(2w) + 3 * 2w] = -2 + 6 = 4; the input hook flips the whole 8
    assert torch.equal(_two_branches(GradReverse()), torch.full((3,), -8.0))


@pytest.mark.parametrize("fixed", [GradReverseView, GradReverseClone, GradReverseFunction])
def test_hooking_a_new_tensor_flips_only_its_own_path(fixed):
    assert torch.equal(_two_branches(fixed()), torch.full((3,), 4.0))


def test_hkl404_flags_the_broken_layer_and_not_the_fixes():
    source = (FIXTURES / "rules" / "hkl404_hook_on_shared_input.py").read_text(encoding="utf-8")
    flagged = {f.message.split("`")[1] for f in lint(source, "HKL404")}
    assert "GradReverse.forward" in flagged
    assert not {"GradReverseView.forward", "GradReverseClone.forward"} & flagged


def test_out_of_place_fix_can_change_the_dtype_which_torch_rejects():
    """HKL401's Fix safety: `grad *= t` keeps a float16 gradient float16; `grad * t` promotes it."""
    x = torch.ones(3, dtype=torch.float16, requires_grad=True)
    scale = torch.tensor([1.0, 2.0, 3.0])
    x.register_hook(lambda g: g * scale)
    with pytest.raises(RuntimeError, match="has changed the type of value"):
        (x * 2).sum().backward()
