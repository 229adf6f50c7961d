"""Conditions whose value is known before the code runs.

The control-flow graphs cut the branch such a condition never takes:
literals (``if False:``, ``while 1:``), ``typing.TYPE_CHECKING`` (false when
the code runs), ``__debug__``, a module-level switch bound once to a boolean
and never declared ``global`` (``DEBUG = False``), and what
:func:`hooklint.static.fallbacks.decide` knows of every torch >= 1.8
(``hasattr(m, "register_full_backward_hook")``, version gates at 1.8 or
below).
"""

from __future__ import annotations

import ast

from hooklint.static.fallbacks import decide
from hooklint.static.semantic import SemanticModel

_TYPE_CHECKING = frozenset({"typing.TYPE_CHECKING", "typing_extensions.TYPE_CHECKING"})


def truth(model: SemanticModel, test: ast.AST, depth: int = 0) -> bool | None:
    """The value of ``test`` whenever it runs, or None when it may differ."""
    if depth > 6:
        return None
    if isinstance(test, ast.Constant):
        if test.value is Ellipsis:
            return True
        try:
            return bool(test.value)
        except Exception:  # noqa: BLE001 - an odd constant: unknown
            return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = truth(model, test.operand, depth + 1)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [truth(model, v, depth + 1) for v in test.values]
        if isinstance(test.op, ast.And):
            if any(v is False for v in values):
                # `a and False`: false whatever `a` is (its side effects aside)
                return False
            return True if all(v is True for v in values) else None
        if any(v is True for v in values):
            return True
        return False if all(v is False for v in values) else None
    if isinstance(test, ast.Name):
        if test.id == "__debug__":
            return True
    if isinstance(test, (ast.Name, ast.Attribute)) and _qualify(model, test) in _TYPE_CHECKING:
        return False
    if isinstance(test, (ast.Name, ast.Call, ast.Compare, ast.Attribute)) and hasattr(test, "_hl_parent"):
        try:
            return decide(model, test)
        except RecursionError:
            return None
    return None


def _qualify(model: SemanticModel, expr: ast.AST) -> str | None:
    try:
        return model.qualify(expr) if hasattr(expr, "_hl_scope") or isinstance(expr, ast.Attribute) else None
    except Exception:  # noqa: BLE001 - an expression the model did not visit
        return None
