"""HKL514: a custom Function's backward reads `ctx.saved_tensors` more than once."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.saved_tensor_reads import TRIGGER_PATTERN, TRIGGERS, backward_unpacks


class FunctionSavedTensorsReadTwice(Rule):
    """
    ## What it does
    Reports, in the `backward` of a custom `torch.autograd.Function`, a read
    of `ctx.saved_tensors` (or `ctx.saved_variables`) that can run after
    another read in the same backward: two reads in a row
    (`ctx.saved_tensors[0]`, then `ctx.saved_tensors[1:]`), a read inside a
    loop or a comprehension, a read in a helper the backward passes `ctx`
    to, or through a local alias of `ctx`.  Reads in exclusive branches
    (`if` / `else`, a `return` before the other) are fine.

    ## Why is this bad?
    `ctx.saved_tensors` is not a stored tuple: each read unpacks every
    tensor `forward` saved again, and runs the active saved-tensor hooks'
    unpack once more per tensor.  Under non-reentrant activation
    checkpointing (`torch.utils.checkpoint.checkpoint(...,
    use_reentrant=False)`, the default of FSDP's and most trainers'
    checkpoint wrappers) a saved tensor may be unpacked only once, and the
    second read raises `CheckpointError: Unpack is being triggered for a
    tensor that was already unpacked once`.  Under
    `torch.autograd.graph.saved_tensors_hooks` (activation offloading)
    the unpack hook runs twice for the same tensor: a copy back from the
    host per read, or an offloader's bookkeeping that expects one reload
    breaks.  Without hooks the reads only cost time.  TransformerEngine's
    context-parallel attention sliced `ctx.saved_tensors` six times in a
    row (1.12) and its fused-op backward read it once per op in a loop
    (2.4); both failed under checkpointing or offloading.

    ## Example
    ```python
    import torch

    class MulAdd(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w, b)
            return x * w + b

        @staticmethod
        def backward(ctx, grad):
            x, w = ctx.saved_tensors[:2]
            b = ctx.saved_tensors[2]
            return grad * w, grad * x, grad
    ```

    ## Use instead
    ```python
    import torch

    class MulAdd(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w, b)
            return x * w + b

        @staticmethod
        def backward(ctx, grad):
            saved = ctx.saved_tensors
            x, w = saved[:2]
            b = saved[2]
            return grad * w, grad * x, grad
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`FunctionCtx.save_for_backward`](https://pytorch.org/docs/stable/generated/torch.autograd.function.FunctionCtx.save_for_backward.html)
    - [Hooks for saved tensors](https://pytorch.org/docs/stable/notes/autograd.html#hooks-for-saved-tensors)
    - [`torch.utils.checkpoint`](https://pytorch.org/docs/stable/checkpoint.html)
    """

    code = "HKL514"
    name = "function-saved-tensors-read-twice"
    summary = ("A custom autograd Function's backward reads ctx.saved_tensors more than once, unpacking every "
               "saved tensor again")
    severity = Severity.WARNING
    triggers = TRIGGERS
    trigger_pattern = TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # read once, then sliced
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, y):\n"
        "        ctx.save_for_backward(x, y)\n"
        "        return x * y\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        saved = ctx.saved_tensors\n"
        "        x, y = saved[0], saved[1]\n"
        "        return g * y, g * x\n",
        # exclusive branches: one read per backward
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, y):\n"
        "        ctx.save_for_backward(x, y)\n"
        "        ctx.swap = False\n"
        "        return x * y\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        if ctx.swap:\n"
        "            y, x = ctx.saved_tensors\n"
        "        else:\n"
        "            x, y = ctx.saved_tensors\n"
        "        return g * y, g * x\n",
        # an early return before the second read; a conditional expression
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        ctx.fast = True\n"
        "        return x * x\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        if ctx.fast:\n"
        "            return 2 * g * ctx.saved_tensors[0]\n"
        "        x = ctx.saved_tensors[0] if ctx.fast else ctx.saved_tensors[0].clone()\n"
        "        return 2 * g * x\n",
        # read once as a loop's iterable; a loop left right after its read
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, *xs):\n"
        "        ctx.save_for_backward(*xs)\n"
        "        return sum(xs)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        out = []\n"
        "        for t in ctx.saved_tensors:\n"
        "            out.append(g * torch.ones_like(t))\n"
        "        return tuple(out)\n",
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, *xs):\n"
        "        ctx.save_for_backward(*xs)\n"
        "        return sum(xs)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        while True:\n"
        "            saved = ctx.saved_tensors\n"
        "            break\n"
        "        return tuple(g * torch.ones_like(t) for t in saved)\n",
        # a plain object's `saved_tensors` attribute (an op context, not autograd's)
        "class OpCtx:\n"
        "    saved_tensors = ()\n"
        "def op_backward(ctx, g):\n"
        "    a = ctx.saved_tensors[0]\n"
        "    b = ctx.saved_tensors[1]\n"
        "    return g * a * b\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class CPAttention(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, q, k, v, n):\n"
            "        ctx.n = n\n"
            "        ctx.save_for_backward(q, k, v)\n"
            "        return q * k * v\n"
            "    @staticmethod\n"
            "    def backward(ctx, dout):\n"
            "        q, k = ctx.saved_tensors[:2]\n"
            "        v = ctx.saved_tensors[2 : 2 + ctx.n]  # HKL514\n"
            "        return dout * k * v[0], dout * q * v[0], dout * q * k, None\n"
        ),
        # once per op, in a loop, through a differently named ctx
        Invalid(
            "import torch\n"
            "class Fused(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(func_ctx, x, ops):\n"
            "        func_ctx.ops = ops\n"
            "        func_ctx.save_for_backward(x)\n"
            "        return x\n"
            "    @staticmethod\n"
            "    def backward(func_ctx, dy):\n"
            "        for op in func_ctx.ops:\n"
            "            op.saved = func_ctx.saved_tensors[slice(*op.range)]  # HKL514\n"
            "        return dy, None\n"
        ),
        # a helper that takes ctx, then a read of the backward's own, through an alias
        Invalid(
            "import torch\n"
            "def _unpack(context):\n"
            "    return context.saved_variables\n"
            "class Scale(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, s):\n"
            "        ctx.save_for_backward(x, s)\n"
            "        return x * s\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        x, s = _unpack(ctx)\n"
            "        c = ctx\n"
            "        if ctx.needs_input_grad[1]:\n"
            "            (s,) = c.saved_tensors[1:]  # HKL514\n"
            "        return g * s, (g * x).sum()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        reported: set[int] = set()
        for backward in backward_unpacks(ctx):
            for rep in backward.repeated:
                site, read = rep.site, rep.site.read
                if id(site.node) in reported:
                    continue
                reported.add(id(site.node))
                what = f"`{ctx.segment(read)}`"
                if site.via:
                    helper = getattr(site.via[-1], "name", "a helper")
                    where = f"this call reaches {what} (in `{helper}`, line {read.lineno}), which"
                else:
                    where = f"{what}"
                if rep.repeat == "loop":
                    again = "runs once per iteration of the loop around it"
                elif rep.repeat == "comprehension":
                    again = "runs once per element of the comprehension around it"
                else:
                    line = rep.earlier.node.lineno  # type: ignore[attr-defined]
                    again = (f"runs after the unpack on line {line}" if line != site.node.lineno  # type: ignore[attr-defined]
                             else "runs after the unpack before it on this line")
                in_fn = "" if rep.func is backward.backward else f" (in `{getattr(rep.func, 'name', '?')}`, which " \
                        f"{backward.label} calls with its ctx)"
                related = [] if rep.earlier is site else [
                    Related("unpacked first here", ctx.display_path, ctx.span(rep.earlier.node)[0])]
                yield self.finding(
                    ctx, site.node,
                    f"{where} {again} in one call of {backward.label}{in_fn}: every read of "
                    f"`ctx.{read.attr}` unpacks all saved tensors again, so the active saved-tensor hooks' unpack "
                    f"runs once per read; non-reentrant activation checkpointing allows one unpack per tensor and "
                    f"raises CheckpointError on the second, and an offloading unpack hook reloads the tensors "
                    f"twice",
                    help=f"Read `ctx.{read.attr}` once at the top of backward into a local (`saved = "
                         f"ctx.{read.attr}`) and index, slice or pass that local instead.",
                    related=related,
                )
