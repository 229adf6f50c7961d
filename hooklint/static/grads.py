"""Parameter gradients in hook bodies: which expressions are a parameter
(so that ``.grad`` is written by AccumulateGrad), their ``.grad`` reads, and
whether one is written through.  Shared by the HKL2xx and HKL6xx rules."""

from __future__ import annotations

import ast

from hooklint.static.bodies import body_nodes
from hooklint.static.context import FileContext
from hooklint.static.values import TensorValue

_PARAM_ITERATORS = {"parameters": (), "named_parameters": (1,)}


def is_parameter(ctx: FileContext, expr: ast.AST, depth: int = 0) -> bool:
    """Is ``expr`` a parameter (so that ``expr.grad`` is written by AccumulateGrad)?"""
    if depth > 5:
        return False
    if isinstance(expr, ast.Attribute):
        if expr.attr in ("weight", "bias") or expr.attr.endswith(("_weight", "_bias")):
            return True
        value = ctx.inference.infer(expr)
        return isinstance(value, TensorValue) and value.parameter
    if isinstance(expr, ast.Name):
        for binding in ctx.model.bindings_at(expr):
            value = binding.value
            if binding.kind == "for" and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                    and _PARAM_ITERATORS.get(value.func.attr) == binding.path:
                return True
            if binding.kind == "assign" and not binding.path and isinstance(value, ast.AST) and value is not expr \
                    and is_parameter(ctx, value, depth + 1):
                return True
        value = ctx.inference.infer(expr)
        return isinstance(value, TensorValue) and value.parameter
    return False


def parameter_grads(ctx: FileContext, func: ast.AST) -> list[ast.Attribute]:
    """``<parameter>.grad`` expressions in a function body, in source order."""
    found = [n for n in body_nodes(func) if isinstance(n, ast.Attribute) and n.attr == "grad"
             and is_parameter(ctx, n.value)]
    found.sort(key=lambda n: (n.lineno, n.col_offset))
    return found


def writes_through(node: ast.Attribute) -> bool:
    """Is this ``.grad`` expression (or a view of it) assigned to or edited in place?"""
    child: ast.AST = node
    parent = getattr(node, "_hl_parent", None)
    while isinstance(parent, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(parent, ast.Attribute) and parent.value is child:
            if parent.attr.endswith("_") and not parent.attr.startswith("_"):
                return True
            if parent.attr not in ("data", "view", "view_as", "detach"):
                return False
        elif isinstance(parent, ast.Subscript):
            if isinstance(parent.ctx, ast.Store):
                return True
            if parent.value is not child:
                return False
        elif isinstance(parent, ast.Call) and parent.func is not child:
            return False
        child, parent = parent, getattr(parent, "_hl_parent", None)
    if isinstance(parent, (ast.Assign, ast.AugAssign)) and child is not getattr(parent, "value", None):
        return True
    return isinstance(node.ctx, ast.Store)
