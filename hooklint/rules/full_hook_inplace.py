"""HKL4xx rules that the model graph sees best (hooklint.graph).

HKL403 works from the graph facts when the graph analysis ran for the file,
and falls back to the plainest static patterns (an in-place op on the hooked
submodule's output in the parent's ``forward``) when it did not.
"""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING, ClassVar, Iterable

from hooklint.findings import Finding, Location, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.forward import inplace_modules
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind, Registration
from hooklint.static.inplace import FULL_HOOK_INPLACE_ERROR, inplace_after_call
from hooklint.static.values import ModuleValue

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.graph.facts import ModelFacts, ModuleFacts, Op

_HELP = ("Make the in-place op out-of-place (`nn.ReLU()` instead of `nn.ReLU(inplace=True)`, `y = y + x` "
         "instead of `y += x`), or clone the module's output before modifying it.")


class FullHookInplace(Rule):
    """
    ## What it does
    Reports a full backward hook or full backward pre-hook
    (`register_full_backward_hook`, `register_full_backward_pre_hook`) on a
    module whose output is modified in place after it (an `nn.ReLU(inplace=True)`
    right after it, `relu_()`, `out += identity`), or that modifies its own input
    in place while that input requires grad.

    ## Why is this bad?
    To call a full backward hook, PyTorch passes the module's inputs and outputs
    through an autograd Function (`BackwardHookFunction`) that returns them as
    views.  Modifying such a view in place is forbidden, so the forward pass
    fails at the in-place op, as soon as the hook is registered:

    ```text
    RuntimeError: Output 0 of BackwardHookFunction is a view and is being
    modified inplace. This view was created inside a custom Function ...
    ```

    The model trains without the hook, so the error appears only once someone
    adds one (a gradient logger, a saliency method), often far from the
    `inplace=True` that causes it.  It happens in torchvision-style blocks,
    where `bn2`'s output gets `out += identity` and convolutions are followed
    by `nn.ReLU(inplace=True)`.

    ## Known problems
    The graph analysis (`hooklint check` without `--static-only`) sees every
    in-place op on the module's output, in any parent, through `nn.Sequential`,
    and in-place ops on its input.  Without it, only the plainest pattern is
    reported: the hooked submodule's output modified in place in the `forward`
    of the class that owns it, in the same file.

    ## Example
    ```python
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.conv(x))

    def log_grad(module, grad_input, grad_output):
        print(grad_output[0].norm())

    block = Block()
    block.conv.register_full_backward_hook(log_grad)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.conv(x))

    def log_grad(module, grad_input, grad_output):
        print(grad_output[0].norm())

    block = Block()
    block.conv.register_full_backward_hook(log_grad)
    ```

    ## Fix safety
    There is no automatic fix: making an op out-of-place costs memory, and
    cloning the output must be placed by someone who knows the model.

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [Autograd mechanics: in-place operations](https://pytorch.org/docs/stable/notes/autograd.html#in-place-operations-with-autograd)
    """

    code = "HKL403"
    name = "full-hook-inplace"
    summary = "A full backward hook on a module whose output (or input) is modified in place breaks the forward"
    severity = Severity.ERROR
    origins = (Origin.GRAPH, Origin.STATIC, Origin.RUNTIME)
    triggers = ("register_full_backward_hook", "register_full_backward_pre_hook") + DYNAMIC_NAME_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # out-of-place ReLU after the hooked conv
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 3, 3)\n"
        "        self.relu = nn.ReLU()\n"
        "    def forward(self, x):\n"
        "        return self.relu(self.conv(x))\n"
        "net = Net()\n"
        "net.conv.register_full_backward_hook(lambda m, gi, go: None)\n",
        # the name is rebound before the in-place op: that modifies another tensor
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        y = self.fc(x)\n"
        "        y = y * 2\n"
        "        y += 1\n"
        "        return y\n"
        "net = Net()\n"
        "net.fc.register_full_backward_hook(lambda m, gi, go: None)\n",
        # a legacy hook does not wrap the output (HKL101 reports the API)
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        y = self.fc(x)\n"
        "        y += 1\n"
        "        return y\n"
        "net = Net()\n"
        "net.fc.register_forward_hook(lambda m, i, o: None)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(4, 4)\n"
            "    def forward(self, x):\n"
            "        y = self.fc(x)\n"
            "        y += x\n"
            "        return y\n"
            "net = Net()\n"
            "net.fc.register_full_backward_hook(lambda m, gi, go: None)  # HKL403\n"
        ),
        Invalid(
            "import torch\n"
            "import torch.nn as nn\n"
            "class Block(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.bn = nn.BatchNorm2d(3)\n"
            "        self.bn.register_full_backward_pre_hook(self.log)  # HKL403\n"
            "    def log(self, module, grad_output):\n"
            "        print(grad_output[0].norm())\n"
            "    def forward(self, x):\n"
            "        return torch.relu_(self.bn(x))\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        reported: set[tuple[int, int]] = set()
        for reg in ctx.hooks.instances_by_kind(HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE):
            if reg.is_global or reg.receiver is None:
                continue
            pairs, links = [], []
            if ctx.graph is not None:  # the graph layer is imported only when it ran
                from hooklint.graph.link import modules_for

                pairs = [(model, m) for model, m in modules_for(ctx, module_expr(reg)) if m.calls]
            if ctx.graph is not None and reg.receiver_origin is None:
                # the caller's model, built by another checked file (a pruner, an explainer)
                from hooklint.graph.linked import hooked_pairs, links_for

                links = links_for(ctx, reg.call)
                pairs = pairs or hooked_pairs(links)
            if pairs:
                finding = self._from_graph(ctx, reg, pairs, links)
            else:
                finding = self._from_source(ctx, reg)
            if finding is None:
                continue
            key = (finding.location.row, finding.location.column)
            if key not in reported:
                reported.add(key)
                yield finding

    def _at(self, ctx: FileContext, reg: Registration, message: str, related: list[Related],
            origin: Origin = Origin.STATIC) -> Finding:
        """At the registration; for a module a call site passed to a helper, at that
        call (where the module is chosen), with the registration as a related place."""
        site = reg.site_call
        if site is not None and reg.receiver_origin is not None:
            related = [Related(f"registered here, in `{_function_name(ctx, reg.call)}`", ctx.display_path,
                               ctx.span(reg.call)[0])] + related
            return self.finding(ctx, site, message, help=_HELP, related=related, origin=origin)
        return self.finding(ctx, reg.name_node, message, name_only=True, help=_HELP, related=related,
                            origin=origin)

    # -- with graph facts -------------------------------------------------------
    def _from_graph(self, ctx: FileContext, reg: Registration,
                    pairs: list[tuple[ModelFacts, ModuleFacts]], links: list | None = None) -> Finding | None:
        for model, module in pairs:
            target = _target(reg, model, module)
            if module.output_inplace is not None and module.output_needs_grad is not False:
                op = module.output_inplace
                what = f"its output is modified in place after it by {op.name}{_where(op, ctx)}"
            elif module.input_inplace is not None and module.inputs_from_data is False:
                op = module.input_inplace
                what = f"it modifies its input (which requires grad) in place with {op.name}{_where(op, ctx)}"
            else:
                continue
            related = []
            if op.line is not None and op.file is not None and op.file == os.path.realpath(ctx.path):
                related.append(Related("modified in place here", ctx.display_path, Location(op.line, 1)))
            message = self._message(reg, target, what)
            if links:
                from hooklint.graph.linked import via_text

                message += via_text(links, model)
            return self._at(ctx, reg, message, related, Origin.GRAPH)
        return None

    # -- from the source alone ----------------------------------------------------
    def _from_source(self, ctx: FileContext, reg: Registration) -> Finding | None:
        receiver = module_expr(reg)
        if not isinstance(receiver, ast.Attribute):
            return None
        owner = ctx.inference.infer(receiver.value)
        if not isinstance(owner, ModuleValue) or owner.local_class is None:
            return None
        target = f"`{reg.receiver_text}`" + reg.via_text()
        hooked = reg.receiver_module
        if hooked is not None and hooked.torch_class and inplace_modules(hooked.call):
            # nn.ReLU(inplace=True) inside a model: its input comes from earlier layers
            what = f"it modifies its input in place (`{ctx.segment(hooked.call)}`)"  # type: ignore[arg-type]
            return self._at(ctx, reg, self._message(reg, target, what), [])
        site = inplace_after_call(ctx, owner.local_class, receiver.attr)
        if site is None:
            return None
        what = f"its output is modified in place after it by {site.description} (line {site.node.lineno} " \
               f"in {owner.local_class.name}.forward)"
        related = [Related("modified in place here", ctx.display_path, ctx.span(site.node)[0])]
        return self._at(ctx, reg, self._message(reg, target, what), related)

    @staticmethod
    def _message(reg: Registration, target: str, what: str) -> str:
        kind = "full backward pre-hook" if reg.kind is HookKind.FULL_BACKWARD_PRE else "full backward hook"
        hook = f" `{reg.hook.name}`" if reg.hook is not None and reg.hook.name != "<lambda>" else ""
        return (f"{kind}{hook} on {target}: {what}; with the hook registered, the forward fails there with "
                f"\"RuntimeError: {FULL_HOOK_INPLACE_ERROR}\"")


def _target(reg: Registration, model: ModelFacts, module: ModuleFacts) -> str:
    if module.path:
        return f"`{reg.receiver_text}` ({module.class_name}, module `{module.path}` of {model.class_name})" + \
            reg.via_text()
    return f"`{reg.receiver_text}` ({module.class_name})" + reg.via_text()


def module_expr(reg: Registration) -> ast.AST | None:
    """The expression naming the hooked module where it is chosen: the call
    site's argument for a helper's parameter, else the receiver itself."""
    return reg.receiver_origin if reg.receiver_origin is not None else reg.receiver


def _function_name(ctx: FileContext, node: ast.AST) -> str:
    func = ctx.model.enclosing_function(node)
    return getattr(func, "name", "<lambda>") if func is not None else "<module>"


def _where(op: Op, ctx: FileContext) -> str:
    site = op.where(relative_to=os.path.realpath(ctx.path))
    code = f"`{op.code}`, " if op.code else ""
    return f" ({code}{site})" if site else ""
