"""In-place ops on a module's output, read from the source.

A full backward hook wraps the module's output in a view
(``BackwardHookFunction``); an in-place op on that output then fails the
forward with :data:`FULL_HOOK_INPLACE_ERROR` (hook-semantics.md, section 5).
HKL403 falls back on these patterns when no graph facts exist, and HKL101's
and HKL303's fixes use them to decide what keeps the code running.

Only the AST: no torch, no user code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.context import FileContext
from hooklint.static.forward import inplace_modules
from hooklint.static.semantic import ClassInfo
from hooklint.static.values import ModuleValue

FULL_HOOK_INPLACE_ERROR = "Output 0 of BackwardHookFunction is a view and is being modified inplace"


@dataclass(frozen=True)
class InplaceSite:
    description: str  # "ReLU(inplace=True)", "`+=`"
    node: ast.AST  # where, in this file


_INPLACE_FUNCTIONS = frozenset({"relu_", "sigmoid_", "tanh_", "clamp_", "add_", "mul_", "zero_", "fill_"})


def inplace_use(ctx: FileContext, node: ast.AST, value: ast.AST) -> str | None:
    """How the call ``node`` modifies ``value`` (one of its parts) in place, or None."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.value is value and func.attr.endswith("_") \
            and not func.attr.startswith("_"):
        return f"`.{func.attr}()`"
    if not node.args or node.args[0] is not value:
        return None
    qual = ctx.model.qualify(func) or ""
    last = qual.rsplit(".", 1)[-1]
    if qual.startswith("torch.") and last in _INPLACE_FUNCTIONS:
        return f"`{last}()`"
    if qual.startswith("torch.") and any(
            k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in node.keywords):
        return f"`{last}(..., inplace=True)`"
    callee = ctx.inference.infer(func)
    if isinstance(callee, ModuleValue) and callee.torch_class and inplace_modules(callee.call):
        return f"`{ast.unparse(func)}` ({callee.class_name}(inplace=True))"
    return None


def inplace_use_of(ctx: FileContext, expr: ast.AST) -> InplaceSite | None:
    """An in-place op applied directly to ``expr``: ``f(expr)``, ``expr.relu_()``."""
    parent = getattr(expr, "_hl_parent", None)
    if parent is None:
        return None
    how = inplace_use(ctx, parent, expr)
    if how is None and isinstance(parent, ast.Attribute):  # expr.relu_()
        grand = getattr(parent, "_hl_parent", None)
        if grand is not None and getattr(grand, "func", None) is parent:
            how = inplace_use(ctx, grand, expr)
            parent = grand
    return InplaceSite(how, parent) if how is not None else None


def inplace_after_call(ctx: FileContext, cls: ClassInfo, attr: str) -> InplaceSite | None:
    """An in-place op on the result of ``self.<attr>(...)`` in ``cls.forward``."""
    forward = cls.method("forward")
    if forward is None:
        return None
    calls = [n for n in ast.walk(forward) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == attr and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
    for call in calls:
        site = inplace_use_of(ctx, call)
        if site is not None:
            return site
        parent = getattr(call, "_hl_parent", None)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            site = inplace_of_name(ctx, forward, parent.targets[0].id, parent)
            if site is not None:
                return site
    return None


def inplace_of_name(ctx: FileContext, forward: ast.AST, name: str, assigned: ast.Assign) -> InplaceSite | None:
    """The first in-place op on ``name`` after ``assigned``, before ``name`` is bound again."""
    later = sorted((n for n in ast.walk(forward) if isinstance(n, ast.Name) and n.id == name
                    and n.lineno > assigned.end_lineno), key=lambda n: (n.lineno, n.col_offset))
    for node in later:
        parent = getattr(node, "_hl_parent", None)
        if isinstance(node.ctx, ast.Store):
            if isinstance(parent, ast.AugAssign):
                return InplaceSite(f"`{name} {_AUG_SYMBOLS.get(type(parent.op), '')}= ...`", parent)
            return None  # rebound: later ops modify another tensor
        if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store):
            return InplaceSite(f"an item assignment (`{name}[...] = ...`)", parent)
        site = inplace_use_of(ctx, node)
        if site is not None:
            return site
    return None


_AUG_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
                ast.Pow: "**", ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
                ast.LShift: "<<", ast.RShift: ">>"}
