"""Post-accumulate-grad hooks that clear the gradient, and other such hooks
that read it afterwards.

``Tensor.register_post_accumulate_grad_hook`` hooks of one tensor run in
registration order, each with the tensor whose ``.grad`` was just
accumulated.  A hook that steps an optimizer in backward and then calls
``zero_grad()`` (``set_to_none=True`` by default since torch 2.0) or sets
``param.grad = None`` leaves the hooks registered after it a tensor whose
``.grad`` is None (checked on torch 2.13).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind, Registration


@dataclass
class LateGradRead:
    reader: Registration
    read: ast.Attribute  # `param.grad` in the reader's body
    guarded: bool  # the read is a test against None
    clearer: Registration
    clear: ast.AST  # `zero_grad()` call or `param.grad = None`


def _param(node: ast.AST, bound: int) -> str | None:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return None
    params = [a.arg for a in node.args.posonlyargs + node.args.args][bound:]
    return params[0] if params else None


def _clears(node: ast.AST, param: str) -> ast.AST | None:
    for n in ast.walk(node):
        if isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "grad" and isinstance(t.value, ast.Name)
                and t.value.id == param for t in n.targets) \
                and isinstance(n.value, ast.Constant) and n.value.value is None:
            return n
        if isinstance(n, ast.Delete) and any(
                isinstance(t, ast.Attribute) and t.attr == "grad" and isinstance(t.value, ast.Name)
                and t.value.id == param for t in n.targets):
            return n
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "zero_grad":
            keep = [k for k in n.keywords if k.arg == "set_to_none"]
            if n.args or (keep and not (isinstance(keep[0].value, ast.Constant) and keep[0].value.value is True)):
                continue
            return n
    return None


def _grad_reads(node: ast.AST, param: str) -> list[tuple[ast.Attribute, bool]]:
    out = []
    guards: set[int] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Is, ast.IsNot)) \
                and isinstance(n.comparators[0], ast.Constant) and n.comparators[0].value is None:
            guards.add(id(n.left))
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr == "grad" and isinstance(n.ctx, ast.Load) \
                and isinstance(n.value, ast.Name) and n.value.id == param:
            out.append((n, id(n) in guards))
    out.sort(key=lambda r: (r[0].lineno, r[0].col_offset))
    return out


def late_grad_reads(ctx: FileContext) -> list[LateGradRead]:
    regs = [r for r in ctx.core.hooks.registrations
            if r.kind is HookKind.POST_ACCUMULATE and r.hook is not None and not r.via]
    clearers: list[tuple[Registration, ast.AST]] = []
    readers: list[tuple[Registration, ast.Attribute, bool]] = []
    for r in regs:
        param = _param(r.hook.node, r.hook.bound)  # type: ignore[union-attr]
        if param is None:
            continue
        clear = _clears(r.hook.node, param)  # type: ignore[union-attr]
        if clear is not None:
            clearers.append((r, clear))
            continue
        reads = _grad_reads(r.hook.node, param)  # type: ignore[union-attr]
        if reads:
            readers.append((r, reads[0][0], reads[0][1]))
    # Which tensors two registrations share is known only when one body makes both on a receiver written
    # the same way (then the order is known too); across functions the pair is judged only when the file
    # has a single clearing hook, both receivers are plain names (loop variables, parameters) and the
    # reader's function registers no other post-accumulate-grad hook (a step hook that keeps the grad).
    distinct_clearers = {id(c.hook.node) for c, _ in clearers}  # type: ignore[union-attr]
    out: list[LateGradRead] = []
    seen: set[int] = set()
    for reader, read, guarded in readers:
        if id(read) in seen:
            continue
        local = [(c, x) for c, x in clearers if _same_function(ctx, c, reader) and _same_receiver(c, reader)]
        alone = not any(_same_function(ctx, r, reader) and r.hook.node is not reader.hook.node  # type: ignore
                        for r in regs)
        across = [(c, x) for c, x in clearers
                  if isinstance(c.receiver, ast.Name) and isinstance(reader.receiver, ast.Name)]
        candidates = local if local else (across if len(distinct_clearers) == 1 and alone else [])
        for clearer, clear in candidates:
            if clearer.hook.node is reader.hook.node:  # type: ignore[union-attr]
                continue
            if _same_function(ctx, clearer, reader) and clearer.call.lineno > reader.call.lineno:
                continue  # registered after the reader in the same body: it runs later
            seen.add(id(read))
            out.append(LateGradRead(reader, read, guarded, clearer, clear))
            break
    return out


def _same_receiver(a: Registration, b: Registration) -> bool:
    """Written the same (`p` of two loops over the parameters, `layer.weight` twice): the same tensors as far
    as the text shows; `second.weight` and `second.bias` are not."""
    return a.receiver is not None and b.receiver is not None and ast.unparse(a.receiver) == ast.unparse(b.receiver)


def _same_function(ctx: FileContext, a: Registration, b: Registration) -> bool:
    places = ctx.core.places
    return places.owner(a.call) is places.owner(b.call)
