"""Which guards a path to the end of a function must have passed.

A path that falls off the end of a function runs its top-level statements in
order and leaves every ``if C: return ...`` through its false branch, so
``not C`` holds for each of them.  When those facts contradict each other
(``if not (a or b): return ...``, then ``if a: return ...``, ``if b: return
...``), no call ever falls off the end, though the control-flow graph, which
does not read conditions, has such a path.  Rules that report a function
falling off its end ask :func:`fall_off_is_excluded` first.

The reasoning is propositional: conditions are split at ``and`` / ``or`` /
``not`` into atoms compared by their source shape (``x is not None`` is the
negation of ``x is None``), and an atom whose names are assigned between two
guards is forgotten.  It only removes paths, never adds one.
"""

from __future__ import annotations

import ast
import itertools
from typing import Union

Formula = Union[tuple, str]

_NEGATED = {ast.IsNot: ast.Is, ast.NotEq: ast.Eq, ast.NotIn: ast.In}
_MAX_ATOMS = 12


def _always_exits(body: list[ast.stmt]) -> bool:
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and bool(last.orelse) and _always_exits(last.body) \
        and _always_exits(last.orelse)


def _formula(expr: ast.expr, atoms: dict[str, frozenset[str]]) -> Formula:
    if isinstance(expr, ast.BoolOp):
        op = "and" if isinstance(expr.op, ast.And) else "or"
        return (op, tuple(_formula(v, atoms) for v in expr.values))
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return ("not", _formula(expr.operand, atoms))
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and type(expr.ops[0]) in _NEGATED:
        positive = ast.Compare(left=expr.left, ops=[_NEGATED[type(expr.ops[0])]()], comparators=expr.comparators)
        return ("not", _formula(positive, atoms))
    key = ast.dump(expr, annotate_fields=False, include_attributes=False)
    atoms[key] = frozenset(n.id for n in ast.walk(expr) if isinstance(n, ast.Name))
    return key


def _holds(formula: Formula, value: dict[str, bool]) -> bool:
    if isinstance(formula, str):
        return value[formula]
    op, arg = formula
    if op == "not":
        return not _holds(arg, value)
    if op == "and":
        return all(_holds(f, value) for f in arg)
    return any(_holds(f, value) for f in arg)


def _atoms_of(formula: Formula) -> set[str]:
    if isinstance(formula, str):
        return {formula}
    op, arg = formula
    if op == "not":
        return _atoms_of(arg)
    return set().union(*(_atoms_of(f) for f in arg))


def _assigned_names(stmt: ast.stmt) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _facts(body: list[ast.stmt], atoms: dict[str, frozenset[str]], facts: list[Formula]) -> None:
    for stmt in body:
        if isinstance(stmt, ast.If):
            test = _formula(stmt.test, atoms)
            if _always_exits(stmt.body):
                facts.append(("not", test))
                _facts(stmt.orelse, atoms, facts)
                continue
            if stmt.orelse and _always_exits(stmt.orelse):
                facts.append(test)
                _facts(stmt.body, atoms, facts)
                continue
        changed = _assigned_names(stmt)
        if changed:
            facts[:] = [f for f in facts if not any(atoms[a] & changed for a in _atoms_of(f))]


def fall_off_is_excluded(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Do the early-exit guards of ``func``'s body contradict each other, so
    that no call reaches the end of the body?"""
    atoms: dict[str, frozenset[str]] = {}
    facts: list[Formula] = []
    _facts(func.body, atoms, facts)
    if not facts:
        return False
    used = sorted(set().union(*(_atoms_of(f) for f in facts)))
    if len(used) > _MAX_ATOMS:
        return False
    for values in itertools.product((False, True), repeat=len(used)):
        value = dict(zip(used, values))
        if all(_holds(f, value) for f in facts):
            return False
    return True
