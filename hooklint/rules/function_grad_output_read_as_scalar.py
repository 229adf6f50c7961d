"""HKL509: a custom `autograd.Function` reads the upstream gradient as one number while its output can be per element."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS
from hooklint.static.backward_flow import function_backwards
from hooklint.static.context import FileContext
from hooklint.static.grad_output_shape import gradient_uses, unreduced_on_some_path
from hooklint.static.semantic import is_staticmethod, positional_params


class FunctionGradOutputReadAsScalar(Rule):
    """
    ## What it does
    Reports the `backward` of a custom `torch.autograd.Function` that reads
    the gradient of an output as one number (it hands the bare tensor to a
    kernel launch `kernel[grid](...)` with nothing of its shape or strides,
    or calls `g.item()`, `float(g)`) and never uses it in a way that
    sees its shape (arithmetic, views, slicing, `g.ndim`, `g.stride(0)`, a
    torch op), while `forward` returns that output unreduced on some path:
    a tensor `t` on one path and `t.sum()` / `torch.mean(t)` on another (the
    shape of a `reduction="none"` option).  Followed through local names,
    conditional expressions, tuple unpacking, and helpers of the same file
    that `forward` and `backward` call.

    ## Why is this bad?
    Autograd hands `backward` a gradient of the output's shape.  When the
    output is a reduced loss that is one number, and a kernel that loads
    the first element of the gradient is right.  On the unreduced path the
    output, so its gradient, has one element per row: a caller's per-token
    weights, masks or `loss.backward(gradient=...)` arrive as a vector, and
    a backward that reads one element scales every row by the first row's
    upstream gradient.  Nothing raises; the weights are silently lost
    (`g.item()` and `float(g)` at least raise there).
    liger-kernel's cross-entropy (until 0.5.9) and fused linear
    cross-entropy (until 0.8.2) Functions did this with `reduction="none"`.

    ## Known problems
    The kernel is not read: one that walks the gradient by row from the bare
    pointer (a contiguous 1-D gradient needs no stride) is reported although
    it is right; the message says so.  A gradient read as a scalar only in a
    helper of another file, or through `self.method(...)`, is not followed.
    An output reduced on every path is not reported: its gradient is one
    number.

    ## Example
    ```python
    import torch

    def scale_by_upstream(grad, grad_output):
        if not torch.equal(grad_output, torch.tensor(1.0, device=grad_output.device)):
            scale_kernel[(grad.shape[0],)](grad, grad.stride(0), grad_output, grad.shape[1])

    class RowLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target, reduction="mean"):
            rows = torch.nn.functional.cross_entropy(logits.detach(), target, reduction="none")
            ctx.save_for_backward(torch.softmax(logits, -1) - torch.nn.functional.one_hot(target, logits.shape[1]))
            if reduction == "none":
                loss = rows
            else:
                loss = torch.sum(rows)
            return loss

        @staticmethod
        def backward(ctx, grad_output):
            (grad,) = ctx.saved_tensors
            scale_by_upstream(grad, grad_output)
            return grad, None, None
    ```

    ## Use instead
    ```python
    import torch

    def scale_by_upstream(grad, grad_output):
        if grad_output.ndim > 0:  # reduction="none": one upstream gradient per row
            grad.mul_(grad_output.unsqueeze(1))
        elif not torch.equal(grad_output, torch.tensor(1.0, device=grad_output.device)):
            scale_kernel[(grad.shape[0],)](grad, grad.stride(0), grad_output, grad.shape[1])

    class RowLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target, reduction="mean"):
            rows = torch.nn.functional.cross_entropy(logits.detach(), target, reduction="none")
            ctx.save_for_backward(torch.softmax(logits, -1) - torch.nn.functional.one_hot(target, logits.shape[1]))
            if reduction == "none":
                loss = rows
            else:
                loss = torch.sum(rows)
            return loss

        @staticmethod
        def backward(ctx, grad_output):
            (grad,) = ctx.saved_tensors
            scale_by_upstream(grad, grad_output)
            return grad, None, None
    ```

    ## Fix safety
    There is no automatic fix: a per-row gradient must be broadcast over
    each row (`grad * grad_output.unsqueeze(1)`), and a gradient summed over
    rows in `forward` (a weight gradient) cannot be rescaled afterwards at
    all: it has to be computed in `backward`, or with the upstream gradient
    folded in before the sum.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - liger-kernel pull requests 680 and 1298 (`reduction="none"` upstream gradients read as a scalar)
    """

    code = "HKL509"
    name = "function-grad-output-read-as-scalar"
    summary = ("A custom autograd Function reads an output's upstream gradient as one number while the output "
               "is unreduced on some path")
    severity = Severity.WARNING
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # the output is reduced on every path: its gradient is one number, a scalar load is right
        "import torch\n"
        "class MeanLoss(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(torch.ones_like(x) / x.numel())\n"
        "        return x.mean()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (grad,) = ctx.saved_tensors\n"
        "        scale_kernel[(grad.shape[0],)](grad, g)\n"
        "        return grad\n",
        # the kernel is told the gradient's stride: it can walk it by row
        "import torch\n"
        "class RowLoss(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, reduction):\n"
        "        rows = (x * x).sum(-1)\n"
        "        ctx.save_for_backward(2 * x)\n"
        "        return rows if reduction == 'none' else rows.sum()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (grad,) = ctx.saved_tensors\n"
        "        stride = g.stride(-1) if g.ndim else 0\n"
        "        scale_kernel[(grad.shape[0],)](grad, g, stride)\n"
        "        return grad, None\n",
        # the gradient broadcast over rows with torch ops
        "import torch\n"
        "def _scale(grad, g):\n"
        "    if g.ndim > 0:\n"
        "        return grad * g.unsqueeze(1)\n"
        "    return grad * g\n"
        "class RowLoss(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, reduction):\n"
        "        rows = (x * x).sum(-1)\n"
        "        ctx.save_for_backward(2 * x)\n"
        "        if reduction == 'none':\n"
        "            return rows\n"
        "        return torch.sum(rows)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (grad,) = ctx.saved_tensors\n"
        "        return _scale(grad, g), None\n",
        # a reduction over a dimension is not a full one: the output stays per row on both paths
        "import torch\n"
        "class RowNorm(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, keep):\n"
        "        sq = x * x\n"
        "        out = sq if keep else sq.sum(dim=-1)\n"
        "        return out\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g.item() * 2, None\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "def scale_by_upstream(grad, grad_output):\n"
            "    if torch.equal(grad_output, torch.tensor(1.0, device=grad_output.device)):\n"
            "        return grad\n"
            "    scale_kernel[(grad.shape[0],)](grad, grad.stride(0), grad_output, grad.shape[1])\n"
            "    return grad\n"
            "class RowLoss(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, reduction='mean'):\n"
            "        rows = (x * x).sum(-1)\n"
            "        ctx.save_for_backward(2 * x)\n"
            "        if reduction == 'none':\n"
            "            loss = rows\n"
            "        else:\n"
            "            loss = torch.sum(rows)\n"
            "        return loss\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        (grad,) = ctx.saved_tensors\n"
            "        grad = scale_by_upstream(grad, grad_output)  # HKL509\n"
            "        return grad, None\n"
        ),
        # several outputs, a helper returning the tuple, a mean divided by a count, the element read by index
        Invalid(
            "from torch.autograd import Function\n"
            "def _losses(x, per_token):\n"
            "    tok = (x * x).sum(-1)\n"
            "    loss = tok if per_token else tok.sum() / tok.shape[0]\n"
            "    return loss, tok.max()\n"
            "class TokenLoss(Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, per_token=False):\n"
            "        loss, peak = _losses(x, per_token)\n"
            "        ctx.save_for_backward(x)\n"
            "        return peak, loss\n"
            "    @staticmethod\n"
            "    def backward(ctx, d_peak, d_loss):\n"
            "        (x,) = ctx.saved_tensors\n"
            "        scale = d_loss.item()  # HKL509\n"
            "        return 2 * x * scale, None\n"
        ),
        # the launch in backward itself, through an alias and `.contiguous()`, keyword arguments
        Invalid(
            "import torch\n"
            "class Fused(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, w, reduce=True):\n"
            "        per_row = x @ w\n"
            "        ctx.save_for_backward(x, w)\n"
            "        return torch.mean(per_row) if reduce else per_row\n"
            "    @staticmethod\n"
            "    def backward(ctx, dy):\n"
            "        x, w = ctx.saved_tensors\n"
            "        upstream = dy\n"
            "        dx = torch.empty_like(x)\n"
            "        _bwd_kernel[(x.shape[0],)](dx, x, w, g_ptr=upstream.contiguous())  # HKL509\n"
            "        return dx, None, None\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        model = ctx.model
        for fn in function_backwards(model):
            forward = fn.info.method("forward")
            if forward is None or not is_staticmethod(forward):
                continue
            cls = fn.info.node
            backward = fn.backward
            for index, param in enumerate(positional_params(backward)[1:]):
                uses = gradient_uses(backward, param, ctx.tree, cls, model)
                if not uses.read_as_scalar:
                    continue
                reduced = unreduced_on_some_path(forward, index, ctx.tree, cls, model)
                if reduced is None:
                    continue
                yield self._finding(ctx, fn.name, backward, param, index, uses, reduced)

    def _finding(self, ctx: FileContext, name: str, backward: ast.AST, param: str, index: int, uses,
                 reduced: ast.AST) -> Finding:
        first_line, last_line = backward.lineno, backward.end_lineno or backward.lineno
        own = [n for n in [*uses.handed, *uses.scalar] if first_line <= n.lineno <= last_line]
        anchor = min(own, key=lambda n: (n.lineno, n.col_offset)) if own else backward
        scalar = uses.scalar[0]
        shown = ast.unparse(scalar)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        launch = isinstance(scalar, ast.Call) and isinstance(scalar.func, ast.Subscript)
        kind = "a kernel launch that gets the bare tensor and none of its shape or strides" if launch \
            else "a conversion to a Python number"
        consequence = ("a caller's per-row weights or masks are lost and every row is scaled by the first "
                       "element's value, without an error (unless the kernel walks the gradient by row on its own)"
                       if launch else "the conversion raises as soon as a caller backpropagates through the "
                       "unreduced output")
        related = [Related("read as one number here", ctx.display_path, ctx.span(n)[0])
                   for n in uses.scalar[:3] if n is not anchor]
        related.append(Related("the output, reduced on this path only", ctx.display_path, ctx.span(reduced)[0]))
        return self.finding(
            ctx, anchor,
            f"`{name}.backward` reads `{param}`, the gradient of output {index}, as one number ({kind}: "
            f"`{shown}`), but `forward` returns that output unreduced on some path (reduced as "
            f"`{ast.unparse(reduced)}` on another only): there autograd passes one upstream gradient per "
            f"element, so {consequence}",
            help=f"On the unreduced path, broadcast `{param}` over each row (`grad * {param}.unsqueeze(-1)`) or "
                 f"hand the kernel its stride; a gradient summed over rows in `forward` must then be "
                 f"computed with the upstream gradient folded in before the sum.",
            related=related,
        )
