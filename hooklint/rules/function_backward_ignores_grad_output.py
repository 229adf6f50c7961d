"""HKL506: a custom `autograd.Function` returns an input gradient that never uses the incoming gradient."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS
from hooklint.static.backward_flow import GradFlow, function_backwards, reads_outside_state, returned_slots, zero_valued
from hooklint.static.context import FileContext


class FunctionBackwardIgnoresGradOutput(Rule):
    """
    ## What it does
    Reports a gradient that the `backward` of a custom
    `torch.autograd.Function` returns for an input when its value does not
    depend on the gradients `backward` receives (`grad_output`, `*grads`):
    it is built only from saved tensors, attributes of `ctx`, constants and
    the *metadata* of `grad_output` (its shape, dtype or device).  `None`
    and zero gradients are fine.

    The dependence is followed through assignments, loops, in-place writes
    (`buf.copy_(grad)`), buffers handed to a kernel together with the
    gradient, and `.grad` fields after a call such as
    `torch.autograd.backward(out, grad)`; on any path is enough.

    ## Why is this bad?
    `backward` computes a vector-Jacobian product: the gradient of each
    input is the incoming gradient times the local derivative, so it scales
    with `grad_output`.  A gradient that ignores it is right only when
    `grad_output` is exactly one.  It is wrong as soon as the output is
    scaled before the loss: `GradScaler`'s loss scaling (the ignored part is
    then un-scaled by `1 / scale` and vanishes), a weighted sum of losses,
    the division by the number of micro-batches under gradient accumulation,
    `autograd.grad(..., grad_outputs=...)`, or any op applied after the
    Function.  Nothing raises: the gradient is silently off by that factor.
    fla's `L2Wrap` (a max-logit penalty injected in `backward`) returned
    the penalty's logits gradient without `grad_output` until fla 0.5.2.

    Only a `backward` that passes the upstream gradient on to some input is
    checked: one that never uses it for any input (a phony output whose
    gradient arrives through a side channel, `backward(ctx, *unused)`) is
    left alone, and so is a gradient scaled by state kept outside `ctx` (a
    global or class attribute the training loop sets, as Megatron does for
    its auxiliary-loss scaler).

    ## Known problems
    A `backward` that ignores the upstream gradient for every input (a
    fused loss returning the gradient it computed in `forward`) is not
    reported, for the reason above: in torch's own sources that shape is
    `make_graphed_callables`, whose `backward` copies the gradients into
    the captured graph's buffers and replays it.  A fused loss that scales
    its precomputed gradient by the upstream gradient read as one number,
    while its output can be per row, is HKL509's question.  A gradient injected on purpose (an auxiliary loss added in `backward`)
    is reported too: it still ignores loss scaling and loss weights.  A
    gradient computed by a helper that reads the upstream gradient from
    somewhere `backward` does not pass it (a global, a field set outside
    `backward`) is reported although it uses it.

    ## Example
    ```python
    import torch

    class MaxLogitPenalty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, loss, logits):
            top, idx = logits.max(dim=-1, keepdim=True)
            ctx.save_for_backward(top * 1e-4, idx)
            ctx.shape = logits.shape
            return loss

        @staticmethod
        def backward(ctx, grad_output):
            top, idx = ctx.saved_tensors
            grad_logits = torch.zeros(ctx.shape, dtype=grad_output.dtype, device=grad_output.device)
            grad_logits.scatter_(-1, idx, top)
            return grad_output, grad_logits
    ```

    ## Use instead
    ```python
    import torch

    class MaxLogitPenalty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, loss, logits):
            top, idx = logits.max(dim=-1, keepdim=True)
            ctx.save_for_backward(top * 1e-4, idx)
            ctx.shape = logits.shape
            return loss

        @staticmethod
        def backward(ctx, grad_output):
            top, idx = ctx.saved_tensors
            grad_logits = torch.zeros(ctx.shape, dtype=grad_output.dtype, device=grad_output.device)
            grad_logits.scatter_(-1, idx, top * grad_output)
            return grad_output, grad_logits
    ```

    ## Fix safety
    There is no automatic fix: where the incoming gradient enters the
    formula (and its broadcasting) is the author's to decide.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - [Automatic mixed precision: gradient scaling](https://pytorch.org/docs/stable/amp.html#gradient-scaling)
    """

    code = "HKL506"
    name = "function-backward-ignores-grad-output"
    summary = "A custom autograd Function's backward returns an input gradient that never uses the incoming gradient"
    severity = Severity.WARNING
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # the chain rule through a helper kernel that writes into a buffer
        "import torch\n"
        "def _bwd_kernel(x, dy, dx):\n"
        "    dx.copy_(dy * torch.sigmoid(x))\n"
        "class Swish(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x * torch.sigmoid(x)\n"
        "    @staticmethod\n"
        "    def backward(ctx, dy):\n"
        "        x, = ctx.saved_tensors\n"
        "        dx = torch.empty_like(x)\n"
        "        _bwd_kernel(x, dy, dx)\n"
        "        return dx\n",
        # zero and None gradients; a gradient scaled only on some paths (precomputed in forward)
        "import torch\n"
        "class FusedLoss(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, logits, target, weight):\n"
        "        grad = torch.softmax(logits, -1)\n"
        "        ctx.save_for_backward(grad)\n"
        "        return grad.sum()\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_output):\n"
        "        grad, = ctx.saved_tensors\n"
        "        if grad_output.ne(1.0).any():\n"
        "            grad = grad * grad_output\n"
        "        return grad, None, torch.zeros_like(grad)\n",
        # checkpoint-style: gradients read from .grad after autograd.backward received grad_output
        "import torch\n"
        "class Recompute(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, fn, *args):\n"
        "        ctx.fn = fn\n"
        "        ctx.save_for_backward(*args)\n"
        "        with torch.no_grad():\n"
        "            return fn(*args)\n"
        "    @staticmethod\n"
        "    def backward(ctx, *grads):\n"
        "        inputs = [t.detach().requires_grad_() for t in ctx.saved_tensors]\n"
        "        with torch.enable_grad():\n"
        "            out = ctx.fn(*inputs)\n"
        "        torch.autograd.backward(out, grads)\n"
        "        return (None,) + tuple(t.grad for t in inputs)\n",
        # gradient stored through ctx by a helper method, then returned
        "import torch\n"
        "class Stash(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x.clone()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        ctx.buffers = [g * 2]\n"
        "        return ctx.buffers[0]\n",
        # a gradient computed in forward, and a backward that never uses the upstream gradient for any
        # input: left alone (a phony output whose gradient comes through a side channel looks the same)
        "import torch\n"
        "class FusedCE(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, logits, target):\n"
        "        probs = torch.softmax(logits, -1)\n"
        "        ctx.save_for_backward(probs / logits.shape[0])\n"
        "        return probs.sum()\n"
        "    @staticmethod\n"
        "    def backward(ctx, unused):\n"
        "        (grad_logits,) = ctx.saved_tensors\n"
        "        return grad_logits, None\n",
        # an injected gradient scaled by state the training loop keeps outside ctx
        "import torch\n"
        "class AuxLossScaler(torch.autograd.Function):\n"
        "    loss_scale = torch.tensor(1.0)\n"
        "    @staticmethod\n"
        "    def forward(ctx, output, aux_loss):\n"
        "        ctx.save_for_backward(aux_loss)\n"
        "        return output\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad_output):\n"
        "        (aux_loss,) = ctx.saved_tensors\n"
        "        scaled = torch.ones_like(aux_loss) * AuxLossScaler.loss_scale\n"
        "        return grad_output, scaled\n",
        # metadata of grad_output only in a zero buffer never written
        "import torch\n"
        "class Detach(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, y):\n"
        "        return x + y.detach()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        dy = g.new_zeros(g.shape)\n"
        "        return g, dy\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class MaxLogitPenalty(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, loss, logits, factor=1e-4):\n"
            "        top, idx = torch.max(logits, dim=-1, keepdim=True)\n"
            "        ctx.shape = logits.shape\n"
            "        ctx.save_for_backward(top * factor, idx)\n"
            "        return loss\n"
            "    @staticmethod\n"
            "    def backward(ctx, grad_output):\n"
            "        top, idx = ctx.saved_tensors\n"
            "        glogits = torch.zeros(ctx.shape, device=grad_output.device, dtype=grad_output.dtype)\n"
            "        glogits.scatter_(-1, idx, top)\n"
            "        return grad_output, glogits, None  # HKL506\n"
        ),
        # an auxiliary loss injected with a constant gradient (grad_output read for its device only)
        Invalid(
            "import torch\n"
            "from torch.autograd import Function as F\n"
            "class AddAux(F):\n"
            "    @staticmethod\n"
            "    def forward(ctx, hidden, aux_loss):\n"
            "        ctx.dtype = aux_loss.dtype\n"
            "        return hidden\n"
            "    @staticmethod\n"
            "    def backward(ctx, *grads):\n"
            "        d_aux = torch.ones(1, dtype=ctx.dtype, device=grads[0].device)\n"
            "        return grads[0], d_aux  # HKL506\n"
        ),
        # the upstream gradient reaches one input through a star parameter, not the other
        Invalid(
            "import torch\n"
            "class ScaleWithDecay(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, w):\n"
            "        ctx.save_for_backward(x, w)\n"
            "        return x * w\n"
            "    @staticmethod\n"
            "    def backward(ctx, *grad_outputs):\n"
            "        x, w = ctx.saved_tensors\n"
            "        decay = 1e-3 * w\n"
            "        grad_w = x.sum(0)\n"
            "        grad_w += decay\n"
            "        return grad_outputs[0] * w, grad_w  # HKL506\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        model = ctx.model
        for fn in function_backwards(model):
            grad_params = fn.grad_params
            if not grad_params:
                continue
            flow = GradFlow(fn.backward, grad_params, model.qualify)
            returns = [r for r in ctx.core.cfg(fn.backward).reachable_returns() if r.value is not None]
            # Only a backward that passes the upstream gradient on to some input shows that its output's
            # gradient matters: one that never does (a phony output, a gradient handed over through a
            # side channel, `def backward(ctx, *unused)`) is left alone.
            if not any(flow.depends(r.value) for r in returns):
                continue
            for ret in returns:
                slots = returned_slots(ret.value, model)
                if not slots and fn.inputs is not None and len(fn.inputs) == 1:
                    slots = [(0, ret.value)]  # one input: the value is its gradient
                ignored = [(i, e) for i, e in slots if self._ignores(e, model, flow)]
                if not ignored:
                    continue
                index, expr = ignored[0]
                what = f"`{ast.unparse(expr)}`"
                slot = f"the gradient of {fn.input_word(index)}" if index is not None else "a gradient"
                upstream = ", ".join(f"`{p}`" for p in grad_params)
                more = f" (and {len(ignored) - 1} more)" if len(ignored) > 1 else ""
                yield self.finding(
                    ctx, ret,
                    f"`{fn.name}.backward` returns {what} as {slot}{more}, but its value never depends on the "
                    f"incoming gradient {upstream}: a gradient must be the upstream gradient times the local "
                    f"derivative, so this one is right only when the upstream gradient is exactly 1 and silently "
                    f"off when the output is scaled before the loss (GradScaler, loss weights, gradient "
                    f"accumulation, `autograd.grad(grad_outputs=...)`), even if the constant gradient is meant "
                    f"as an injected penalty",
                    help="Multiply the gradient by the incoming gradient (broadcast to its shape), e.g. "
                         "`grad * grad_output`.",
                )

    @staticmethod
    def _ignores(expr: ast.AST, model, flow: GradFlow) -> bool:
        if isinstance(expr, ast.Constant) and expr.value is None:
            return False
        if isinstance(expr, (ast.Tuple, ast.List, ast.Starred, ast.GeneratorExp, ast.ListComp)):
            return False  # a structure: another rule's question, and its parts are not one gradient
        if isinstance(expr, ast.IfExp):
            return False  # a gradient chosen at run time: too little to go on
        if flow.depends(expr) or zero_valued(expr, model, flow):
            return False
        return not reads_outside_state(expr, model, flow.backward)
