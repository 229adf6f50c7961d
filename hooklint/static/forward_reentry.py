"""A function standing in for a module's forward that calls the same module through `Module.__call__`.

Facts of torch 2.13 (tests/behaviour/test_forward_reentry.py): `Module.__call__` runs the forward
pre-hooks, then ``self.forward`` (an instance attribute when one is set), then the forward hooks.
A function installed as ``module.forward`` (or a forward hook / pre-hook on the module) that calls
``module(...)``, ``module.__call__(...)``, ``torch.func.functional_call(module, ...)`` (which calls
the module under the substituted tensors) or ``module._call_impl(...)`` enters ``__call__`` a
second time: with the instance forward put back first, every hook of the module runs twice per
call; without, the call recurses.  Calling the saved forward (``old_forward(...)``,
``type(module).forward(module, ...)``) does not.

The stand-ins are hook_io's ``forward_captures`` (the file's one analysis of installed forwards).
Never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.forward_binding import _free_names
from hooklint.static.hook_io import forward_captures
from hooklint.static.semantic import FunctionNode, positional_params

_CALL_ENTRIES = frozenset({"__call__", "_call_impl", "_wrapped_call_impl"})


@dataclass(frozen=True)
class Reentry:
    site: ast.AST  # where the function is installed (or the hook registered)
    module: str  # the module as the site names it
    call: ast.Call  # the call that enters Module.__call__ again
    how: str  # the call, in words
    stand_in: str  # the stand-in, in words


def _own_calls(func: ast.AST):
    body = func.body if isinstance(func.body, list) else [func.body]
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, FunctionNode + (ast.ClassDef,)):
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _guarded(call: ast.AST, func: ast.AST) -> bool:
    """Under an ``if`` (or conditional expression) of ``func``'s own: a re-entrancy flag, a mode
    switch; the call may be the deliberate second pass.  Not judged."""
    cur = getattr(call, "_hl_parent", None)
    while cur is not None and cur is not func:
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)):
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def _removes_handle(func: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "remove"
               for n in ast.walk(func))


def _assigned_in(func: ast.AST, name: str) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
    return False


def module_call(model, call: ast.Call, names: set[str]) -> str | None:
    """How ``call`` runs one of the modules spelled ``names`` through ``Module.__call__``."""
    func = call.func
    if ast.unparse(func) in names:
        return f"`{ast.unparse(call.func)}(...)`"
    if isinstance(func, ast.Attribute) and func.attr in _CALL_ENTRIES:
        if ast.unparse(func.value) in names:
            return f"`{ast.unparse(func)}(...)`"
        # `nn.Module.__call__(module, ...)`, `type(module).__call__(module, ...)`
        if call.args and ast.unparse(call.args[0]) in names:
            return f"`{ast.unparse(func)}({ast.unparse(call.args[0])}, ...)`"
    qual = model.qualify(func) or ""
    last = qual.rsplit(".", 1)[-1] if qual else (func.attr if isinstance(func, ast.Attribute)
                                                 else getattr(func, "id", ""))
    if last == "functional_call" and call.args and ast.unparse(call.args[0]) in names:
        return f"`{last}({ast.unparse(call.args[0])}, ...)`"
    return None


def _site_value(site: ast.AST) -> ast.AST | None:
    if isinstance(site, ast.Assign):
        return site.value
    if isinstance(site, ast.Call) and len(site.args) == 3:
        return site.args[2]
    return None


def forward_reentries(ctx) -> list[Reentry]:
    out: list[Reentry] = []
    for cap in forward_captures(ctx.model, ctx.inference, ctx.tree):
        site = cap.site
        value = _site_value(site)
        installs_forward = (isinstance(site, ast.Assign) and isinstance(site.targets[0], ast.Attribute)
                            and site.targets[0].attr == "forward") or isinstance(site, ast.Call)
        if not installs_forward or value is None:
            continue  # a wrapper module put in the slot is another module: calling the old one is its job
        module = ast.unparse(cap.receiver)
        names: set[str] = set()
        root = cap.receiver
        while isinstance(root, ast.Attribute):
            root = root.value
        func = cap.func
        # the module reached through the closure: the installing function's own name for it
        if isinstance(root, ast.Name) and root.id in _free_names(func) and not _assigned_in(func, root.id) \
                and ctx.model.enclosing_function(func) is ctx.model.enclosing_function(site):
            names.add(module)
        # the module bound as the function's first argument: `partial(fn, module)`, `MethodType(fn, module)`
        params = positional_params(func)
        if cap.bound >= 1 and params and isinstance(value, ast.Call) and (
                (len(value.args) >= 2 and ast.unparse(value.args[1]) == module)
                or (isinstance(value.func, ast.Attribute) and value.func.attr == "__get__" and value.args
                    and ast.unparse(value.args[0]) == module)):  # `fn.__get__(module)`
            names.add(params[0])
        if not names:
            continue
        for call in _own_calls(func):
            how = module_call(ctx.model, call, names)
            if how is not None and not _guarded(call, func):
                if all(r.call is not call for r in out):  # one function installed at several places
                    out.append(Reentry(site, module, call, how, f"{cap.how} runs in place of `{module}`'s forward"))
                break
    for reg in ctx.hooks.registrations:
        if reg.kind.value not in ("forward", "forward-pre") or reg.hook is None or reg.receiver is None:
            continue
        func = reg.hook.node
        if not isinstance(func, FunctionNode + (ast.Lambda,)):
            continue
        param = reg.param("module")
        if param is None or _removes_handle(func):
            continue  # a hook that takes itself off before running the module again: a one-shot pass
        for call in _own_calls(func):
            how = module_call(ctx.model, call, {param})
            if how is not None and not _guarded(call, func):
                out.append(Reentry(reg.call, ast.unparse(reg.receiver), call, how,
                                   f"the forward {'pre-' if reg.kind.value == 'forward-pre' else ''}hook "
                                   f"`{getattr(func, 'name', '<lambda>')}` runs inside every call of "
                                   f"`{ast.unparse(reg.receiver)}`"))
                break
    return out
