"""HKL513: a custom `autograd.Function`'s backward reads a `ctx` attribute that nothing sets."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS
from hooklint.static.context import FileContext
from hooklint.static.function_ctx import unset_ctx_reads


class FunctionCtxAttributeUnset(Rule):
    """
    ## What it does
    Reports a read of `ctx.<name>` in the `backward` of a custom
    `torch.autograd.Function` when nothing in the class ever sets `<name>`:
    neither `forward` (or `setup_context`) nor any other method assigns it,
    and it is not one of the attributes torch gives every `ctx`
    (`saved_tensors`, `needs_input_grad`, ...).  When `forward` passed a value
    of that name to `ctx.save_for_backward`, the finding is put on that call:
    the value went to `ctx.saved_tensors`, not to `ctx.<name>`.

    Left alone: a class whose `ctx` is passed to a helper, aliased or captured
    by a nested function; a class subclassed in the file or with a base
    other than torch's `Function`; a backward that tests attributes
    (`hasattr`, `getattr`, `except AttributeError`).

    ## Why is this bad?
    `ctx` is an instance of the `<Name>Backward` node class torch builds for
    the Function, not of the Function: it holds what `forward` put on it and
    nothing else (a class attribute of the Function is not visible on it
    either).  The read raises `AttributeError: 'FBackward' object has no
    attribute 'alpha'` every time this backward runs, so the model can run
    forward and evaluate, and fails at its first training step.

    ## Example
    ```python
    import torch

    class Surrogate(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, alpha):
            ctx.save_for_backward(x, alpha)
            return (x >= 0).to(x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return grad_output * ctx.alpha * (1 - x.abs()).clamp(min=0), None
    ```

    ## Use instead
    ```python
    import torch

    class Surrogate(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, alpha):
            ctx.save_for_backward(x)
            ctx.alpha = alpha
            return (x >= 0).to(x)

        @staticmethod
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            return grad_output * ctx.alpha * (1 - x.abs()).clamp(min=0), None
    ```

    ## Fix safety
    There is no automatic fix: which value `backward` means is for the author
    to say.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - [`FunctionCtx`](https://pytorch.org/docs/stable/autograd.html#context-method-mixins)
    """

    code = "HKL513"
    name = "function-ctx-attribute-unset"
    summary = "A custom autograd Function's backward reads a ctx attribute that forward never sets"
    severity = Severity.WARNING
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN

    VALID: ClassVar[tuple[str, ...]] = (
        # set in forward
        "import torch\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, factor):\n"
        "        ctx.factor = factor\n"
        "        return x * factor\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * ctx.factor, None\n",
        # set in setup_context
        "import torch\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(x, factor):\n"
        "        return x * factor\n"
        "    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n"
        "        _, ctx.factor = inputs\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * ctx.factor, None\n",
        # a helper receives ctx and may set anything
        "import torch\n"
        "def remember(ctx, factor):\n"
        "    ctx.factor = factor\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, factor):\n"
        "        remember(ctx, factor)\n"
        "        return x * factor\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * ctx.factor, None\n",
        # attributes torch gives every ctx, and a guarded read
        "import torch\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, = ctx.saved_tensors\n"
        "        if ctx.needs_input_grad[0] and hasattr(ctx, 'scale'):\n"
        "            return g * ctx.scale\n"
        "        return g * 2\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Surrogate(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, alpha):\n"
            "        ctx.save_for_backward(x, alpha)  # HKL513\n"
            "        return (x >= 0).to(x)\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        x, = ctx.saved_tensors\n"
            "        return grad_output * ctx.alpha, None\n"
        ),
        # a class attribute of the Function is not on ctx
        Invalid(
            "import torch\n"
            "class Clip(torch.autograd.Function):\n"
            "    bound = 1.0\n"
            "    @staticmethod\n"
            "    def forward(ctx, x):\n"
            "        return x.clamp(-1, 1)\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        return g * (g.abs() < ctx.bound)  # HKL513\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for hit in unset_ctx_reads(ctx):
            read_line = ctx.span(hit.read)[0]
            where = f"`{hit.fn.name}.backward` reads `ctx.{hit.attr}`"
            if hit.saved_in is not None:
                yield self.finding(
                    ctx, hit.saved_in,
                    f"`{hit.fn.name}.forward` passes `{hit.attr}` to `save_for_backward`, but {where} "
                    f"(line {read_line.row}), which nothing sets: `save_for_backward` stores tensors for "
                    f"`ctx.saved_tensors` only (and rejects a non-tensor), so that read raises AttributeError when it runs",
                    help=f"Keep a non-tensor as an attribute (`ctx.{hit.attr} = {hit.attr}`) and save only tensors, "
                         f"or read it back from `ctx.saved_tensors`.",
                    related=[Related("the read", ctx.display_path, read_line)],
                )
            else:
                yield self.finding(
                    ctx, hit.read,
                    f"{where}, which neither `forward` nor any method of `{hit.fn.name}` sets (ctx is the "
                    f"backward node, not the Function: class attributes are not on it): this read raises "
                    f"AttributeError whenever it runs",
                    help=f"Set `ctx.{hit.attr}` in `forward` (or `setup_context`).",
                )
