"""HKL302: a module backward hook registered after the forward that built the graph (hook-semantics.md, section 3)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.flow import (
    BackwardCall,
    BackwardFinder,
    access_path,
    block_of,
    calls_in,
    executed_nodes,
    root_name,
    statement_of,
)
from hooklint.static.hook_targets import hook_words
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.values import src

_MODULE_BACKWARD_KINDS = (HookKind.BACKWARD_LEGACY, HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE)


class ModuleHookRegisteredAfterForward(Rule):
    """
    ## What it does
    Reports a module backward hook (`register_full_backward_hook`,
    `register_full_backward_pre_hook` or the legacy `register_backward_hook`)
    registered after the forward pass of that module (or of a module containing
    it) produced a tensor, and before the backward pass of that tensor.

    ## Why is this bad?
    Module backward hooks are bound into the autograd graph while the forward
    runs: `Module.__call__` wraps the inputs and outputs of the forward with
    the hooks registered at that moment.  A hook registered after
    `out = net(x)` does not fire for `out.backward()`; it fires only for the
    graphs of later forward passes.  Seed 004 says it in a comment ("these hook
    functions must be registered before `result = net(input)` runs"), and seed
    001's blog post registers its backward hook after computing the loss.

    Tensor hooks behave the other way: a tensor hook registered after the
    forward does fire.

    ## Known problems
    hooklint traces the tensor that `backward()` is called on back to a call of
    the module through assignments in the same function.  A forward through an
    alias (`layer = net.layer1; out = layer(x)`) or through another function is
    not seen, and nothing is reported.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    x = torch.rand(2, 4, requires_grad=True)
    loss = net(x).sum()
    net[0].register_full_backward_hook(lambda module, grad_input, grad_output: print(grad_output))
    loss.backward()
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    x = torch.rand(2, 4, requires_grad=True)
    net[0].register_full_backward_hook(lambda module, grad_input, grad_output: print(grad_output))
    loss = net(x).sum()
    loss.backward()
    ```

    ## Fix safety
    There is no automatic fix: moving the registration above the forward can
    change what other code between the two sees.

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - PyTorch issue 25723, "backward_hook triggered despite RemovableHandle.remove()"
      (a maintainer: "You cannot change the nn.Module's hooks after the graph has been created")
    """

    code = "HKL302"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "module-hook-registered-after-forward"
    summary = "A module backward hook is registered after the forward whose backward it is meant for; it does not fire"
    severity = Severity.ERROR
    triggers = ("register_backward_hook", "register_full_backward_hook", "register_full_backward_pre_hook")
    VALID: ClassVar[tuple[str, ...]] = (
        # registered before the forward
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 1)\n"
        "net.register_full_backward_hook(lambda m, gi, go: None)\n"
        "out = net(torch.rand(1, 2, requires_grad=True))\n"
        "out.sum().backward()\n",
        # a new forward after the registration produces the tensor
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 1)\n"
        "x = torch.rand(1, 2, requires_grad=True)\n"
        "out = net(x)\n"
        "net.register_full_backward_hook(lambda m, gi, go: None)\n"
        "out = net(x)\n"
        "out.sum().backward()\n",
        # the backward of the earlier forward already ran
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 1)\n"
        "x = torch.rand(1, 2, requires_grad=True)\n"
        "net(x).sum().backward()\n"
        "h = net.register_full_backward_hook(lambda m, gi, go: None)\n"
        "h.remove()\n",
        # a tensor hook registered after the forward does fire
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 1)\n"
        "loss = net(torch.rand(1, 2)).sum()\n"
        "net.weight.register_hook(lambda g: g * 0)\n"
        "loss.backward()\n",
        # the forward of another module does not involve this one
        "import torch, torch.nn as nn\n"
        "a, b = nn.Linear(2, 2), nn.Linear(2, 2)\n"
        "loss = a(torch.rand(1, 2)).sum()\n"
        "b.register_full_backward_hook(lambda m, gi, go: None)\n"
        "loss.backward()\n",
        # forward hooks run during the forward: not this rule
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 1)\n"
        "out = net(torch.rand(1, 2))\n"
        "net.register_forward_hook(lambda m, i, o: None)\n"
        "out.sum().backward()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.layer1 = nn.Linear(4, 3)\n"
            "    def forward(self, x):\n"
            "        return self.layer1(x)\n"
            "net = Net()\n"
            "loss = net(torch.rand(5, 4, requires_grad=True)).sum()\n"
            "hook = net.layer1.register_backward_hook(lambda m, gi, go: None)  # HKL101, HKL302\n"
            "loss.backward()\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "def train_step(model: nn.Module, x, target):\n"
            "    out = model(x)\n"
            "    loss = ((out - target) ** 2).mean()\n"
            "    model.register_full_backward_pre_hook(lambda m, go: print(go))  # HKL302\n"
            "    params = list(model.parameters())\n"
            "    return torch.autograd.grad(loss, params)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        finder = BackwardFinder(ctx.model, ctx.inference)
        # For each statement list, its statements that call backward, found
        # once: every registration looks at the statements after it, which
        # was quadratic in a file with hundreds of registrations.
        blocks: dict[int, list[tuple[int, list[BackwardCall]]]] = {}

        def backward_statements(block: list[ast.stmt]) -> list[tuple[int, list[BackwardCall]]]:
            if id(block) not in blocks:
                entries = []
                for i, statement in enumerate(block):
                    found_calls = [finder.backward_call(call) for call in calls_in(statement)]
                    found_calls = [b for b in found_calls if b is not None and b.tensor is not None]
                    if found_calls:
                        entries.append((i, found_calls))
                blocks[id(block)] = entries
            return blocks[id(block)]

        for reg in ctx.hooks.by_kind(*_MODULE_BACKWARD_KINDS):
            if reg.receiver is None or access_path(reg.receiver) is None:
                continue
            stmt = statement_of(reg.call)
            pos = block_of(stmt) if stmt is not None else None
            if pos is None:
                continue
            block, index = pos
            for later_index, later_backwards in backward_statements(block):
                if later_index <= index:
                    continue
                found = None
                for backward in later_backwards:
                    forward = self._earlier_forward(ctx, reg, backward.tensor)
                    if forward is not None:
                        found = (backward, forward)
                        break
                if found is not None:
                    yield self._finding(ctx, reg, *found)
                    break

    def _earlier_forward(self, ctx: FileContext, reg: Registration, tensor: ast.expr) -> ast.Call | None:
        """The call of the hooked module (or of a module containing it) that made
        ``tensor``, when every such call happened before the registration."""
        receiver_path = access_path(reg.receiver)  # type: ignore[arg-type]
        receiver_root = root_name(reg.receiver)  # type: ignore[arg-type]
        reg_line = reg.call.lineno
        reg_scope = ctx.model.scope_of(reg.call)
        earlier: list[ast.Call] = []
        pending: list[ast.AST] = [tensor]
        seen: set[int] = set()
        while pending:
            expr = pending.pop()
            for node in executed_nodes(expr):
                if isinstance(node, ast.Call):
                    path = access_path(node.func)
                    if path is not None and path == receiver_path[:len(path)] and \
                            ctx.model.bindings_at(root_name(node.func)) == ctx.model.bindings_at(receiver_root):
                        if node.lineno >= reg_line:
                            return None  # a forward after the registration: the hook fires
                        earlier.append(node)
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    bindings = ctx.model.bindings_at(node)
                    if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].scope is not reg_scope:
                        continue
                    b = bindings[0]
                    if id(b.node) in seen:
                        continue
                    seen.add(id(b.node))
                    pending.append(b.value)  # type: ignore[arg-type]
        return earlier[0] if earlier else None

    def _finding(self, ctx: FileContext, reg: Registration, backward: BackwardCall, forward: ast.Call) -> Finding:
        fw_row = ctx.span(forward)[0].row
        bw_start = ctx.span(backward.call)[0]
        module_text = src(forward.func)
        message = (f"{hook_words(reg)} is registered on {reg.describe_target()} after the forward of `{module_text}` "
                   f"at line {fw_row} built the graph that `{backward.text}` at line {bw_start.row} differentiates: "
                   f"module backward hooks are bound when the forward runs, so it does not fire for that backward")
        return self.finding(
            ctx, reg.name_node, message, name_only=True,
            help=f"Register the hook before the forward call `{module_text}(...)` at line {fw_row}.",
            related=[Related("the forward that built the graph", ctx.display_path, ctx.span(forward)[0]),
                     Related("the backward the hook misses", ctx.display_path, bw_start)],
        )
