"""HKL518: a custom `autograd.Function` keeps one of its own outputs as a plain `ctx` attribute."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS
from hooklint.static.context import FileContext
from hooklint.static.function_ctx_outputs import stored_outputs


class FunctionCtxStoresOutput(Rule):
    """
    ## What it does
    Reports `ctx.<name> = <value>` in the `forward` (or `setup_context`) of
    a custom `torch.autograd.Function` when `<value>` is one of the
    Function's outputs: a name `forward` returns, alone or in the returned
    tuple, a name the returned value was assigned from, or an element the
    returned value is unpacked into (`t, y = ans; ctx.t = t; return ans`).
    Outputs passed to `ctx.mark_non_differentiable`, inputs returned as
    they are, values that are visibly not tensors, tensors nested in a
    returned tuple (`apply` passes them through untouched) and outputs
    whose gradient `backward` never reads (its parameter is `_` or
    unused: the author treats the output as an index map, a handle or an
    integer tensor, which get no `grad_fn`) are not reported.

    ## Why is this bad?
    When `apply` returns, each differentiable output gets the Function's
    backward node, the `ctx` object itself, as its `grad_fn`.  An output
    also held as a `ctx` attribute closes a reference cycle
    (ctx -> output -> grad_fn -> ctx): reference counting never frees it,
    so the output, and everything else `ctx` holds (saved tensors, the
    module, the options), stays alive after the last user reference is
    gone, until Python's cycle collector happens to run.  The collector is
    driven by object counts, not by memory, so on a GPU, or in a loop that
    calls the Function every step, memory grows.  PyTorch's documentation
    of `save_for_backward` asks for outputs to be saved with it for this
    reason; `save_for_backward` keeps them without the cycle.

    ## Known problems
    The value is followed by name within the method; a non-tensor output
    whose type the rule cannot see (an object returned next to the
    tensors) is reported too: the severity is *warning*.

    ## Example
    ```python
    import torch

    class FirstCrossing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y0, rate):
            ans = (y0.sum() / rate, y0 * rate)
            event_t, y = ans
            ctx.event_t = event_t
            ctx.save_for_backward(rate)
            return ans

        @staticmethod
        def backward(ctx, *grads):
            (rate,) = ctx.saved_tensors
            return grads[1] * rate, None
    ```

    ## Use instead
    ```python
    import torch

    class FirstCrossing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, y0, rate):
            ans = (y0.sum() / rate, y0 * rate)
            event_t, y = ans
            ctx.save_for_backward(rate, event_t)
            return ans

        @staticmethod
        def backward(ctx, *grads):
            rate, event_t = ctx.saved_tensors
            return grads[1] * rate, None
    ```

    ## Fix safety
    There is no automatic fix: the read in `backward` moves to
    `ctx.saved_tensors`.

    ## References
    - [`FunctionCtx.save_for_backward`](https://pytorch.org/docs/stable/generated/torch.autograd.function.FunctionCtx.save_for_backward.html)
    - [Extending torch.autograd](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    """

    code = "HKL518"
    name = "function-ctx-stores-output"
    summary = "A custom autograd Function keeps one of its outputs as a ctx attribute (a reference cycle)"
    severity = Severity.WARNING
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN

    VALID: ClassVar[tuple[str, ...]] = (
        # the output is saved with save_for_backward
        "import torch\n"
        "class Exp(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        out = x.exp()\n"
        "        ctx.save_for_backward(out)\n"
        "        return out\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        out, = ctx.saved_tensors\n"
        "        return g * out\n",
        # a non-differentiable output has no grad_fn: no cycle
        "import torch\n"
        "class Top(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        values, index = x.max(dim=-1)\n"
        "        ctx.mark_non_differentiable(index)\n"
        "        ctx.index = index\n"
        "        return values, index\n"
        "    @staticmethod\n"
        "    def backward(ctx, g, _):\n"
        "        return torch.zeros(ctx.index.shape + (2,)).scatter(-1, ctx.index[..., None], g[..., None])\n",
        # an input returned as it is, and a count that is no tensor
        "import torch\n"
        "class Passthrough(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        n = x.numel()\n"
        "        ctx.x = x\n"
        "        ctx.n = n\n"
        "        return x, n\n"
        "    @staticmethod\n"
        "    def backward(ctx, g, _):\n"
        "        return g\n",
        # a NumPy array returned next to the tensor has no grad_fn
        "import torch\n"
        "class Cube(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(x):\n"
        "        x_np = x.detach().numpy()\n"
        "        return torch.tensor(x_np ** 3), x_np\n"
        "    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n"
        "        _, x_np = output\n"
        "        ctx.x_np = x_np\n"
        "    @staticmethod\n"
        "    def backward(ctx, g, _):\n"
        "        return g * 3 * torch.tensor(ctx.x_np) ** 2\n",
        # an index map whose gradient backward ignores (an integer tensor gets no grad_fn)
        "import torch\n"
        "class Permute(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, order):\n"
        "        row_map = torch.argsort(order).to(torch.int32)\n"
        "        ctx.row_map = row_map\n"
        "        return x[order], row_map\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad, _):\n"
        "        return grad[ctx.row_map.long()], None\n",
        # non-tensors nested in the returned tuple are passed through
        "import torch\n"
        "class Sample(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(x, mode):\n"
        "        code = 0 if mode == 'a' else 1\n"
        "        return x * 2, (code, mode)\n"
        "    @staticmethod\n"
        "    def setup_context(ctx, inputs, outputs):\n"
        "        x, mode = inputs\n"
        "        _, (code, _) = outputs\n"
        "        ctx.code = code\n"
        "        ctx.mode = mode\n"
        "    @staticmethod\n"
        "    def backward(ctx, g, _):\n"
        "        return g * 2, None\n",
        # an intermediate that is not returned
        "import torch\n"
        "class Sq(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        doubled = x * 2\n"
        "        ctx.doubled = doubled\n"
        "        return x * x\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * ctx.doubled\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Exp(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x):\n"
            "        result = x.exp()\n"
            "        ctx.result = result  # HKL518\n"
            "        return result\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        return g * ctx.result\n"
        ),
        # an element unpacked from the returned tuple
        Invalid(
            "import torch\n"
            "from torch.autograd import Function\n"
            "class Solve(Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, y0, *params):\n"
            "        with torch.no_grad():\n"
            "            ans = (y0.sum(), y0 * 2)\n"
            "            hit, y = ans\n"
            "            ctx.hit = hit  # HKL518\n"
            "        ctx.save_for_backward(y, *params)\n"
            "        return ans\n"
            "    @staticmethod\n"
            "    def backward(ctx, *grads):\n"
            "        return (grads[1] * 2,) + (None,) * (len(ctx.saved_tensors) - 1)\n"
        ),
        # setup_context receives the output
        Invalid(
            "import torch\n"
            "class Tanh(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(x):\n"
            "        return x.tanh()\n"
            "    @staticmethod\n"
            "    def setup_context(ctx, inputs, output):\n"
            "        ctx.out = output  # HKL518\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        return g * (1 - ctx.out ** 2)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for hit in stored_outputs(ctx):
            yield self.finding(
                ctx, hit.store,
                f"`{hit.function}.{hit.method}` keeps `{hit.name}`, an output of the Function, as "
                f"`ctx.{hit.attr}`: once `apply` returns, that output's `grad_fn` is this ctx, so (if it is a "
                f"tensor that requires grad) ctx and output hold each other in a reference cycle that reference "
                f"counting never frees; they, and all ctx keeps, stay in memory until Python's cycle collector runs",
                help=f"Save it with `ctx.save_for_backward(..., {hit.name})` and read it from `ctx.saved_tensors` "
                     f"in backward (or `ctx.mark_non_differentiable({hit.name})` if it takes no gradient).",
            )
