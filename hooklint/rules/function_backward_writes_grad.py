"""HKL505: a custom Function's backward that writes an input's .grad and also returns it (hook-semantics.md, section 7)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS, autograd_functions
from hooklint.static.context import FileContext
from hooklint.static.function_bodies import outer_grad_writes


class FunctionBackwardWritesGrad(Rule):
    """
    ## What it does
    Reports a custom `torch.autograd.Function` whose `backward` writes the
    gradient of a tensor the `forward` was given (a `ctx` attribute or a
    saved tensor) into that tensor's `.grad`, by a nested
    `torch.autograd.backward(...)` / `.backward()` or by assigning or
    editing `.grad`, and then also returns that `.grad` as the input's
    gradient.

    ## Why is this bad?
    The engine accumulates whatever `backward` returns into the input's
    `.grad` (or hands it on, for a non-leaf).  The nested backward already
    accumulated the same gradient into the leaf: it is counted twice, and
    the returned `.grad` also carries everything accumulated before (an
    earlier micro-batch, another chunk using the same weight), which is
    counted again.  Training runs, with wrong gradients and no error.
    Recomputing a forward inside `backward` (activation offloading,
    chunked losses) is where this appears.

    `torch.autograd.grad(outputs, inputs, grad_outputs)` computes the same
    gradients without touching any `.grad`, and `backward` returns them.

    ## Known problems
    The tensor must reach `backward` from `ctx` by a plain name
    (`w = ctx.weight`, `x, w = ctx.saved_tensors`); a tensor rebuilt there
    (`x = ctx.x.detach().requires_grad_()`) is a fresh leaf whose `.grad`
    is backward's own, and is fine.

    ## Example
    ```python
    import torch

    class RecomputedLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.x, ctx.weight = x.detach(), weight
            with torch.no_grad():
                return x @ weight

        @staticmethod
        def backward(ctx, grad_output):
            x = ctx.x.clone().requires_grad_(True)
            weight = ctx.weight
            with torch.enable_grad():
                out = x @ weight
            torch.autograd.backward(out, grad_output)
            return x.grad, weight.grad
    ```

    ## Use instead
    ```python
    import torch

    class RecomputedLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.x, ctx.weight = x.detach(), weight
            with torch.no_grad():
                return x @ weight

        @staticmethod
        def backward(ctx, grad_output):
            x = ctx.x.clone().requires_grad_(True)
            weight = ctx.weight.detach().requires_grad_(True)
            with torch.enable_grad():
                out = x @ weight
            return torch.autograd.grad(out, (x, weight), grad_output)
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`torch.autograd.grad`](https://pytorch.org/docs/stable/generated/torch.autograd.grad.html)
    - unsloth-zoo 2026.8.2 (`Unsloth_Offloaded_Log_Softmax` returned `lm_head.grad` after a nested backward)
    """

    code = "HKL505"
    name = "function-backward-writes-grad"
    summary = "A custom Function's backward writes an input's .grad itself and also returns it: counted twice"
    severity = Severity.ERROR
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # autograd.grad: no .grad touched
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, w):\n"
        "        ctx.w = w\n"
        "        return x * w\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        w = ctx.w.detach().requires_grad_(True)\n"
        "        with torch.enable_grad():\n"
        "            out = w * 2\n"
        "        (gw,) = torch.autograd.grad(out, (w,), g)\n"
        "        return None, gw\n",
        # a nested backward into fresh leaves only
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.x = x.detach()\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x = ctx.x.clone().requires_grad_(True)\n"
        "        with torch.enable_grad():\n"
        "            (x * 2).backward(g)\n"
        "        return x.grad\n",
        # writes .grad itself and returns None for it (manual accumulation, not counted twice)
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, w):\n"
        "        ctx.save_for_backward(x, w)\n"
        "        return x @ w\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, w = ctx.saved_tensors\n"
        "        w.grad = x.t() @ g\n"
        "        return g @ w.t(), None\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class F(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, w):\n"
            "        ctx.x, ctx.w = x.detach(), w\n"
            "        return x @ w\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        x = ctx.x.clone().requires_grad_(True)\n"
            "        w = ctx.w\n"
            "        with torch.enable_grad():\n"
            "            out = x @ w\n"
            "        torch.autograd.backward(out, g)  # HKL505\n"
            "        return x.grad, w.grad\n"
        ),
        Invalid(
            "import torch\n"
            "class F(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, w):\n"
            "        ctx.save_for_backward(x, w)\n"
            "        return x @ w\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        x, w = ctx.saved_tensors\n"
            "        w.grad = x.t() @ g  # HKL505\n"
            "        return g @ w.t(), w.grad\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for fn in autograd_functions(ctx):
            for write in outer_grad_writes(fn.backward, ctx.model.qualify):
                yield self.finding(
                    ctx, write.node,
                    message=(f"`{fn.name}.backward` writes `{write.tensor}.grad` ({write.how}; `{write.tensor}` is "
                             f"{write.origin}, a tensor `forward` was given) and also returns `{write.tensor}.grad` "
                             f"as its gradient: the engine accumulates it again, so the gradient is counted twice "
                             f"(plus whatever `.grad` held before)"),
                    help="Compute the gradients with `torch.autograd.grad(outputs, inputs, grad_outputs)` and return "
                         "them; recompute on detached copies (`t.detach().requires_grad_()`) so no caller's `.grad` "
                         "is touched.",
                    related=[Related(f"returns `{write.tensor}.grad`", ctx.display_path,
                                     ctx.span(write.returned)[0])] if write.returned is not None else [],
                )
