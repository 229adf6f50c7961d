"""HKL3xx: hook lifetime (hook-semantics.md, section 3).

Tensor hooks are looked up when backward runs; module backward hooks are bound
into the graph when the forward runs.  Removing or registering a hook at the
wrong moment silently changes which pass it affects, and a hook registered
again and again without removing the old one stacks up.
"""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Applicability, Edit, Finding, Fix, Location, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.callgraph import EMPTY, SELF, is_step_method, leaves_loop_after
from hooklint.static.context import FileContext
from hooklint.static.handles import RemovalFlow, apply_overwrite, destination, lost_wrappers, overwritten_each_run
from hooklint.static.flow import (
    BackwardCall,
    BackwardFinder,
    block_of,
    access_path,
    calls_in,
    constant_range_length,
    contains,
    enclosing_loops,
    executed_nodes,
    function_of,
    is_simple_statement,
    later_statements,
    names_stored_in,
    root_name,
    statement_of,
)
from hooklint.static.hooks import REGISTRATION_TRIGGERS, HookKind, Registration
from hooklint.static.semantic import (
    Binding,
    ClassInfo,
    FunctionNode,
    is_staticmethod,
    positional_params,
)
from hooklint.static.inplace import inplace_of_name, inplace_use_of
from hooklint.static.values import ModuleValue, TensorValue, src

_TENSOR_KINDS = (HookKind.TENSOR, HookKind.POST_ACCUMULATE)
_MODULE_BACKWARD_KINDS = (HookKind.BACKWARD_LEGACY, HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE)
_KIND_WORDS = {
    HookKind.FORWARD: "forward hook",
    HookKind.FORWARD_PRE: "forward pre-hook",
    HookKind.BACKWARD_LEGACY: "legacy backward hook",
    HookKind.FULL_BACKWARD: "full backward hook",
    HookKind.FULL_BACKWARD_PRE: "full backward pre-hook",
    HookKind.TENSOR: "tensor hook",
    HookKind.POST_ACCUMULATE: "post-accumulate-grad hook",
}


def _hook_words(reg: Registration) -> str:
    name = f" `{reg.hook.name}`" if reg.hook is not None else ""
    return f"{_KIND_WORDS[reg.kind]}{name}"


def _single_name_target(stmt: ast.AST, value: ast.AST) -> ast.Name | None:
    """``h = <value>``: the ``h``."""
    if isinstance(stmt, ast.Assign) and stmt.value is value and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0]
    if isinstance(stmt, ast.AnnAssign) and stmt.value is value and isinstance(stmt.target, ast.Name):
        return stmt.target
    return None


def _binding_of(ctx: FileContext, target: ast.Name, stmt: ast.AST) -> Binding | None:
    scope = ctx.model.scope_of(target)
    for b in scope.bindings.get(target.id, ()):
        if b.node is stmt:
            return b
    return None


def _refers_to(ctx: FileContext, name: ast.Name, binding: Binding) -> bool:
    return ctx.model.bindings_at(name) == [binding]


def _removed_name(stmt: ast.stmt) -> ast.Name | None:
    """``h.remove()`` as a statement of its own: the ``h``."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and not stmt.value.args \
            and not stmt.value.keywords:
        func = stmt.value.func
        if isinstance(func, ast.Attribute) and func.attr == "remove" and isinstance(func.value, ast.Name):
            return func.value
    return None


def _object_key(ctx: FileContext, expr: ast.AST) -> object:
    """Equal keys for expressions that name the same object: the same access
    path (``net.fc``, ``seq[0]``) from the same binding of its root name, or
    from ``self`` in any method of the same class."""
    path = access_path(expr)
    root = root_name(expr)
    if path is None or root is None:
        return id(expr)
    model = ctx.model
    bindings = model.bindings_at(root)
    if len(bindings) == 1 and bindings[0].kind == "param":
        func = bindings[0].scope.node
        params = positional_params(func)
        cls = model.enclosing_class(func)
        if params and params[0] == root.id and cls is not None and func in cls.methods.values() \
                and not is_staticmethod(func):
            return ("self", id(cls.node), path[1:])
    return (path, tuple(id(b.node) for b in bindings))


def _by_target(ctx: FileContext, registrations: Iterable[Registration]) -> dict[object, list[Registration]]:
    """Registrations grouped by the object they hook."""
    out: dict[object, list[Registration]] = {}
    for reg in registrations:
        if reg.receiver is not None:
            out.setdefault(_object_key(ctx, reg.receiver), []).append(reg)
    return out


# --------------------------------------------------------------------- HKL301

class TensorHookRemovedBeforeBackward(Rule):
    """
    ## What it does
    Reports `handle.remove()` of a tensor hook (`Tensor.register_hook`,
    `register_post_accumulate_grad_hook`) that runs after the registration and
    before the next `backward()` (or `torch.autograd.backward` /
    `torch.autograd.grad`), with no backward pass in between.

    ## Why is this bad?
    A tensor hook does nothing when it is registered: autograd looks it up when
    the backward pass reaches the tensor.  Removing the handle before
    `backward()` therefore means the hook never fires, even if the loss was
    computed while it was registered; the gradients are silently left
    unmodified (or not recorded).  Seed 001's blog post warns about exactly this:
    "`remove()` must come after `backward()`".

    Module *forward* hooks are the opposite case: they run during the forward,
    and removing them right after it is correct.  Module *backward* hooks are
    bound to the graph by the forward, so removing them before `backward()`
    does not stop them; neither is reported here.

    ## Known problems
    hooklint follows one function body in source order.  When a call between the
    registration and the `remove()` may run a backward pass that hooklint
    cannot see (a call of a function from another file whose name suggests
    training, such as `trainer.fit(...)`, or one that receives a callable), the
    rule stays quiet.  A `remove()` inside a branch is not reported.

    ## Example
    ```python
    import torch

    x = torch.ones(4, requires_grad=True)
    handle = x.register_hook(lambda grad: grad * 2)
    loss = (x ** 2).sum()
    handle.remove()
    loss.backward()
    ```

    ## Use instead
    ```python
    import torch

    x = torch.ones(4, requires_grad=True)
    handle = x.register_hook(lambda grad: grad * 2)
    loss = (x ** 2).sum()
    loss.backward()
    handle.remove()
    ```

    ## Fix safety
    The fix moves the `remove()` statement to just after the `backward()`
    statement, when both are statements of their own in the same block.  It is
    **unsafe**: the hook then fires, which changes the gradients (that is the
    point, but review it).

    ## References
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - [Backward hooks execution](https://pytorch.org/docs/stable/notes/autograd.html#backward-hooks-execution)
    """

    code = "HKL301"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "tensor-hook-removed-before-backward"
    summary = "A tensor hook is removed before the backward pass it was registered for, so it never fires"
    severity = Severity.ERROR
    triggers = ("register_hook", "register_post_accumulate_grad_hook")
    fix_applicability = "unsafe (moves the remove() after the backward() statement)"
    VALID: ClassVar[tuple[str, ...]] = (
        # removed after backward
        "import torch\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "h = x.register_hook(lambda g: g * 2)\n"
        "z = (x * x).sum()\n"
        "z.backward()\n"
        "h.remove()\n"
        "w = (x * 3).sum()\n"
        "w.backward()\n",
        # torch.autograd.grad between registration and removal is a backward pass
        "import torch\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "h = x.register_hook(print)\n"
        "g, = torch.autograd.grad((x * x).sum(), x)\n"
        "h.remove()\n"
        "(x * 2).sum().backward()\n",
        # a forward hook removed right after the forward: correct
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "h = net.register_forward_hook(lambda m, i, o: None)\n"
        "out = net(torch.rand(1, 2))\n"
        "h.remove()\n"
        "out.sum().backward()\n",
        # a module backward hook: removal before backward does not stop it (not this rule)
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "h = net.register_full_backward_hook(lambda m, gi, go: None)\n"
        "out = net(torch.rand(1, 2, requires_grad=True))\n"
        "h.remove()\n"
        "out.sum().backward()\n",
        # a local function that runs backward, called between registration and removal
        "import torch\n"
        "def step(t):\n"
        "    (t * t).sum().backward()\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "h = x.register_hook(print)\n"
        "step(x)\n"
        "h.remove()\n"
        "(x * 2).sum().backward()\n",
        # removal in a branch: order unclear, quiet
        "import torch\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "h = x.register_hook(print)\n"
        "if x.sum() > 10:\n"
        "    h.remove()\n"
        "(x * 2).sum().backward()\n",
        # `h` was rebound: this remove() is of another handle
        "import torch\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "h = x.register_hook(print)\n"
        "(x * 2).sum().backward()\n"
        "h = x.register_hook(print)\n"
        "(x * 3).sum().backward()\n"
        "h.remove()\n"
        "(x * 4).sum().backward()\n",
        # training code hooklint cannot see runs in between
        "import torch\n"
        "def run(trainer, model):\n"
        "    h = model.weight.register_hook(print)\n"
        "    trainer.fit(model)\n"
        "    h.remove()\n"
        "    model(torch.ones(2)).sum().backward()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "x = torch.ones(4, requires_grad=True)\n"
            "h = x.register_hook(lambda grad: grad * 1.6)\n"
            "z = torch.sum(torch.pow(x, 2))\n"
            "h.remove()  # HKL301\n"
            "z.backward()\n",
            fixed="import torch\n"
            "x = torch.ones(4, requires_grad=True)\n"
            "h = x.register_hook(lambda grad: grad * 1.6)\n"
            "z = torch.sum(torch.pow(x, 2))\n"
            "z.backward()\n"
            "h.remove()  # HKL301\n",
        ),
        Invalid(
            "import torch\n"
            "def saliency(model, image):\n"
            "    image.requires_grad_()\n"
            "    grads = []\n"
            "    handle = image.register_hook(grads.append)\n"
            "    score = model(image)[0].max()\n"
            "    handle.remove()  # HKL301\n"
            "    torch.autograd.grad(score, image)\n"
            "    return grads\n",
            fixed="import torch\n"
            "def saliency(model, image):\n"
            "    image.requires_grad_()\n"
            "    grads = []\n"
            "    handle = image.register_hook(grads.append)\n"
            "    score = model(image)[0].max()\n"
            "    torch.autograd.grad(score, image)\n"
            "    handle.remove()  # HKL301\n"
            "    return grads\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def clip(param):\n"
            "    param.grad.clamp_(-1, 1)\n"
            "layer = nn.Linear(3, 1)\n"
            "for batch in range(3):\n"
            "    h = layer.weight.register_post_accumulate_grad_hook(clip)\n"
            "    loss = layer(batch_input).sum()\n"
            "    h.remove()  # HKL301\n"
            "    if loss > 0:\n"
            "        loss.backward()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        finder = BackwardFinder(ctx.model, ctx.inference)
        registrations = ctx.hooks.by_kind(*_TENSOR_KINDS)
        by_target = _by_target(ctx, registrations)
        for reg in registrations:
            same_target = by_target.get(_object_key(ctx, reg.receiver), []) if reg.receiver is not None else []
            finding = self._check_registration(ctx, finder, reg, same_target)
            if finding is not None:
                yield finding

    def _check_registration(self, ctx: FileContext, finder: BackwardFinder, reg: Registration,
                            same_target: list[Registration]) -> Finding | None:
        stmt = getattr(reg.call, "_hl_parent", None)
        target = _single_name_target(stmt, reg.call) if stmt is not None else None
        if target is None:
            return None
        binding = _binding_of(ctx, target, stmt)
        if binding is None:
            return None
        remove_stmt = None
        for later in later_statements(stmt):  # type: ignore[arg-type]
            name = _removed_name(later)
            if name is not None and name.id == target.id and _refers_to(ctx, name, binding):
                remove_stmt = later
                break
            if finder.may_run_backward(later) or target.id in names_stored_in(later):
                return None  # the hook may have fired, or `h` now names another handle
        if remove_stmt is None:
            return None
        backward = None
        for later in later_statements(remove_stmt):
            if any(contains(later, r.call) for r in same_target):
                return None  # registered again before the backward
            backward = finder.first_backward(later)
            if backward is not None:
                break
        if backward is None:
            return None
        reg_row = ctx.span(reg.call)[0].row
        bw_start = ctx.span(backward.call)[0]
        removal = src(remove_stmt.value)  # type: ignore[attr-defined]
        message = (f"`{removal}` removes the {_hook_words(reg)} registered on `{reg.receiver_text}` "
                   f"(line {reg_row}) before `{backward.text}` runs at line {bw_start.row}, and no backward pass ran "
                   f"in between: tensor hooks are looked up when backward runs, so this hook never fires")
        return self.finding(
            ctx,
            remove_stmt.value,  # type: ignore[attr-defined]
            message,
            help=f"Call `{target.id}.remove()` after `{backward.text}`.",
            fix=self._move_fix(ctx, remove_stmt, backward, target.id),
            related=[Related("the hook is registered here", ctx.display_path, ctx.span(reg.call)[0]),
                     Related("the backward pass it misses", ctx.display_path, bw_start)],
        )

    @staticmethod
    def _move_fix(ctx: FileContext, remove_stmt: ast.stmt, backward: BackwardCall, handle: str) -> Fix | None:
        bw_stmt = statement_of(backward.call)
        rm_pos, bw_pos = block_of(remove_stmt), block_of(bw_stmt) if bw_stmt is not None else None
        if bw_stmt is None or rm_pos is None or bw_pos is None or rm_pos[0] is not bw_pos[0]:
            return None
        if not (is_simple_statement(bw_stmt) and _owns_its_lines(ctx, remove_stmt)
                and _owns_its_lines(ctx, bw_stmt)):
            return None
        first, last = remove_stmt.lineno, remove_stmt.end_lineno or remove_stmt.lineno
        moved = "\n".join(ctx.line(row) for row in range(first, last + 1))
        bw_last = bw_stmt.end_lineno or bw_stmt.lineno
        end_of_backward = Location(bw_last, len(ctx.line(bw_last)) + 1)
        return Fix(
            message=f"Move `{handle}.remove()` after `{backward.text}`",
            edits=(Edit("", Location(first, 1), Location(last + 1, 1)),
                   Edit("\n" + moved, end_of_backward, end_of_backward)),
            applicability=Applicability.UNSAFE,
        )


def _owns_its_lines(ctx: FileContext, stmt: ast.stmt) -> bool:
    """Nothing but the statement (and a comment) on its lines."""
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    before = ctx.line(first).encode("utf-8")[:stmt.col_offset].decode("utf-8", "replace")
    after = ctx.line(last).encode("utf-8")[stmt.end_col_offset or 0:].decode("utf-8", "replace")
    return not before.strip() and (not after.strip() or after.strip().startswith("#"))


# --------------------------------------------------------------------- HKL302

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
        message = (f"{_hook_words(reg)} is registered on {reg.describe_target()} after the forward of `{module_text}` "
                   f"at line {fw_row} built the graph that `{backward.text}` at line {bw_start.row} differentiates: "
                   f"module backward hooks are bound when the forward runs, so it does not fire for that backward")
        return self.finding(
            ctx, reg.name_node, message, name_only=True,
            help=f"Register the hook before the forward call `{module_text}(...)` at line {fw_row}.",
            related=[Related("the forward that built the graph", ctx.display_path, ctx.span(forward)[0]),
                     Related("the backward the hook misses", ctx.display_path, bw_start)],
        )


# --------------------------------------------------------------------- HKL303

class ForwardBypassesHooks(Rule):
    """
    ## What it does
    Reports `module.forward(...)` called directly on an `nn.Module` instance,
    instead of calling the module itself, `module(...)`.

    ## Why is this bad?
    Hooks run from `nn.Module.__call__`, not from `forward`.  Calling
    `forward` directly skips every forward pre-hook, forward hook and module
    backward hook registered on that module, yours and torch's own: the
    deprecated `torch.nn.utils.weight_norm` and `spectral_norm`, and
    `torch.nn.utils.prune`, recompute the weight in a forward pre-hook, so
    `module.forward(x)` silently uses the weight computed by the previous call
    (stale after an optimizer step, or before pruning masks change).

    Calling the parent's implementation from an override
    (`super().forward(x)`, `Base.forward(self, x)`) is the normal way to
    extend `forward` and is not reported, nor is `self.forward(...)` inside
    one of the class's own methods (its `__call__` override, a recursive
    `forward`, or a helper such as `generate` or `input_to_embed` that runs
    the module's computation on purpose: the caller called that method, not
    the module).

    ## Known problems
    The severity is *warning*: the call is only wrong when some hook is (or
    later gets) registered on the module, which hooklint cannot always see.
    Modules from `torch.nn.utils.parametrizations` compute the weight when it
    is read, not in a hook, and are not affected.  Receivers whose type
    hooklint cannot tell (an unannotated parameter) are not reported.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    layer = nn.Linear(4, 2)
    layer.register_forward_hook(lambda module, inputs, output: print(output.shape))
    y = layer.forward(torch.rand(1, 4))
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    layer = nn.Linear(4, 2)
    layer.register_forward_hook(lambda module, inputs, output: print(output.shape))
    y = layer(torch.rand(1, 4))
    ```

    ## Fix safety
    The fix replaces `module.forward(...)` with `module(...)`.  It is
    **unsafe**: the hooks registered on the module then run, which can change
    the result (that is the point, but review it).  A full backward hook on
    the module then runs too, and if an in-place op modifies the module's
    output (`nn.ReLU(inplace=True)` after it) the forward fails (HKL403):
    when hooklint sees that (the result of `.forward(...)` passed to an
    in-place op or modified in place in the same function, or the graph's
    facts), no fix is offered.  `--fix --verify` does not apply this fix (no
    model run proves it).

    ## References
    - [`nn.Module.forward`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.forward):
      "one should call the Module instance afterwards instead of this since the
      former takes care of running the registered hooks while the latter
      silently ignores them"
    """

    code = "HKL303"
    name = "forward-bypasses-hooks"
    summary = "`module.forward(...)` skips the module's hooks; call `module(...)`"
    severity = Severity.WARNING
    triggers = ("forward",)
    # A call `<receiver>.forward(...)` (or `(<receiver>.forward)(...)`), with
    # what Python allows between the tokens; never after `super()`, whose
    # forward is the parent's (not reported).  It starts with the literal dot
    # so that the regex engine can skip from dot to dot.
    trigger_pattern = (r"\.(?<!super\(\)\.)(?:[ \t\f\r\n\\]|#[^\r\n]*[\r\n])*forward"
                       r"(?:[ \t\f\r\n\\)]|#[^\r\n]*[\r\n])*\(")
    fix_applicability = "unsafe (replaces `module.forward(...)` with `module(...)`)"
    VALID: ClassVar[tuple[str, ...]] = (
        # the parent's forward from an override
        "import torch.nn as nn\n"
        "class Wide(nn.Linear):\n"
        "    def forward(self, x):\n"
        "        return super().forward(x) * 2\n"
        "class Wider(nn.Linear):\n"
        "    def forward(self, x):\n"
        "        return nn.Linear.forward(self, x) * 2\n",
        # a class's own __call__ override calling its forward
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "    def __call__(self, x):\n"
        "        return self.forward(x)\n",
        # a recursive forward: the outer call ran the hooks
        "import torch.nn as nn\n"
        "class Tree(nn.Module):\n"
        "    def forward(self, x, depth=2):\n"
        "        return x if depth == 0 else self.forward(x * 2, depth - 1)\n",
        # a helper method of the module running its own forward (transformers' Gemma3n)
        "import torch.nn as nn\n"
        "class AltUp(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2\n"
        "    def scale_corrected_output(self, x):\n"
        "        return self.forward(x)\n",
        # unknown receiver: not known to be a module
        "def run(model, x):\n"
        "    return model.forward(x)\n",
        # calling the module
        "import torch, torch.nn as nn\n"
        "layer = nn.Linear(2, 2)\n"
        "y = layer(torch.rand(1, 2))\n",
        # a plain object's forward method is not a module's
        "class Step:\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "Step().forward(1)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "layer = nn.utils.weight_norm(nn.Linear(4, 2))\n"
            "net = nn.Linear(4, 2)\n"
            "y = net.forward(torch.rand(1, 4))  # HKL303\n",
            fixed="import torch, torch.nn as nn\n"
            "layer = nn.utils.weight_norm(nn.Linear(4, 2))\n"
            "net = nn.Linear(4, 2)\n"
            "y = net(torch.rand(1, 4))  # HKL303\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Wrapper(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.inner = nn.Conv2d(3, 8, 3)\n"
            "    def forward(self, x):\n"
            "        return self.inner.forward(x)  # HKL303\n",
            fixed="import torch.nn as nn\n"
            "class Wrapper(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.inner = nn.Conv2d(3, 8, 3)\n"
            "    def forward(self, x):\n"
            "        return self.inner(x)  # HKL303\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        by_target = _by_target(ctx, (r for r in ctx.hooks.registrations if r.kind.is_module))
        for call in ctx.model.calls_of_method("forward"):
            func = call.func
            assert isinstance(func, ast.Attribute)
            value = ctx.inference.infer(func.value)
            if not isinstance(value, ModuleValue):
                continue
            cls = value.local_class
            if cls is not None and cls.method("__call__") is not None:
                continue  # a module with its own __call__: `module(...)` would not run torch's hooks either
            if _is_method_self(ctx, func.value):
                continue  # the module's own method: a recursive forward, or a helper run on purpose
            hooked = [r for r in by_target.get(_object_key(ctx, func.value), ()) if r.call.lineno < call.lineno]
            receiver = src(func.value)
            if hooked:
                first = hooked[0]
                what = (f"the {_hook_words(first)} registered on it at line {first.call.lineno}"
                        + (f" and {len(hooked) - 1} more" if len(hooked) > 1 else ""))
            else:
                what = "any forward pre-hook, forward hook or backward hook registered on it (torch's own " \
                       "included: `nn.utils.weight_norm`, `spectral_norm` and pruning use forward pre-hooks)"
            message = (f"`{receiver}.forward(...)` calls the forward of `{receiver}` directly and skips {what}: "
                       f"hooks run from `{receiver}(...)`, not from `forward`")
            related = [Related("hook registered here", ctx.display_path, ctx.span(r.call)[0]) for r in hooked]
            yield self.finding(
                ctx, call, message,
                help=f"Call the module: `{receiver}(...)`.",
                fix=self._fix(ctx, func),
                related=related,
            )

    @staticmethod
    def _fix(ctx: FileContext, func: ast.Attribute) -> Fix | None:
        if _full_hook_breaks_call(ctx, func.value):
            return None
        _start, receiver_end = ctx.span(func.value)
        _fstart, func_end = ctx.span(func)
        return Fix(
            message="Call the module instead of its `forward`",
            edits=(Edit("", receiver_end, func_end),),
            applicability=Applicability.UNSAFE,
        )


def _full_hook_breaks_call(ctx: FileContext, receiver: ast.AST) -> bool:
    """Calling the module would run a full backward hook registered on it,
    and an in-place op modifies its output after it: the forward would then
    fail ("Output 0 of BackwardHookFunction is a view and is being modified
    inplace", HKL403) where `.forward(...)` ran."""
    full = ctx.hooks.by_kind(HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE)
    if not full:
        return False
    same = [r for r in full if r.is_global or _same_module(ctx, r.receiver, receiver)]
    if not same:
        return False
    call = getattr(getattr(receiver, "_hl_parent", None), "_hl_parent", None)
    return isinstance(call, ast.Call) and _result_modified_in_place(ctx, call, receiver)


def _same_module(ctx: FileContext, a: ast.AST | None, b: ast.AST) -> bool:
    if a is None:
        return False
    if _object_key(ctx, a) == _object_key(ctx, b):
        return True
    if isinstance(a, ast.Attribute) and isinstance(b, ast.Attribute) and a.attr == b.attr:
        owner_a, owner_b = ctx.inference.infer(a.value), ctx.inference.infer(b.value)
        if isinstance(owner_a, ModuleValue) and isinstance(owner_b, ModuleValue) \
                and owner_a.local_class is not None and owner_a.local_class is owner_b.local_class:
            return True  # `block.conv` and `self.conv` in Block's methods
    if ctx.graph is not None:
        from hooklint.graph.link import modules_for

        known = {(id(model), module.path) for model, module in modules_for(ctx, b)}
        return any((id(model), module.path) in known for model, module in modules_for(ctx, a))
    return False


def _result_modified_in_place(ctx: FileContext, call: ast.Call, receiver: ast.AST) -> bool:
    """``relu_(m.forward(x))``, ``y = m.forward(x); y += 1``..., or the graph's word for it."""
    if inplace_use_of(ctx, call) is not None:
        return True
    parent = getattr(call, "_hl_parent", None)
    function = ctx.model.enclosing_function(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name) \
            and function is not None and inplace_of_name(ctx, function, parent.targets[0].id, parent) is not None:
        return True
    if ctx.graph is not None:
        from hooklint.graph.link import modules_for

        return any(module.output_inplace is not None for _model, module in modules_for(ctx, receiver))
    return False


def _is_method_self(ctx: FileContext, expr: ast.AST) -> bool:
    """Is ``expr`` the ``self`` (first parameter) of a method?"""
    if not isinstance(expr, ast.Name):
        return False
    bindings = ctx.model.bindings_at(expr)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return False
    func = bindings[0].scope.node
    params = positional_params(func)
    return bool(params) and params[0] == expr.id and not is_staticmethod(func) \
        and ctx.model.enclosing_class(func) is not None


# --------------------------------------------------------------------- HKL304

class HookLeak(Rule):
    """
    ## What it does
    Reports a hook registered again and again on the same target, with a
    handle that is never removed: inside a loop whose iterations all hook the
    same module or parameter, or inside a function, method or constructor
    that runs again with the same target.  It runs again when a module's
    `forward` (or `training_step`) calls it, when it is called in a loop or
    a comprehension, or twice on the same object, or from a function that
    runs again itself, in any of the checked files: a Grad-CAM class in a
    library that hooks `target_layer` in its constructor leaks when an
    evaluation script in another folder builds one per image.  The target
    may arrive as an argument (`model`, `target_layer`, `self.model`
    assigned from one, `model.get_submodule(name)`, the modules of
    `model.named_modules()`): the call site must then pass the same object
    each time.

    Where no call in the checked files repeats it, an entry point that its
    users call is reported as a *warning*: a public method (or `__call__`)
    of a public class that hooks the object's own module (`self.model`), the
    constructor of a public class that hooks a module it is given, and a
    public function of a package that hooks its argument and that no
    checked file calls.  Every further call adds one more hook and nothing
    can remove them.

    In a package's code (not in its tests or `__main__` scripts), hooks
    registered on a module the caller owns and removed after the caller's
    code ran (`model(x)`, a `forward_fn` it passed), outside a `finally`,
    are reported as a *warning* too: when that code raises, the hooks stay
    on the caller's module and each retry adds more.

    ## Why is this bad?
    Every registration adds one more hook; the old ones stay.  After N
    iterations (or calls) the hook runs N times per forward or backward pass,
    so a hook that scales a gradient scales it N times, a hook that records
    activations records N copies, and memory grows.  The objects the hooks
    reference (an explainer, its saved activations) stay alive with the model.
    hook-semantics.md, section 3: a saliency library registered its "guided"
    ReLU hooks on every call and dropped the handles, so its "vanilla" mode
    returned guided gradients after a single guided call.

    ## Known problems
    Registering one hook per module in a loop over `model.modules()`,
    `named_modules()`, `children()` or `parameters()` hooks different targets
    and is not reported; tensor hooks on tensors created in the loop or in
    `forward` die with the tensor and are not reported either.  A registration
    guarded by a condition that can make it run once (`if self._handle is
    None:`, `if step == 0:`, `hasattr(...)`), here or at a call site on the
    way, is not reported.  A handle stored in an attribute or appended to a
    list counts as removed as soon as the file calls `.remove()` on that
    attribute or reads the list anywhere: hooklint does not check that this
    happens between registrations.  Calls in other files are seen when those
    files are checked in the same run (`hooklint check .`), through imports,
    re-exports, constructors, methods of instances whose class the file shows
    (`cam = GradCAM(...)`, a parameter annotated with the class) and
    `super()`; a call through an object of unknown class is not followed.
    A handle kept in a public attribute (`self.handles`) of an entry point
    counts as removable by the object's users.  A removal is paired with
    its registration through local names, lists and dicts, attributes of
    `self` and the methods of the class that register or remove them; a
    pairing through other objects (a helper class's `add_hook`/`reset_hooks`)
    is not seen.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    features = []
    for step in range(100):
        model.register_forward_hook(lambda module, inputs, output: features.append(output))
        model(torch.rand(8, 4)).sum().backward()
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    features = []
    handle = model.register_forward_hook(lambda module, inputs, output: features.append(output))
    for step in range(100):
        model(torch.rand(8, 4)).sum().backward()
    handle.remove()
    ```

    ## Fix safety
    There is no automatic fix: where the hook should be registered once, or
    removed, depends on what it is for.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook):
      every `register_*` call returns a handle whose `remove()` removes that one hook
    """

    code = "HKL304"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "hook-leak"
    summary = "A hook is registered again on the same target on every iteration or call, and never removed"
    severity = Severity.ERROR
    triggers = REGISTRATION_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # one hook per module: different targets
        "import torch.nn as nn\n"
        "net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
        "for m in net.modules():\n"
        "    m.register_forward_hook(lambda mod, i, o: None)\n"
        "for name, p in net.named_parameters():\n"
        "    p.register_hook(lambda g: g)\n",
        # handle removed in the loop
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "for step in range(3):\n"
        "    h = net.register_forward_hook(lambda m, i, o: None)\n"
        "    net(torch.rand(1, 2))\n"
        "    h.remove()\n",
        # fresh tensors each iteration
        "import torch\n"
        "for step in range(3):\n"
        "    x = torch.rand(3, requires_grad=True)\n"
        "    x.register_hook(lambda g: g * 2)\n"
        "    (x * x).sum().backward()\n",
        # once-guard
        "import torch.nn as nn\n"
        "class Probe:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "        self._handle = None\n"
        "    def attach(self):\n"
        "        if self._handle is None:\n"
        "            self._handle = self.model.register_forward_hook(self.record)\n"
        "    def record(self, m, i, o):\n"
        "        pass\n"
        "p = Probe(nn.Linear(2, 2))\n"
        "p.attach()\n"
        "p.attach()\n",
        # handles kept in a list and removed later
        "import torch.nn as nn\n"
        "class Guided:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "        self.handles = []\n"
        "    def attach(self):\n"
        "        for m in self.model.modules():\n"
        "            if isinstance(m, nn.ReLU):\n"
        "                self.handles.append(m.register_full_backward_hook(lambda mod, gi, go: None))\n"
        "    def detach(self):\n"
        "        for h in self.handles:\n"
        "            h.remove()\n"
        "g = Guided(nn.Sequential(nn.ReLU()))\n"
        "g.attach(); g.detach(); g.attach()\n",
        # gradient reversal on the forward's input: a fresh tensor every call
        "import torch.nn as nn\n"
        "class Reverse(nn.Module):\n"
        "    def forward(self, x):\n"
        "        x = x.view_as(x)\n"
        "        x.register_hook(lambda g: -g)\n"
        "        return x\n",
        # registered once, then break
        "import torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "for attempt in range(3):\n"
        "    net.register_forward_hook(lambda m, i, o: None)\n"
        "    break\n",
        # copying different hooks onto one module (torch.ao does this)
        "import torch.nn as nn\n"
        "old, new = nn.Linear(2, 2), nn.Linear(2, 2)\n"
        "for hook_fn in old._forward_hooks.values():\n"
        "    new.register_forward_hook(hook_fn)\n",
        # a function called once
        "import torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "def attach():\n"
        "    net.register_forward_hook(lambda m, i, o: None)\n"
        "attach()\n",
        # registered once in __init__, the handle kept
        "class Probe:\n"
        "    def __init__(self, layer):\n"
        "        self.handle = layer.register_forward_hook(self.save)\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n"
        "    def close(self):\n"
        "        self.handle.remove()\n"
        "for image in range(3):\n"
        "    Probe(object()).close()\n",
        # a public method that removes its hook in `finally`
        "class Explainer:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "    def attribute(self, x):\n"
        "        handle = self.model.register_forward_hook(self.save)\n"
        "        try:\n"
        "            return self.model(x)\n"
        "        finally:\n"
        "            handle.remove()\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n",
        # a private class constructed in a loop, on a new model each time
        "class _Probe:\n"
        "    def __init__(self, model):\n"
        "        model.register_forward_hook(print)\n"
        "def run(models):\n"
        "    for model in models:\n"
        "        _Probe(model)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "model = nn.Linear(4, 1)\n"
            "for step in range(5):\n"
            "    model.weight.register_hook(lambda g: g * 0.5)  # HKL304\n"
            "    model(torch.rand(2, 4)).sum().backward()\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Saliency:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "    def guided(self, x):\n"
            "        for m in self.model.modules():\n"
            "            if isinstance(m, nn.ReLU):\n"
            "                m.register_full_backward_hook(self.clamp)  # HKL304\n"
            "        return self.model(x)\n"
            "    def clamp(self, m, gi, go):\n"
            "        return (gi[0].clamp(min=0),)\n"
            "s = Saliency(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))\n"
            "s.guided(1)\n"
            "s.guided(2)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(2, 2)\n"
            "        self.seen = []\n"
            "    def forward(self, x):\n"
            "        self.fc.register_forward_hook(lambda m, i, o: self.seen.append(o))  # HKL304\n"
            "        return self.fc(x)\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "net = nn.Linear(2, 2)\n"
            "for step in range(3):\n"
            "    h = net.register_forward_hook(lambda m, i, o: None)  # HKL304\n"
            "    net(torch.rand(1, 2))\n"
            "h.remove()\n"
        ),
        Invalid(
            # a constructor that hooks its argument, built once per image
            "class GradCAM:\n"
            "    def __init__(self, model, target_layer):\n"
            "        self.model = model\n"
            "        target_layer.register_forward_hook(self.save)  # HKL304\n"
            "    def save(self, m, i, o):\n"
            "        self.activation = o\n"
            "def explain(model, images):\n"
            "    return [GradCAM(model, model.layer4) for image in images]\n"
        ),
        Invalid(
            # a public method that hooks its own model on every call (a warning)
            "class FeatureExtractor:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "    def extract(self, x):\n"
            "        self.model.layer4.register_forward_hook(self.keep)  # HKL304\n"
            "        self.model(x)\n"
            "        return self.features\n"
            "    def keep(self, m, i, o):\n"
            "        self.features = o\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        analysis = _LeakAnalysis(ctx)
        for reg in ctx.hooks.registrations:
            finding = analysis.check(self, reg)
            if finding is None:
                finding = analysis.apply_overwrite(self, reg)
            if finding is None:
                finding = analysis.inside_hook(self, reg)
            if finding is not None:
                yield finding
        yield from analysis.lost_wrappers(self)
        yield from analysis.unprotected_removals(self)


# List methods that store or forget handles without removing their hooks.
_LIST_METHODS_THAT_DROP = frozenset({"append", "clear"})


class _LeakAnalysis:
    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self.dependence = ctx.summarizer.dependence
        self.guards = ctx.summarizer.guards
        self._loads: tuple[dict[str, list[ast.Name]], dict[str, list[ast.Attribute]]] | None = None
        self._self_classes: dict[int, ClassInfo | None] = {}
        # registrations whose handle is lost only in some runs (a hook that removes itself when it runs)
        self.conditional_fates: set[int] = set()

    def _load_index(self) -> tuple[dict[str, list[ast.Name]], dict[str, list[ast.Attribute]]]:
        """Every read of a name and of an attribute in the file, by name (built once)."""
        if self._loads is None:
            names: dict[str, list[ast.Name]] = {}
            attributes: dict[str, list[ast.Attribute]] = {}
            for node in ast.walk(self.ctx.tree):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    names.setdefault(node.id, []).append(node)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    attributes.setdefault(node.attr, []).append(node)
            self._loads = (names, attributes)
        return self._loads

    # ---------------------------------------------------------------- entry
    def check(self, rule: Rule, reg: Registration) -> Finding | None:
        for loop in enclosing_loops(reg.call):
            if self._needed(reg, loop) != EMPTY or self.guards.guarded(reg.call, loop) \
                    or leaves_loop_after(reg.call, loop):
                continue
            fate = self._handle_fate(reg, loop)
            if fate is None:
                return None
            times = constant_range_length(loop.iter) if isinstance(loop, (ast.For, ast.AsyncFor)) else None
            return self._finding(rule, reg, f"on every iteration of the loop at line {loop.lineno}", times, fate)
        func = function_of(reg.call)
        if not isinstance(func, FunctionNode):
            return None
        needed = self._needed(reg, func)
        if needed is None or self.guards.guarded(reg.call, func):
            return None
        fate = self._handle_fate(reg, func)
        if fate is None:
            return None
        repeat = self._repeat(func, needed)
        if repeat is None:
            return None
        text, proven, related = repeat
        if not proven:
            kept = destination(self.ctx, reg)
            if kept.kind in ("attribute", "container") and kept.attr and not kept.attr.startswith("_"):
                return None  # the object's users can reach the handles and remove them
        cls = self.ctx.model.enclosing_class(func)
        name = f"{cls.name}.{func.name}" if cls is not None and func in cls.methods.values() else func.name
        finding = self._finding(rule, reg, f"each time `{name}` runs ({text})", None, fate, related)
        if not proven or id(reg.call) in self.conditional_fates:  # a hook that removes itself leaks only unrun
            finding = finding.with_changes(severity=Severity.WARNING)
        return finding

    def apply_overwrite(self, rule: Rule, reg: Registration) -> Finding | None:
        """A handle kept under the module that ``model.apply(fn)`` visits, with
        no check for one already there: a submodule shared by two parents is
        visited twice and its first handle is lost (a warning: it needs a
        shared submodule)."""
        found = apply_overwrite(self.ctx, reg)
        if found is None:
            return None
        ctx = self.ctx
        applied = src(found.apply_call.func.value)  # type: ignore[attr-defined]
        store = src(found.store)
        checked = ""
        if found.wrong_check is not None:
            checked = (f" (`{src(found.wrong_check)}` at line {found.wrong_check.lineno} checks another attribute "
                       f"than `{store}`)")
        message = (f"{_hook_words(reg)} is registered on `{found.module_param}` for each submodule of `{applied}` "
                   f"(`{src(found.apply_call)}` at line {found.apply_call.lineno}) and its handle is kept in "
                   f"`{store}` with no check for a handle already there{checked}: `Module.apply` visits a submodule "
                   f"once per parent that holds it, so a module shared by two parents (one activation instance "
                   f"reused across layers) is hooked twice and the second handle overwrites the first; that first "
                   f"hook can never be removed and keeps running in every later forward")
        return rule.finding(
            ctx, reg.name_node, message, name_only=True,
            help=f"Skip modules already hooked (`if {found.module_param} in ...: return`, or a `hasattr` check of "
                 f"the attribute you store), or iterate `{applied}.modules()`, which yields each module once.",
            related=[Related("`apply` runs the function on every submodule here", ctx.display_path,
                             ctx.span(found.apply_call)[0])],
        ).with_changes(severity=Severity.WARNING)

    def lost_wrappers(self, rule: Rule) -> Iterable[Finding]:
        """``W(module)`` of a class whose constructor hooks ``module`` and
        whose ``close()`` (or the like) alone removes the hook, when the
        object is dropped or kept where nothing calls it, in code that runs
        again with the same module."""
        ctx = self.ctx
        for lost in lost_wrappers(ctx):
            call, wrapper = lost.call, lost.wrapper
            func = function_of(call)
            if not isinstance(func, FunctionNode) or self.guards.guarded(call, func):
                continue
            reg = wrapper.registration
            cleanup = " or ".join(f"`{name}()`" for name in wrapper.cleanup)
            where = f"kept only in `{lost.kept_in}`" if lost.kept_in else "dropped"
            head = (f"`{src(call.func)}(...)` registers a {_KIND_WORDS[reg.kind]} on `{src(lost.argument)}` "
                    f"(`{wrapper.cls.name}.__init__`, line {reg.call.lineno}) whose handle only {cleanup} removes; "
                    f"the object is {where} and nothing calls {cleanup} on it")
            repeat: tuple[str, bool, list[Related]] | None = None
            for loop in enclosing_loops(call):
                if self.dependence.of(lost.argument, loop) == EMPTY and not self.guards.guarded(call, loop) \
                        and not leaves_loop_after(call, loop):
                    repeat = (f"on every iteration of the loop at line {loop.lineno}", True, [])
                    break
            if repeat is None:
                needed = self.dependence.of(lost.argument, func)
                if needed is None:
                    continue
                found = self._repeat(func, needed)
                if found is None:
                    continue
                text, proven, related = found
                cls = ctx.model.enclosing_class(func)
                name = f"{cls.name}.{func.name}" if cls is not None and func in cls.methods.values() else func.name
                repeat = (f"each time `{name}` runs ({text})", proven, related)
            text, proven, related = repeat
            event = "forward" if reg.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
            finding = rule.finding(
                ctx, call, f"{head}: it runs {text}, and each run leaves one more hook that runs on every {event} "
                f"pass", help=f"Call {cleanup} on the objects when done (a `try`/`finally`, or a context manager), "
                f"or keep them where the caller can.",
                related=[Related("the hook is registered here", ctx.display_path, ctx.span(reg.call)[0])] + related)
            yield finding if proven else finding.with_changes(severity=Severity.WARNING)

    def inside_hook(self, rule: Rule, reg: Registration) -> Finding | None:
        """A registration inside a module hook: it runs on every forward (or
        backward) of that module, and its handles end up where the next run
        overwrites them, or nowhere (a warning: it needs two passes before the
        handles are removed)."""
        ctx = self.ctx
        func = function_of(reg.call)
        if not isinstance(func, FunctionNode) or reg.receiver is None or reg.hook_expr is None:
            return None
        outer = [r for r in ctx.hooks.registrations if r.hook is not None and r.hook.node is func
                 and r.kind.is_module and r.receiver is not None]
        if not outer:
            return None
        params = positional_params(func)
        bound = outer[0].hook.bound if outer[0].hook is not None else 0
        module_param = params[bound] if len(params) > bound else None  # every module hook gets its module first
        target = self.dependence.of(reg.receiver, func)
        if target is None or not target <= ({module_param} if module_param else set()):
            return None  # another object on each run
        if self.guards.guarded(reg.call, func):
            return None
        parent = getattr(reg.call, "_hl_parent", None)
        if isinstance(parent, ast.Expr):
            fate = "its handle is discarded"
        else:
            kept = overwritten_each_run(ctx, reg, func)
            if kept is None:
                return None
            fate = (f"its handle ends up in `{kept.name}` (line {kept.assignment.lineno}), which the next run "
                    f"overwrites: only the handles of the last run can be removed")
        first = outer[0]
        event = "forward" if first.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
        message = (f"{_hook_words(reg)} is registered on {reg.describe_target()} inside `{func.name}`, which is "
                   f"itself a {_KIND_WORDS[first.kind]} on `{first.receiver_text}` (line {first.call.lineno}) and "
                   f"runs on every {event} pass of it, and {fate}: each pass adds one more hook, after N passes "
                   f"it runs N times")
        return rule.finding(
            ctx, reg.name_node, message, name_only=True,
            help="Register the inner hooks once, outside the hook, or remove them in the same run "
                 "(`try`/`finally` around the work that needs them).",
            related=[Related("the hook that runs this code is registered here", ctx.display_path,
                             ctx.span(first.call)[0])],
        ).with_changes(severity=Severity.WARNING)

    def unprotected_removals(self, rule: Rule) -> Iterable[Finding]:
        """Hooks on the caller's modules removed after the caller's code ran,
        outside a ``finally``: when that code raises, they stay (a warning)."""
        ctx = self.ctx
        if "." not in ctx.module or _is_script(ctx.tree) or _is_test_file(ctx.path):
            return  # a script or a test: the library API of a package is what callers retry after an error
        removing = _functions_reaching(ctx, {id(f): f for f in (function_of(c) for c in
                                                               ctx.model.calls_of_method("remove"))
                                             if isinstance(f, FunctionNode)})
        registering = _functions_reaching(ctx, {id(f): f for f in (function_of(r.call) for r in
                                                                   ctx.hooks.registrations)
                                                if isinstance(f, FunctionNode)})
        candidates = {key: func for key, func in removing.items() if key in registering}
        flow = RemovalFlow(ctx)
        for func in sorted(candidates.values(), key=lambda f: f.lineno):
            if function_of(func) is not None:
                continue  # a nested function: its own caller decides
            for found in flow.unprotected(func):
                # the module outlives the call: the caller's (not one the function builds)
                regs = [r for r in found.registrations if r.kind.is_module and r.receiver is not None
                        and self.dependence.of(r.receiver, function_of(r.call)) is not None]
                if not regs:
                    continue
                first = regs[0]
                risky = src(found.risky.func)
                removal = src(found.removal)
                hooks = " and ".join(sorted({_hook_words(r) for r in regs}))
                # a registration under a once-guard (`if self.handle is None:`) is not made again by a retry
                stacks = not any(self.guards.guarded(anchor, func) for anchor in found.anchors)
                message = (f"`{removal}` removes the {hooks} registered on {first.describe_target()} (line "
                           f"{first.call.lineno}) only when `{risky}(...)` at line {found.risky.lineno} returns: it "
                           f"is not in a `finally`, so when the caller's code raises the hooks stay on its module"
                           + (", and every later call adds more" if stacks else
                              " (a later call does not register them again, but they keep running until it "
                              "succeeds)"))
                yield rule.finding(
                    ctx, found.removal, message,
                    help="Remove the hooks in a `finally:` block (or a `with` block whose `__exit__` removes them).",
                    related=[Related("the hook is registered here", ctx.display_path, ctx.span(r.call)[0])
                             for r in regs[:3]]
                    + [Related("this call can raise", ctx.display_path, ctx.span(found.risky)[0])],
                ).with_changes(severity=Severity.WARNING)

    def _needed(self, reg: Registration, unit: ast.AST) -> frozenset[str] | None:
        """The parameters of ``unit`` that must be the same for the registration
        to hook the same target with the same hook again (None: it hooks a new
        object each time, or copies different hooks: not a leak)."""
        if reg.hook_expr is None:
            return None
        hook = self.dependence.behaviour(reg.hook_expr, unit)
        if hook is None:
            return None
        if reg.receiver is None:
            return hook  # a global hook: one target, every module
        target = self.dependence.of(reg.receiver, unit)
        if target is None:
            return None
        if reg.kind.is_tensor:
            # only tensors known to outlive the loop or call: parameters and leaves
            value = self.ctx.inference.infer(reg.receiver)
            if not (isinstance(value, TensorValue) and (value.parameter or value.leaf is True)):
                return None
        return target | hook

    def _finding(self, rule: Rule, reg: Registration, repeat: str, times: int | None, fate: str,
                 related: Iterable[Related] = ()) -> Finding:
        event = "forward" if reg.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
        stacks = (f"after {times} iterations it is registered {times} times and runs {times} times per {event} pass"
                  if times and times > 1 else f"after N registrations it runs N times per {event} pass")
        message = (f"{_hook_words(reg)} is registered on {reg.describe_target()} {repeat}, and {fate}: the hooks "
                   f"stack up, {stacks}")
        return rule.finding(
            self.ctx, reg.name_node, message, name_only=True,
            help="Register the hook once (before the loop, or in `__init__`), or keep the handle and call "
                 "`handle.remove()` before registering it again (a `with` block or `try`/`finally` does it).",
            related=related,
        )

    # ----------------------------------------------------- repeated functions
    def _repeat(self, func: ast.AST, needed: frozenset[str]) -> tuple[str, bool, list[Related]] | None:
        """Why ``func`` runs again with the same ``needed`` arguments: (words,
        proven, related locations); not proven for an entry point (a public
        method, a constructor, a public function) that nothing shown calls twice."""
        ctx = self.ctx
        model = ctx.model
        cls = model.enclosing_class(func)
        if is_step_method(model, func) and all(n == SELF or n.startswith(SELF + ".") for n in needed):
            return f"torch calls `{cls.name}.{func.name}` on every step", True, []  # type: ignore[union-attr]
        qual = ctx.qualname(func)
        if qual is None:
            return None
        reason = ctx.project.first_reason(qual, needed)
        if reason is None:
            return None
        related = [] if reason.path == ctx.display_path else \
            [Related("the call that repeats it", reason.path, Location(reason.line, 1))]
        text = reason.describe(ctx.display_path)
        if not reason.proven:
            text += "; nothing in the checked files calls it twice, so this is reported as a warning"
        return text, reason.proven, related

    # ------------------------------------------------------------- handles
    def _handle_fate(self, reg: Registration, unit: ast.AST) -> str | None:
        """How the handle is lost ("its handle is discarded"...), or None when it
        is (or may be) removed."""
        ctx = self.ctx
        parent = getattr(reg.call, "_hl_parent", None)
        if isinstance(parent, ast.Expr):
            return "its handle is discarded"
        target = _single_name_target(parent, reg.call) if parent is not None else None
        if target is not None:
            return self._name_handle_fate(target, parent, unit)  # type: ignore[arg-type]
        if isinstance(parent, ast.Return):
            # `return m.register_...(hook)` from a method, stored by the caller: `self.h = self._register()`
            stored = self._stored_from_method(reg)
            if stored is None:
                return None
            return self._self_removing_fate(reg, stored)
        if isinstance(parent, ast.Assign) and parent.value is reg.call and len(parent.targets) == 1 \
                and isinstance(parent.targets[0], ast.Attribute):
            attr = parent.targets[0].attr
            if self._attribute_read_elsewhere(attr, parent.targets[0]):
                return self._self_removing_fate(reg, parent.targets[0])
            return f"its handle is stored in `{src(parent.targets[0])}` and never removed"
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "append" \
                and isinstance(getattr(parent, "_hl_parent", None), ast.Expr):
            holder = parent.func.value
            if isinstance(holder, ast.Attribute):
                if self._attribute_read_elsewhere(holder.attr, holder, allow_append=True):
                    return None
                return f"its handle is appended to `{src(holder)}`, whose handles are never removed"
            if isinstance(holder, ast.Name):
                bindings = ctx.model.bindings_at(holder)
                if len(bindings) != 1 or self._name_used_except_append(holder, bindings[0]):
                    return None
                return f"its handle is appended to `{holder.id}`, whose handles are never removed"
        return None

    def _stored_from_method(self, reg: Registration) -> ast.Attribute | None:
        """``self.<attr> = self.<method>()`` where ``method`` returns the
        registration: the ``self.<attr>`` (the only caller of the method)."""
        func = function_of(reg.call)
        cls = self.ctx.model.enclosing_class(func) if isinstance(func, FunctionNode) else None
        if cls is None or func not in cls.methods.values():
            return None
        returns = [n for n in executed_nodes(func) if isinstance(n, ast.Return)]
        if len(returns) != 1:
            return None
        calls = [c for c in self.ctx.model.method_calls.get(func.name, ())  # type: ignore[union-attr]
                 if self._self_class(c.func) is cls]
        if len(calls) != 1:
            return None
        holder = getattr(calls[0], "_hl_parent", None)
        if isinstance(holder, ast.Assign) and holder.value is calls[0] and len(holder.targets) == 1 \
                and isinstance(holder.targets[0], ast.Attribute) and self._self_class(holder.targets[0]) is cls:
            return holder.targets[0]
        return None

    def _self_removing_fate(self, reg: Registration, stored: ast.Attribute) -> str | None:
        """Every read of the stored handle is ``self.<attr>.remove()`` in the
        hook's own body: the hook is removed only if it runs."""
        hook = reg.hook
        if hook is None or reg.kind not in (HookKind.FORWARD, HookKind.FORWARD_PRE) or reg.receiver is None:
            return None
        owner = self._self_class(stored)
        removals = []
        for node in self._load_index()[1].get(stored.attr, ()):
            other = self._self_class(node)
            if owner is not None and other is not None and other is not owner and not _related_classes(owner, other):
                continue
            parent = getattr(node, "_hl_parent", None)
            call = getattr(parent, "_hl_parent", None)
            if not (isinstance(parent, ast.Attribute) and parent.attr == "remove" and isinstance(call, ast.Call)
                    and call.func is parent and contains(hook.node, call)):
                return None
            removals.append(call)
        if not removals:
            return None
        self.conditional_fates.add(id(reg.call))
        event = "forward" if reg.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
        return (f"its handle, `{src(stored)}`, is removed only by the hook itself (line {removals[0].lineno}), when "
                f"it runs: a module whose {event} never runs (a layer the input does not reach) keeps it")

    def _name_handle_fate(self, target: ast.Name, stmt: ast.stmt, unit: ast.AST) -> str | None:
        ctx = self.ctx
        binding = _binding_of(ctx, target, stmt)
        scope = ctx.model.scope_of(target)
        if binding is None or target.id in scope.globals_ or target.id in scope.nonlocals:
            return None
        removed_outside: list[ast.Call] = []
        for node in self._load_index()[0].get(target.id, ()):
            if not contains(scope.node, node):
                continue
            if ctx.model.scope_of(node) is not scope:
                return None  # used by a nested function: it may remove it
            if binding not in ctx.model.bindings_at(node) and \
                    (node.lineno <= binding.lineno or not _other_branch(ctx, node, binding)):
                continue  # another binding of the name, in straight-line code
            parent = getattr(node, "_hl_parent", None)
            call = getattr(parent, "_hl_parent", None)
            if isinstance(parent, ast.Attribute) and parent.attr == "remove" and isinstance(call, ast.Call) \
                    and call.func is parent:
                if contains(unit, call):
                    return None
                removed_outside.append(call)
                continue
            return None  # the handle goes somewhere hooklint does not follow
        if removed_outside:
            return (f"its handle `{target.id}` is overwritten each time; `{target.id}.remove()` at line "
                    f"{min(c.lineno for c in removed_outside)} removes only the last one")
        return f"its handle `{target.id}` is never removed"

    def _attribute_read_elsewhere(self, attr: str, stored: ast.AST, allow_append: bool = False) -> bool:
        """Is ``<x>.<attr>`` read anywhere other than in a test for None (or, for
        lists, other than to append)?  ``self.<attr>`` in the methods of an
        unrelated class is another object's attribute and does not count."""
        owner = self._self_class(stored)
        for node in self._load_index()[1].get(attr, ()):
            if node is stored:
                continue
            other = self._self_class(node)
            if owner is not None and other is not None and other is not owner and not _related_classes(owner, other):
                continue
            parent = getattr(node, "_hl_parent", None)
            if allow_append and isinstance(parent, ast.Attribute) and parent.attr in _LIST_METHODS_THAT_DROP:
                continue
            if isinstance(parent, ast.Compare) and all(isinstance(c, ast.Constant) and c.value is None
                                                       for c in parent.comparators):
                continue
            return True
        return False

    def _self_class(self, attribute: ast.AST) -> ClassInfo | None:
        """The class whose instance ``self.<attr>`` is, when the receiver is a method's ``self``."""
        key = id(attribute)
        if key not in self._self_classes:
            self._self_classes[key] = self._compute_self_class(attribute)
        return self._self_classes[key]

    def _compute_self_class(self, attribute: ast.AST) -> ClassInfo | None:
        if not (isinstance(attribute, ast.Attribute) and isinstance(attribute.value, ast.Name)):
            return None
        bindings = self.ctx.model.bindings_at(attribute.value)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        func = bindings[0].scope.node
        params = positional_params(func)
        cls = self.ctx.model.enclosing_class(func)
        if not params or params[0] != attribute.value.id or cls is None or func not in cls.methods.values() \
                or is_staticmethod(func):
            return None
        return cls

    def _name_used_except_append(self, holder: ast.Name, binding: Binding) -> bool:
        ctx = self.ctx
        for node in self._load_index()[0].get(holder.id, ()):
            if contains(binding.scope.node, node):
                if ctx.model.scope_of(node) is not binding.scope:
                    return True
                if binding not in ctx.model.bindings_at(node):
                    continue
                parent = getattr(node, "_hl_parent", None)
                if isinstance(parent, ast.Attribute) and parent.attr in _LIST_METHODS_THAT_DROP:
                    continue
                return True
        return False


def _functions_reaching(ctx: FileContext, functions: dict[int, ast.AST]) -> dict[int, ast.AST]:
    """``functions`` and the functions of the file that call one of them by
    name (``self._remove_hooks()``, ``helper(m)``, ``model.apply(helper)``),
    one level up: the helpers a function uses to register or remove."""
    out = dict(functions)
    model = ctx.model
    for func in list(functions.values()):
        name = getattr(func, "name", None)
        if name is None:
            continue
        calls = list(model.method_calls.get(name, ())) + list(model.name_calls.get(name, ()))
        calls += [c for c in model.method_calls.get("apply", ()) if c.args and
                  getattr(c.args[0], "attr", getattr(c.args[0], "id", None)) == name]
        for call in calls:
            caller = function_of(call)
            if isinstance(caller, FunctionNode):
                out.setdefault(id(caller), caller)
    return out


def _other_branch(ctx: FileContext, use: ast.Name, binding: Binding) -> bool:
    """Can ``binding`` reach ``use`` although another binding comes between them
    in the text (``if d == "fwd": h = ... elif ...: h = ...``, then ``use(h)``)?
    True when the bindings in between are all in branches (if/try) that do not
    hold ``binding`` itself."""
    others = [b for b in ctx.model.bindings_at(use) if b is not binding]
    for other in others:
        cur = getattr(other.node, "_hl_parent", None)
        in_branch = False
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            if isinstance(cur, (ast.If, ast.Try, ast.Match)) and not contains(cur, binding.node):
                in_branch = True
                break
            cur = getattr(cur, "_hl_parent", None)
        if not in_branch:
            return False
    return True


def _is_test_file(path: str) -> bool:
    parts = path.replace("\\", "/").split("/")
    return any(p in ("tests", "test", "testing") for p in parts[:-1]) or parts[-1].startswith("test_") \
        or parts[-1].endswith("_test.py") or parts[-1] == "conftest.py"


def _is_script(tree: ast.Module) -> bool:
    """A file with an ``if __name__ == "__main__":`` block (a conversion script in a package)."""
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare) and isinstance(stmt.test.left, ast.Name) \
                and stmt.test.left.id == "__name__":
            return True
    return False


def _related_classes(a: ClassInfo, b: ClassInfo) -> bool:
    def bases(info: ClassInfo) -> set[int]:
        out, stack = set(), [info]
        while stack:
            cur = stack.pop()
            if id(cur) not in out:
                out.add(id(cur))
                stack.extend(cur.local_bases)
        return out

    return id(b) in bases(a) or id(a) in bases(b)
