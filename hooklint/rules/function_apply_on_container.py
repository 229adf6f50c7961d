"""HKL511: a custom `autograd.Function` gets tensors inside a container and returns them: its backward never runs."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.apply_arguments import backward_calls_out, container_pass_through
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN, FUNCTION_TRIGGERS, autograd_functions
from hooklint.static.context import FileContext


class FunctionApplyOnContainer(Rule):
    """
    ## What it does
    Reports a call `Fn.apply(..., arg, ...)` of a custom
    `torch.autograd.Function` whose `forward` returns the parameter that
    receives `arg` as it got it (`return args`), when `arg` is a tuple,
    list or dict: a display, a local name bound only to one, or a parameter
    of the calling function annotated as one.  A parameter annotated `Any`
    or `object` may hold one: reported too, and the message says so.

    ## Why is this bad?
    `apply` makes an autograd node whose inputs are the tensors passed as
    *direct* arguments.  A tensor inside a container is not an input, so
    the Function's `backward` never runs for it.  Returned in a tuple,
    autograd takes it for a tensor made inside `forward` without grad and
    cuts the caller's tensor itself from the graph (`requires_grad=False`,
    no `grad_fn`: no gradient reaches what computed it); returned in a
    list or dict, the gradient flows around the Function.  Pass-through
    Functions exist for that `backward` (firing parameter hooks before
    their gradients are computed, as ColossalAI's `PostFwdPreBwd` does for
    Gemini's gather): with a container argument the hooks silently do not
    fire.

    ## Known problems
    An `Any` argument is reported although the callers may only ever pass
    a tensor; the message says it is a possibility.  Containers built in
    another function and passed through several calls are not seen.

    ## Example
    ```python
    import torch

    class PreBackwardHook(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hook, outputs):
            ctx.hook = hook
            return outputs

        @staticmethod
        def backward(ctx, *grads):
            ctx.hook()
            return (None,) + grads

    def wrap_outputs(hook, a, b):
        return PreBackwardHook.apply(hook, (a, b))
    ```

    ## Use instead
    ```python
    import torch

    class PreBackwardHook(torch.autograd.Function):
        @staticmethod
        def forward(ctx, hook, *outputs):
            ctx.hook = hook
            return outputs

        @staticmethod
        def backward(ctx, *grads):
            ctx.hook()
            return (None,) + grads

    def wrap_outputs(hook, a, b):
        return PreBackwardHook.apply(hook, a, b)  # each tensor a direct argument
    ```

    ## Fix safety
    There is no automatic fix: flatten the container into direct arguments
    (`torch.utils._pytree.tree_flatten`) and rebuild it from the outputs.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - ColossalAI pull request 5355 (`PostFwdPreBwd.apply(params, arg)` with a tuple output)
    """

    code = "HKL511"
    name = "function-apply-on-container"
    summary = ("A custom autograd Function gets tensors inside a container and returns them: its backward never "
               "runs for them")
    severity = Severity.WARNING
    triggers = FUNCTION_TRIGGERS
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # the tensors as direct arguments
        "import torch\n"
        "class Hooked(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, hook, *outs):\n"
        "        ctx.hook = hook\n"
        "        return outs\n"
        "    @staticmethod\n"
        "    def backward(ctx, *grads):\n"
        "        ctx.hook()\n"
        "        return (None,) + grads\n"
        "def wrap(hook, a, b):\n"
        "    return Hooked.apply(hook, a, b)\n",
        # a container that forward only keeps on ctx (parameters to act on), not returned
        "import torch\n"
        "from typing import List\n"
        "class Gather(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, params, x):\n"
        "        ctx.params = params\n"
        "        return x.view_as(x)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return None, g\n"
        "def run(params: List[torch.Tensor], x: torch.Tensor):\n"
        "    return Gather.apply(params, x)\n",
        # a tensor-annotated argument returned as-is
        "import torch\n"
        "class Mark(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return g\n"
        "def mark(x: torch.Tensor):\n"
        "    return Mark.apply(x)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class PreBackwardHook(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, hook, outputs):\n"
            "        ctx.hook = hook\n"
            "        return outputs\n"
            "    @staticmethod\n"
            "    def backward(ctx, *grads):\n"
            "        ctx.hook()\n"
            "        return (None,) + grads\n"
            "def wrap_outputs(hook, a, b):\n"
            "    return PreBackwardHook.apply(hook, (a, b))  # HKL511\n"
        ),
        # an op's output of any type handed on whole (ColossalAI's post_op shape)
        Invalid(
            "from typing import Any, List\n"
            "import torch\n"
            "class Trigger(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, params, args):\n"
            "        ctx.params = params\n"
            "        return args\n"
            "    @staticmethod\n"
            "    def backward(ctx, *grads):\n"
            "        fire_pre_backward(ctx.params)\n"
            "        return (None,) + grads\n"
            "class Manager:\n"
            "    @staticmethod\n"
            "    def post_op(params: List[torch.Tensor], arg: Any) -> Any:\n"
            "        return Trigger.apply(params, arg)  # HKL511\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for fn in autograd_functions(ctx):
            for call in fn.apply_calls:
                for found in container_pass_through(call, fn.forward, fn.inputs):
                    effects = backward_calls_out(fn.backward)
                    effects = f" (which calls `{effects[0]}`)" if effects else ""
                    may = "" if found.certain else "may be "
                    yield self.finding(
                        ctx, found.arg,
                        f"`{ast.unparse(found.arg)[:60]}` ({found.why}) {may}a container of tensors handed to "
                        f"`{fn.name}.apply` as `{found.param}`, which `forward` returns as it got it: autograd "
                        f"takes only tensors passed as direct arguments as inputs, so `{fn.name}.backward`"
                        f"{effects} never runs for the tensors inside; returned in a tuple they are even cut from "
                        f"the graph (`requires_grad=False`)",
                        help="Pass the tensors as separate arguments (flatten with "
                             "`torch.utils._pytree.tree_flatten`, `forward(ctx, ..., *args)`) and rebuild the "
                             "structure from the outputs.",
                    )
