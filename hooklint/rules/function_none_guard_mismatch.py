"""HKL510: a custom `autograd.Function` uses a value that may be None under another value's None test."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS
from hooklint.static.context import FileContext
from hooklint.static.none_guards import mismatched_none_guards

_METHODS = ("forward", "setup_context", "backward")


class FunctionNoneGuardMismatch(Rule):
    """
    ## What it does
    Reports, in the `forward`, `setup_context` or `backward` of a custom
    `torch.autograd.Function`, a use of a value `y` (`y.detach()`,
    `y.shape`, `y[i]`) guarded by a `None` test of *another* value `x`
    (`y.detach() if x is not None else None`, `if x is not None:
    y.sum(0)`) when `y` can be `None` while `x` is not: the file binds `y`
    to `None` under a condition that says nothing about `x` (a gradient
    computed only when an input requires grad, a buffer made only for one
    mode), and nothing re-binds it when `x` is set.  Followed through
    tuple unpacking and the same file's helpers that return `y`.

    ## Why is this bad?
    A Function typically computes its inputs' gradients, or what it saves
    for them, only when they are needed: `grad_bias` is `None` when the
    input does not require grad (inference, a frozen encoder), even though
    `bias` exists.  Guarding `grad_bias.detach()` on `bias is not None`
    passes on exactly that path and raises `AttributeError: 'NoneType'
    object has no attribute 'detach'` in `forward`, so the Function fails
    in the configuration its own tests rarely run.  liger-kernel's fused
    linear cross-entropy (0.7.0) saved `grad_bias.detach() if bias is not
    None else None` and crashed whenever the input did not require grad.
    `ctx.save_for_backward` takes `None` as it is: test the value saved.

    ## Known problems
    Conditions are compared by the names they test: `y` bound to `None`
    under a flag that in fact implies `x is None` (two flags kept in step)
    is reported although the path cannot happen.  Loops are not followed:
    a `y = None` re-bound in a loop counts as possibly `None`.

    ## Example
    ```python
    import torch

    class LinearLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, bias=None):
            out = x @ w.t() + (bias if bias is not None else 0)
            grad_bias = None
            if x.requires_grad:
                grad_bias = torch.ones_like(out).sum(0)
            ctx.save_for_backward(grad_bias.detach() if bias is not None else None)
            return out.sum()

        @staticmethod
        def backward(ctx, g):
            (grad_bias,) = ctx.saved_tensors
            return None, None, grad_bias
    ```

    ## Use instead
    ```python
    import torch

    class LinearLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, bias=None):
            out = x @ w.t() + (bias if bias is not None else 0)
            grad_bias = None
            if x.requires_grad:
                grad_bias = torch.ones_like(out).sum(0)
            ctx.save_for_backward(grad_bias.detach() if grad_bias is not None else None)
            return out.sum()

        @staticmethod
        def backward(ctx, g):
            (grad_bias,) = ctx.saved_tensors
            return None, None, grad_bias
    ```

    ## Fix safety
    There is no automatic fix: test the value used (`grad_bias is not
    None`), unless the author meant both conditions to hold.

    ## References
    - [`FunctionCtx.save_for_backward`](https://pytorch.org/docs/stable/generated/torch.autograd.function.FunctionCtx.save_for_backward.html)
    - liger-kernel pull request 1157 (`grad_bias.detach()` guarded on `bias`)
    """

    code = "HKL510"
    name = "function-none-guard-mismatch"
    summary = "A custom autograd Function uses a value that may be None under another value's None test"
    severity = Severity.WARNING
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # the value tested is the value used
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, bias=None):\n"
        "        gb = torch.ones_like(x).sum(0) if x.requires_grad else None\n"
        "        ctx.save_for_backward(gb.detach() if gb is not None else None)\n"
        "        return x.sum()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return None, None\n",
        # None only when the guard's value is None: the two are in step
        "import torch\n"
        "def helper(x, bias):\n"
        "    gb = torch.zeros_like(bias) if bias is not None else None\n"
        "    return x * 2, gb\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, bias=None):\n"
        "        out, gb = helper(x, bias=bias)\n"
        "        ctx.save_for_backward(gb.detach() if bias is not None else None)\n"
        "        return out\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * 2, None\n",
        # bound to None first, then re-bound whenever the guard's value is set
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, bias=None):\n"
        "        gb = None\n"
        "        if bias is not None:\n"
        "            gb = torch.ones_like(bias)\n"
        "        ctx.save_for_backward(gb.detach() if bias is not None else None)\n"
        "        return x.clone()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g, None\n",
        # the two names are set None together and non-None together (a buffer and its view:
        # transformer_engine's context-parallel attention)
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, bias=None):\n"
        "        if bias is not None:\n"
        "            dbias = torch.zeros_like(bias)\n"
        "            dbias_ = dbias.view(-1)\n"
        "        else:\n"
        "            dbias = None\n"
        "            dbias_ = None\n"
        "        if dbias is not None:\n"
        "            dbias_.add_(1)\n"
        "        return x.clone()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g, None\n",
        # the None is overwritten on both branches of an if / else before the use
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, packed, half=None):\n"
        "        lse_ = None\n"
        "        if half is not None:\n"
        "            if packed:\n"
        "                lse_ = x[1:].clone()\n"
        "            else:\n"
        "                lse_ = x[:-1].clone()\n"
        "            lse_.unsqueeze_(-1)\n"
        "        return x.clone()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g, None, None\n",
        # bound under `if fused:` and again, in a nested block, under `if not fused:`: one of them always ran
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, fused, bias=None):\n"
        "        dact = None\n"
        "        if fused:\n"
        "            dact = x * 2\n"
        "        if x.dim() > 1:\n"
        "            if not fused:\n"
        "                dact = x * 3\n"
        "            if bias is not None:\n"
        "                gb = dact.sum(0)\n"
        "        return x.clone()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g, None, None\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "def fused_forward(x, w, bias):\n"
            "    if x.requires_grad:\n"
            "        gb = torch.zeros_like(bias) if bias is not None else None\n"
            "    else:\n"
            "        gb = None\n"
            "    return (x @ w.t()).sum(), gb\n"
            "class FusedLoss(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, w, bias=None):\n"
            "        loss, grad_bias = fused_forward(x, w, bias=bias)\n"
            "        ctx.save_for_backward(grad_bias.detach() if bias is not None else None)  # HKL510\n"
            "        return loss\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        (grad_bias,) = ctx.saved_tensors\n"
            "        return None, None, grad_bias\n"
        ),
        # in backward, under an `if` statement on a `ctx` attribute: the gradient is computed only when needed
        Invalid(
            "import torch\n"
            "class Affine(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, w, b):\n"
            "        ctx.save_for_backward(x, w)\n"
            "        ctx.bias = b\n"
            "        return x @ w + (b if b is not None else 0)\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        x, w = ctx.saved_tensors\n"
            "        gw = gb = None\n"
            "        if ctx.needs_input_grad[1]:\n"
            "            gw = x.t() @ g\n"
            "            gb = g\n"
            "        if ctx.bias is not None:\n"
            "            gb = gb.sum(0)  # HKL510\n"
            "        return g @ w.t(), gw, gb\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        model = ctx.model
        for info in model.classes.values():
            if not model.is_autograd_function_class(info):
                continue
            for method in _METHODS:
                func = info.methods.get(method)
                if func is None:
                    continue
                for found in mismatched_none_guards(func, ctx.tree, info.node):
                    witness = found.witness
                    where = "" if witness.func is func else f" (in `{getattr(witness.func, 'name', '?')}`)"
                    when = f" when {witness.condition}" if witness.condition else ""
                    yield self.finding(
                        ctx, found.deref,
                        f"`{info.name}.{method}` uses `{ast.unparse(found.deref)}` under a test of "
                        f"`{found.guard}`, but `{found.name}` can be None while `{found.guard}` is not: it is "
                        f"bound to None{when} at line {witness.binding.lineno}{where}, so this raises "
                        f"`AttributeError` / `TypeError` on that path (a gradient computed only when an input "
                        f"requires grad is None in inference even though `{found.guard}` is set)",
                        help=f"Test the value used (`{found.name} is not None`).",
                        related=[Related(f"`{found.name}` is None here", ctx.display_path,
                                         ctx.span(witness.binding)[0])],
                    )
