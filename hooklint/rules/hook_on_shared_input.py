"""HKL404: a forward that hooks its own input and returns it."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import return_statements, returns_nothing
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind
from hooklint.static.semantic import positional_params


class HookOnSharedInput(Rule):
    """
    ## What it does
    Reports a module's `forward` that registers a gradient-changing tensor
    hook on one of its own inputs and returns that input unchanged, e.g. a
    gradient-reversal layer written as `x.register_hook(lambda g: -g);
    return x`.

    ## Why is this bad?
    The hook is registered on the caller's tensor, not on this module's
    output: it rewrites the *total* gradient of that tensor, which includes
    every other consumer of it.  In a domain-adversarial network whose
    features feed both the classifier and the reversal layer, the
    classifier's gradient is flipped too: the feature extractor is trained to
    make the classifier worse.

    ## Known problems
    A forward that hooks its input and then computes on it
    (`x.register_hook(flip); return self.layers(x)`) also rewrites the whole
    gradient of the caller's tensor, but is harmless when the caller passes a
    tensor nothing else uses; it is not reported.

    ## Example
    ```python
    import torch.nn as nn

    class GradReverse(nn.Module):
        def forward(self, x):
            x.register_hook(lambda g: -g)
            return x
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class GradReverse(nn.Module):
        def forward(self, x):
            y = x.view_as(x)  # a new autograd node: only this path's gradient
            y.register_hook(lambda g: -g)
            return y
    ```

    ## Fix safety
    There is no automatic fix; hook a new tensor (`y = x.view_as(x)` or
    `x.clone()`) and return it, or write a custom `torch.autograd.Function`.

    ## References
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - [Extending torch.autograd](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    """

    code = "HKL404"
    name = "hook-on-shared-input"
    summary = "A module's forward hooks its own input tensor and returns it, changing every consumer's gradient"
    severity = Severity.ERROR
    triggers = ("register_hook",)
    VALID: ClassVar[tuple[str, ...]] = (
        # hooking a new tensor
        "import torch.nn as nn\n"
        "class GradReverse(nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x.view_as(x)\n"
        "        y.register_hook(lambda g: -g)\n"
        "        return y\n",
        # a hook that only records the gradient changes nothing
        "import torch.nn as nn\n"
        "class Probe(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.grads = []\n"
        "    def forward(self, x):\n"
        "        x.register_hook(self.grads.append)\n"
        "        return x\n",
        # the input is rebound before it is hooked
        "import torch.nn as nn\n"
        "class Flip(nn.Module):\n"
        "    def forward(self, x):\n"
        "        x = x.clone()\n"
        "        x.register_hook(lambda g: -g)\n"
        "        return x\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class GradReverse(nn.Module):\n"
            "    def __init__(self, alpha=1.0):\n"
            "        super().__init__()\n"
            "        self.alpha = alpha\n"
            "    def forward(self, x):\n"
            "        x.register_hook(lambda g: -self.alpha * g)  # HKL404\n"
            "        return x\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for reg in ctx.hooks.by_kind(HookKind.TENSOR):
            receiver = reg.receiver
            if not isinstance(receiver, ast.Name) or reg.hook is None or returns_nothing(reg.hook.node):
                continue
            forward = self._forward_owning(ctx, receiver)
            if forward is None or not self._returns_input(ctx, forward, receiver.id):
                continue
            cls = ctx.model.enclosing_class(forward)
            yield self.finding(
                ctx, reg.name_node, name_only=True,
                message=f"`{cls.name if cls else ''}.forward` registers a tensor hook on its input `{receiver.id}` "
                f"and returns `{receiver.id}` itself: the hook changes the whole gradient of the caller's tensor, "
                f"including the gradient from every other consumer of it, not only this module's path",
                help=f"Hook a new tensor: `y = {receiver.id}.view_as({receiver.id})`, register the hook on `y` "
                "and return `y` (or write a custom torch.autograd.Function).",
            )

    @staticmethod
    def _forward_owning(ctx: FileContext, receiver: ast.Name) -> ast.FunctionDef | None:
        bindings = ctx.model.bindings_at(receiver)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        func = bindings[0].scope.node
        if not isinstance(func, ast.FunctionDef) or func.name != "forward":
            return None
        if ctx.model.enclosing_class(func) is None:
            return None
        params = positional_params(func)
        if receiver.id not in params[1:]:  # not `self`
            return None
        return func

    @staticmethod
    def _returns_input(ctx: FileContext, forward: ast.FunctionDef, name: str) -> bool:
        for ret in return_statements(forward):
            values = ret.value.elts if isinstance(ret.value, ast.Tuple) else [ret.value]
            for value in values:
                if isinstance(value, ast.Name) and value.id == name:
                    bindings = ctx.model.bindings_at(value)
                    if len(bindings) == 1 and bindings[0].kind == "param":
                        return True
        return False
