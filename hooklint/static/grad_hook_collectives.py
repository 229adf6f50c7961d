"""Collectives launched only from per-parameter gradient hooks.

A data-parallel optimizer or wrapper often starts each parameter's gradient
all-reduce from a hook on that parameter (a hook on its AccumulateGrad node,
``p.register_hook`` or ``register_post_accumulate_grad_hook``) and, before
the update, waits for the work those hooks recorded.  Such a hook fires only
when the parameter's gradient is computed in this backward: a parameter that
takes no part in the forward (an unused branch, a layer skipped on some
ranks, a frozen-by-control-flow head) never fires it, so its collective is
never launched on that rank while the other ranks launch it and wait (hang),
or the ranks apply different gradients.  torch's DDP needs
``find_unused_parameters=True`` for the same reason.

:func:`hook_only_collectives` finds, per class, the registrations of such
hooks whose class never launches the collective anywhere but in the hooks
(no fallback for the parameters whose hook did not fire) and has a method
that waits on what the hooks recorded.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.hooks import HookKind
from hooklint.static.semantic import ClassInfo, FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

_COLLECTIVE_WORDS = ("allreduce", "all_reduce", "reduce_scatter", "allgather", "all_gather", "alltoall", "all_to_all")
_NOT_COLLECTIVES = frozenset({"broadcast_tensors", "broadcast_to", "broadcast_shapes"})


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def is_collective_name(name: str) -> bool:
    low = name.lower()
    if low in _NOT_COLLECTIVES:
        return False
    return any(word in low for word in _COLLECTIVE_WORDS) or low.lstrip("_").startswith("broadcast")


def _self_method(info: ClassInfo, call: ast.Call) -> FunctionNode | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return info.method(func.attr)
    return None


def launches_collective(info: ClassInfo | None, func: ast.AST, depth: int = 0) -> ast.Call | None:
    """A collective call the body runs, or a method of the class it calls runs (two levels); the
    bodies of functions it only defines (a hook factory's hook) do not count."""
    for node in _runs(func):
        if not isinstance(node, ast.Call):
            continue
        if is_collective_name(_call_name(node)):
            return node
        if info is not None and depth < 2:
            callee = _self_method(info, node)
            if callee is not None and callee is not func and launches_collective(info, callee, depth + 1):
                return node
    return None


def _runs(func: ast.AST):
    """The nodes of a function's body, without the bodies of the functions it defines."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _self_containers_filled(func: ast.AST) -> set[str]:
    """``self.X`` the body stores into per call (``self.X[k] = v``, ``self.X.append(v)``, ``.add``)."""
    out: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and _self_attr(t.value):
                    out.add(_self_attr(t.value))  # type: ignore[arg-type]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "add", "put", "extend") and _self_attr(node.func.value):
            out.add(_self_attr(node.func.value))  # type: ignore[arg-type]
    return out


def _self_attr(expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return expr.attr
    return None


def _iterates(func: ast.AST, attr: str) -> ast.AST | None:
    for node in ast.walk(func):
        if isinstance(node, (ast.For, ast.comprehension)):
            it = node.iter
            while isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
                it = it.func.value  # self._handles.items()
            if isinstance(it, ast.Call) and it.args:  # list(self._handles), enumerate(...)
                it = it.args[0]
                while isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
                    it = it.func.value
            if _self_attr(it) == attr:
                return node
    return None


def _per_parameter_loop(call: ast.Call) -> ast.AST | None:
    """The loop the registration is in, when it iterates parameters (by the
    words of its iterable: ``group["params"]``, ``model.parameters()``...)."""
    cur = getattr(call, "_hl_parent", None)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        if isinstance(cur, (ast.For, ast.comprehension)) and "param" in ast.unparse(cur.iter).lower():
            return cur
        if isinstance(cur, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in cur.generators:
                if "param" in ast.unparse(gen.iter).lower():
                    return gen
        cur = getattr(cur, "_hl_parent", None)
    return None


@dataclass(frozen=True)
class HookOnlyCollective:
    call: ast.Call  # the registration
    hook: FunctionNode  # the hook's body
    collective: ast.Call  # the collective the hook launches (or the call leading to it)
    container: str  # self.<container> the hook fills
    waiter: FunctionNode  # the method that iterates it
    kind: str  # "AccumulateGrad node hook", "tensor hook", "post-accumulate-grad hook"


def _gradient_hook_calls(ctx: "FileContext") -> list[tuple[ast.Call, str]]:
    out: list[tuple[ast.Call, str]] = []
    for call in ctx.model.calls_of_method("register_hook"):
        receiver = call.func.value  # type: ignore[attr-defined]
        if ctx.hooks._is_autograd_node(receiver):
            out.append((call, "AccumulateGrad node hook"))
    for reg in ctx.hooks.by_kind(HookKind.TENSOR, HookKind.POST_ACCUMULATE):
        kind = "tensor hook" if reg.kind is HookKind.TENSOR else "post-accumulate-grad hook"
        out.append((reg.call, kind))
    return out


def hook_only_collectives(ctx: "FileContext") -> list[HookOnlyCollective]:
    found: list[HookOnlyCollective] = []
    for call, kind in _gradient_hook_calls(ctx):
        info = ctx.model.enclosing_class(call)
        if info is None or not call.args or _per_parameter_loop(call) is None:
            continue
        hook = ctx.inference.callable_of(call.args[0])
        if hook is None or not isinstance(hook.node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        collective = launches_collective(info, hook.node)
        if collective is None:
            continue
        filled = set(_self_containers_filled(hook.node))
        for node in ast.walk(hook.node):  # through the helpers it calls
            if isinstance(node, ast.Call):
                callee = _self_method(info, node)
                if callee is not None:
                    filled |= _self_containers_filled(callee)
        hook_side = _hook_side(info, hook.node, call)
        # a fallback: the collective launched by a method that is not the hook's own machinery
        if any(launches_collective(info, m) is not None for m in info.methods.values() if m not in hook_side):
            continue
        for container in sorted(filled):
            waiter = next((m for m in info.methods.values() if m not in hook_side and _iterates(m, container)), None)
            if waiter is not None:
                found.append(HookOnlyCollective(call, hook.node, collective, container, waiter, kind))
                break
    return found


def _hook_side(info: ClassInfo, hook: ast.AST, call: ast.Call) -> set[ast.AST]:
    """The hook, the factory that makes it, and the helpers only they call."""
    side: set[ast.AST] = set()
    cur = getattr(hook, "_hl_parent", None)
    while cur is not None:
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
            side.add(cur)  # the factory (`_make_hook`)
        cur = getattr(cur, "_hl_parent", None)
    side.add(hook)
    others = [m for m in info.methods.values() if m not in side]
    for node in ast.walk(hook):
        if isinstance(node, ast.Call):
            callee = _self_method(info, node)
            if callee is None:
                continue
            name = callee.name
            if not any(_calls_method(m, name) for m in others if m is not callee):
                side.add(callee)
    return side


def _calls_method(func: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name
               and isinstance(n.func.value, ast.Name) and n.func.value.id == "self" for n in ast.walk(func))
