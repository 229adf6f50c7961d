"""Real torch: what HKL504 and HKL505 claim about custom autograd Functions,
run on the fixtures' own Functions.

- HKL504: an output that is a view made inside a custom Function cannot be
  modified in place ("... is a view and is being modified inplace. This
  view was created inside a custom Function ..."); the same view made
  outside the Function can, with the right gradients.
- HKL505: a backward that runs a nested backward into an input and returns
  that input's `.grad` counts the gradient twice (and again whatever
  `.grad` held before); `torch.autograd.grad` gives the reference.
"""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"
VIEW_ERROR = r"is a view and is being modified inplace\. This view was created inside a custom Function"


@pytest.fixture(scope="module")
def views():
    return runpy.run_path(str(RULES / "hkl504_function_returns_view.py"))


@pytest.fixture(scope="module")
def writes():
    return runpy.run_path(str(RULES / "hkl505_function_backward_writes_grad.py"))


def _inplace_after(apply, *args):
    out = apply(*args)
    out.add_(1)  # a caller's `out += bias`
    out.sum().backward()


def test_view_returned_by_a_function_cannot_be_modified_in_place(views):
    a = torch.randn(4, 3, requires_grad=True)  # 2-D: the identity lambda, so a view
    b = torch.randn(3, 5, requires_grad=True)
    with pytest.raises(RuntimeError, match=VIEW_ERROR):
        _inplace_after(views["FlatMatmul"].apply, a, b)
    a3 = torch.randn(2, 4, 3, requires_grad=True)  # 3-D: cloned, works
    _inplace_after(views["FlatMatmul"].apply, a3, b)
    with pytest.raises(RuntimeError, match=VIEW_ERROR):
        _inplace_after(views["Transposed"].apply, a)
    with pytest.raises(RuntimeError, match=VIEW_ERROR):  # not reported (the idiom), but the same failure
        _inplace_after(views["GradReverse"].apply, a)
    with pytest.raises(RuntimeError, match=VIEW_ERROR):
        _inplace_after(views["Unpad"].apply, a)


def test_view_made_outside_the_function_is_fine_and_gradients_match(views):
    a = torch.randn(2, 4, 3, requires_grad=True)
    b = torch.randn(3, 5, requires_grad=True)
    out = views["flat_matmul"](a, b)
    out.add_(1)
    out.sum().backward()
    ref_a, ref_b = a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    (ref_a @ ref_b + 1).sum().backward()
    torch.testing.assert_close(a.grad, ref_a.grad)
    torch.testing.assert_close(b.grad, ref_b.grad)
    x = torch.randn(3, requires_grad=True)
    y = views["ClonedGradReverse"].apply(x)
    y.add_(1)
    y.sum().backward()
    torch.testing.assert_close(x.grad, -torch.ones(3))


def test_hkl504_reports_the_fixture_views(views):
    text = (RULES / "hkl504_function_returns_view.py").read_text()
    expected = [row for row, line in enumerate(text.splitlines(), 1) if line.endswith("# HKL504")]
    assert [f.location.row for f in lint(text, "HKL504")] == expected and len(expected) == 3


def _weight_grad(apply, preexisting: bool):
    torch.manual_seed(0)
    x = torch.randn(6, 4)
    w = torch.randn(4, 3, requires_grad=True)
    g = torch.randn(6, 3)
    if preexisting:
        w.grad = torch.ones(4, 3)  # an earlier micro-batch
    torch.autograd.backward(apply(x, w), g)
    return w.grad.clone(), (x.t() @ g) + (1 if preexisting else 0)


@pytest.mark.parametrize("preexisting", [False, True])
def test_nested_backward_counts_the_weight_gradient_twice(writes, preexisting):
    got, reference = _weight_grad(writes["RecomputedLinear"].apply, preexisting)
    # the nested backward accumulated once, then the engine added the returned .grad (which
    # holds that and the earlier gradient) again: twice the new gradient, twice the earlier one
    torch.testing.assert_close(got, 2 * reference)
    assert not torch.allclose(got, reference)
    fixed, reference = _weight_grad(writes["FixedRecomputedLinear"].apply, preexisting)
    torch.testing.assert_close(fixed, reference)


def test_grad_assigned_and_returned_is_counted_twice(writes):
    got, reference = _weight_grad(writes["ManualWeightGrad"].apply, False)
    torch.testing.assert_close(got, 2 * reference)


# --------------------------------------------------- HKL501: register_autograd


@pytest.fixture(scope="module")
def ops():
    return runpy.run_path(str(RULES / "hkl501_register_autograd.py"))


def test_registered_backward_with_too_few_gradients_raises(ops):
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        torch.ops.hooklint_fixture.shift(x, 1.0).sum().backward()


def test_registered_backward_with_an_extra_none_on_a_list_op_raises(ops):
    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="Expected the return from backward to be of the same structure"):
        ops["scale_first"]([x], 2.0).sum().backward()


def test_registered_backward_extra_none_is_dropped_by_torch_2_13_but_the_count_is_one_per_input(ops):
    """torch 2.13 drops an extra trailing None for ops without list arguments
    (later PyTorch raises, as torchrec's tests found); the right count works everywhere."""
    x = torch.ones(3, requires_grad=True)
    ops["scale"](x, 2.0, False).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
    y = torch.ones(3, requires_grad=True)
    ops["scale_fixed"](y, 2.0, True).sum().backward()
    torch.testing.assert_close(y.grad, torch.full((3,), 0.5))


# ------------------------------------------- HKL504: the error text it quotes

_SEVERAL_OUTPUTS = '''
import torch
class Halves(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * 2
        return y[:1], None, y.t()
    @staticmethod
    def backward(ctx, a, b, c):
        return None
class Single(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * 2
        return y.t(), 3
    @staticmethod
    def backward(ctx, a, b):
        return a.t()
'''


def _raised(apply, index: int) -> str:
    out = apply(torch.ones(3, 3, requires_grad=True))[index]
    with pytest.raises(RuntimeError) as raised:
        out.add_(1)
    return str(raised.value)


def test_hkl504_quotes_the_error_torch_raises_for_each_output():
    namespace: dict = {}
    exec(compile(_SEVERAL_OUTPUTS, "<hkl504>", "exec"), namespace)
    findings = lint(_SEVERAL_OUTPUTS, "HKL504")
    quoted = {}
    for finding in findings:
        text = finding.message.split('"RuntimeError: ', 1)[1].rstrip('"')
        name, index = text.split(" of ", 1)[1].split(" ", 1)[0], int(text.split(" ", 2)[1])
        quoted[(name, index)] = text.removesuffix(" ...")
    assert set(quoted) == {("Halves", 0), ("Halves", 2), ("Single", 0)}
    for (name, index), text in quoted.items():
        real = _raised(namespace[name].apply, index)
        assert real.startswith(text), (text, real)  # the index, the name and the reason torch gives
    assert "returns multiple views" in quoted[("Halves", 2)]
    assert "created inside a custom Function" in quoted[("Single", 0)]


def test_integer_views_made_inside_a_function_can_be_modified_in_place():
    """HKL504 stays quiet on integer outputs: a view of an int32 tensor the Function made has no
    grad, so torch allows `+=` on it (vllm's routing indices); a float view of the same shape raises."""

    class Sort(torch.autograd.Function):
        @staticmethod
        def forward(ctx, scores, n):
            idx = torch.arange(2 * n, dtype=torch.int32)
            buf = scores.detach() * 2
            return buf.view(-1), idx[:n], idx[n:]

        @staticmethod
        def backward(ctx, g, *_):
            return g * 2, None

    scores = torch.randn(4, requires_grad=True)
    values, first, second = Sort.apply(scores, 2)
    first += 1
    second.zero_()
    assert first.tolist() == [1, 2] and second.tolist() == [0, 0]
    with pytest.raises(RuntimeError, match=VIEW_ERROR):
        values += 1
    src = (
        "import torch\n"
        "class Sort(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, scores, n):\n"
        "        idx = torch.arange(2 * n, dtype=torch.int32)\n"
        "        return scores * 2, idx[:n], idx[n:]\n"
        "    @staticmethod\n"
        "    def backward(ctx, g, *_):\n"
        "        return g * 2, None\n"
    )
    assert not [f for f in lint(src) if f.code == "HKL504"]
