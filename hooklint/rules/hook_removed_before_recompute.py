"""HKL702: an output-changing forward hook removed before the backward that recomputes its module (docs/compile.md)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.compile_regions import (
    CHECKPOINT_REGION_PATTERN,
    CheckpointRegions,
    Foreign,
    Refs,
    Region,
    foreign_registrations,
    receiver_views,
    runs_after,
    runs_again,
    runs_region,
    views_relation,
)
from hooklint.static.context import FileContext
from hooklint.static.flow import BackwardFinder, executed_nodes, function_of
from hooklint.static.hook_effects import changes_output
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.semantic import FunctionNode
from hooklint.static.values import src

HELP = ("Remove the hook after the `backward()` that uses this forward (keep it registered through the "
        "recompute), or exclude the hooked module from checkpointing; an observe-only hook can be removed early.")
WITH_HELP = ("Run the `backward()` inside the `with` block, so the hook is still registered when the backward "
             "recomputes the region; or exclude the hooked module from checkpointing.")


@dataclass
class _Removal:
    node: ast.AST  # the remove() call, or the `with` item whose exit removes the hook
    forward: ast.Call  # the call that ran the checkpointed forward with the hook
    backward: ast.Call | None  # the backward that recomputes (None: in a module's forward, the caller's)
    how: str  # "remove", "finally", "with", "forward"


class HookRemovedBeforeRecompute(Rule):
    """
    ## What it does
    Reports the removal of a forward hook or forward pre-hook that changes
    what a module computes (it returns a new output or input, or edits it in
    place) on a module inside an activation-checkpointed region
    (`torch.utils.checkpoint.checkpoint`, `checkpoint_wrapper`,
    `checkpoint_sequential`), when the removal runs after the checkpointed
    forward and before the backward that recomputes it: `handle.remove()`
    between `out = model(x)` and `loss.backward()`, in a `finally` around the
    forward, at the exit of a `with` block that holds only the forward, or
    inside a module's `forward` right after the checkpointed call.

    ## Why is this bad?
    Activation checkpointing does not keep the region's activations: the
    backward runs the region's forward again to rebuild them, with the hooks
    registered *at that moment*.  A steering vector, an intervention or an
    adapter applied by a hook that is gone by then is missing from the
    recompute: the backward differentiates activations the forward never
    produced, and the gradients are silently wrong (a 3-layer MLP whose first
    layer's output a hook scaled by 3: every gradient off, max abs
    difference 1.35, no error).  Removing the same hook before `backward()`
    without checkpointing changes nothing, and so does removing an
    observe-only hook under checkpointing: only hooks that change the
    computation are reported.

    Under non-reentrant checkpointing (the default of `checkpoint_wrapper`)
    the recompute stops once the last saved activation is rebuilt: a forward
    hook on the checkpointed module itself, or on its last layer, does not
    run again and is not reported.

    ## Known problems
    The region, the registration, the removal and the backward must be seen
    in one file; a removal through a helper of another file is found by
    `hooklint run`, which also compares what the module produced in the
    forward and in the recompute.  Where the order of the region's layers
    cannot be seen, non-reentrant regions are not reported.

    ## Example
    ```python
    import torch
    import torch.nn as nn
    from torch.utils.checkpoint import checkpoint

    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    handle = model[0].register_forward_hook(lambda module, inputs, output: output * 3.0)
    out = checkpoint(model, torch.rand(4, 8), use_reentrant=False)
    handle.remove()
    out.sum().backward()
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn
    from torch.utils.checkpoint import checkpoint

    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    handle = model[0].register_forward_hook(lambda module, inputs, output: output * 3.0)
    out = checkpoint(model, torch.rand(4, 8), use_reentrant=False)
    out.sum().backward()
    handle.remove()
    ```

    ## Fix safety
    There is no automatic fix: where the hook's lifetime should end depends
    on the code that registers it.

    ## References
    - [`torch.utils.checkpoint`](https://pytorch.org/docs/stable/checkpoint.html)
    - [`torch.utils.checkpoint.checkpoint`](https://pytorch.org/docs/stable/checkpoint.html): the recompute
      runs the forward again in backward
    """

    code = "HKL702"
    name = "hook-removed-before-recompute"
    summary = "An output-changing forward hook is removed before the backward that recomputes its checkpointed module"
    severity = Severity.ERROR
    origins = (Origin.STATIC, Origin.RUNTIME)
    triggers = ("checkpoint",)
    trigger_pattern = CHECKPOINT_REGION_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # removed after the backward
        "import torch, torch.nn as nn\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
        "h = model[0].register_forward_hook(lambda m, i, o: o * 3)\n"
        "out = checkpoint(model, torch.rand(1, 2), use_reentrant=False)\n"
        "out.sum().backward()\n"
        "h.remove()\n",
        # observe-only: cannot change gradients
        "import torch, torch.nn as nn\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
        "feats = []\n"
        "h = model[0].register_forward_hook(lambda m, i, o: feats.append(o.detach()))\n"
        "out = checkpoint(model, torch.rand(1, 2), use_reentrant=False)\n"
        "h.remove()\n"
        "out.sum().backward()\n",
        # no checkpointing: removing before backward changes nothing
        "import torch, torch.nn as nn\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
        "h = model[0].register_forward_hook(lambda m, i, o: o * 3)\n"
        "out = model(torch.rand(1, 2))\n"
        "h.remove()\n"
        "out.sum().backward()\n",
        # the last layer of a non-reentrant region does not run again
        "import torch, torch.nn as nn\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
        "h = model[2].register_forward_hook(lambda m, i, o: o * 3)\n"
        "out = checkpoint(model, torch.rand(1, 2), use_reentrant=False)\n"
        "h.remove()\n"
        "out.sum().backward()\n",
        # a module outside the checkpointed region
        "import torch, torch.nn as nn\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "body = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 2))\n"
        "head = nn.Linear(2, 1)\n"
        "h = head.register_forward_hook(lambda m, i, o: o * 3)\n"
        "out = head(checkpoint(body, torch.rand(1, 2), use_reentrant=False))\n"
        "h.remove()\n"
        "out.sum().backward()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "from torch.utils.checkpoint import checkpoint\n"
            "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
            "h = model[0].register_forward_hook(lambda m, i, o: o * 3)\n"
            "out = checkpoint(model, torch.rand(1, 2), use_reentrant=False)\n"
            "h.remove()  # HKL702\n"
            "out.sum().backward()\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "from torch.utils.checkpoint import checkpoint\n"
            "class Block(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.inner, self.outer = nn.Linear(8, 8), nn.Linear(8, 8)\n"
            "    def forward(self, x):\n"
            "        return self.outer(torch.tanh(self.inner(x)))\n"
            "class Intervened(nn.Module):\n"
            "    def __init__(self, block, factor):\n"
            "        super().__init__()\n"
            "        self.block, self.factor = block, factor\n"
            "    def forward(self, x):\n"
            "        handle = self.block.inner.register_forward_hook(lambda m, i, o: o * self.factor)\n"
            "        try:\n"
            "            return checkpoint(self.block, x, use_reentrant=False)\n"
            "        finally:\n"
            "            handle.remove()  # HKL702\n"
        ),
        Invalid(
            "import contextlib, torch, torch.nn as nn\n"
            "from torch.utils.checkpoint import checkpoint\n"
            "@contextlib.contextmanager\n"
            "def steer(module, vector):\n"
            "    def add(m, args):\n"
            "        return (args[0] + vector,)\n"
            "    handle = module.register_forward_pre_hook(add)\n"
            "    try:\n"
            "        yield\n"
            "    finally:\n"
            "        handle.remove()\n"
            "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
            "with steer(model[2], torch.ones(2)):  # HKL702\n"
            "    out = checkpoint(model, torch.rand(1, 2), use_reentrant=True)\n"
            "out.sum().backward()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        refs = Refs(ctx)
        regions = CheckpointRegions(ctx, refs).regions()
        if not regions:
            return
        finder = BackwardFinder(ctx.model, ctx.inference)
        reported: set[int] = set()
        for reg in ctx.hooks.instances:
            if reg.kind not in (HookKind.FORWARD, HookKind.FORWARD_PRE) or reg.hook is None or reg.receiver is None:
                continue
            change = changes_output(reg.hook.node, _changed_param(reg))
            if change is None:
                continue
            for site, _receiver, views in receiver_views(ctx, refs, reg):
                found = self._in_region(views, reg.kind, regions)
                if found is None:
                    continue
                region, how = found
                removal = self._removal(ctx, refs, finder, reg, region, site)
                if removal is None or id(removal.node) in reported:
                    continue
                reported.add(id(removal.node))
                yield self._finding(ctx, reg, region, how, removal, change)
                break

        relevant = lambda views: any(views_relation(views, region) is not None for region in regions)  # noqa: E731
        for foreign in foreign_registrations(ctx, refs, relevant):
            if not foreign.changes or foreign.removal not in ("exit", "yield") \
                    or foreign.kind not in (HookKind.FORWARD.value, HookKind.FORWARD_PRE.value):
                continue
            found = self._in_region(foreign.views, HookKind(foreign.kind), regions)
            if found is None:
                continue
            removal = self._with_block(ctx, refs, finder, foreign.site, found[0])
            if removal is not None and id(removal.node) not in reported:
                reported.add(id(removal.node))
                yield self._foreign_finding(ctx, foreign, found[0], found[1], removal)

    @staticmethod
    def _in_region(views, kind, regions: list[Region]) -> tuple[Region, str] | None:
        if isinstance(kind, Registration):
            kind = kind.kind
        for region in regions:
            rel = views_relation(views, region)
            if rel is not None and runs_again(region, rel[0], rel[1], kind is HookKind.FORWARD_PRE):
                return region, rel[0]
        return None

    # -- where the hook is removed
    def _removal(self, ctx: FileContext, refs: Refs, finder: BackwardFinder, reg: Registration,
                 region: Region, site: ast.Call | None) -> _Removal | None:
        if site is not None:
            return self._context_manager(ctx, refs, finder, reg, region, site)
        if reg.via:
            return None
        stmt = getattr(reg.call, "_hl_parent", None)
        if not (isinstance(stmt, ast.Assign) and stmt.value is reg.call and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            return None
        handle = stmt.targets[0]
        func = function_of(reg.call)
        body = func if func is not None else ctx.tree
        removals = []
        for call in ctx.model.method_calls.get("remove", ()):
            removed = call.func.value  # type: ignore[attr-defined]
            if isinstance(removed, ast.Name) and removed.id == handle.id and function_of(call) is func \
                    and not call.args and any(b.node is stmt for b in ctx.model.bindings_at(removed)):
                removals.append(call)
        calls = [node for node in executed_nodes(body) if isinstance(node, ast.Call)]
        for removal in removals:
            if runs_after(reg.call, removal) is None or runs_after(reg.call, removal).how != "after":
                continue
            forward = next((c for c in calls if _between(reg.call, c, removal) and runs_region(refs, c, region)), None)
            if forward is None:
                continue
            if any(_between(forward, c, removal) and finder.backward_call(c) is not None for c in calls):
                continue  # the backward ran while the hook was there
            how = "finally" if _in_finally(removal) else "remove"
            if isinstance(func, FunctionNode) and func.name == "forward":
                return _Removal(removal, forward, None, how)
            backward = next((c for c in calls if finder.backward_call(c) is not None
                             and runs_after(removal, c) is not None and runs_after(removal, c).how == "after"), None)
            if backward is not None:
                return _Removal(removal, forward, backward, how)
        return None

    def _context_manager(self, ctx: FileContext, refs: Refs, finder: BackwardFinder, reg: Registration,
                         region: Region, site: ast.Call) -> _Removal | None:
        """A ``@contextmanager`` helper of this file that registers before its
        ``yield`` and removes after it, used as ``with helper(module):`` around
        the forward only."""
        helper = function_of(reg.call)
        if not isinstance(helper, FunctionNode) or not _is_contextmanager(ctx, helper):
            return None
        item = getattr(site, "_hl_parent", None)
        with_stmt = getattr(item, "_hl_parent", None)
        if not isinstance(item, ast.withitem) or not isinstance(with_stmt, (ast.With, ast.AsyncWith)):
            return None
        yields = [n for n in executed_nodes(helper) if isinstance(n, (ast.Yield, ast.YieldFrom))]
        removes = [n for n in executed_nodes(helper) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                   and n.func.attr == "remove" and not n.args]
        if not yields or not any(runs_after(y, r) is not None for y in yields for r in removes):
            return None
        return self._with_block(ctx, refs, finder, site, region)

    def _with_block(self, ctx: FileContext, refs: Refs, finder: BackwardFinder, site: ast.Call,
                    region: Region) -> _Removal | None:
        """``with helper(...):`` (``site``) around the checkpointed forward only, the backward after it."""
        item = getattr(site, "_hl_parent", None)
        with_stmt = getattr(item, "_hl_parent", None)
        if not isinstance(item, ast.withitem) or not isinstance(with_stmt, (ast.With, ast.AsyncWith)):
            return None
        inner = [n for stmt in with_stmt.body for n in executed_nodes(stmt) if isinstance(n, ast.Call)]
        forward = next((c for c in inner if runs_region(refs, c, region)), None)
        if forward is None or any(finder.backward_call(c) is not None for c in inner):
            return None
        func = function_of(with_stmt)
        body = func if func is not None else ctx.tree
        after = [n for n in executed_nodes(body) if isinstance(n, ast.Call) and finder.backward_call(n) is not None
                 and runs_after(with_stmt, n) is not None and runs_after(with_stmt, n).how == "after"]
        if not after and isinstance(func, FunctionNode) and not any(
                isinstance(n, ast.Call) and finder.backward_call(n) is not None for n in executed_nodes(func)):
            # `def steered_loss(...): with ...: out = model(x); return loss(out)`: the caller's backward
            after = _backward_of_result(ctx, finder, func)
        if not after:
            return None
        return _Removal(site, forward, after[0], "with")

    def _foreign_finding(self, ctx: FileContext, foreign: Foreign, region: Region, how: str,
                         removal: _Removal) -> Finding:
        kind = "forward pre-hook" if foreign.kind == HookKind.FORWARD_PRE.value else "forward hook"
        changes = "changes its input" if foreign.kind == HookKind.FORWARD_PRE.value else "changes its output"
        inside = "the checkpointed module" if how == "root" else "a module inside the checkpointed region"
        backward = removal.backward
        when = f"before the backward `{src(backward.func)}(...)` at line {ctx.span(backward)[0].row}" \
            if backward is not None else "before the backward"
        exits = "when this `with` block exits" if foreign.removal == "exit" else "after the `with` block's body"
        message = (f"`{foreign.callee}(...)` (in another file) registers a {kind} on `{src(foreign.argument)}` "
                   f"({inside} of `{region.text}` at line {ctx.span(region.call)[0].row}) that {changes}, and "
                   f"removes it {exits}: after the checkpointed forward at line {ctx.span(removal.forward)[0].row} "
                   f"and {when}, which recomputes the region without the hook, so the gradients are computed from "
                   f"activations the forward never produced (silently wrong)")
        related = [Related("the checkpointed region", ctx.display_path, ctx.span(region.call)[0])]
        if backward is not None:
            related.append(Related("the backward that recomputes without it", ctx.display_path,
                                   ctx.span(backward)[0]))
        return self.finding(ctx, removal.node, message, help=WITH_HELP, related=related)

    def _finding(self, ctx: FileContext, reg: Registration, region: Region, how: str, removal: _Removal,
                 change: ast.AST) -> Finding:
        kind = "forward pre-hook" if reg.kind is HookKind.FORWARD_PRE else "forward hook"
        hook = f" `{reg.hook.name}`" if reg.hook is not None else ""
        reg_row = ctx.span(reg.call)[0].row
        region_row = ctx.span(region.call)[0].row
        forward_row = ctx.span(removal.forward)[0].row
        changes = "changes its input" if reg.kind is HookKind.FORWARD_PRE else "changes its output"
        place = {"remove": "is removed here", "finally": "is removed in this `finally`",
                 "with": "is removed when this `with` block exits",
                 "forward": "is removed here"}[removal.how]
        if removal.backward is not None:
            row = ctx.span(removal.backward)[0].row
            when = f"before the backward `{src(removal.backward.func)}(...)` at line {row}"
        else:
            when = "before `forward` returns, so before any backward of its output"
        module = reg.receiver_text
        inside = "the checkpointed module" if how == "root" else "a module inside the checkpointed region"
        message = (f"the {kind}{hook} on `{module}` ({inside} of `{region.text}` at line {region_row}, registered at "
                   f"line {reg_row}) {changes} (`{src(change)[:60]}`) and {place}, after the checkpointed forward at "
                   f"line {forward_row} and {when}: the backward recomputes the region without the hook, so the "
                   f"gradients are computed from activations the forward never produced (silently wrong)")
        related = [Related("the hook is registered here", ctx.display_path, ctx.span(reg.call)[0]),
                   Related("the checkpointed region", ctx.display_path, ctx.span(region.call)[0])]
        if removal.backward is not None:
            related.append(Related("the backward that recomputes without it", ctx.display_path,
                                   ctx.span(removal.backward)[0]))
        return self.finding(ctx, removal.node, message, help=WITH_HELP if removal.how == "with" else HELP,
                            related=related)


def _changed_param(reg: Registration) -> str | None:
    if reg.kind is HookKind.FORWARD:
        return reg.param("output")
    return reg.param("args") if reg.with_kwargs else reg.param("input")


def _backward_of_result(ctx: FileContext, finder: BackwardFinder, func: ast.AST) -> list[ast.Call]:
    """The backward a caller in this file runs on what ``func`` returns:
    ``func(...).backward()``, or ``loss = func(...)`` then ``loss.backward()``."""
    out = []
    for call in ctx.model.name_calls.get(getattr(func, "name", ""), ()):
        bindings = ctx.model.bindings_at(call.func)  # type: ignore[arg-type]
        if len(bindings) != 1 or bindings[0].node is not func:
            continue
        parent = getattr(call, "_hl_parent", None)
        if isinstance(parent, ast.Attribute) and parent.attr == "backward":
            grand = getattr(parent, "_hl_parent", None)
            if isinstance(grand, ast.Call) and finder.backward_call(grand) is not None:
                out.append(grand)
                continue
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            name = parent.targets[0].id
            caller = function_of(call)
            scope_body = caller if caller is not None else ctx.tree
            for node in executed_nodes(scope_body):
                if isinstance(node, ast.Call) and finder.backward_call(node) is not None \
                        and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
                        and node.func.value.id == name and runs_after(call, node) is not None:
                    out.append(node)
                    break
    return out


def _between(first: ast.AST, node: ast.AST, last: ast.AST) -> bool:
    a, b = runs_after(first, node), runs_after(node, last)
    return a is not None and a.how == "after" and b is not None and b.how == "after"


def _in_finally(node: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    child = node
    while cur is not None and not isinstance(cur, FunctionNode):
        if isinstance(cur, ast.Try) and child in cur.finalbody:
            return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


def _is_contextmanager(ctx: FileContext, func: ast.AST) -> bool:
    for dec in getattr(func, "decorator_list", ()):
        qual = ctx.model.qualify(dec)
        if qual in ("contextlib.contextmanager", "contextlib.asynccontextmanager"):
            return True
    return False
