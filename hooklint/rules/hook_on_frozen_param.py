"""HKL206: a tensor hook on each of the caller's parameters, frozen ones included (gradient-hooks.md)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind
from hooklint.static.outside import chosen_in_file, outside_root
from hooklint.static.requires_grad import (
    CallerParameter,
    caller_layer_parameter,
    caller_parameter,
    checks_requires_grad,
    filtered_by_requires_grad,
)

REGISTER_ERROR = "RuntimeError: cannot register a hook on a tensor that doesn't require gradient"


class HookOnFrozenParam(Rule):
    """
    ## What it does
    Reports `p.register_hook(...)` or `p.register_post_accumulate_grad_hook(...)`
    in a loop over parameters the caller supplies (`model.parameters()` or
    `named_parameters()` of a module passed in, each group's `"params"` of
    an optimizer's `param_groups`, the parameters and groups handed to an
    optimizer-like constructor as `torch.optim` takes them (`list(params)`,
    `[{"params": params}]`, `group.pop("params")`), or `m.weight` /
    `getattr(layer, name)` for each submodule or each layer the caller
    passed) with no `requires_grad` check on the way.  The parameters may be
    gathered first: through `zip` and `enumerate`, a comprehension, a local
    list, or a container kept on `self` that another method fills
    (`self.params.append(...)` for each layer); an element added under a
    `requires_grad` test makes the collection filtered.

    ## Why is this bad?
    Both registrations raise on a tensor that does not require grad:

    ```text
    RuntimeError: cannot register a hook on a tensor that doesn't require gradient
    ```

    A caller's model or optimizer may legally hold frozen parameters
    (fine-tuning the last layers, adapters, an embedding kept fixed), so the
    library fails in its constructor for exactly those users, while its own
    tests, on fully trainable toy models, pass.  Skipping frozen
    parameters also matters for hooks that count calls: a frozen parameter
    never gets a gradient, so "every parameter reported back" never happens.

    ## Known problems
    Only loops over the caller's collections are reported: parameters of a
    model the file builds itself are taken to require grad.  The severity
    is *warning*: the file cannot show whether the caller's parameters are
    frozen.

    ## Example
    ```python
    class GradStats:
        def __init__(self, optimizer):
            self.handles = []
            for group in optimizer.param_groups:
                for p in group["params"]:
                    self.handles.append(p.register_hook(self.record))

        def record(self, grad):
            pass
    ```

    ## Use instead
    ```python
    class GradStats:
        def __init__(self, optimizer):
            self.handles = []
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.requires_grad:
                        self.handles.append(p.register_hook(self.record))

        def record(self, grad):
            pass
    ```

    ## Fix safety
    There is no automatic fix: whether a frozen parameter should be skipped
    or counted otherwise is the library's decision.

    ## References
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - fairscale issue 1114 (AdaScale fails on an optimizer with frozen parameters)
    """

    code = "HKL206"
    name = "hook-on-frozen-param"
    summary = "A tensor hook on each of the caller's parameters without a requires_grad check raises on frozen ones"
    severity = Severity.WARNING
    triggers = ("register_hook", "register_post_accumulate_grad_hook")
    VALID: ClassVar[tuple[str, ...]] = (
        # checked
        "def watch(model, fn):\n"
        "    for p in model.parameters():\n"
        "        if p.requires_grad:\n"
        "            p.register_hook(fn)\n",
        # skipped early
        "def watch(model, fn):\n"
        "    for name, p in model.named_parameters():\n"
        "        if not p.requires_grad:\n"
        "            continue\n"
        "        p.register_post_accumulate_grad_hook(fn)\n",
        # filtered
        "def watch(model, fn):\n"
        "    for p in filter(lambda p: p.requires_grad, model.parameters()):\n"
        "        p.register_hook(fn)\n",
        # filtered where the list is filled
        "class Masks:\n"
        "    def __init__(self, layers):\n"
        "        self.params = [l.weight for l in layers if l.weight.requires_grad]\n"
        "    def hook(self, fn):\n"
        "        for p in self.params:\n"
        "            p.register_hook(fn)\n",
        # one layer the caller names: its caller chooses a trainable one
        "def watch(layer, fn):\n"
        "    return layer.weight.register_hook(fn)\n",
        # the file's own model
        "import torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "for p in net.parameters():\n"
        "    p.register_hook(print)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def watch(model, fn):\n"
            "    for name, p in model.named_parameters():\n"
            "        p.register_hook(fn)  # HKL206\n"
        ),
        Invalid(
            "class Stats:\n"
            "    def __init__(self, optimizer):\n"
            "        self.optimizer = optimizer\n"
            "    def hook(self, fn):\n"
            "        for i, group in enumerate(self.optimizer.param_groups):\n"
            "            for p in group['params']:\n"
            "                p.register_post_accumulate_grad_hook(fn)  # HKL206\n"
        ),
        Invalid(
            "class Masks:\n"
            "    def __init__(self, layers):\n"
            "        self.layers = layers\n"
            "        self.params = []\n"
            "        for layer, name in zip(self.layers, ['weight'] * len(layers)):\n"
            "            self.params.append(getattr(layer, name))\n"
            "    def hook(self, fn):\n"
            "        return [p.register_hook(fn) for p in self.params]  # HKL206\n"
        ),
        Invalid(
            "def scale(model, fn):\n"
            "    for name, m in model.named_modules():\n"
            "        if hasattr(m, 'weight'):\n"
            "            m.weight.register_hook(fn)  # HKL206\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.registrations:
            if reg.kind not in (HookKind.TENSOR, HookKind.POST_ACCUMULATE) or reg.receiver is None:
                continue
            if id(reg.call) in seen:
                continue
            found = caller_parameter(ctx.model, ctx.inference, reg.receiver)
            if found is None:
                found = self._layer_parameter(ctx, reg.receiver)
                if found is None:
                    continue
            if filtered_by_requires_grad(found.loop) or checks_requires_grad(reg.call, found.text, found.loop):
                continue
            if found.owner is not None:
                root = outside_root(ctx.model, ctx.inference, found.owner)
                if root is not None and chosen_in_file(ctx.model, ctx.inference, ctx.hooks.resolver, reg.call, root[1]):
                    continue  # every call in this file passes a model the file builds
            seen.add(id(reg.call))
            api = "register_post_accumulate_grad_hook" if reg.kind is HookKind.POST_ACCUMULATE else "register_hook"
            yield self.finding(
                ctx, reg.name_node, name_only=True,
                message=(f"`{found.text}.{api}` runs for {found.source}, with no `requires_grad` check: a frozen "
                         f"parameter in the caller's model or optimizer (fine-tuning, adapters) makes it raise "
                         f"\"{REGISTER_ERROR}\""),
                help=f"Skip parameters that do not require grad: `if {found.text}.requires_grad:` before the "
                     f"registration.",
            )

    @staticmethod
    def _layer_parameter(ctx: FileContext, receiver: ast.expr) -> CallerParameter | None:
        """``m.weight.register_hook(...)`` for each of the caller's layers ``m``."""
        found = caller_layer_parameter(ctx.model, ctx.inference, receiver)
        if found is None:
            return None
        text, loop, owner = found
        return CallerParameter(None, text, loop, owner, text=ast.unparse(receiver))
