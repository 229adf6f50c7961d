"""HKL507: a custom `autograd.Function` returns a tuple where one input's gradient belongs."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS
from hooklint.static.backward_flow import function_backwards, returned_slots, tuple_valued
from hooklint.static.context import FileContext


class FunctionGradIsTuple(Rule):
    """
    ## What it does
    Reports a `return` in the `backward` of a custom `torch.autograd.Function`
    that puts a tuple or list in the position of one input's gradient: a
    tuple display, the result of `torch.autograd.grad` (always a tuple),
    `split` / `chunk` / `unbind`, a helper of the file whose every `return`
    is a tuple of two or more values, or a name bound only to one of those.

    ## Why is this bad?
    Autograd takes the values `backward` returns as one gradient per
    `forward` input: each must be a tensor or `None`.  A helper that returns
    `(grad_input, grad_bias)` returned twice (`return tmp, tmp`) instead of
    unpacked, or `return grads, None` with `grads = torch.autograd.grad(...)`,
    raises `RuntimeError: expected Variable or None (got tuple)` each time the
    backward runs (for an input that is not a tensor: "returned a gradient
    different than None at position ..."), so nothing upstream of the
    Function can train.  fla's fused bias-GeLU Function did this in 0.5.0.

    ## Example
    ```python
    import torch

    def bias_act_bwd(g, y, bias):
        grad_y = g * torch.sigmoid(y + bias)
        return grad_y, grad_y.sum(0)

    class BiasAct(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y, bias):
            ctx.save_for_backward(y, bias)
            return torch.nn.functional.silu(y + bias)

        @staticmethod
        def backward(ctx, grad_output):
            y, bias = ctx.saved_tensors
            tmp = bias_act_bwd(grad_output, y, bias)
            return tmp, tmp
    ```

    ## Use instead
    ```python
    import torch

    def bias_act_bwd(g, y, bias):
        grad_y = g * torch.sigmoid(y + bias)
        return grad_y, grad_y.sum(0)

    class BiasAct(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y, bias):
            ctx.save_for_backward(y, bias)
            return torch.nn.functional.silu(y + bias)

        @staticmethod
        def backward(ctx, grad_output):
            y, bias = ctx.saved_tensors
            grad_y, grad_bias = bias_act_bwd(grad_output, y, bias)
            return grad_y, grad_bias
    ```

    ## Fix safety
    There is no automatic fix: which element belongs to which input is the
    author's to say.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    """

    code = "HKL507"
    name = "function-grad-is-tuple"
    summary = "A custom autograd Function's backward returns a tuple in the position of one input's gradient"
    severity = Severity.ERROR
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # the helper's pair unpacked
        "import torch\n"
        "def helper(g, x):\n"
        "    return g * x, g.sum(0)\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, b):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x + b\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, = ctx.saved_tensors\n"
        "        gx, gb = helper(g, x)\n"
        "        return gx, gb\n",
        # the helper's pair returned whole: it is the tuple of both gradients
        "import torch\n"
        "def helper(g, x):\n"
        "    return g * x, g.sum(0)\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, b):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x + b\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, = ctx.saved_tensors\n"
        "        return helper(g, x)\n",
        # autograd.grad's tuple spread with a star
        "import torch\n"
        "class G(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, fn, x, y):\n"
        "        ctx.fn = fn\n"
        "        ctx.save_for_backward(x, y)\n"
        "        return fn(x, y).detach()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, y = [t.detach().requires_grad_() for t in ctx.saved_tensors]\n"
        "        with torch.enable_grad():\n"
        "            out = ctx.fn(x, y)\n"
        "        grads = torch.autograd.grad(out, (x, y), g)\n"
        "        return (None, *grads)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "def bias_gelu_bwd(g, y, bias):\n"
            "    x = y + bias\n"
            "    grad_y = g * torch.sigmoid(1.702 * x)\n"
            "    return grad_y, grad_y.sum(0)\n"
            "class GeLU(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, y, bias):\n"
            "        ctx.save_for_backward(y, bias)\n"
            "        return y + bias\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        y, bias = ctx.saved_tensors\n"
            "        tmp = bias_gelu_bwd(grad_output, y, bias)\n"
            "        return tmp, tmp  # HKL507\n"
        ),
        # autograd.grad's tuple not spread
        Invalid(
            "import torch\n"
            "class G(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, fn, x):\n"
            "        ctx.fn = fn\n"
            "        ctx.save_for_backward(x)\n"
            "        return fn(x).detach()\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        x, = ctx.saved_tensors\n"
            "        x = x.detach().requires_grad_()\n"
            "        with torch.enable_grad():\n"
            "            out = ctx.fn(x)\n"
            "        grad_x = torch.autograd.grad(out, x, g)\n"
            "        return None, grad_x  # HKL507\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        model = ctx.model
        for fn in function_backwards(model):
            for ret in ctx.core.cfg(fn.backward).reachable_returns():
                if ret.value is None:
                    continue
                nested = [(i, e, how) for i, e in returned_slots(ret.value, model)
                          if not isinstance(e, ast.Starred) and (how := tuple_valued(e, model)) is not None]
                if not nested:
                    continue
                index, expr, how = nested[0]
                slot = f"the gradient of {fn.input_word(index)}" if index is not None else "one input's gradient"
                more = f" (and {len(nested) - 1} more position{'s' if len(nested) > 2 else ''})" \
                    if len(nested) > 1 else ""
                yield self.finding(
                    ctx, ret,
                    f"`{fn.name}.backward` returns `{ast.unparse(expr)}`, {how}, as {slot}{more}: autograd wants "
                    f"one tensor or None per `forward` input, so this backward raises \"expected Variable or None "
                    f"(got tuple)\" every time it runs",
                    help="Unpack the tuple and return its elements in the positions of their inputs "
                         "(`a, b = helper(...); return a, b`, or `return (None, *grads)`).",
                )
