"""HKL301: a tensor hook removed before the backward it was meant for (hook-semantics.md, section 3)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Applicability, Edit, Finding, Fix, Location, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.flow import (
    BackwardCall,
    BackwardFinder,
    block_of,
    contains,
    is_simple_statement,
    later_statements,
    names_stored_in,
    statement_of,
)
from hooklint.static.hook_targets import binding_of, hook_words, object_key, registrations_by_target, single_name_target
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.semantic import Binding
from hooklint.static.values import src

_TENSOR_KINDS = (HookKind.TENSOR, HookKind.POST_ACCUMULATE)


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
        by_target = registrations_by_target(ctx, registrations)
        for reg in registrations:
            same_target = by_target.get(object_key(ctx, reg.receiver), []) if reg.receiver is not None else []
            finding = self._check_registration(ctx, finder, reg, same_target)
            if finding is not None:
                yield finding

    def _check_registration(self, ctx: FileContext, finder: BackwardFinder, reg: Registration,
                            same_target: list[Registration]) -> Finding | None:
        stmt = getattr(reg.call, "_hl_parent", None)
        target = single_name_target(stmt, reg.call) if stmt is not None else None
        if target is None:
            return None
        binding = binding_of(ctx, target, stmt)
        if binding is None:
            return None
        remove_stmt = None
        for later in later_statements(stmt):  # type: ignore[arg-type]
            name = _removed_name(later)
            if name is not None and name.id == target.id and _refers_to(ctx, name, binding):
                if not ctx.core.can_run(later):
                    return None  # a removal that never runs removes nothing (the leak rules say so)
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
            if backward is not None and not ctx.core.can_run(backward.call):
                backward = None  # after a `return`, in a branch that never runs: not the backward it misses
            if backward is not None:
                break
        if backward is None:
            return None
        reg_row = ctx.span(reg.call)[0].row
        bw_start = ctx.span(backward.call)[0]
        removal = src(remove_stmt.value)  # type: ignore[attr-defined]
        message = (f"`{removal}` removes the {hook_words(reg)} registered on `{reg.receiver_text}` "
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
