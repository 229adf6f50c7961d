"""HKL5xx: custom ``torch.autograd.Function`` gradients (hook-semantics.md, section 7).

``backward`` must return one gradient per ``forward`` input, in the same order,
and ``ctx.needs_input_grad[i]`` is the flag of the i-th input.  Getting the
count wrong raises when the backward runs; getting the order wrong trains the
wrong parameters, silently.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import return_statements
from hooklint.static.context import FileContext
from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import ClassInfo, FunctionNode, is_staticmethod, positional_params

# A Function subclass is recognised by its base's qualified name, which ends in
# `Function` (or `InplaceFunction`), and needs a `def backward`; a file
# without both has no Function these rules can check.  (The pattern starts
# with a literal so that the regex engine can skip to each `def`.)
FUNCTION_TRIGGERS = ("Function",)
FUNCTION_TRIGGER_PATTERN = r"def[ \t\f\r\n\\]+backward\b"

# Tensor methods that return one tensor (not a tuple), whatever their arguments.
_SINGLE_TENSOR_METHODS = frozenset({
    "mm", "matmul", "bmm", "t", "sum", "mean", "mul", "add", "sub", "div", "neg", "exp", "log", "clone", "view",
    "view_as", "reshape", "reshape_as", "expand", "expand_as", "squeeze", "unsqueeze", "flatten", "permute",
    "transpose", "contiguous", "clamp", "clamp_min", "clamp_max", "masked_fill", "where", "abs", "sign", "pow",
    "sqrt", "rsqrt", "to", "type_as", "float", "double", "half", "detach", "mul_", "add_", "zero_", "sigmoid",
    "tanh", "relu", "softmax", "log_softmax", "cumsum", "flip", "roll", "repeat", "index_select", "gather",
    "scatter", "scatter_add", "new_zeros", "new_ones", "new_full", "new_empty", "outer", "diag", "tril", "triu",
})
_SINGLE_TENSOR_FUNCTIONS = frozenset(
    f"torch.{n}" for n in (
        "zeros_like", "ones_like", "empty_like", "full_like", "mm", "matmul", "bmm", "mul", "add", "sub", "div",
        "where", "sum", "mean", "exp", "log", "clamp", "outer", "einsum", "zeros", "ones", "cat", "stack",
        "neg", "abs", "sign", "sqrt", "tensordot", "masked_fill",
    )
)


@dataclass
class AutogradFunction:
    """A custom ``torch.autograd.Function`` subclass defined in this file."""

    info: ClassInfo
    forward: ast.FunctionDef | ast.AsyncFunctionDef
    backward: ast.FunctionDef | ast.AsyncFunctionDef
    inputs: list[str]  # forward's inputs (without ctx)
    required: int  # inputs without a default
    apply_calls: list[ast.Call] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def ctx_name(self) -> str | None:
        params = positional_params(self.backward)
        return params[0] if params else None

    @property
    def grad_params(self) -> set[str]:
        return set(positional_params(self.backward)[1:])

    def input_word(self, index: int) -> str:
        return f"`{self.inputs[index]}` (input {index})" if 0 <= index < len(self.inputs) else f"input {index}"


def autograd_functions(ctx: FileContext) -> list[AutogradFunction]:
    """The Functions whose inputs hooklint can count: a static ``forward``
    without ``*args`` or keyword-only parameters, and a static ``backward``."""
    model = ctx.model
    out = []
    for info in model.classes.values():
        if not model.is_autograd_function_class(info):
            continue
        forward, backward = info.method("forward"), info.method("backward")
        if forward is None or backward is None or not is_staticmethod(forward) or not is_staticmethod(backward):
            continue
        args = forward.args
        if args.vararg is not None or args.kwonlyargs:
            continue
        params = positional_params(forward)
        # With a separate setup_context, forward takes the inputs only; otherwise ctx first.
        inputs = params if info.method("setup_context") is not None else params[1:]
        required = len(inputs) - len(args.defaults)
        fn = AutogradFunction(info, forward, backward, inputs, max(required, 0))
        fn.apply_calls = _apply_calls(ctx, info)
        out.append(fn)
    return out


def _apply_calls(ctx: FileContext, info: ClassInfo) -> list[ast.Call]:
    """``Fn.apply(...)`` calls, and calls of a name bound to ``Fn.apply``."""
    model = ctx.model
    calls = [c for c in model.calls_of_method("apply")
             if model.class_for_expr(c.func.value) is info]  # type: ignore[attr-defined]
    aliases = []
    for scope in model.scopes.values():
        for name, bindings in scope.bindings.items():
            for b in bindings:
                value = b.value
                if b.kind == "assign" and not b.path and isinstance(value, ast.Attribute) and value.attr == "apply" \
                        and model.class_for_expr(value.value) is info:
                    aliases.append((name, b))
    for name, binding in aliases:
        for call in model.name_calls.get(name, ()):
            if binding in model.bindings_at(call.func):  # type: ignore[arg-type]
                calls.append(call)
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return calls


def _argument_count(call: ast.Call) -> int | None:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    return len(call.args) + len(call.keywords)


class _Values:
    """What a returned expression of one ``backward`` is: a tuple of n gradients,
    or a single gradient."""

    def __init__(self, ctx: FileContext, fn: AutogradFunction):
        self.ctx = ctx
        self.fn = fn
        self.scope = ctx.model.scopes.get(fn.backward)

    def count(self, expr: ast.AST | None, depth: int = 0) -> int | None:
        """How many gradients ``expr`` returns, or None when unknown."""
        if expr is None or depth > 6:
            return None
        if isinstance(expr, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in expr.elts):
                return None
            return len(expr.elts)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self._tuple_count(expr.left, depth), self._tuple_count(expr.right, depth)
            if left is not None and right is not None:
                return left + right
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
            for seq, times in ((expr.left, expr.right), (expr.right, expr.left)):
                n = self._tuple_count(seq, depth)
                if n is not None and isinstance(times, ast.Constant) and type(times.value) is int:
                    return n * times.value
        return 1 if self.single(expr, depth) else None

    def _tuple_count(self, expr: ast.AST, depth: int) -> int | None:
        if isinstance(expr, (ast.Tuple, ast.List)):
            return self.count(expr, depth + 1)
        if isinstance(expr, ast.Name):
            values = self._assigned_values(expr)
            if values and all(isinstance(v, (ast.Tuple, ast.List)) for v in values):
                counts = {self.count(v, depth + 1) for v in values}
                return counts.pop() if len(counts) == 1 else None
        if isinstance(expr, ast.BinOp):
            count = self.count(expr, depth + 1)
            return count if count is not None and not self.single(expr, depth + 1) else None
        return None

    def single(self, expr: ast.AST, depth: int = 0) -> bool:
        """Certainly one value (a tensor, a number or None), not a tuple."""
        if depth > 6:
            return False
        if isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.UnaryOp):
            return self.single(expr.operand, depth + 1)
        if isinstance(expr, ast.BinOp):
            # `tuple * n` is a tuple, `tensor * anything` is a tensor
            return self.tensor(expr.left, depth + 1) or self.tensor(expr.right, depth + 1) or \
                (self.single(expr.left, depth + 1) and self.single(expr.right, depth + 1))
        if isinstance(expr, ast.IfExp):
            return self.single(expr.body, depth + 1) and self.single(expr.orelse, depth + 1)
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in _SINGLE_TENSOR_METHODS:
                return True
            return self.ctx.model.qualify(func) in _SINGLE_TENSOR_FUNCTIONS
        if isinstance(expr, ast.Name):
            if expr.id in self.fn.grad_params:
                return True
            if self.scope is None:
                return False
            bindings = self.scope.bindings.get(expr.id, [])
            if not bindings:
                return False
            for b in bindings:
                if b.kind == "assign" and not b.path:
                    if not self.single(b.value, depth + 1):  # type: ignore[arg-type]
                        return False
                elif b.kind == "assign" and _is_saved_tensors(b.value):
                    continue  # one element of ctx.saved_tensors
                elif b.kind != "augassign":
                    return False
            return True
        return False

    def tensor(self, expr: ast.AST, depth: int = 0) -> bool:
        """Certainly a tensor."""
        if depth > 6:
            return False
        if isinstance(expr, ast.Name):
            return expr.id in self.fn.grad_params
        if isinstance(expr, ast.UnaryOp):
            return self.tensor(expr.operand, depth + 1)
        if isinstance(expr, ast.BinOp):
            return self.tensor(expr.left, depth + 1) or self.tensor(expr.right, depth + 1)
        if isinstance(expr, ast.Call):
            return self.single(expr, depth + 1)
        return False

    def not_none(self, expr: ast.AST, depth: int = 0) -> bool:
        """Certainly not None at run time."""
        if depth > 6:
            return False
        if isinstance(expr, ast.Constant):
            return expr.value is not None
        if isinstance(expr, (ast.BinOp, ast.UnaryOp)):
            return True
        if isinstance(expr, ast.Call):
            return self.single(expr, depth + 1)
        if isinstance(expr, ast.Name):
            if expr.id in self.fn.grad_params:
                return True
            bindings = self.scope.bindings.get(expr.id, []) if self.scope is not None else []
            return bool(bindings) and all(
                b.kind == "augassign" or (b.kind == "assign" and not b.path and self.not_none(b.value, depth + 1))
                for b in bindings
            )
        return False

    def _assigned_values(self, name: ast.Name) -> list[ast.AST]:
        if self.scope is None:
            return []
        bindings = self.scope.bindings.get(name.id, [])
        if not bindings or any(b.kind != "assign" or b.path for b in bindings):
            return []
        return [b.value for b in bindings]  # type: ignore[misc]


def _is_saved_tensors(value: object) -> bool:
    return isinstance(value, ast.Attribute) and value.attr in ("saved_tensors", "saved_variables")


# --------------------------------------------------------------------- HKL501

class FunctionGradCount(Rule):
    """
    ## What it does
    Reports a `return` in the `backward` of a custom `torch.autograd.Function`
    that returns a different number of gradients than the inputs `forward`
    receives: fewer than the inputs passed to `apply` (or than `forward`'s
    required inputs), or more, when an extra one is not `None`.

    ## Why is this bad?
    Autograd pairs the values `backward` returns with the inputs of `forward`,
    one per input, in order.  With the wrong count, the backward pass fails
    with `RuntimeError: function MyFnBackward returned an incorrect number of
    gradients (expected 2, got 1)`, and only when that backward runs (a model
    can train its other parts and evaluate fine until the first step that
    needs this gradient).

    What torch 2.13 accepts, checked by running it:

    - the count is the number of arguments passed to `apply` (positional and
      keyword), not the number of `forward` parameters: a parameter left at its
      default is not an input, and `backward` may return one gradient fewer;
    - extra gradients at the end are accepted only when they are `None`;
    - every input needs an entry, even a non-tensor one (`None` for it).

    `forward(ctx, *args)` is not checked.  The `setup_context` style
    (`forward(x, w)` without `ctx`) counts the same way.

    ## Known problems
    hooklint counts the values only when it can see them: a tuple literal, or
    an expression that is certainly one tensor.  `return grads` where `grads`
    is built elsewhere is not checked.  Without any `apply` call in the file,
    only counts below the number of required `forward` inputs (or non-`None`
    extras beyond all of them) are reported.  At run time (`hooklint run`,
    `hooklint.instrument()`), PyTorch's error is reported as this rule, at the
    `backward` of the Function it names, whatever `backward` returns.

    ## Example
    ```python
    import torch

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.factor
    ```

    ## Use instead
    ```python
    import torch

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, factor):
            ctx.factor = factor
            return x * factor

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.factor, None
    ```

    ## Fix safety
    There is no automatic fix: which input lacks a gradient is for the author
    to say.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - [`Function.backward`](https://pytorch.org/docs/stable/generated/torch.autograd.Function.backward.html)
    """

    code = "HKL501"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "function-grad-count"
    summary = "A custom autograd Function's backward returns a different number of gradients than forward has inputs"
    severity = Severity.ERROR
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # one gradient per input, None for the non-tensor one
        "import torch\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, factor):\n"
        "        ctx.factor = factor\n"
        "        return x * factor\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * ctx.factor, None\n",
        # extra trailing Nones are accepted
        "import torch\n"
        "class Id(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x.clone()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g, None, None\n",
        # a defaulted input left out of apply: one gradient fewer is right
        "import torch\n"
        "class Lin(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, w, b=None):\n"
        "        ctx.save_for_backward(x, w)\n"
        "        return x.mm(w.t())\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, w = ctx.saved_tensors\n"
        "        return g.mm(w), g.t().mm(x)\n"
        "y = Lin.apply(torch.rand(2, 3), torch.rand(4, 3))\n",
        # *args: not counted
        "import torch\n"
        "class Sum(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, *xs):\n"
        "        ctx.n = len(xs)\n"
        "        return sum(xs)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return (g,) * ctx.n\n",
        # setup_context style, right count
        "import torch\n"
        "class Mul(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(a, b):\n"
        "        return a * b\n"
        "    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n"
        "        ctx.save_for_backward(*inputs)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        a, b = ctx.saved_tensors\n"
        "        return g * b, g * a\n",
        # a tuple built elsewhere: not counted
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, a, b):\n"
        "        return a + b\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return split_grad(g)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Scale(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, factor):\n"
            "        ctx.factor = factor\n"
            "        return x * factor\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        return g * ctx.factor  # HKL501\n"
        ),
        Invalid(
            "import torch\n"
            "class Lin(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, w, b=None):\n"
            "        ctx.save_for_backward(x, w)\n"
            "        return x.mm(w.t()) + b\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        x, w = ctx.saved_tensors\n"
            "        return g.mm(w), g.t().mm(x)  # HKL501\n"
            "y = Lin.apply(torch.rand(2, 3), torch.rand(4, 3), torch.rand(4))\n"
        ),
        Invalid(
            "import torch\n"
            "class Mul(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(a, b):\n"
            "        return a * b\n"
            "    @staticmethod\n"
            "    def setup_context(ctx, inputs, output):\n"
            "        ctx.save_for_backward(*inputs)\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        a, b = ctx.saved_tensors\n"
            "        return g * b, g * a, g  # HKL501\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for fn in autograd_functions(ctx):
            values = _Values(ctx, fn)
            sites = [(c, n) for c in fn.apply_calls if (n := _argument_count(c)) is not None]
            for ret in return_statements(fn.backward):
                got = values.count(ret.value)
                if got is None:
                    continue
                problem = self._problem(ctx, fn, values, ret, got, sites)
                if problem is not None:
                    message, related = problem
                    yield self.finding(
                        ctx, ret, message,
                        help="Return one gradient per `forward` input, in order, with `None` for inputs that need "
                             "none (non-tensor arguments, tensors that do not require grad).",
                        related=related,
                    )

    def _problem(self, ctx: FileContext, fn: AutogradFunction, values: _Values, ret: ast.Return, got: int,
                 sites: list[tuple[ast.Call, int]]) -> tuple[str, list[Related]] | None:
        elts = ret.value.elts if isinstance(ret.value, (ast.Tuple, ast.List)) else None
        head = f"`{fn.name}.backward` returns {got} gradient{'s' if got != 1 else ''}"
        raises = "torch raises `RuntimeError: function {name}Backward returned an incorrect number of gradients " \
                 "(expected {want}, got {got})` when this backward runs"
        if sites:
            for call, want in sites:
                too_many = got > want and elts is not None and any(values.not_none(e) for e in elts[want:])
                if got < want or too_many:
                    where = f"`{fn.name}.apply` is called with {want} input{'s' if want != 1 else ''} at line " \
                            f"{call.lineno}"
                    extra = " and the extra ones are not None" if too_many else ""
                    return (f"{head}, but {where}{extra}: " + raises.format(name=fn.name, want=want, got=got),
                            [Related("the apply call", ctx.display_path, ctx.span(call)[0])])
            return None
        inputs = ", ".join(f"`{p}`" for p in fn.inputs)
        if got < fn.required:
            if fn.required == len(fn.inputs):
                return (f"{head}, but `forward` takes {len(fn.inputs)} inputs ({inputs}): "
                        + raises.format(name=fn.name, want=len(fn.inputs), got=got), [])
            return (f"{head}, but `forward` takes {len(fn.inputs)} inputs ({inputs}), {fn.required} of them required: "
                    + raises.format(name=fn.name, want="N", got=got)
                    + f", for every call with N >= {fn.required} inputs", [])
        if got > len(fn.inputs) and elts is not None and any(values.not_none(e) for e in elts[len(fn.inputs):]):
            return (f"{head}, but `forward` takes {len(fn.inputs)} inputs ({inputs}) and the extra ones are not None: "
                    + raises.format(name=fn.name, want=len(fn.inputs), got=got), [])
        return None


# --------------------------------------------------------------------- HKL502

def _input_for_grad_name(var: str, inputs: list[str]) -> str | None:
    """The forward input a gradient variable is named after: ``grad_bias`` and
    ``bias_grad`` -> ``bias``, ``dx`` / ``d_x`` -> ``x``."""
    if var in inputs:
        return None  # the variable is itself named like an input: no naming scheme to read
    candidates = []
    if var.startswith("grad_"):
        candidates.append(var[5:])
    if var.endswith("_grad"):
        candidates.append(var[:-5])
    if var.startswith("d_"):
        candidates.append(var[2:])
    if var.startswith("d") and len(var) > 1:
        candidates.append(var[1:])
    for cand in candidates:
        if cand in inputs:
            return cand
    return None


class FunctionGradOrder(Rule):
    """
    ## What it does
    In the `backward` of a custom `torch.autograd.Function`, reports:

    - `ctx.needs_input_grad[i]` guarding the computation of a gradient that
      belongs to another input: by its name (`grad_bias`, `bias_grad`,
      `dbias` for the input `bias`) or by the position `backward` returns it
      at;
    - a gradient returned in another input's slot, when its name says which
      input it belongs to (`grad_bias` returned in `location`'s position).

    ## Why is this bad?
    `ctx.needs_input_grad[i]` is the flag of the i-th `forward` input, and the
    i-th returned value is the gradient of the i-th input; nothing else ties a
    gradient to an input.  Seed 002's `LinearFunction.forward(ctx, input,
    weight, location, bias)` tests `needs_input_grad[2]` (`location`, an index
    tensor that never requires grad) before computing the bias gradient, so the
    bias gradient is never computed; it also returns `grad_bias` in
    `location`'s slot.  Running it: `bias.grad` stays `None` after every
    backward, the bias never trains, and torch raises nothing.

    ## Known problems
    Names are matched only when they follow `grad_<input>`, `<input>_grad`,
    `d<input>` or `d_<input>` and the input name exists in `forward`.  Code
    that names gradients otherwise is checked by position only.

    ## Example
    ```python
    import torch

    class Affine(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            return x * weight + bias

        @staticmethod
        def backward(ctx, grad_output):
            x, weight = ctx.saved_tensors
            grad_x = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_x = grad_output * weight
            if ctx.needs_input_grad[1]:
                grad_bias = grad_output
            grad_weight = grad_output * x
            return grad_x, grad_bias, grad_weight
    ```

    ## Use instead
    ```python
    import torch

    class Affine(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            return x * weight + bias

        @staticmethod
        def backward(ctx, grad_output):
            x, weight = ctx.saved_tensors
            grad_x = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_x = grad_output * weight
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output * x
            if ctx.needs_input_grad[2]:
                grad_bias = grad_output
            return grad_x, grad_weight, grad_bias
    ```

    ## Fix safety
    There is no automatic fix: the index or the order may be the intended one
    and the names wrong.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - [`FunctionCtx.needs_input_grad`](https://pytorch.org/docs/stable/autograd.html#context-method-mixins)
    """

    code = "HKL502"
    name = "function-grad-order"
    summary = "A custom autograd Function guards or returns a gradient in another input's position"
    severity = Severity.ERROR
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # the PyTorch docs' LinearFunction
        "import torch\n"
        "class LinearFunction(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, input, weight, bias=None):\n"
        "        ctx.save_for_backward(input, weight, bias)\n"
        "        return input.mm(weight.t())\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_output):\n"
        "        input, weight, bias = ctx.saved_tensors\n"
        "        grad_input = grad_weight = grad_bias = None\n"
        "        if ctx.needs_input_grad[0]:\n"
        "            grad_input = grad_output.mm(weight)\n"
        "        if ctx.needs_input_grad[1]:\n"
        "            grad_weight = grad_output.t().mm(input)\n"
        "        if bias is not None and ctx.needs_input_grad[2]:\n"
        "            grad_bias = grad_output.sum(0)\n"
        "        return grad_input, grad_weight, grad_bias\n",
        # names that follow no scheme, positions consistent
        "import torch\n"
        "class Mul(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, a, b):\n"
        "        ctx.save_for_backward(a, b)\n"
        "        return a * b\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        a, b = ctx.saved_tensors\n"
        "        first = second = None\n"
        "        if ctx.needs_input_grad[0]:\n"
        "            first = g * b\n"
        "        if ctx.needs_input_grad[1]:\n"
        "            second = g * a\n"
        "        return first, second\n",
        # needs_input_grad unpacked into names, setup_context style
        "import torch\n"
        "class Mul(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(x, y):\n"
        "        return x * y\n"
        "    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n"
        "        ctx.save_for_backward(*inputs)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, y = ctx.saved_tensors\n"
        "        x_needs, y_needs = ctx.needs_input_grad\n"
        "        dx = g * y if x_needs else None\n"
        "        dy = None\n"
        "        if y_needs:\n"
        "            dy = g * x\n"
        "        return dx, dy\n",
        # a nested test of another flag guards its own gradient
        "import torch\n"
        "class Mul(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, a, b):\n"
        "        ctx.save_for_backward(a, b)\n"
        "        return a * b\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        a, b = ctx.saved_tensors\n"
        "        grad_a = grad_b = None\n"
        "        if ctx.needs_input_grad[0]:\n"
        "            grad_a = g * b\n"
        "            if ctx.needs_input_grad[1]:\n"
        "                grad_b = g * a\n"
        "        return grad_a, grad_b\n",
        # a variable named like an input is not read as a gradient name
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, dx):\n"
        "        return x + dx\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        dx = g\n"
        "        return dx, g\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class LinearFunction(torch.autograd.function.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, input, weight, location, bias=None):\n"
            "        ctx.save_for_backward(input, weight, bias, location)\n"
            "        return input.mm(weight.t()) + bias\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        input, weight, bias, loc = ctx.saved_tensors\n"
            "        grad_input = grad_weight = grad_bias = None\n"
            "        if ctx.needs_input_grad[0]:\n"
            "            grad_input = grad_output.mm(weight)\n"
            "        if ctx.needs_input_grad[1]:\n"
            "            grad_weight = grad_output.t().mm(input)\n"
            "        if bias is not None and ctx.needs_input_grad[2]:  # HKL502\n"
            "            grad_bias = grad_output.sum(0)\n"
            "        return grad_input, grad_weight, grad_bias, grad_bias  # HKL502\n"
        ),
        Invalid(
            "import torch\n"
            "class Mul(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, a, b):\n"
            "        ctx.save_for_backward(a, b)\n"
            "        return a * b\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        a, b = ctx.saved_tensors\n"
            "        first = second = None\n"
            "        if ctx.needs_input_grad[1]:  # HKL502\n"
            "            first = g * b\n"
            "        if ctx.needs_input_grad[0]:  # HKL502\n"
            "            second = g * a\n"
            "        return first, second\n"
        ),
        Invalid(
            "import torch\n"
            "class Affine(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, weight, bias):\n"
            "        ctx.save_for_backward(x, weight)\n"
            "        return x * weight + bias\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        x, weight = ctx.saved_tensors\n"
            "        return grad_output * weight, grad_output, grad_output * x\n"
            "class Affine2(Affine):\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        x, weight = ctx.saved_tensors\n"
            "        dx, dweight, dbias = grad_output * weight, grad_output * x, grad_output\n"
            "        return dx, dbias, dweight  # HKL502\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for fn in autograd_functions(ctx):
            positions = self._returned_positions(fn)
            yield from self._check_guards(ctx, fn, positions)
            yield from self._check_slots(ctx, fn)

    @staticmethod
    def _returned_positions(fn: AutogradFunction) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for ret in return_statements(fn.backward):
            if isinstance(ret.value, (ast.Tuple, ast.List)):
                for i, elt in enumerate(ret.value.elts):
                    if isinstance(elt, ast.Name):
                        out.setdefault(elt.id, set()).add(i)
        return out

    def _flag_indexes(self, fn: AutogradFunction, test: ast.AST) -> list[tuple[int, ast.AST]]:
        """``(i, node)`` for each ``ctx.needs_input_grad[i]`` (or a name unpacked
        from it) read in ``test``."""
        ctx_name = fn.ctx_name
        unpacked: dict[str, int] = {}
        for node in executed_nodes(fn.backward):
            if isinstance(node, ast.Assign) and _is_flags(node.value, ctx_name):
                for target in node.targets:
                    if isinstance(target, (ast.Tuple, ast.List)):
                        for i, elt in enumerate(target.elts):
                            if isinstance(elt, ast.Name):
                                unpacked[elt.id] = i
        out = []
        for node in executed_nodes(test):
            if isinstance(node, ast.Subscript) and _is_flags(node.value, ctx_name) \
                    and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int:
                out.append((node.slice.value, node))
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in unpacked:
                out.append((unpacked[node.id], node))
        return out

    def _check_guards(self, ctx: FileContext, fn: AutogradFunction,
                      positions: dict[str, set[int]]) -> Iterable[Finding]:
        for node in executed_nodes(fn.backward):
            if isinstance(node, ast.If):
                guarded = self._assigned_under(fn, node.body)
            elif isinstance(node, ast.IfExp):
                parent = getattr(node, "_hl_parent", None)
                target = parent.targets[0] if isinstance(parent, ast.Assign) and len(parent.targets) == 1 else None
                guarded = [target] if isinstance(target, ast.Name) else []
            else:
                continue
            flags = self._flag_indexes(fn, node.test)
            if len({i for i, _ in flags}) != 1 or not guarded:
                continue
            index, flag_node = flags[0]
            if not 0 <= index < len(fn.inputs):
                continue
            message = self._guard_problem(fn, index, [g.id for g in guarded], positions)
            if message is not None:
                yield self.finding(
                    ctx, flag_node, message,
                    help="Test the flag of the input the gradient belongs to: `needs_input_grad[i]` for the i-th "
                         "`forward` input.",
                )

    def _assigned_under(self, fn: AutogradFunction, body: list[ast.stmt]) -> list[ast.Name]:
        """Names assigned in ``body``, except under a nested test of another
        flag (which guards them itself)."""
        out: list[ast.Name] = []
        stack: list[ast.AST] = list(reversed(body))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.If, ast.IfExp)) and self._flag_indexes(fn, node.test):
                continue
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.append(node)
            if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
                continue
            stack.extend(reversed(list(ast.iter_child_nodes(node))))
        return out

    @staticmethod
    def _guard_problem(fn: AutogradFunction, index: int, names: list[str],
                       positions: dict[str, set[int]]) -> str | None:
        flag = f"`needs_input_grad[{index}]` is the flag of {fn.input_word(index)}"
        for name in dict.fromkeys(names):
            owner = _input_for_grad_name(name, fn.inputs)
            if owner is not None and fn.inputs.index(owner) != index:
                other = fn.inputs.index(owner)
                return (f"{flag}, but it guards `{name}`, the gradient of {fn.input_word(other)}: `{name}` is computed "
                        f"only when `{fn.inputs[index]}` requires grad, so when it does not, `{owner}` silently gets "
                        f"no gradient")
        for name in dict.fromkeys(names):
            if _input_for_grad_name(name, fn.inputs) is not None:
                continue
            where = positions.get(name)
            if where and index not in where and all(0 <= w < len(fn.inputs) for w in where):
                slot = min(where)
                return (f"{flag}, but it guards `{name}`, which `backward` returns as the gradient of "
                        f"{fn.input_word(slot)}: `{name}` is computed only when `{fn.inputs[index]}` requires grad, "
                        f"so when it does not, `{fn.inputs[slot]}` silently gets no gradient")
        return None

    def _check_slots(self, ctx: FileContext, fn: AutogradFunction) -> Iterable[Finding]:
        for ret in return_statements(fn.backward):
            if not isinstance(ret.value, (ast.Tuple, ast.List)):
                continue
            wrong = []
            for slot, elt in enumerate(ret.value.elts[:len(fn.inputs)]):
                if not isinstance(elt, ast.Name):
                    continue
                owner = _input_for_grad_name(elt.id, fn.inputs)
                if owner is not None and fn.inputs.index(owner) != slot:
                    wrong.append(f"position {slot}, the gradient of `{fn.inputs[slot]}`, holds `{elt.id}`, named "
                                 f"for {fn.input_word(fn.inputs.index(owner))}")
            if wrong:
                yield self.finding(
                    ctx, ret,
                    f"`{fn.name}.backward` returns gradients in the wrong slots: {'; '.join(wrong)}. Autograd gives "
                    f"the i-th returned value to the i-th `forward` input, so those inputs get another input's "
                    f"gradient (or None)",
                    help="Return the gradients in the order of `forward`'s inputs, `None` for inputs that need none.",
                )


def _is_flags(expr: ast.AST, ctx_name: str | None) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == "needs_input_grad" and \
        isinstance(expr.value, ast.Name) and expr.value.id == ctx_name
