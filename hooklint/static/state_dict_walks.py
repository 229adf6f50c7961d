"""Direct calls of a module's private state-dict steps, which skip the hooks the public methods run.

``nn.Module.load_state_dict`` calls each module's ``_load_from_state_dict``
(which runs the load pre-hooks) and, after the walk, the hooks registered
with ``register_load_state_dict_post_hook``.  ``nn.Module.state_dict`` runs
the ``register_state_dict_pre_hook`` hooks, ``_save_to_state_dict``, and then
the ``_register_state_dict_hook`` hooks.  Code that walks the modules itself
and calls the private step directly skips the hooks only the public method
runs, unless it runs them too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode, SemanticModel

# private step -> (public method, the hook dicts only the public method runs, the registering methods)
PRIVATE_STEPS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "_load_from_state_dict": ("load_state_dict", ("_load_state_dict_post_hooks",),
                              ("register_load_state_dict_post_hook",)),
    "_save_to_state_dict": ("state_dict", ("_state_dict_pre_hooks", "_state_dict_hooks"),
                            ("register_state_dict_pre_hook", "register_state_dict_post_hook",
                             "_register_state_dict_hook")),
}
STATE_DICT_TRIGGERS = tuple(PRIVATE_STEPS)


@dataclass
class PrivateStepCall:
    call: ast.Call
    step: str
    outermost: ast.AST  # the outermost function around the call (the walk and its helpers)


def _outermost_function(node: ast.AST) -> ast.AST | None:
    found = None
    cur = getattr(node, "_hl_parent", None)
    while cur is not None:
        if isinstance(cur, FunctionNode):
            found = cur
        if isinstance(cur, ast.ClassDef) and found is not None:
            break
        cur = getattr(cur, "_hl_parent", None)
    return found


def _enclosing_function(node: ast.AST) -> ast.AST | None:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, FunctionNode):
        cur = getattr(cur, "_hl_parent", None)
    return cur


_WALKS = frozenset({"_modules", "named_modules", "modules", "children", "named_children"})


def _in_module_walk(call: ast.Call, func: ast.AST, model: SemanticModel) -> bool:
    """The call is made on each module of a walk over a module tree: its receiver is a parameter or loop
    variable of ``func`` (not ``self`` / ``super()``), and ``func`` calls itself or iterates a module's
    children (``_modules``, ``named_modules()``, ``children()``...)."""
    receiver = call.func.value  # type: ignore[attr-defined]
    if not isinstance(receiver, ast.Name) or receiver.id in ("self", "cls"):
        return False
    kinds = {b.kind for b in model.bindings_at(receiver)}
    if not kinds or not kinds <= {"param", "for", "assign"}:
        return False
    name = getattr(func, "name", None)
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
            return True  # recursion over the children
        if isinstance(node, ast.Attribute) and node.attr in _WALKS:
            return True
    return False


def hook_skipping_calls(model: SemanticModel) -> list[PrivateStepCall]:
    """Calls ``m._load_from_state_dict(...)`` / ``m._save_to_state_dict(...)`` on each module of a walk over
    a module tree (a reimplementation of the public method), made outside an override of
    the same step (``super()._load_from_state_dict(...)`` in a module's own override is how the step is
    extended), in code that never runs the hooks the public method would (it reads none of their dicts)."""
    out = []
    for step, (_public, dicts, _registers) in PRIVATE_STEPS.items():
        for call in model.calls_of_method(step):
            func = _enclosing_function(call)
            if func is None or getattr(func, "name", None) == step:
                continue
            if not _in_module_walk(call, func, model):
                continue
            outer = _outermost_function(call) or func
            if any(isinstance(n, ast.Attribute) and n.attr in dicts for n in ast.walk(outer)):
                continue
            if any(isinstance(n, ast.Constant) and n.value in dicts for n in ast.walk(outer)):
                continue  # getattr(module, "_load_state_dict_post_hooks")
            out.append(PrivateStepCall(call, step, outer))
    return out
