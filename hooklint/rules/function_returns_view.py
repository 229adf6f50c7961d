"""HKL504: a custom `autograd.Function` whose forward returns a view (hook-semantics.md, section 7)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS, autograd_functions
from hooklint.static.context import FileContext
from hooklint.static.function_bodies import returned_views, tensor_outputs

# torch 2.13's texts (tests/behaviour/test_function_bodies.py runs both): a Function with one tensor output
# names the custom Function; one with several tensor outputs says the node returns several views.
_VIEW_INPLACE_HEAD = "Output {index} of {name} is a view and is being modified inplace."
_ONE_OUTPUT_REASON = " This view was created inside a custom Function ..."
_MANY_OUTPUTS_REASON = " This view is the output of a function that returns multiple views ..."


def view_inplace_error(name: str, index: int | None, tensor_outputs: int | None) -> str:
    """The error torch raises when a caller modifies output ``index`` in place; ``tensor_outputs`` is how
    many outputs of the returned tuple are tensors (None: not known from the code)."""
    head = _VIEW_INPLACE_HEAD.format(index=index or 0, name=name)
    if index is None or tensor_outputs == 1:
        return head + _ONE_OUTPUT_REASON
    if tensor_outputs is not None and tensor_outputs > 1:
        return head + _MANY_OUTPUTS_REASON
    return head + " ..."


class FunctionReturnsView(Rule):
    """
    ## What it does
    Reports a custom `torch.autograd.Function` whose `forward` returns a
    view of a tensor it made: `out.view(shape)`, `.t()`, `.transpose(...)`,
    `.expand(...)`, `.view_as(x)`, a basic slice `out[:n]`, also through a
    local name or a callable that may be the identity (`clone = torch.clone
    if c else lambda x: x`).

    ## Why is this bad?
    Autograd cannot rebase a custom Function's backward onto a view made
    inside it, so it forbids modifying such an output in place.  The
    Function works until a caller does exactly that, an `out += bias`, a
    `torch.relu_(out)`, an `nn.ReLU(inplace=True)` or a library that
    flattens activations in place, and then the forward fails:

    ```text
    RuntimeError: Output 0 of MatMul8bitLt is a view and is being
    modified inplace. This view was created inside a custom Function (or
    because an input was returned as-is) and the autograd logic to handle
    view+inplace would override the custom backward associated with the
    custom Function, leading to incorrect gradients. This behavior is forbidden.
    ```

    A Function with several tensor outputs fails the same way, with
    another reason: "Output 1 of Name is a view and is being modified
    inplace. This view is the output of a function that returns multiple
    views. Such functions do not allow the output views to be modified
    inplace."

    The Function's own tests rarely modify its output in place, so the
    error reaches users first (bitsandbytes' 8-bit matmul returned a view
    for 2-D inputs; PEFT users running flash-attention's varlen path hit it).

    ## Known problems
    Only ops that always return a view count: `reshape`, `flatten` and
    `contiguous` return a view or a copy depending on the strides, which
    the file does not show, so they are not reported.  An input returned
    as-is is a view for autograd too, but identity Functions (Megatron's
    copy-to-region, dropout at evaluation) are common and intended: not
    reported, and neither is a view of an input itself (`return
    x.view_as(x)`, the usual gradient-reversal layer), for the same reason,
    although an in-place op right after it fails the same way.  The
    severity is *warning*: nothing fails until a caller
    modifies the output in place.

    ## Example
    ```python
    import torch

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            flat = x.reshape(-1) * 2  # the kernel works on 1-D data
            return flat.view(x.shape)

        @staticmethod
        def backward(ctx, grad):
            return grad * 2
    ```

    ## Use instead
    ```python
    import torch

    class FlatDouble(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.shape = x.shape
            return x.reshape(-1) * 2

        @staticmethod
        def backward(ctx, grad):
            return (grad * 2).view(ctx.shape)

    def double(x):
        # the view is made outside the Function: autograd tracks it like any other
        return FlatDouble.apply(x).view(x.shape)
    ```

    ## Fix safety
    There is no automatic fix: either return the tensor itself and make the
    view outside the Function, or return `.clone()` of the view (a copy).

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - bitsandbytes issue 736 (`MatMul8bitLt` returned `output.view(...)` for 2-D inputs; fixed in 0.45.0)
    """

    code = "HKL504"
    name = "function-returns-view"
    summary = "A custom autograd.Function returns a view: callers cannot modify its output in place"
    severity = Severity.WARNING
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # slices of an integer tensor the Function made (routing indices): they never require grad, so
        # autograd puts no in-place restriction on them
        "import torch\n"
        "class Sort(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, scores, n):\n"
        "        idx = torch.empty(2 * n, dtype=torch.int32, device=scores.device)\n"
        "        order = scores.argsort().long()\n"
        "        return scores * 2, idx[:n], idx[n:], order.view(-1)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g, *_):\n"
        "        return g * 2, None\n",
        # the tensor itself
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        out = x * 2\n"
        "        return out\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * 2\n",
        # a view, cloned
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return (x * 2).view(-1).clone()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g.view(-1) * 2\n",
        # reshape may copy: not reported
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return (x * 2).reshape(-1)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * 2\n",
        # the gradient-reversal idiom: a view of the input itself
        "import torch\n"
        "class GradReverse(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x.view_as(x)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return -g\n",
        # an identity Function returning its input
        "import torch\n"
        "class Copy(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g\n",
        # an element of a tuple, not a slice
        "import torch\n"
        "class F(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        outs = [x * 2, x * 3]\n"
        "        return outs[0]\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g * 2\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Transposed(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x):\n"
            "        return (x * 2).t()  # HKL504\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        return g.t() * 2\n"
        ),
        Invalid(
            "import torch\n"
            "class F(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, three_d):\n"
            "        out = x.reshape(-1, x.shape[-1]) * 2\n"
            "        clone = torch.clone if three_d else lambda t: t\n"
            "        return clone(out.view(x.shape))  # HKL504\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        return g * 2, None\n"
        ),
        Invalid(
            "import torch\n"
            "class Pad(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, n):\n"
            "        padded = torch.cat([x, x.new_zeros(1)])\n"
            "        out = padded[:n]\n"
            "        return out, n  # HKL504\n"
            "    @staticmethod\n"
            "    def backward(ctx, g, _):\n"
            "        return g, None\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for fn in autograd_functions(ctx):
            for view in returned_views(fn.forward, fn.inputs):
                where = f"output {view.index}" if view.index is not None else "its output"
                when = f" {view.conditional}" if view.conditional else ""
                error = view_inplace_error(fn.name, view.index, tensor_outputs(view, fn.forward, fn.inputs))
                yield self.finding(
                    ctx, view.node,
                    message=(f"`{fn.name}.forward` returns {view.what} as {where}{when}: autograd forbids modifying "
                             f"a view made inside a custom Function in place, so a caller's `out += ...`, "
                             f"`relu_` or `nn.ReLU(inplace=True)` on it raises \"RuntimeError: {error}\""),
                    help="Return the tensor itself and make the view outside the Function "
                         f"(`{fn.name}.apply(...).view(...)`), or return a `.clone()` of the view.",
                )
