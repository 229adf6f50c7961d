"""Legacy backward hook registrations, grouped by hook, and the notes that name their sites.
"""

from __future__ import annotations

import ast

from hooklint.findings import Related
from hooklint.static.context import FileContext
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind, Registration
from hooklint.static.values import src

LEGACY_TRIGGERS = ("register_backward_hook", "register_module_backward_hook") + DYNAMIC_NAME_TRIGGERS


def legacy_groups(ctx: FileContext, through_wrappers: bool = False) -> list[list[Registration]]:
    """Legacy registrations by registering call: each call's instances (one per
    call site of the helper it is in, per handler a loop gives it...).  A call
    of a wrapper in another file that registers the legacy hook counts when
    ``through_wrappers`` (the hook's body is here), or when the call's own
    argument named the legacy API (``attach(m, fn, kind="backward")``)."""
    groups: dict[int, list[Registration]] = {}
    for reg in ctx.hooks.instances_by_kind(HookKind.BACKWARD_LEGACY):
        if reg.summary is not None and not through_wrappers and not getattr(reg.summary, "chosen", False):
            continue  # a wrapper that spells the legacy API itself: reported there, where it is fixed
        groups.setdefault(id(reg.call), []).append(reg)
    return list(groups.values())


def site_notes(ctx: FileContext, group: list[Registration], limit: int = 4) -> list[Related]:
    """Where the calls that chose the hook or the module are."""
    notes: list[Related] = []
    seen: set[int] = set()
    for reg in group:
        site = reg.site_call
        if site is None or id(site) in seen:
            continue
        seen.add(id(site))
        parts = []
        if reg.receiver_origin is not None:
            module = reg.receiver_module
            label = f" ({module.class_name})" if module is not None and module.class_name else ""
            parts.append(f"the module `{src(reg.receiver_origin)}`{label}")
        if reg.hook_origin is not None and reg.hook is not None:
            parts.append(f"the hook `{reg.hook.name}`")
        what = " and ".join(parts) or "the registration's arguments"
        notes.append(Related(f"`{src(site.func)}(...)` passes {what}", ctx.display_path, ctx.span(site)[0]))
        if len(notes) >= limit:
            break
    return notes


def input_grad_rebuilt(ctx: FileContext, reg: Registration) -> ast.Call | None:
    """The tensor-hook registration that replaces the gradient of the hooked
    module's input, when the code that registers the legacy hook ``reg`` also
    gives the same module a forward (pre-)hook that registers, on the module's
    input tensor, a tensor hook returning a value.

    A tensor hook on the input fires with the gradient with respect to that
    input, whatever op the legacy hook bound to, and what it returns is the
    gradient that flows on: the library fixes the module's input gradient at
    the input itself (captum's DeepLift recomputes it for modules whose
    forward runs several ops).  ``grad_input`` is then not what the module's
    input receives."""
    func = ctx.model.enclosing_function(reg.call)
    if func is None or not isinstance(reg.receiver, ast.Name):
        return None
    for fwd in ctx.hooks.registrations:
        if fwd.kind not in (HookKind.FORWARD_PRE, HookKind.FORWARD) or fwd.hook is None \
                or not isinstance(fwd.receiver, ast.Name) or fwd.receiver.id != reg.receiver.id \
                or ctx.model.enclosing_function(fwd.call) is not func:
            continue
        inputs = fwd.param("input")
        if inputs is None:
            continue
        found = _tensor_hook_on_input(ctx, fwd.hook.node, inputs)
        if found is not None:
            return found
    return None


def _tensor_hook_on_input(ctx: FileContext, hook: ast.AST, inputs: str) -> ast.Call | None:
    """A ``register_hook`` in ``hook``'s body on (a part of) its ``inputs``
    parameter, whose callable returns a value."""
    derived = {inputs}
    for node in ast.walk(hook):  # `inputs = _as_tuple(inputs)`: still the module's input
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and any(isinstance(n, ast.Name) and n.id in derived for n in ast.walk(node.value)):
            derived.add(node.targets[0].id)
    for tensor in ctx.hooks.registrations:
        if tensor.kind is not HookKind.TENSOR or tensor.hook is None or tensor.receiver is None:
            continue
        if ctx.model.enclosing_function(tensor.call) is not hook:
            continue
        root = tensor.receiver
        while isinstance(root, (ast.Subscript, ast.Attribute)):
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in derived):
            continue
        if _returns_value(ctx, tensor.hook.node):
            return tensor.call
    return None


def _returns_value(ctx: FileContext, func: ast.AST) -> bool:
    if isinstance(func, ast.Lambda):
        return not (isinstance(func.body, ast.Constant) and func.body.value is None)
    own = [n for n in ast.walk(func) if isinstance(n, ast.Return) and ctx.model.enclosing_function(n) is func]
    return any(r.value is not None and not (isinstance(r.value, ast.Constant) and r.value.value is None)
               for r in own)
