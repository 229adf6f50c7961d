"""Dereferences guarded by another value's ``None`` test, in a custom ``autograd.Function``.

A Function's ``forward`` (or a helper of the same file it calls) computes
some tensors only under a condition: a gradient only when an input requires
grad, a buffer only for one mode.  Those are ``None`` on the other paths.
:func:`mismatched_none_guards` finds a dereference of such a value ``y``
(``y.detach()``, ``y.shape``, ``y[i]``) whose guard tests *another* value
``x`` (``y.detach() if x is not None else None``, ``if x is not None:
y.view(...)``) while ``y`` can be ``None`` with ``x`` not ``None``: a binding
``y = None`` that is not itself under ``x is None`` (or under ``y``'s own
test), and that no later assignment under ``x is not None`` overwrites.

Followed through local names, conditional expressions, tuple unpacking
and the same file's helpers whose returned tuple holds ``y`` (their
parameters mapped to the caller's names at the call).  On the syntax of
one file; flow-insensitive apart from the overwrite test above.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.grad_output_shape import file_helper, returned_values
from hooklint.static.semantic import positional_params

_MAX_DEPTH = 3


@dataclass(frozen=True)
class NoneWitness:
    """Where ``y`` is bound to None on a path where the guard's value need not be None."""

    binding: ast.AST  # the ``y = None`` statement (or the ``None`` branch of a conditional expression)
    func: ast.AST  # the function it is in
    condition: str  # the condition it is under, in words ("" when unconditional)


@dataclass(frozen=True)
class MismatchedGuard:
    deref: ast.AST  # ``y.detach`` / ``y[i]``
    name: str  # y
    guard: str  # x
    witness: NoneWitness


def _dotted(expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = _dotted(expr.value)
        return f"{base}.{expr.attr}" if base else None
    return None


def _none_test(test: ast.AST) -> tuple[str, bool] | None:
    """(name, True) for ``name is None``, (name, False) for ``name is not None``; ``name`` may be dotted
    (``ctx.bias``)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        name = _dotted(test.left)
        if name is None:
            return None
        if isinstance(test.ops[0], ast.Is):
            return name, True
        if isinstance(test.ops[0], ast.IsNot):
            return name, False
    return None


def _contains(parent: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(parent))


def _facts(test: ast.AST, branch: bool) -> list[tuple[str, bool]]:
    """The None tests that hold when ``branch`` of ``test`` is taken (through ``and`` / ``or`` / ``not``)."""
    found = _none_test(test)
    if found is not None:
        return [(found[0], found[1] if branch else not found[1])]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _facts(test.operand, not branch)
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) == branch:
        return [fact for value in test.values for fact in _facts(value, branch)]
    return []


def _guards(node: ast.AST, func: ast.AST) -> list[tuple[str, bool]]:
    """The None tests that hold where ``node`` runs: (name, is None) from the enclosing conditional
    expressions, ``if`` statements and ``and`` chains, nearest first."""
    out = []
    child, cur = node, getattr(node, "_hl_parent", None)
    while cur is not None and cur is not func:
        if isinstance(cur, (ast.IfExp, ast.If)) and child is not cur.test:
            in_body = any(child is b for b in cur.body) if isinstance(cur, ast.If) else child is cur.body
            out.extend(_facts(cur.test, in_body))
        elif isinstance(cur, ast.BoolOp) and isinstance(cur.op, ast.And):
            for value in cur.values:
                if value is child:
                    break
                out.extend(_facts(value, True))
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return out


def _statement(node: ast.AST) -> ast.stmt | None:
    while node is not None and not isinstance(node, ast.stmt):
        node = getattr(node, "_hl_parent", None)
    return node


def _block_of(stmt: ast.stmt) -> list[ast.stmt] | None:
    parent = getattr(stmt, "_hl_parent", None)
    for field in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            return block
    return None


def reaching_assignments(stmt: ast.stmt, name: str, func: ast.AST) -> list[ast.Assign]:
    """The assignments of ``name`` that can reach ``stmt``: walking back through the blocks that hold
    it, the nearest plain assignment ends the search (it kills the earlier ones); assignments nested in
    compound statements on the way may or may not run, and are all kept."""
    out: list[ast.Assign] = []
    # `if t:` / `if not t:` statements that bind the name, seen on the way back (in this block or an
    # enclosing one: each ran before ``stmt`` on this path)
    one_sided: list[tuple[str, bool]] = []
    cur = stmt
    while cur is not None and cur is not func:
        block = _block_of(cur)
        if block is None:
            break
        before = block[:[id(s) for s in block].index(id(cur))]
        for prev in reversed(before):
            if isinstance(prev, ast.Assign) and _binds(prev, name):
                out.append(prev)
                return out
            if not isinstance(prev, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.extend(n for n in ast.walk(prev) if isinstance(n, ast.Assign) and _binds(n, name))
                if _certainly_binds(prev, name):
                    return out  # every path through it binds the name: the earlier bindings are dead
                side = _one_sided_binding(prev, name)
                if side is not None:
                    if (side[0], not side[1]) in one_sided:
                        return out  # `if t: y = ...` and `if not t: y = ...`: one of them always runs
                    one_sided.append(side)
        cur = getattr(cur, "_hl_parent", None)
        if isinstance(cur, (ast.For, ast.AsyncFor, ast.While)):
            # a later statement of the loop body reaches the next iteration
            out.extend(n for n in ast.walk(cur) if isinstance(n, ast.Assign) and _binds(n, name) and n not in out)
    return out


def _certainly_binds(stmt: ast.stmt, name: str) -> bool:
    """Does every normal path through ``stmt`` bind ``name``?  (both branches of an ``if``, a ``with``'s
    body; a loop or ``try`` may run its body zero times or leave it early)"""
    if isinstance(stmt, ast.Assign):
        return _binds(stmt, name)
    if isinstance(stmt, ast.If):
        return any(_certainly_binds(s, name) for s in stmt.body) and \
            any(_certainly_binds(s, name) for s in stmt.orelse)
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return any(_certainly_binds(s, name) for s in stmt.body)
    return False


def _one_sided_binding(stmt: ast.stmt, name: str) -> tuple[str, bool] | None:
    """``if t: <binds name>`` as (t, True), ``if not t: ...`` as (t, False); the ``else`` branch binding
    it instead counts as the opposite side."""
    if not isinstance(stmt, ast.If):
        return None
    in_body = any(_certainly_binds(s, name) for s in stmt.body)
    in_else = any(_certainly_binds(s, name) for s in stmt.orelse)
    if in_body == in_else:
        return None
    test, positive = stmt.test, in_body
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, positive = test.operand, not positive
    if not isinstance(test, (ast.Name, ast.Attribute)):
        return None
    return ast.dump(test), positive


def _guard_none_beside(stmt: ast.stmt, guard_names: set[str]) -> bool:
    """``a = b = None`` or ``b = None`` in the same block as ``stmt``'s ``a = None``: on that path the
    guard is None too (names kept in step, as ``x`` and its view ``x_``)."""
    if isinstance(stmt, ast.Assign) and any(isinstance(tg, ast.Name) and tg.id in guard_names
                                            for tg in stmt.targets):
        return True
    block = _block_of(stmt)
    if block is None:
        return False
    for other in block:
        if other is stmt or not isinstance(other, ast.Assign):
            continue
        if isinstance(other.value, ast.Constant) and other.value.value is None and \
                any(isinstance(tg, ast.Name) and tg.id in guard_names for tg in other.targets):
            return True
    return False


def _binds(stmt: ast.Assign, name: str) -> bool:
    for target in stmt.targets:
        if isinstance(target, ast.Name) and target.id == name:
            return True
        if isinstance(target, (ast.Tuple, ast.List)) and any(isinstance(e, ast.Name) and e.id == name
                                                             for e in target.elts):
            return True
    return False


def _bound_value(stmt: ast.Assign, name: str) -> tuple[ast.AST, int | None] | None:
    for target in stmt.targets:
        if isinstance(target, ast.Name) and target.id == name:
            return stmt.value, None
        if isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
            for index, elt in enumerate(target.elts):
                if isinstance(elt, ast.Name) and elt.id == name:
                    return stmt.value, index
    return None


def _conditions(node: ast.AST, func: ast.AST) -> list[tuple[ast.AST, bool]]:
    """Every enclosing ``if`` / conditional expression test of ``node`` in ``func``, with the branch taken."""
    out = []
    child, cur = node, getattr(node, "_hl_parent", None)
    while cur is not None and cur is not func:
        if isinstance(cur, (ast.IfExp, ast.If)) and child is not cur.test:
            in_body = any(child is b for b in cur.body) if isinstance(cur, ast.If) else child is cur.body
            out.append((cur.test, in_body))
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return out


def _asserts_none(test: ast.AST, branch: bool, names: set[str]) -> bool:
    """Does taking ``branch`` of ``test`` mean one of ``names`` is None?"""
    found = _none_test(test)
    if found is not None:
        return found[0] in names and found[1] == branch
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _asserts_none(test.operand, not branch, names)
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) and branch:
            return any(_asserts_none(v, True, names) for v in test.values)
        if isinstance(test.op, ast.Or) and not branch:
            return any(_asserts_none(v, False, names) for v in test.values)
    if isinstance(test, (ast.Name, ast.Attribute)) and not branch:
        return _dotted(test) in names  # `if x:` not taken: x may be None
    return False


def _overwritten(stmt: ast.stmt, name: str, guard_names: set[str]) -> bool:
    """A later statement of the same block re-binds ``name`` always, or whenever the guard is not None."""
    parent = getattr(stmt, "_hl_parent", None)
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and any(s is stmt for s in block):
            break
    else:
        return False
    after = block[[id(s) for s in block].index(id(stmt)) + 1:]
    for later in after:
        if _assigns(later, name):
            return True
        if isinstance(later, ast.If):
            # `if x is not None: y = ...`: its body runs whenever the guard's value is not None
            if _asserts_none(later.test, False, guard_names) and any(_assigns(s, name) for s in later.body):
                return True
            if _asserts_none(later.test, True, guard_names) and any(_assigns(s, name) for s in later.orelse):
                return True
    return False


def _assigns(stmt: ast.stmt, name: str) -> bool:
    """``stmt`` re-binds ``name`` to a value made without reading it (``y = y.sum(0)`` uses it first)."""
    if not isinstance(stmt, ast.Assign):
        return False
    if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt.value)):
        return False
    for target in stmt.targets:
        if isinstance(target, ast.Name) and target.id == name:
            return True
        if isinstance(target, (ast.Tuple, ast.List)) and any(isinstance(e, ast.Name) and e.id == name
                                                             for e in target.elts):
            return True
    return False


def _call_mapping(call: ast.Call, helper: ast.AST, names: set[str]) -> set[str]:
    """The helper's parameters that receive one of the caller's ``names`` at ``call``."""
    params = positional_params(helper)
    out = set()
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if isinstance(arg, ast.Name) and arg.id in names and position < len(params):
            out.add(params[position])
    for keyword in call.keywords:
        if keyword.arg and isinstance(keyword.value, ast.Name) and keyword.value.id in names:
            out.add(keyword.arg)
    return out


def _witness(expr: ast.AST, func: ast.AST, name: str, guard_names: set[str], tree: ast.Module,
             cls: ast.ClassDef | None, depth: int, seen: set[tuple[int, str]],
             conditions: list[tuple[ast.AST, bool]]) -> NoneWitness | None:
    """A path on which ``expr`` (bound to ``name`` in ``func``) is None while no name of ``guard_names``
    is (as far as the conditions on the way say)."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Constant) and expr.value is None:
        held = conditions + _conditions(expr, func)
        if any(_asserts_none(test, branch, guard_names) for test, branch in held):
            return None
        stmt = _statement(expr)
        if any(_asserts_none(test, branch, {name}) for test, branch in held):
            # `y = f(y) if y is not None else None`: None only if the earlier `y` was
            if stmt is None or (id(stmt), name) in seen:
                return None
            seen.add((id(stmt), name))
            return _assignments_witness(reaching_assignments(stmt, name, func), func, name, guard_names, tree,
                                        cls, depth, seen)
        if isinstance(stmt, ast.Assign) and stmt.value is expr and _overwritten(stmt, name, guard_names):
            return None
        if isinstance(stmt, ast.Assign) and stmt.value is expr and _guard_none_beside(stmt, guard_names):
            return None
        words = " and ".join(f"`{ast.unparse(t)}` is {'true' if b else 'false'}" for t, b in held[:2])
        return NoneWitness(stmt if stmt is not None else expr, func, words)
    if isinstance(expr, ast.IfExp):
        for branch, value in ((True, expr.body), (False, expr.orelse)):
            found = _witness(value, func, name, guard_names, tree, cls, depth, seen,
                             conditions + [(expr.test, branch)])
            if found is not None:
                return found
        return None
    if isinstance(expr, ast.Name):
        stmt = _statement(expr)
        if stmt is None or (id(stmt), expr.id) in seen:
            return None
        seen.add((id(stmt), expr.id))
        return _assignments_witness(reaching_assignments(stmt, expr.id, func), func, expr.id, guard_names, tree,
                                    cls, depth, seen)
    return None


def _assignments_witness(assignments: list[ast.Assign], func: ast.AST, name: str, guard_names: set[str],
                         tree: ast.Module, cls: ast.ClassDef | None, depth: int,
                         seen: set[tuple[int, str]]) -> NoneWitness | None:
    for stmt in assignments:
        bound = _bound_value(stmt, name)
        if bound is None:
            continue
        value, index = bound
        held = _conditions(stmt, func)
        if any(_asserts_none(test, branch, guard_names) for test, branch in held):
            continue
        found = None
        if index is None:
            found = _witness(value, func, name, guard_names, tree, cls, depth, seen, [])
        elif isinstance(value, (ast.Tuple, ast.List)):
            if index < len(value.elts):
                found = _witness(value.elts[index], func, name, guard_names, tree, cls, depth, seen, [])
        elif isinstance(value, ast.Call):
            helper = file_helper(value, tree, cls)
            if helper is not None:
                mapped = _call_mapping(value, helper, guard_names)
                for returned in returned_values(helper, index):
                    inner = returned.id if isinstance(returned, ast.Name) else name
                    found = _witness(returned, helper, inner, mapped, tree, cls, depth + 1, seen, [])
                    if found is not None:
                        break
        if found is not None:
            return found
    return None


def mismatched_none_guards(func: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module,
                           cls: ast.ClassDef | None) -> list[MismatchedGuard]:
    params = set(positional_params(func)) | {a.arg for a in func.args.kwonlyargs}
    out: list[MismatchedGuard] = []
    reported: set[str] = set()
    for node in ast.walk(func):
        if not isinstance(node, (ast.Attribute, ast.Subscript)) or not isinstance(node.value, ast.Name):
            continue
        if not isinstance(node.ctx, ast.Load):
            continue
        name = node.value.id
        if name in params or name in reported:
            continue
        guards = _guards(node, func)
        if not guards or any(g == name for g, _ in guards):
            continue  # unguarded (another question), or guarded by its own test
        tested = {g for g, is_none in guards if not is_none}
        if not tested:
            continue
        stmt = _statement(node)
        witness = _assignments_witness(reaching_assignments(stmt, name, func), func, name, tested, tree, cls, 0,
                                       set()) if stmt is not None else None
        if witness is not None:
            reported.add(name)
            out.append(MismatchedGuard(node, name, sorted(tested)[0], witness))
    return out
