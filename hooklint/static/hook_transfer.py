"""Hooks read out of one object's hook dict and registered again on another.

Code that replaces or copies a module often carries the user's hooks over by
registering every entry of the old module's hook dict on the new one
(``for fn in old._forward_hooks.values(): new.register_forward_hook(fn)``).
That is right only when the new module does not hold those hooks already.
It does when the two are the same object (the same module reached through two
models), when they share the dict (``copy.copy(module)`` and any shallow copy
of a model share ``_forward_hooks`` and the submodules themselves), and after
``copy.deepcopy`` (the copy's dicts are copies holding the same functions):
each transfer then adds every hook once more.

This module finds such transfers and says whether the function guards them:
an identity or equality test between the two dicts or the two modules, a test
of the hook against the destination's hooks, an emptying of either dict, or a
destination the function builds itself (a constructor or factory call, not a
copy).  It never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import child_nodes, walk_tree

# The per-object dicts torch keeps hooks in (nn.Module's, and a tensor's `_backward_hooks`).
HOOK_DICT_NAMES = frozenset({
    "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
    "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
})
_COPIES = frozenset({"copy", "deepcopy", "__copy__", "__deepcopy__", "clone"})
# calls that find an existing object rather than build one (`model.get_submodule(name)`, `getattr(m, name)`)
_LOOKUPS = ("get", "find", "lookup", "search", "select", "next", "pop", "setdefault", "unwrap", "resolve")
_EMPTYING = frozenset({"clear", "pop", "popitem", "__delitem__"})
_WRAPPERS = frozenset({"list", "tuple", "sorted", "reversed", "iter", "dict", "OrderedDict"})


@dataclass(frozen=True)
class Transfer:
    call: ast.Call  # `new.register_forward_hook(fn, ...)`
    function: ast.AST  # the function holding it
    source: ast.AST  # where the hook was read: `old._forward_hooks`, `getattr(old, "_forward_hooks", None)`
    dict_name: str  # `_forward_hooks`
    source_owner: ast.AST  # `old`
    destination: ast.AST  # `new`
    same_object: bool  # the receiver is spelled as the owner of the dict it reads


def unguarded_transfers(tree: ast.Module) -> list[Transfer]:
    """Registrations of hooks read from another object's hook dict, in functions that never make sure the
    destination does not hold them already."""
    out: list[Transfer] = []
    for func in walk_tree(tree):
        if isinstance(func, FunctionNode):
            out.extend(_Function(func).transfers())
    return out


def _hook_dict(expr: ast.AST) -> tuple[str, ast.AST] | None:
    """``(dict name, owner)`` of ``owner._forward_hooks`` or ``getattr(owner, "_forward_hooks"[, default])``."""
    if isinstance(expr, ast.Attribute) and expr.attr in HOOK_DICT_NAMES:
        return expr.attr, expr.value
    if (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr"
            and len(expr.args) >= 2 and isinstance(expr.args[1], ast.Constant)
            and expr.args[1].value in HOOK_DICT_NAMES):
        return expr.args[1].value, expr.args[0]
    return None


def _strip(expr: ast.AST) -> ast.AST:
    """``list(x)``, ``sorted(x)``, ``x.copy()``: the iteration is over ``x``."""
    while True:
        if isinstance(expr, ast.Call) and len(expr.args) == 1 and not expr.keywords \
                and isinstance(expr.func, ast.Name) and expr.func.id in _WRAPPERS:
            expr = expr.args[0]
        elif isinstance(expr, ast.Call) and not expr.args and isinstance(expr.func, ast.Attribute) \
                and expr.func.attr == "copy":
            expr = expr.func.value
        else:
            return expr


_BUILTINS = frozenset({"getattr", "hasattr", "id", "type", "len", "list", "tuple", "dict", "iter", "sorted", "vars"})


def _names(expr: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(expr) if isinstance(node, ast.Name) and node.id not in _BUILTINS}


def _spelling(expr: ast.AST) -> str:
    try:
        return ast.unparse(expr)
    except Exception:  # pragma: no cover - unparse handles every parsed tree
        return ""


class _Function:
    def __init__(self, func: ast.AST) -> None:
        self.func = func
        self.parents: dict[ast.AST, ast.AST] = {}
        self.nodes = _own_nodes(func, self.parents)
        self.dict_aliases: dict[str, tuple[str, ast.AST, ast.AST]] = {}
        self.assigned: dict[str, list[ast.AST]] = {}
        for node in self.nodes:
            targets: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, ast.Assign):
                targets = [(t, node.value) for t in node.targets]
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                targets = [(node.target, node.value)]
            for target, value in targets:
                if isinstance(target, ast.Name):
                    self.assigned.setdefault(target.id, []).append(value)
                    found = _hook_dict(_strip(value))
                    if found is not None:
                        self.dict_aliases[target.id] = (found[0], found[1], value)
        # names holding the hooks themselves: `hooks = list(old._forward_hooks.values())`, `[h for h in ...]`
        self.hook_lists: dict[str, tuple[str, ast.AST, ast.AST]] = {}
        for name, values in self.assigned.items():
            if len(values) == 1:
                source = self._hooks_listed(values[0])
                if source is not None:
                    self.hook_lists[name] = source

    def _hooks_listed(self, value: ast.AST) -> tuple[str, ast.AST, ast.AST] | None:
        """The hook dict whose hooks ``value`` lists (``d.values()``, a copy of it, a comprehension keeping them)."""
        value = _strip(value)
        if isinstance(value, (ast.ListComp, ast.GeneratorExp)) and len(value.generators) == 1 \
                and isinstance(value.elt, ast.Name) and isinstance(value.generators[0].target, ast.Name) \
                and value.elt.id == value.generators[0].target.id:
            value = value.generators[0].iter
        if _is_values(value):
            return self._source_dict(value, "value")
        return None

    def _source_dict(self, iterable: ast.AST, want: str) -> tuple[str, ast.AST, ast.AST] | None:
        """What a loop over ``iterable`` reads: its hook dict when it yields hooks (``want="value"``, via
        ``.values()`` / ``.items()``) or ids (``want="key"``: the dict itself, ``.keys()``)."""
        expr = _strip(iterable)
        method = None
        if isinstance(expr, ast.Call) and not expr.args and isinstance(expr.func, ast.Attribute) \
                and expr.func.attr in ("values", "items", "keys"):
            method, expr = expr.func.attr, _strip(expr.func.value)
        if want == "value" and method not in ("values", "items"):
            return None
        if want == "key" and method not in (None, "keys"):
            return None
        found = _hook_dict(expr)
        if found is not None:
            return found[0], found[1], expr
        if isinstance(expr, ast.Name) and expr.id in self.dict_aliases:
            return self.dict_aliases[expr.id]
        return None

    def _hook_names(self) -> dict[ast.AST, dict[str, tuple[str, ast.AST, ast.AST]]]:
        """Per loop or comprehension: its names bound to the hooks of a hook dict (or, ``key:``, to its ids)."""
        by_loop: dict[ast.AST, dict[str, tuple[str, ast.AST, ast.AST]]] = {}
        for node in self.nodes:
            bound = by_loop.setdefault(node, {})
            loops: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, (ast.For, ast.AsyncFor)):
                loops.append((node.target, node.iter))
            elif isinstance(node, ast.comprehension):
                loops.append((node.target, node.iter))
            for target, iterable in loops:
                if isinstance(target, ast.Name):
                    listed = _strip(iterable)
                    if isinstance(listed, ast.Name) and listed.id in self.hook_lists:
                        bound[target.id] = self.hook_lists[listed.id]
                        continue
                    source = self._source_dict(iterable, "value")
                    if source is not None and _is_values(iterable):
                        bound[target.id] = source
                        continue
                    source = self._source_dict(iterable, "key")
                    if source is not None:
                        bound["key:" + target.id] = source
                elif isinstance(target, ast.Tuple) and len(target.elts) == 2:
                    source = self._source_dict(iterable, "value")
                    if source is not None and not _is_values(iterable):
                        key, value = target.elts
                        if isinstance(value, ast.Name):
                            bound[value.id] = source
                        if isinstance(key, ast.Name):
                            bound["key:" + key.id] = source
            if not bound:
                del by_loop[node]
        return by_loop

    def transfers(self) -> list[Transfer]:
        by_loop = self._hook_names()
        if not by_loop:
            return []
        out: list[Transfer] = []
        for node in self.nodes:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith("register_") and node.func.attr.endswith("hook")):
                continue
            hook = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "hook"), None)
            source = self._hook_read(hook, _enclosing_bindings(node, by_loop, self.parents))
            if source is None:
                continue
            dict_name, owner, read = source
            destination = node.func.value
            same = _spelling(destination) == _spelling(owner)
            if self._guarded(owner, destination, read, hook, dict_name) or (
                    not same and self._fresh(destination)):
                continue
            out.append(Transfer(node, self.func, read, dict_name, owner, destination, same))
        return out

    def _hook_read(self, hook: ast.AST | None, hooks: dict) -> tuple[str, ast.AST, ast.AST] | None:
        if isinstance(hook, ast.Name):
            return hooks.get(hook.id)
        if isinstance(hook, ast.Subscript) and isinstance(hook.slice, ast.Name) \
                and "key:" + hook.slice.id in hooks:
            found = _hook_dict(hook.value)
            if found is not None or (isinstance(hook.value, ast.Name) and hook.value.id in self.dict_aliases):
                return hooks["key:" + hook.slice.id]
        return None

    def _fresh(self, destination: ast.AST) -> bool:
        """The function builds the destination itself on some path (a constructor or factory call, such as
        ``from_float(mod)``, not a look-up such as ``get_submodule(name)``) and never binds it to a copy: the transfer is how the new module gets the hooks
        (torch's ``swap_module`` binds ``new_mod = mod`` first and transfers only after a swap)."""
        if not isinstance(destination, ast.Name):
            return False
        if destination.id == "self" and getattr(self.func, "name", "") == "__init__":
            return True  # the object being made: its hook dicts are its own and empty
        if _is_parameter(self.func, destination.id):
            return False
        built = False
        for value in self.assigned.get(destination.id, ()):
            if isinstance(value, ast.Call):
                callee = value.func
                name = callee.attr if isinstance(callee, ast.Attribute) else \
                    callee.id if isinstance(callee, ast.Name) else ""
                if name in _COPIES or "copy" in name.lower():
                    return False
                if not name.lstrip("_").startswith(_LOOKUPS):
                    built = True
        return built

    def _guarded(self, owner: ast.AST, destination: ast.AST, read: ast.AST, hook: ast.AST | None,
                 dict_name: str) -> bool:
        source_side = _names(owner) | _names(read)
        for alias, (_, alias_owner, _) in self.dict_aliases.items():
            if _spelling(alias_owner) == _spelling(owner):
                source_side.add(alias)
        hook_side = _names(hook) if hook is not None else set()
        destination_side = _names(destination)
        if not destination_side:
            return False
        destination_spelling = _spelling(destination)
        same = destination_spelling == _spelling(owner)
        for node in self.nodes:
            # the destination's own hooks consulted (`any(h is fn for h in new._forward_hooks.values())`)
            if not same:
                found = _hook_dict(node)
                if found is not None and _spelling(found[1]) == destination_spelling:
                    return True
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
                mentions = [_names(part) for part in parts]
                identity = any(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in node.ops)
                member = any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                touches_destination = any(m & destination_side for m in mentions)
                if identity and touches_destination and any(m & source_side for m in mentions) \
                        and not all(m & destination_side and m & source_side for m in mentions):
                    return True
                if member and touches_destination and any(m & hook_side for m in mentions):
                    return True
            # emptied or replaced: the hooks are moved, or the destination starts over
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _EMPTYING:
                found = _hook_dict(node.func.value)
                if found is not None and found[0] == dict_name:
                    return True
                if isinstance(node.func.value, ast.Name) and node.func.value.id in self.dict_aliases:
                    return True
            if isinstance(node, (ast.Assign, ast.Delete)):
                for target in node.targets:
                    base = target.value if isinstance(target, ast.Subscript) else target
                    if _hook_dict(base) is not None:
                        return True
        return False


def _enclosing_bindings(node: ast.AST, by_loop: dict, parents: dict[ast.AST, ast.AST]
                        ) -> dict[str, tuple[str, ast.AST, ast.AST]]:
    """The hook names the loops and comprehensions around ``node`` bind, the innermost first."""
    out: dict[str, tuple[str, ast.AST, ast.AST]] = {}
    current = parents.get(node)
    while current is not None:
        if isinstance(current, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            for gen in current.generators:
                for name, source in by_loop.get(gen, {}).items():
                    out.setdefault(name, source)
        for name, source in by_loop.get(current, {}).items():
            out.setdefault(name, source)
        current = parents.get(current)
    return out


def _is_values(iterable: ast.AST) -> bool:
    expr = _strip(iterable)
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "values"


def _is_parameter(func: ast.AST, name: str) -> bool:
    args = func.args  # type: ignore[attr-defined]
    return any(a.arg == name for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))


def _own_nodes(func: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.AST]:
    """The nodes of ``func``'s body and its comprehensions, not of functions, lambdas or classes in it;
    ``parents`` gets each node's parent (the tree's own links are set only once the semantic model is built)."""
    out: list[ast.AST] = []
    stack = [(child, func) for child in reversed(func.body)]  # type: ignore[attr-defined]
    while stack:
        node, parent = stack.pop()
        out.append(node)
        parents[node] = parent
        if isinstance(node, (*FunctionNode, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend((child, node) for child in reversed(child_nodes(node)))
    return out
