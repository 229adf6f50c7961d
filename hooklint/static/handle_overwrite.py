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


def _scopes_with_loops(tree: ast.Module) -> set[ast.AST] | None:
    """The module and functions whose own nodes (``_own_nodes``) hold a loop,
    found going up from each loop of the file; None when a loop has no parent
    link (every scope is walked then)."""
    out: set[ast.AST] = set()
    for node in walk_tree(tree):
        if not isinstance(node, _LOOPS):
            continue
        cur = getattr(node, "_hl_parent", None)
        while cur is not None and not isinstance(cur, _SCOPES + (ast.Module,)):
            cur = getattr(cur, "_hl_parent", None)
        if cur is None:
            return None
        out.add(cur)
    return out


def overwritten_handles(ctx: FileContext) -> list[Overwrite]:
    core = ctx.core
    registration_calls = {id(r.call) for r in core.hooks.registrations if not r.via}
    out: list[Overwrite] = []
    scopes: list[ast.AST] = [ctx.tree] + [n for n in walk_tree(ctx.tree)
                                          if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    looping = _scopes_with_loops(ctx.tree)
    for scope in scopes:
        if looping is not None and scope not in looping:
            continue  # no loop of its own: its walk finds nothing (most functions; a second of the corpus)
        for loop in _own_nodes(scope):
            if not isinstance(loop, _LOOPS):
                continue
            # the assignments first: most loops have none of the shape, and walking them is cheaper than
            # asking `_single_pass`, which walks the loop too
            assigns = [stmt for stmt in _own_nodes(loop) if isinstance(stmt, ast.Assign)
                       and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)]
            if not assigns or _single_pass(loop):
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
