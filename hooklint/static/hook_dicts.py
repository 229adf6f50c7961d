"""Hooks taken off by editing a module's (or tensor's) hook dict directly.

A registration's handle is one way to remove a hook; the other is the dict
torch keeps the hooks in (``module._forward_hooks``, an ``OrderedDict`` keyed
by the handle's id): ``del layer._forward_hooks[key]``,
``layer._forward_hooks.pop(key)``, ``.clear()``.  Libraries that dropped the
handle sometimes clean up that way (a destructor that deletes its own hook
from each layer's ``_forward_hooks``).  A class that does so for the kind of
hook it registers is taken to remove it: its handle being discarded is then
no leak hooklint can prove.
"""

from __future__ import annotations

import ast

from hooklint.static.hooks import HookKind
from hooklint.static.semantic import ClassInfo

# The dicts torch keeps each kind of hook in (torch 2.x: nn.Module and Tensor attributes).
HOOK_DICTS: dict[HookKind, frozenset[str]] = {
    HookKind.FORWARD: frozenset({"_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called"}),
    HookKind.FORWARD_PRE: frozenset({"_forward_pre_hooks", "_forward_pre_hooks_with_kwargs"}),
    HookKind.BACKWARD_LEGACY: frozenset({"_backward_hooks"}),
    HookKind.FULL_BACKWARD: frozenset({"_backward_hooks"}),
    HookKind.FULL_BACKWARD_PRE: frozenset({"_backward_pre_hooks"}),
    HookKind.TENSOR: frozenset({"_backward_hooks"}),
    HookKind.POST_ACCUMULATE: frozenset({"_post_accumulate_grad_hooks"}),
}
_DROPPING_METHODS = frozenset({"pop", "popitem", "clear", "__delitem__"})


def removes_through_hook_dict(cls: ClassInfo | None, kind: HookKind) -> bool:
    """Does a method of ``cls`` delete entries from the dict hooks of ``kind``
    live in (``del m._forward_hooks[k]``, ``m._forward_hooks.pop(k)``,
    ``.clear()``), or rebind it?"""
    if cls is None:
        return False
    names = HOOK_DICTS.get(kind, frozenset())
    for method in cls.methods.values():
        # local names bound to a hook dict (`hooks = layer._forward_hooks`)
        aliases = {target.id for node in ast.walk(method) if isinstance(node, ast.Assign)
                   and _is_hook_dict(node.value, names, set())
                   for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(method):
            if isinstance(node, ast.Delete):
                if any(isinstance(t, ast.Subscript) and _is_hook_dict(t.value, names, aliases) for t in node.targets):
                    return True
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _DROPPING_METHODS and _is_hook_dict(node.func.value, names, aliases):
                return True
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr in names:
                return True
    return False


def _is_hook_dict(expr: ast.AST, names: frozenset[str], aliases: set[str]) -> bool:
    if isinstance(expr, ast.Attribute):
        return expr.attr in names
    return isinstance(expr, ast.Name) and expr.id in aliases
