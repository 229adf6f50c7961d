"""Real torch: what HKL501/HKL502 claim about custom autograd Functions.

hook-semantics.md section 7: `backward` returns one gradient per `forward`
input, in order; `ctx.needs_input_grad[i]` is the i-th input's flag.  Seed
002's LinearFunction is run from the fixture file itself.
"""

from __future__ import annotations

import ast
import warnings

import pytest

from conftest import FIXTURES, lint
from hooklint.rules.function_grad_count import FunctionGradCount
from hooklint.rules.function_grad_order import FunctionGradOrder

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

COUNT_ERROR = r"returned an incorrect number of gradients \(expected {want}, got {got}\)"


def _function(forward_params: str, returned: str, setup_context: bool = False):
    """A Function whose forward computes `a * 2` and whose backward returns `returned`."""
    ctx_param = "" if setup_context else "ctx, "
    source = (
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        f"    def forward({ctx_param}{forward_params}):\n"
        "        return a * 2\n"
        + ("    @staticmethod\n"
           "    def setup_context(ctx, inputs, output):\n"
           "        pass\n" if setup_context else "")
        + "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        f"        return {returned}\n"
    )
    namespace = {"torch": torch}
    exec(source, namespace)  # noqa: S102 - built here
    return namespace["F"], source


def _classes_from(path, *names) -> dict:
    """Run only the named classes of a fixture file (the seed also imports
    numpy and builds a demo under __main__, which these tests do not need)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    namespace = {"torch": torch, "nn": nn}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in names:
            exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102
    return namespace


# --------------------------------------------------------------------- HKL501

@pytest.mark.parametrize(
    ("params", "returned", "n_args", "want", "got"),
    [
        ("a, b", "g * 2", 2, 2, 1),  # fewer than the inputs
        ("a, b", "(g * 2,)", 2, 2, 1),
        ("a, b", "None", 2, 2, 1),
        ("a, b", "g * 2, g, g", 2, 2, 3),  # an extra one that is not None
        ("a, b=None", "g * 2, g", 1, 1, 2),  # the default was not passed: one input
        ("a, b=None", "g * 2", 2, 2, 1),  # the default was passed: two inputs
    ],
)
def test_wrong_count_raises_when_backward_runs(params, returned, n_args, want, got):
    fn, source = _function(params, returned)
    a = torch.ones(2, requires_grad=True)
    out = fn.apply(*[a, torch.ones(2)][:n_args])  # the forward itself is fine
    with pytest.raises(RuntimeError, match=COUNT_ERROR.format(want=want, got=got)):
        out.sum().backward()
    apply_line = f"y = F.apply({', '.join(['x', 'w'][:n_args])})\n"
    assert [f.code for f in lint("import torch\n" + source + apply_line, "HKL501")] == ["HKL501"]


@pytest.mark.parametrize(
    ("params", "returned", "n_args"),
    [
        ("a, b", "g * 2, None", 2),
        ("a, b", "g * 2, None, None", 2),  # extra trailing Nones are accepted
        ("a, b=None", "g * 2", 1),  # a default left out is not an input
        ("a, b=None", "g * 2, None", 1),
    ],
)
def test_accepted_counts(params, returned, n_args):
    fn, source = _function(params, returned)
    a = torch.ones(2, requires_grad=True)
    fn.apply(*[a, torch.ones(2)][:n_args]).sum().backward()
    assert torch.equal(a.grad, torch.full((2,), 2.0))
    apply_line = f"y = F.apply({', '.join(['x', 'w'][:n_args])})\n"
    assert not lint("import torch\n" + source + apply_line, "HKL501")


def test_keyword_arguments_to_apply_count_as_inputs():
    fn, _ = _function("a, b=None", "g * 2")
    a = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=COUNT_ERROR.format(want=2, got=1)):
        fn.apply(a, b=torch.ones(2)).sum().backward()


def test_setup_context_style_counts_the_same():
    fn, _ = _function("a, b", "g * 2", setup_context=True)
    a = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=COUNT_ERROR.format(want=2, got=1)):
        fn.apply(a, torch.ones(2, requires_grad=True)).sum().backward()


def test_no_error_until_a_backward_needs_the_function():
    """Why the bug hides: with no input requiring grad, nothing is checked."""
    fn, _ = _function("a, b", "g * 2")
    out = fn.apply(torch.ones(2), torch.ones(2))
    assert not out.requires_grad


def test_hkl501_docs_example_raises_and_use_instead_works():
    bad, good = FunctionGradCount.code_blocks("Example")[0], FunctionGradCount.code_blocks("Use instead")[0]
    for source, should_raise in ((bad, True), (good, False)):
        namespace: dict = {}
        exec(source, namespace)  # noqa: S102 - the rule's own docs
        x = torch.ones(3, requires_grad=True)
        out = namespace["Scale"].apply(x, 3.0).sum()
        if should_raise:
            with pytest.raises(RuntimeError, match=COUNT_ERROR.format(want=2, got=1)):
                out.backward()
        else:
            out.backward()
            assert torch.equal(x.grad, torch.full((3,), 3.0))


# --------------------------------------------------------------------- HKL502

class _LinearCraft(nn.Module):
    """Seed 002's LinearCraft without numpy: `location` is an index tensor."""

    def __init__(self, function, location):
        super().__init__()
        self.function = function
        self.loc = location
        self.weight = nn.Parameter(torch.empty(5, 20).uniform_(-0.1, 0.1))
        self.bias = nn.Parameter(torch.empty(5).uniform_(-0.1, 0.1))

    def forward(self, x):
        return self.function.apply(x, self.weight, self.loc, self.bias)


def test_seed002_bias_never_gets_a_gradient_and_the_fix_does():
    seed = _classes_from(FIXTURES / "seeds" / "seed002_custom_function.py", "LinearFunction")["LinearFunction"]
    fixed = _classes_from(FIXTURES / "seeds" / "seed002_fixed.py", "LinearFunction")["LinearFunction"]
    location = torch.tensor([1, 3, 5])
    torch.manual_seed(0)
    x = torch.rand(8, 20)

    layer = _LinearCraft(seed, location)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch raises nothing and warns nothing
        for _ in range(3):
            layer(x).sum().backward()
    assert layer.weight.grad is not None
    assert layer.bias.grad is None, "needs_input_grad[2] is `location`'s flag: the bias gradient is never computed"

    layer = _LinearCraft(fixed, location)
    layer(x).sum().backward()
    assert layer.bias.grad is not None
    assert torch.allclose(layer.bias.grad, torch.full((5,), 8.0))
    masked = [c for c in range(20) if c not in location.tolist()]
    assert torch.count_nonzero(layer.weight.grad[:, masked]) == 0, "the fix keeps the column mask"


def test_seed002_grad_bias_in_locations_slot_is_ignored_silently():
    """Even when the bias gradient is computed, the seed's extra copy in
    `location`'s slot is silently dropped: an index tensor takes no gradient."""
    source = (FIXTURES / "seeds" / "seed002_custom_function.py").read_text(encoding="utf-8")
    source = source.replace("ctx.needs_input_grad[2]", "ctx.needs_input_grad[3]")
    tree = ast.parse(source)
    namespace = {"torch": torch, "nn": nn}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "LinearFunction":
            exec(compile(ast.Module([node], []), "<seed002>", "exec"), namespace)  # noqa: S102
    layer = _LinearCraft(namespace["LinearFunction"], torch.tensor([1, 3, 5]))
    layer(torch.rand(8, 20)).sum().backward()
    assert layer.bias.grad is not None


def test_swapped_guards_leave_an_input_without_gradient():
    """HKL502's second INVALID example: guards swapped by position."""
    bad = FunctionGradOrder.INVALID[1].code
    good = bad.replace("needs_input_grad[1]:  # HKL502", "needs_input_grad[0]:") \
        .replace("needs_input_grad[0]:  # HKL502", "needs_input_grad[1]:")
    assert not lint(good, "HKL502")
    results = {}
    for label, source in (("bad", bad), ("good", good)):
        namespace: dict = {}
        exec(source, namespace)  # noqa: S102 - the rule's own example
        a = torch.ones(3, requires_grad=True)
        b = torch.full((3,), 2.0)  # does not require grad
        namespace["Mul"].apply(a, b).sum().backward()
        results[label] = a.grad
    assert results["bad"] is None, "a's gradient was guarded by b's flag"
    assert torch.equal(results["good"], torch.full((3,), 2.0))


def test_hkl502_docs_example_trains_the_wrong_parameters():
    bad, good = FunctionGradOrder.code_blocks("Example")[0], FunctionGradOrder.code_blocks("Use instead")[0]
    grads = {}
    for label, source in (("bad", bad), ("good", good)):
        namespace: dict = {}
        exec(source, namespace)  # noqa: S102 - the rule's own docs
        x = torch.full((3,), 5.0)
        weight = torch.full((3,), 2.0, requires_grad=True)
        bias = torch.zeros(3, requires_grad=True)
        namespace["Affine"].apply(x, weight, bias).sum().backward()
        grads[label] = (weight.grad, bias.grad)
    bad_weight, bad_bias = grads["bad"]
    good_weight, good_bias = grads["good"]
    assert torch.equal(good_weight, torch.full((3,), 5.0)) and torch.equal(good_bias, torch.ones(3))
    assert torch.equal(bad_weight, torch.ones(3)), "weight received the bias gradient"
    assert torch.equal(bad_bias, torch.full((3,), 5.0)), "bias received the weight gradient"


def test_straight_through_stitch_hands_the_output_gradient_to_the_first_input():
    """HKL502 stays quiet on a straight-through estimator: backward hands its incoming `grad_out` to `x1`,
    the input whose value the output stands for, on purpose (torchdiffeq 0.2.x's _StitchGradient).  In real
    torch `x1` gets exactly the output's gradient and the no-grad `out` gets none: nothing is misplaced."""
    source = (
        "import torch\n"
        "class Stitch(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x1, out):\n"
        "        return out\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_out):\n"
        "        return grad_out, None\n"
    )
    assert not lint(source, "HKL502")
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - the test's own code
    x1 = torch.tensor([1.0, 2.0], requires_grad=True)
    with torch.no_grad():
        out = torch.nextafter(x1, x1 + 1)
    (namespace["Stitch"].apply(x1, out) * torch.tensor([3.0, 4.0])).sum().backward()
    assert torch.equal(x1.grad, torch.tensor([3.0, 4.0]))
    assert not out.requires_grad
