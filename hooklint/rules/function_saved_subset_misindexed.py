"""HKL508: a custom `autograd.Function` saves a filtered subset of its inputs and indexes it with full positions."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS
from hooklint.static.backward_flow import compacted_save, function_backwards, misaligned_subscripts
from hooklint.static.context import FileContext
from hooklint.static.semantic import positional_params


class FunctionSavedSubsetMisindexed(Rule):
    """
    ## What it does
    Reports, in the `backward` of a custom `torch.autograd.Function`, a
    subscript `seq[i]` where `seq` holds the tensors `forward` saved after
    filtering them (`ctx.save_for_backward(*kept, ...)` with `kept` built by
    a comprehension with an `if`, such as only the inputs that require
    grad), or the gradients `torch.autograd.grad` returns for them, and `i`
    runs over the positions of the *unfiltered* sequence: `range(len(ctx.mask))`
    or `enumerate(ctx.mask)` for the mask the filter read, or
    `ctx.needs_input_grad`.

    ## Why is this bad?
    `ctx.saved_tensors` has one entry per tensor saved, so after the filter
    the k-th saved tensor is the k-th *kept* input, not the k-th input.  As
    soon as an input before the last is dropped (a constant, a tensor that
    does not require grad), `seq[i]` is another input's tensor (or raises
    `IndexError`), and the gradient or relevance of input `i` is computed
    from the wrong one, with no error when the shapes agree.  LXT's
    `epsilon_lrp_fn` indexed its compacted inputs and gradients with the
    full positions until 0.5.9.

    ## Example
    ```python
    import torch

    class InputTimesGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, fn, *inputs):
            mask = [t.requires_grad for t in inputs]
            inputs = tuple(t.detach().requires_grad_() if t.requires_grad else t for t in inputs)
            with torch.enable_grad():
                out = fn(*inputs)
            ctx.mask = mask
            kept = [inputs[i] for i in range(len(inputs)) if mask[i]]
            ctx.save_for_backward(*kept, out)
            return out.detach()

        @staticmethod
        def backward(ctx, grad_out):
            *kept, out = ctx.saved_tensors
            grads = torch.autograd.grad(out, kept, grad_out)
            return (None,) + tuple(grads[i] * kept[i] if ctx.mask[i] else None for i in range(len(ctx.mask)))
    ```

    ## Use instead
    ```python
    import torch

    class InputTimesGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, fn, *inputs):
            mask = [t.requires_grad for t in inputs]
            inputs = tuple(t.detach().requires_grad_() if t.requires_grad else t for t in inputs)
            with torch.enable_grad():
                out = fn(*inputs)
            ctx.mask = mask
            kept = [inputs[i] for i in range(len(inputs)) if mask[i]]
            ctx.save_for_backward(*kept, out)
            return out.detach()

        @staticmethod
        def backward(ctx, grad_out):
            *kept, out = ctx.saved_tensors
            grads = iter(zip(torch.autograd.grad(out, kept, grad_out), kept))
            relevances = []
            for needed in ctx.mask:
                g, t = next(grads) if needed else (None, None)
                relevances.append(g * t if needed else None)
            return (None, *relevances)
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - [`FunctionCtx.save_for_backward`](https://pytorch.org/docs/stable/generated/torch.autograd.function.FunctionCtx.save_for_backward.html)
    """

    code = "HKL508"
    name = "function-saved-subset-misindexed"
    summary = ("A custom autograd Function saves a filtered subset of its inputs and indexes it with the "
               "positions of the full inputs")
    severity = Severity.WARNING
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # the filtered tensors walked in order
        "import torch\n"
        "class Keep(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, *inputs):\n"
        "        flags = [t.requires_grad for t in inputs]\n"
        "        ctx.flags = flags\n"
        "        kept = [inputs[i] for i in range(len(inputs)) if flags[i]]\n"
        "        ctx.save_for_backward(*kept)\n"
        "        return sum(inputs)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        kept = iter(ctx.saved_tensors)\n"
        "        return tuple(g * next(kept) if f else None for f in ctx.flags)\n",
        # everything saved: positions agree
        "import torch\n"
        "class All(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, *inputs):\n"
        "        ctx.flags = [t.requires_grad for t in inputs]\n"
        "        ctx.save_for_backward(*inputs)\n"
        "        return sum(inputs)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        saved = ctx.saved_tensors\n"
        "        return tuple(g * saved[i] if ctx.flags[i] else None for i in range(len(ctx.flags)))\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "from torch.autograd import Function\n"
            "class EpsilonRule(Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, fn, eps, *inputs):\n"
            "        requires = [True if t.requires_grad else False for t in inputs]\n"
            "        inputs = tuple(t.detach().requires_grad_() if t.requires_grad else t for t in inputs)\n"
            "        with torch.enable_grad():\n"
            "            out = fn(*inputs)\n"
            "        ctx.eps, ctx.requires = eps, requires\n"
            "        inputs = tuple(inputs[i] for i in range(len(inputs)) if requires[i])\n"
            "        ctx.save_for_backward(*inputs, out)\n"
            "        return out.detach()\n"
            "    @staticmethod\n"
            "    def backward(ctx, *rel):\n"
            "        inputs, out = ctx.saved_tensors[:-1], ctx.saved_tensors[-1]\n"
            "        grads = torch.autograd.grad(out, inputs, rel[0] / (out + ctx.eps))\n"
            "        return (None, None) + tuple(grads[i] * inputs[i] if ctx.requires[i] else None  # HKL508\n"
            "                                    for i in range(len(ctx.requires)))\n"
        ),
        # filtered by the element, indexed by needs_input_grad
        Invalid(
            "import torch\n"
            "class Scale(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, a, b, c):\n"
            "        tensors = [t for t in (a, b, c) if t.requires_grad]\n"
            "        ctx.save_for_backward(*tensors)\n"
            "        return a * b * c\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        saved = ctx.saved_tensors\n"
            "        out = []\n"
            "        for k, needed in enumerate(ctx.needs_input_grad):\n"
            "            out.append(g * saved[k] if needed else None)  # HKL508\n"
            "        return tuple(out)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        model = ctx.model
        for fn in function_backwards(model):
            save = compacted_save(fn.info, model)
            if save is None:
                continue
            params = positional_params(fn.backward)
            if not params:
                continue
            seen_lines: set[int] = set()
            for sub, seq in misaligned_subscripts(fn.backward, params[0], save.masks, model):
                line = ctx.span(sub)[0].row
                if line in seen_lines:
                    continue
                seen_lines.add(line)
                index = sub.slice.id  # type: ignore[attr-defined]
                kept = f"`{save.kept}`" if save.kept.isidentifier() else save.kept
                yield self.finding(
                    ctx, sub,
                    f"`{fn.name}.forward` saves {kept} after filtering (line {save.call.lineno}), so "
                    f"`ctx.saved_tensors` holds only the kept tensors; `{seq}[{index}]` indexes them with `{index}`, "
                    f"a position in the unfiltered inputs: once an earlier input is dropped (a constant, a tensor "
                    f"that needs no grad), input `{index}` is paired with another input's tensor or gradient (or "
                    f"the index runs past the end)",
                    help="Walk the kept tensors with an iterator (`next(kept)` at each position whose flag is "
                         "set), or save all inputs, or keep a map from full positions to kept positions.",
                    related=[Related("saved here", ctx.display_path, ctx.span(save.call)[0])],
                )
