"""Does the code that registers a hook then run its caller's model, with the hook in place?

``handles.callers_code_run_after`` looks for the call in the registering
function's own statements (``out = model(x)``).  Library code often runs the
model one method further (``self.gradient(x)`` runs ``self.model(*x)``); the
program-analysis core's summaries see through that (``core.runs_callers_code``).
This asks the core, for the registering call and each call that led to it
(``Registration.via``), about the statements that run after it in the same
block or an enclosing one.
"""

from __future__ import annotations

import ast

from hooklint.static.context import FileContext
from hooklint.static.flow import executed_nodes
from hooklint.static.handles import _precedes_in_block
from hooklint.static.hooks import Registration
from hooklint.static.tree_walk import walk_tree

__all__ = ["callers_model_run_after"]


def callers_model_run_after(ctx: FileContext, reg: Registration) -> ast.Call | None:
    """The first call, after the registration (or after a call that led to it),
    that runs the caller's code: its model, or a method of the object that does."""
    for call in _leading_calls(ctx, reg):
        func = ctx.model.enclosing_function(call)
        if func is None or isinstance(func, ast.Lambda):
            continue
        later = sorted((n for n in executed_nodes(func) if isinstance(n, ast.stmt) and n is not func
                        and _precedes_in_block(call, n, func)), key=lambda n: (n.lineno, n.col_offset))
        for stmt in later:
            found = ctx.core.runs_callers_code(stmt, func)
            if found is not None:
                return found
    return None


def _leading_calls(ctx: FileContext, reg: Registration, depth: int = 3) -> list[ast.Call]:
    """The registering call, the calls ``reg.via`` names, and the calls of the
    file that reach the registering function (``self._hook_leaves(self.model)``
    for a method, ``attach(model)`` for a function), a few levels up; not the
    function's calls of itself."""
    calls = [reg.call, *reg.via]
    frontier = [reg.call]
    seen = {id(c) for c in calls}
    for _ in range(depth):
        nxt = []
        for call in frontier:
            func = ctx.model.enclosing_function(call)
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for site in _calls_of(ctx, func):
                if id(site) in seen or ctx.model.enclosing_function(site) is func:
                    continue
                seen.add(id(site))
                calls.append(site)
                nxt.append(site)
        frontier = nxt
    return calls


def _calls_of(ctx: FileContext, func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Call]:
    cls = ctx.model.enclosing_class(func)
    if cls is not None and ctx.model.enclosing_function(func) is None:
        return [c for c in ctx.model.calls_of_method(func.name)
                if isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name)
                and c.func.value.id == "self" and ctx.model.enclosing_class(c) is cls]
    return [n for n in walk_tree(ctx.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id == func.name]
