"""Hook handles a loop overwrites: ``handles = register_hooks(block)`` (or
``h = m.register_forward_hook(...)``) inside a loop, whose previous value
nothing in the loop reads, keeps only the last iteration's handles.

A ``RemovableHandle`` is the only way to take its hook off again (short of
clearing the module's hook dicts): once it is unreachable its hook stays
registered for the life of the module.  The answer needs the value to be kept
after the loop (read after it, or stored on an attribute): that is what says
the author meant to remove the hooks later; a handle dropped on purpose is
another question (hook_leak).

What returns handles comes from the summaries (hooklint.static.core.summary):
a torch registration, or a function of the project (this file or, in the
project pass, another) whose summary returns a handle or a collection of them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.context import FileContext
from hooklint.static.tree_walk import child_nodes, walk_tree

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


@dataclass
class Overwrite:
    assign: ast.Assign
    loop: ast.For | ast.AsyncFor | ast.While
    target: str  # as written
    plural: bool  # a collection of handles (a helper's list), else one handle
    callee: str  # how to name what made them


def _own_nodes(node: ast.AST):
    """Nodes of ``node``'s body, without descending into nested scopes."""
    stack = child_nodes(node)
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, _SCOPES):
            stack.extend(child_nodes(n))


def _reads(node: ast.AST, text: str, is_name: bool) -> bool:
    """Anything in ``node`` (nested scopes included: a closure may read it) that reads ``text``."""
    for n in ast.walk(node):
        if is_name and isinstance(n, ast.Name) and n.id == text and not isinstance(n.ctx, ast.Store):
            return True
        if not is_name and isinstance(n, ast.Attribute) and not isinstance(n.ctx, ast.Store) \
                and ast.unparse(n) == text:
            return True
    return False


def _rebound_in(loop: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(loop)) \
        or any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name for n in ast.walk(loop))


def _varies_per_pass(call: ast.Call, loop: ast.AST) -> bool:
    """The call reaches something the loop rebinds (its receiver or an argument): each pass
    registers on another object."""
    parts: list[ast.AST] = list(call.args) + [k.value for k in call.keywords]
    if isinstance(call.func, ast.Attribute):
        parts.append(call.func.value)
    return any(isinstance(n, ast.Name) and _rebound_in(loop, n.id) for part in parts for n in ast.walk(part))


def _single_pass(loop: ast.AST) -> bool:
    """A loop that may stop after the assignment (break/return) or runs over one literal item (a raise
    ends the work: nothing uses the handles then)."""
    if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.iter, (ast.List, ast.Tuple, ast.Set)) \
            and len(loop.iter.elts) <= 1:
        return True
    return any(isinstance(n, (ast.Break, ast.Return)) for n in _own_nodes(loop))


def _loop_assignments(ctx: FileContext) -> list[tuple[ast.AST, ast.AST, list[ast.Assign]]]:
    """(scope, loop, its assignments ``x = call(...)``) for every loop of the
    module or of a function that holds one such assignment of its own (not in
    a nested scope), in the order a walk of each scope's own nodes meets them
    (scopes in ``walk_tree`` order, the module first; each loop's
    assignments in ``_own_nodes`` order).  Found from the assignments of the
    model indexes, going up to their scope, rather than by walking every
    function with a loop (most of this rule's cost over the corpus)."""
    by_loop: dict[int, tuple[ast.AST, ast.AST, list[ast.Assign]]] = {}
    scope_order = {id(ctx.tree): 0}
    stops = _SCOPES + (ast.Module,)
    for stmt in walk_tree(ctx.tree):
        kind = type(stmt)
        if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            scope_order[id(stmt)] = len(scope_order)
            continue
        if kind is not ast.Assign or len(stmt.targets) != 1 or not isinstance(stmt.value, ast.Call):
            continue
        loops: list[ast.AST] = []
        cur = getattr(stmt, "_hl_parent", None)
        while cur is not None and not isinstance(cur, stops):
            if isinstance(cur, _LOOPS):
                loops.append(cur)
            cur = getattr(cur, "_hl_parent", None)
        if cur is None or isinstance(cur, (ast.Lambda, ast.ClassDef)):
            continue  # only the module's and the functions' own nodes are walked
        for loop in loops:
            by_loop.setdefault(id(loop), (cur, loop, []))[2].append(stmt)
    out = []
    positions: dict[int, dict[int, int]] = {}
    for scope, loop, assigns in by_loop.values():
        if len(assigns) > 1:
            assigns.sort(key=lambda stmt: _own_order(stmt, loop, positions))
        out.append((scope, loop, assigns))
    out.sort(key=lambda entry: (scope_order[id(entry[0])], _own_order(entry[1], entry[0], positions)))
    return out


def _own_order(node: ast.AST, top: ast.AST, positions: dict[int, dict[int, int]]) -> tuple[int, ...]:
    """Where ``_own_nodes(top)`` yields ``node`` (a descendant outside nested
    scopes): it goes depth first, last child first, so a node comes after its
    ancestors and before the nodes of its earlier siblings.  ``positions``:
    each parent's children by position, kept across calls (a module of
    thousands of statements is listed once)."""
    path: list[int] = []
    cur = node
    while cur is not top:
        parent = cur._hl_parent  # type: ignore[attr-defined]
        index = positions.get(id(parent))
        if index is None:
            index = positions[id(parent)] = {id(child): i for i, child in enumerate(child_nodes(parent))}
        path.append(-index[id(cur)])
        cur = parent
    return tuple(reversed(path))


def overwritten_handles(ctx: FileContext) -> list[Overwrite]:
    core = ctx.core
    registration_calls = {id(r.call) for r in core.hooks.registrations if not r.via}
    out: list[Overwrite] = []
    for scope, loop, assigns in _loop_assignments(ctx):
        # the assignments first: most loops have none of the shape, and finding them is cheaper than
        # asking `_single_pass`, which walks the loop
        if _single_pass(loop):
            continue
        for stmt in assigns:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                text, is_name = target.id, True
            elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and not _rebound_in(loop, target.value.id):
                # `state.h = ...` where `state` is this pass's object keeps one handle per object
                text, is_name = ast.unparse(target), False
            else:
                continue
            call = stmt.value
            made = _handles_made(ctx, call, scope, registration_calls)
            if made is None:
                continue
            plural, callee = made
            if not _varies_per_pass(call, loop):
                continue  # the same object every pass: the hooks stack up on it (hook_leak's question)
            if _reads(loop, text, is_name):
                continue
            if is_name and not _read_after(scope, loop, text):
                continue  # dropped on purpose, or never used: not this question
            out.append(Overwrite(stmt, loop, text, plural, callee))  # type: ignore[arg-type]
    return out


def _read_after(scope: ast.AST, loop: ast.AST, text: str) -> bool:
    end = getattr(loop, "end_lineno", 0) or 0
    for n in _own_nodes(scope):
        if isinstance(n, ast.Name) and n.id == text and not isinstance(n.ctx, ast.Store) and n.lineno > end:
            return True
    return False


def _handles_made(ctx: FileContext, call: ast.Call, scope: ast.AST,
                  registration_calls: set[int]) -> tuple[bool, str] | None:
    if id(call) in registration_calls:
        return False, ast.unparse(call.func)
    func = scope if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
    try:
        found = ctx.core.facts_of.callee(call, func, with_edge=False)
    except RecursionError:
        return None
    if found is None:
        return None
    facts, _edge, name, _path, _line = found
    if facts.ret == "h":
        return False, name or ast.unparse(call.func)
    if facts.ret == "hs":
        return True, name or ast.unparse(call.func)
    return None
