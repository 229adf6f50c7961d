"""Hook protocols of libraries (accelerate-style ``ModelHook``: ``pre_forward``
/ ``new_forward`` / ``post_forward`` around a wrapped forward) and the
dispatchers that run them.

A protocol class whose template method runs other methods of the class on
``self`` (``new_forward``: ``pre_forward``, the original forward,
``post_forward``) lets a subclass override the template to replace the whole
call (skip or reuse the computation).  A dispatcher that calls the template
on one path and runs its steps itself on another (one hook: ``return
hook.new_forward(...)``; several: every hook's ``pre_forward`` and
``post_forward`` around the original forward) runs an override on the first
path only.

Never imports torch, never runs the checked code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hooklint.static.context import FileContext


@dataclass(frozen=True)
class InlinedTemplate:
    """A dispatcher that calls a hook's template method ``method`` on one
    path (``return hook.new_forward(...)``) and, on another, calls the steps
    the template's default body runs (``hook.pre_forward``,
    ``hook.post_forward``) itself: an override of ``method`` runs on the
    first path only."""

    function: ast.AST
    template: str  # `ModelHook.new_forward`
    method: str
    steps: tuple[str, ...]
    call: ast.Call  # the template's call
    step_calls: tuple[ast.Call, ...]


def inlined_templates(ctx: "FileContext") -> list[InlinedTemplate]:
    # the names called as `return <not self>.<name>(...)`: only those can be a dispatcher's template call
    wanted = {name for name, calls in ctx.model.method_calls.items()
              if any(isinstance(getattr(c, "_hl_parent", None), ast.Return)
                     and not (isinstance(c.func.value, ast.Name) and c.func.value.id == "self")  # type: ignore[attr-defined]
                     for c in calls)}
    if not wanted:
        return []
    templates = _templates(ctx, wanted)
    if not templates:
        return []
    out: list[InlinedTemplate] = []
    for (cls_name, method), steps in templates.items():
        for call in ctx.model.calls_of_method(method):
            receiver = call.func.value  # type: ignore[attr-defined]
            if isinstance(receiver, ast.Name) and receiver.id == "self":
                continue
            if not isinstance(getattr(call, "_hl_parent", None), ast.Return):
                continue  # the path through the template goes on: not told apart
            function = ctx.model.enclosing_function(call)
            if function is None:
                continue
            step_calls = []
            for step in steps:
                found = [c for c in ctx.model.calls_of_method(step)
                         if ctx.model.enclosing_function(c) is function and c.lineno > call.lineno
                         and not (isinstance(c.func.value, ast.Name) and c.func.value.id == "self")  # type: ignore[attr-defined]
                         and ctx.core.can_run(c)]
                if not found:
                    break
                step_calls.append(found[0])
            else:
                out.append(InlinedTemplate(function, f"{cls_name}.{method}", method, steps, call, tuple(step_calls)))
    return out


def _templates(ctx: "FileContext", wanted: set[str]) -> dict[tuple[str, str], tuple[str, ...]]:
    """``{(class, method): steps}``: a method of a class of the file whose body
    calls two or more other methods of the same class on ``self`` (not a
    dunder: a name subclasses override)."""
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for info in ctx.model.classes.values():
        methods = {stmt.name: stmt for stmt in info.node.body
                   if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for name, method in methods.items():
            if name.startswith("__") or name not in wanted:
                continue
            steps: list[str] = []
            for node in ast.walk(method):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "self" \
                        and node.func.attr in methods and node.func.attr != name and node.func.attr not in steps:
                    steps.append(node.func.attr)
            if len(steps) >= 2 and _runs_a_wrapped_forward(method):
                out[(info.name, name)] = tuple(steps)
    return out


def _runs_a_wrapped_forward(method: ast.AST) -> bool:
    """Does the body call a forward of another object (``module._old_forward(...)``,
    ``module.forward(...)``): the template wraps a module's forward."""
    for node in ast.walk(method):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("forward") \
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
            return True
    return False
