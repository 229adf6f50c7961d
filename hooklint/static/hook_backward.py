"""A ``backward()`` that a function runs only to make its own gradient hooks fire.

Curvature, attribution and statistics code registers hooks that collect
something in the backward pass (a tensor hook on each layer's output, a
module backward hook), runs the model and calls ``loss.backward()`` to make
them fire.  ``backward()`` also accumulates into ``.grad`` of every
parameter the graph reaches: the model's owner's gradients.
``torch.autograd.grad(loss, inputs)`` fires the same hooks on the way
without touching any ``.grad``.

:func:`hook_only_backwards` finds, per function that registers such hooks on
modules the file does not build, the ``backward()`` calls it makes (itself,
or in a method of its class it calls) while they are registered, when
neither reads a ``.grad`` nor steps an optimizer: nothing in that code
consumes what ``backward()`` wrote.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext
    from hooklint.static.hooks import Registration

_MAX_DEPTH = 2
# Names whose call means the gradients written by backward() are used: an optimizer step,
# a gradient-clipping or -scaling utility, or an explicit read of `.grad`.
_CONSUMERS = frozenset({"step", "clip_grad_norm_", "clip_grad_value_", "unscale_", "all_reduce", "manual_backward"})


@dataclass(frozen=True)
class HookOnlyBackward:
    call: ast.Call  # the backward() call
    registrations: tuple["Registration", ...]  # the gradient-side hooks it is run for
    function: ast.AST  # the function that registers them
    clears: ast.Call | None  # a `zero_grad()` on the hooked model in that code, if any


def hook_only_backwards(ctx: "FileContext") -> list[HookOnlyBackward]:
    by_function: dict[int, list["Registration"]] = {}
    functions: dict[int, ast.AST] = {}
    for reg in ctx.hooks.instances:
        if reg.receiver is None or reg.is_global or not _gradient_side(reg) or _built_here(ctx, reg):
            continue
        func = ctx.model.enclosing_function(reg.call)
        if not isinstance(func, FunctionNode):
            continue
        if reg.call not in by_function.setdefault(id(func), []):
            by_function[id(func)].append(reg)
        functions[id(func)] = func
    out: list[HookOnlyBackward] = []
    for key, regs in by_function.items():
        func = functions[key]
        bodies = _bodies(ctx, func)
        if any(_consumes_grads(body) for body in bodies):
            continue
        first = min(r.call.lineno for r in regs)
        clears = next((n for body in bodies for n in executed_nodes(body) if isinstance(n, ast.Call)
                       and isinstance(n.func, ast.Attribute) and n.func.attr == "zero_grad"), None)
        for body in bodies:
            for node in executed_nodes(body):
                if _is_backward(ctx, node) and (body is not func or node.lineno > first):
                    out.append(HookOnlyBackward(node, tuple(regs), func, clears))
    out.sort(key=lambda b: (b.call.lineno, b.call.col_offset))
    return out


def _gradient_side(reg: "Registration") -> bool:
    """A hook that fires in the backward pass and collects something: a
    module backward hook that stores a value, or a forward hook whose body
    registers a tensor hook (on the output)."""
    if reg.hook is None:
        return False
    if reg.kind.is_module_backward:
        return _stores(reg.hook.node)
    if reg.kind.value in ("forward", "forward-pre"):
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "register_hook"
                   for n in executed_nodes(reg.hook.node))
    return False


_STORE_CALLS = frozenset({"append", "extend", "add", "update", "__setitem__", "add_", "copy_", "put"})


def _stores(hook: ast.AST) -> bool:
    """The hook keeps something: appends, assigns into a container or an attribute."""
    for node in executed_nodes(hook):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STORE_CALLS:
            return True
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, (ast.Subscript, ast.Attribute)) for t in targets):
                return True
        if isinstance(node, ast.Nonlocal):
            return True
    return False


def _built_here(ctx: "FileContext", reg: "Registration") -> bool:
    value = reg.receiver_value
    return getattr(value, "call", None) is not None or getattr(value, "local_class", None) is not None


def _bodies(ctx: "FileContext", func: ast.AST) -> list[ast.AST]:
    """``func`` and the methods of its class it calls on ``self`` (a level or two)."""
    cls = ctx.model.enclosing_class(func)
    out = [func]
    frontier = [func]
    for _ in range(_MAX_DEPTH):
        nxt = []
        for body in frontier:
            for node in executed_nodes(body):
                if cls is not None and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                    callee = cls.method(node.func.attr)
                    if isinstance(callee, FunctionNode) and callee not in out:
                        out.append(callee)
                        nxt.append(callee)
        frontier = nxt
    return out


def _consumes_grads(body: ast.AST) -> bool:
    for node in executed_nodes(body):
        if isinstance(node, ast.Attribute) and node.attr == "grad" and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in _CONSUMERS:
                return True
    return False


def _is_backward(ctx: "FileContext", node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "backward":
        qual = ctx.model.qualify(func)
        return qual is None or qual == "torch.autograd.backward"
    return ctx.model.qualify(func) == "torch.autograd.backward"
