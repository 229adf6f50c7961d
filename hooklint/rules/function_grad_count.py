"""HKL501: a custom `autograd.Function` whose backward returns the wrong number of gradients (hook-semantics.md, section 7)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Location, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import (
    FUNCTION_TRIGGER_PATTERN,
    FUNCTION_TRIGGERS,
    REGISTER_AUTOGRAD_TRIGGERS,
    AutogradFunction,
    RegisteredBackward,
    autograd_functions,
    registered_backwards,
)
from hooklint.static.bodies import return_statements
from hooklint.static.context import FileContext
from hooklint.static.core.guards import fall_off_is_excluded

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
            if expr.id in self.fn.grad_params:
                return True
            # a local bound only to tensors (`g = grad_output.clone()`) is one too
            values = self._assigned_values(expr)
            return bool(values) and all(self.tensor(v, depth + 1) for v in values)
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


class FunctionGradCount(Rule):
    """
    ## What it does
    Reports a `return` in the `backward` of a custom `torch.autograd.Function`
    that returns a different number of gradients than the inputs `forward`
    receives: fewer than the inputs passed to `apply` (or than `forward`'s
    required inputs), or more, when an extra one is not `None`.  The
    `apply` calls are those of every checked file, under any alias or
    re-export (`from .ops import Scale as S; S.apply(x, 2.0)`).

    Also a `backward` that returns nothing on some path: it falls off its
    end (a `return` under an `if` only), or a bare `return` can run.  Only
    `return`s that can run count (the control-flow graph of `backward`
    cuts code after a `return` or `raise` and branches that never run).

    ## Why is this bad?
    Autograd pairs the values `backward` returns with the inputs of `forward`,
    one per input, in order.  With the wrong count, the backward pass fails
    with `RuntimeError: function MyFnBackward returned an incorrect number of
    gradients (expected 2, got 1)`, and only when that backward runs (a model
    can train its other parts and evaluate fine until the first step that
    needs this gradient).

    A path of `backward` that returns nothing returns `None`: autograd takes
    it as one gradient, so with several inputs it raises the same error
    when that path runs, and with one input its gradient is silently None.

    What torch 2.13 accepts, checked by running it:

    - the count is the number of arguments passed to `apply` (positional and
      keyword), not the number of `forward` parameters: a parameter left at its
      default is not an input, and `backward` may return one gradient fewer;
    - extra gradients at the end are accepted only when they are `None`;
    - every input needs an entry, even a non-tensor one (`None` for it).

    `forward(ctx, *args)` is not checked.  The `setup_context` style
    (`forward(x, w)` without `ctx`) counts the same way.

    A backward registered for a custom op with
    `torch.library.register_autograd` (or `op.register_autograd`), for an op
    the file defines with `@torch.library.custom_op` or
    `torch.library.define`, is checked too, and more strictly: it must
    return exactly one value per positional input of the op (defaults are
    filled in).  Fewer fail at backward on every release; an extra trailing
    `None` is rejected by PyTorch since mid-2026 ("The backward formula for
    ns.op.default returned an incorrect number of gradients (expected 5, got
    6)"), and by torch 2.13 already for ops with list arguments, whose
    structure it compares (torchrec 1.7's `reduce_scatter_tensor` backward).

    ## Known problems
    A path that falls off the end is reported even when the inputs it
    leaves without a gradient never require one (autograd then takes the
    missing gradient as None without complaint for a single input).
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
    triggers = FUNCTION_TRIGGERS + REGISTER_AUTOGRAD_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN + "|register_autograd"
    VALID: ClassVar[tuple[str, ...]] = (
        # the early guard leaves no path to the end: one of the two later `if`s returns
        # (monai's grid-pull Functions)
        "import torch\n"
        "class Pull(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, grid):\n"
        "        ctx.save_for_backward(x, grid)\n"
        "        return x * grid\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad):\n"
        "        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):\n"
        "            return None, None\n"
        "        x, grid = ctx.saved_tensors\n"
        "        if ctx.needs_input_grad[0]:\n"
        "            return grad * grid, grad * x if ctx.needs_input_grad[1] else None\n"
        "        if ctx.needs_input_grad[1]:\n"
        "            return None, grad * x\n"
        "y = Pull.apply(torch.ones(2, requires_grad=True), torch.ones(2))\n",
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
        # a backward registered for a custom op, one gradient per input (method form)
        "import torch\n"
        "@torch.library.custom_op('demo::scale', mutates_args=())\n"
        "def scale(x: torch.Tensor, factor: float) -> torch.Tensor:\n"
        "    return x * factor\n"
        "def setup(ctx, inputs, output):\n"
        "    ctx.factor = inputs[1]\n"
        "def scale_backward(ctx, grad):\n"
        "    return grad * ctx.factor, None\n"
        "scale.register_autograd(scale_backward, setup_context=setup)\n",
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
        Invalid(
            "import torch\n"
            "@torch.library.custom_op('demo::scale', mutates_args=())\n"
            "def scale(x: torch.Tensor, factor: float) -> torch.Tensor:\n"
            "    return x * factor\n"
            "def setup(ctx, inputs, output):\n"
            "    ctx.factor = inputs[1]\n"
            "def scale_backward(ctx, grad):\n"
            "    return grad * ctx.factor, None, None  # HKL501\n"
            "torch.library.register_autograd('demo::scale', scale_backward, setup_context=setup)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for fn in autograd_functions(ctx):
            values = _Values(ctx, fn)
            sites: list[tuple[Related, int]] = [
                (Related("the apply call", ctx.display_path, ctx.span(c)[0]), n)
                for c in fn.apply_calls if (n := _argument_count(c)) is not None]
            qual = ctx.qualname(fn.info.node)
            if qual is not None and fn.required < len(fn.inputs):
                # only a defaulted input makes the count depend on the call: ask the other files then
                # `Fn.apply(...)` in the other checked files, under any alias or re-export
                sites += [(Related("the apply call", path, Location(line, 1)), n)
                          for path, line, n in ctx.project.apply_sites(qual)
                          if path != ctx.display_path and n is not None]
            cfg = ctx.core.cfg(fn.backward)
            finding = self._returns_nothing(ctx, fn, cfg, values)
            if finding is not None:
                yield finding
            for ret in cfg.reachable_returns():
                if ret.value is None:
                    continue  # a bare `return`: reported above, with the paths that fall off the end
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
        for op in registered_backwards(ctx):
            values = _Values(ctx, op)  # type: ignore[arg-type]
            for ret in return_statements(op.backward):
                got = values.count(ret.value)
                if got is None or got == len(op.inputs):
                    continue
                yield self._registered_problem(ctx, op, ret, got)

    def _registered_problem(self, ctx: FileContext, op: RegisteredBackward, ret: ast.Return, got: int) -> Finding:
        inputs = ", ".join(f"`{p}`" for p in op.inputs)
        want = len(op.inputs)
        message = (f"`{op.backward.name}`, registered as the backward of `{op.op}` (`register_autograd`, line "
                   f"{op.registration.lineno}), returns {got} gradient{'s' if got != 1 else ''}, but the op has "
                   f"{want} input{'s' if want != 1 else ''} ({inputs}): ")
        if got < want:
            message += ("torch raises `RuntimeError: ... returned an incorrect number of gradients` when this "
                        "backward runs")
        else:
            message += (f"unlike an autograd.Function, a registered backward must return exactly one gradient per "
                        f"input, extra Nones included (PyTorch raises \"The backward formula for "
                        f"{op.op.replace('::', '.')}.default returned an incorrect number of gradients (expected "
                        f"{want}, got {got})\" since mid-2026; earlier releases drop the extra Nones except for ops "
                        f"with list arguments, whose structure they compare)")
        return self.finding(
            ctx, ret, message,
            help=f"Return exactly {want} value{'s' if want != 1 else ''}: one gradient per input of the op, in order, "
                 f"`None` for inputs that need none.",
            related=[Related("registered here", ctx.display_path, ctx.span(op.registration)[0])],
        )

    def _returns_nothing(self, ctx: FileContext, fn: AutogradFunction, cfg, values: _Values) -> Finding | None:
        """``backward`` ends without returning a gradient on some path: off its
        end, or at a bare ``return``.  Autograd takes that as one None."""
        bare = [r for r in cfg.reachable_returns() if r.value is None]
        falls_off = cfg.falls_off_end() and not fall_off_is_excluded(fn.backward)
        if not falls_off and not bare:
            return None
        valued = [r for r in cfg.reachable_returns() if r.value is not None]
        n = len(fn.inputs)
        if bare:
            where = f"returns nothing at line {bare[0].lineno}"
            at: ast.AST = bare[0]
        elif valued:
            where = "falls off its end on some paths (it returns only " + \
                ("at line " + ", ".join(str(r.lineno) for r in valued[:3])) + ")"
            at = fn.backward
        else:
            where = "never returns a gradient: it always falls off its end"
            at = fn.backward
        path = "when that path runs" if valued or bare else "whenever it runs"
        if n >= 2:
            effect = (f"`forward` takes {n} inputs, so {path} torch raises `RuntimeError: function "
                      f"{fn.name}Backward returned an incorrect number of gradients (expected {n}, got 1)`")
        else:
            effect = (f"`forward` takes one input, so {path} its gradient is silently None: nothing upstream of "
                      f"`{fn.name}.apply` receives a gradient and no error is raised")
        message = f"`{fn.name}.backward` {where}: autograd takes that as a single None gradient; {effect}"
        return self.finding(
            ctx, at, message,
            help="Return one gradient per `forward` input on every path (`None` for the inputs that need none).",
            name_only=False,
        ) if isinstance(at, ast.Return) else self.make(
            path=ctx.display_path, location=ctx.span(at)[0], end_location=ctx.span(at)[0], message=message,
            help="Return one gradient per `forward` input on every path (`None` for the inputs that need none).")

    def _problem(self, ctx: FileContext, fn: AutogradFunction, values: _Values, ret: ast.Return, got: int,
                 sites: list[tuple[Related, int]]) -> tuple[str, list[Related]] | None:
        elts = ret.value.elts if isinstance(ret.value, (ast.Tuple, ast.List)) else None
        head = f"`{fn.name}.backward` returns {got} gradient{'s' if got != 1 else ''}"
        raises = "torch raises `RuntimeError: function {name}Backward returned an incorrect number of gradients " \
                 "(expected {want}, got {got})` when this backward runs"
        if sites:
            for related, want in sites:
                too_many = got > want and elts is not None and any(values.not_none(e) for e in elts[want:])
                if got < want or too_many:
                    place = f"line {related.location.row}" if related.path == ctx.display_path else \
                        f"{related.path}:{related.location.row}"
                    where = f"`{fn.name}.apply` is called with {want} input{'s' if want != 1 else ''} at {place}"
                    extra = " and the extra ones are not None" if too_many else ""
                    return (f"{head}, but {where}{extra}: " + raises.format(name=fn.name, want=want, got=got),
                            [related])
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
