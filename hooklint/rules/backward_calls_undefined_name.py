"""HKL517: code that runs only at backward time uses a name its file never binds (hook-semantics.md, section 7)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import registered_backwards
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind
from hooklint.static.semantic import FunctionNode
from hooklint.static.undefined_names import file_bound_names, may_read_unbound, unbound_uses

# The methods autograd calls on a Function only when gradients are computed.
_GRADIENT_METHODS = ("backward", "jvp", "vjp")
_BACKWARD_KINDS = (HookKind.TENSOR, HookKind.POST_ACCUMULATE, HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE,
                   HookKind.BACKWARD_LEGACY)
# Helpers of the file a backward calls run at backward time too; a few levels are enough for real code.
_HELPER_DEPTH = 3


class BackwardCallsUndefinedName(Rule):
    """
    ## What it does
    Reports a name used by code that runs only when gradients are computed
    (a custom `torch.autograd.Function`'s `backward`, `jvp` or `vjp`, a
    backward registered with `torch.library.register_autograd`, a tensor,
    post-accumulate-grad or module backward hook, and the helpers of the
    file they call) that nothing in the file binds: no `def`, `class`,
    import, assignment or parameter of that name in any scope, and no
    builtin.  Files that can gain names the text does not show (`from m
    import *`, `globals()`, `exec`, writes to `builtins` or `sys.modules`)
    are not checked, and a use inside a `try` that catches `NameError` is
    the author's own probe.

    ## Why is this bad?
    Autograd calls `backward` (and a hook registered for the backward
    pass) only when a gradient flows through it.  Importing the module,
    running the model under `torch.no_grad()`, evaluating it and a
    forward-only smoke test never execute that code, so a helper removed or
    renamed in a refactor goes unnoticed until the first training step
    fails with `NameError` inside the autograd engine.

    ## Known problems
    A name another module injects into this one at run time (an explicit
    `module.helper = ...` from outside) is reported.  Uses in branches that
    cannot run are not reported; uses in branches that merely never run in
    practice are.

    ## Example
    ```python
    import torch

    class QuantLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, mask):
            ctx.save_for_backward(weight, mask)
            return x @ weight.t()

        @staticmethod
        def backward(ctx, grad_output):
            weight, mask = ctx.saved_tensors
            mask = unpack_mask(mask)
            return grad_output @ weight * mask, None, None
    ```

    ## Use instead
    ```python
    import torch

    def unpack_mask(mask):
        return mask.to(torch.bool)

    class QuantLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, mask):
            ctx.save_for_backward(weight, mask)
            return x @ weight.t()

        @staticmethod
        def backward(ctx, grad_output):
            weight, mask = ctx.saved_tensors
            mask = unpack_mask(mask)
            return grad_output @ weight * mask, None, None
    ```

    ## Fix safety
    There is no automatic fix: define or import the helper, or drop the call.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - fp-quant issue 5 (a backward calling a mask-unpacking helper the module never defines)
    """

    code = "HKL517"
    name = "backward-calls-undefined-name"
    summary = "Code that runs only at backward time uses a name nothing in its file defines or imports"
    # Error: the NameError is certain once the line runs, and the rule reported nothing false over torch's
    # 2,328 installed files, the 5,360 corpus files and the 68,333 files of the tuning releases.
    severity = Severity.ERROR
    triggers = ("Function", "register_hook", "register_full_backward", "register_backward_hook",
                "register_post_accumulate_grad_hook", "register_autograd")
    trigger_pattern = (r"def[ \t\f\r\n\\]+(?:backward|jvp|vjp)\b"
                       r"|register_(?:hook|full_backward_(?:pre_)?hook|backward_hook|post_accumulate_grad_hook|autograd)\b")

    VALID: ClassVar[tuple[str, ...]] = (
        # the helper is defined after the class: looked up when backward runs
        "import torch\n"
        "class Clip(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x.clamp(-1, 1)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, = ctx.saved_tensors\n"
        "        return g * inside(x)\n"
        "def inside(x):\n"
        "    return (x.abs() <= 1).to(x)\n",
        # imported only when available, guarded at the call
        "import torch\n"
        "try:\n"
        "    from fast_kernels import fused_grad\n"
        "except ImportError:\n"
        "    fused_grad = None\n"
        "class Fused(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return fused_grad(g) if fused_grad is not None else g * 2\n",
        # a star import can bring anything
        "import torch\n"
        "from .kernels import *\n"
        "class Fused(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return fused_grad(g)\n",
        # the author probes for the name
        "import torch\n"
        "def hook(grad):\n"
        "    try:\n"
        "        return rescale(grad)\n"
        "    except NameError:\n"
        "        return grad\n"
        "x = torch.ones(2, requires_grad=True)\n"
        "x.register_hook(hook)\n",
        # a forward hook runs with every forward: not this rule's question
        "import torch.nn as nn\n"
        "m = nn.Linear(2, 2)\n"
        "m.register_forward_hook(lambda mod, i, o: record(o))\n",
        # annotations are not evaluated at run time
        "from __future__ import annotations\n"
        "import torch\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        return x * 2\n"
        "    @staticmethod\n"
        "    def backward(ctx, g: GradTensor) -> GradTensor:\n"
        "        return g * 2\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Pseudo(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x, mask):\n"
            "        ctx.save_for_backward(mask)\n"
            "        return x * mask\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        mask, = ctx.saved_tensors\n"
            "        return g * _unpack_mask(mask), None  # HKL517\n"
        ),
        # a tensor hook, through a helper of the file
        Invalid(
            "import torch\n"
            "def scale(grad):\n"
            "    return grad * clip_factor(grad)  # HKL517\n"
            "def hook(grad):\n"
            "    return scale(grad)\n"
            "w = torch.nn.Parameter(torch.ones(3))\n"
            "w.register_hook(hook)\n"
        ),
        # a module's full backward hook, as a method
        Invalid(
            "import torch.nn as nn\n"
            "class Probe:\n"
            "    def __init__(self, layer):\n"
            "        layer.register_full_backward_hook(self.on_grad)\n"
            "    def on_grad(self, module, grad_input, grad_output):\n"
            "        self.norm = grad_norm(grad_output[0])  # HKL517\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        # The backward-time bodies first, and whether they read a name the semantic model binds nowhere: most
        # files the triggers admit have no such body or read only bound names, and the answer then needs no
        # walk of the whole file (file_bound_names: most of this rule's cost over the corpus).
        bodies: list[tuple[ast.AST, str]] | None
        try:
            bodies = self._bodies(ctx)
            if not bodies or not any(may_read_unbound(ctx.model, func) for body, _where in bodies
                                     for func, _via in _with_helpers(ctx, body)):
                return
        except RecursionError:
            bodies = None  # decided as before: the file's bound names first
        if file_bound_names(ctx.tree) is None:
            return
        if bodies is None:
            bodies = self._bodies(ctx)
        reported: set[int] = set()
        for body, where in bodies:
            for func, via in _with_helpers(ctx, body):
                for use in unbound_uses(ctx.tree, func):
                    if id(use.node) in reported or not ctx.core.can_run(use.node):
                        continue
                    reported.add(id(use.node))
                    verb = "calls" if use.called else "reads"
                    through = f" (in {via}, which it calls)" if via else ""
                    yield self.finding(
                        ctx, use.node,
                        f"{where}, {verb} `{use.node.id}`{through}, which nothing in this file defines or imports "
                        f"and is no builtin: the first backward pass that reaches this line raises NameError, "
                        f"though importing the module and running it forward never show it",
                        help=f"Define or import `{use.node.id}` in this module, or remove the use.",
                    )

    @staticmethod
    def _bodies(ctx: FileContext) -> list[tuple[ast.AST, str]]:
        """The functions that run only at backward time, with how to name them."""
        bodies: list[tuple[ast.AST, str]] = []
        model = ctx.model
        for info in model.classes.values():
            if not model.is_autograd_function_class(info):
                continue
            for method in _GRADIENT_METHODS:
                found = info.method(method)
                if found is not None:
                    bodies.append((found, f"`{info.name}.{method}`, which autograd runs only when gradients are computed"))
        if "register_autograd" in ctx.text:
            for registered in registered_backwards(ctx):
                bodies.append((registered.backward, f"`{registered.backward.name}`, the backward registered for "
                                                    f"`{registered.op}`"))
        for reg in ctx.hooks.registrations:
            if reg.kind in _BACKWARD_KINDS and reg.hook is not None \
                    and isinstance(reg.hook.node, FunctionNode + (ast.Lambda,)):
                bodies.append((reg.hook.node, f"the {reg.kind.value} hook `{reg.hook.name}`, which runs only during "
                                              f"backward"))
        return bodies


def _with_helpers(ctx: FileContext, body: ast.AST) -> list[tuple[ast.AST, str]]:
    """The body and the functions of the file it calls by name, a few levels deep."""
    out: list[tuple[ast.AST, str]] = [(body, "")]
    seen = {id(body)}
    frontier: list[tuple[ast.AST, str]] = [(body, "")]
    for _ in range(_HELPER_DEPTH):
        following: list[tuple[ast.AST, str]] = []
        for func, via in frontier:
            for node in ast.walk(func):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                    continue
                bindings = ctx.model.bindings_at(node.func)
                if len(bindings) != 1 or bindings[0].kind != "def" or not isinstance(bindings[0].node, FunctionNode):
                    continue
                helper = bindings[0].node
                if id(helper) in seen:
                    continue
                seen.add(id(helper))
                step = f"`{helper.name}`" if not via else f"{via} -> `{helper.name}`"
                out.append((helper, step))
                following.append((helper, step))
        frontier = following
    return out
