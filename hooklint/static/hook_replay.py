"""Module forward hooks taken out of a module's hook dicts and called by hand.

``nn.Module._call_impl`` calls each hook of ``module._forward_pre_hooks`` as
``hook(module, args)``, or as ``hook(module, args, kwargs)`` when its id is in
``module._forward_pre_hooks_with_kwargs`` (registered with
``with_kwargs=True``); each hook of ``module._forward_hooks`` as
``hook(module, args, output)``, or ``hook(module, args, kwargs, output)`` when
its id is in ``module._forward_hooks_with_kwargs``.  ``args`` is always a
tuple.  Code that replays those hooks itself (a fused implementation running
its submodules' hooks, a wrapper that bypasses ``__call__``) has to make the
same choice per hook.  This module finds the calls of hooks read from those
dicts, following them through local names, containers (``append``,
``extend``, comprehensions, ``list(...)``, tuples of ``(module, hook)``),
attributes of ``self`` across a class's methods, and closures, and says
whether the code around them ever consults the ``*_with_kwargs`` sets.  It
never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import child_nodes, walk_tree

# hook dict -> (kind, the set torch consults, torch's positional arity without / with kwargs)
HOOK_DICTS = {
    "_forward_pre_hooks": ("forward pre-hook", "_forward_pre_hooks_with_kwargs", 2, 3),
    "_forward_hooks": ("forward hook", "_forward_hooks_with_kwargs", 3, 4),
    # `register_module_forward_hook(hook, with_kwargs=True)`: the global hooks have the same choice
    "_global_forward_hooks": ("global forward hook", "_global_forward_hooks_with_kwargs", 3, 4),
}
_WITH_KWARGS_WORDS = ("_with_kwargs", "with_kwargs")


@dataclass(frozen=True)
class ReplayedHook:
    call: ast.Call  # the hand-made call of a hook
    source: ast.AST  # `submodule._forward_pre_hooks`, where the hook was read
    kind: str  # "forward pre-hook" / "forward hook"
    with_kwargs_set: str  # the set torch consults
    non_tuple_args: str | None  # the second argument when it cannot be the tuple torch passes (`None`)


def replayed_hooks(tree: ast.Module) -> list[ReplayedHook]:
    """Calls of forward (pre-)hooks read from a module's hook dicts, in scopes
    (a top-level function, or a class with its methods) that never mention
    the ``*_with_kwargs`` sets torch consults."""
    out: list[ReplayedHook] = []
    for scope in _scopes(tree):
        # everything _Replay learns starts at a hook dict of the scope: without one it finds nothing
        if not _reads_hook_dict(scope) or _mentions_with_kwargs(scope):
            continue
        out.extend(_Replay(scope).calls())
    return out


def _scopes(tree: ast.AST) -> list[ast.AST]:
    """The outermost classes and functions (also under a module-level ``if`` or ``try``)."""
    scopes: list[ast.AST] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.ClassDef, *FunctionNode)):
            scopes.append(node)
        elif isinstance(node, ast.stmt):
            scopes.extend(_scopes(node))
    return scopes


def _reads_hook_dict(scope: ast.AST) -> bool:
    return any(_hook_dict(node) is not None for node in walk_tree(scope))


def _mentions_with_kwargs(scope: ast.AST) -> bool:
    for node in walk_tree(scope):
        word = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) \
            else node.arg if isinstance(node, ast.keyword) and node.arg else \
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        if word is not None and any(w in word for w in _WITH_KWARGS_WORDS):
            return True
    return False


def _hook_dict(expr: ast.AST) -> ast.AST | None:
    """``m._forward_hooks``, ``getattr(m, "_forward_hooks")``, or the global
    ``_global_forward_hooks`` imported by name: the node naming the dict."""
    if isinstance(expr, ast.Attribute) and expr.attr in HOOK_DICTS:
        return expr
    if isinstance(expr, ast.Name) and expr.id == "_global_forward_hooks":
        return expr
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" \
            and len(expr.args) >= 2 and isinstance(expr.args[1], ast.Constant) and expr.args[1].value in HOOK_DICTS:
        return expr
    return None


def dict_name(node: ast.AST) -> str:
    """Which hook dict ``node`` (from :func:`_hook_dict`) names."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return node.args[1].value  # type: ignore[attr-defined]


def _mentions(expr: ast.AST, key: str) -> bool:
    return any(_key(node) == key for node in ast.walk(expr))


def _key(node: ast.AST) -> str | None:
    """A name (``hooks``) or an attribute of ``self`` (``self.hooks``) as a key."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return f"self.{node.attr}"
    return None


class _Replay:
    """Which names and containers of one scope hold hooks read from a hook dict."""

    def __init__(self, scope: ast.AST):
        self.scope = scope
        # key -> (source attribute, position in a tuple element or None for the hook itself)
        self.hooks: dict[str, ast.AST] = {}
        self.containers: dict[str, tuple[ast.AST, int | None]] = {}
        # a loop binds its own names: `for hook in pre.values()` and a later `for hook in post.values()`
        self.loop_hooks: dict[int, dict[str, ast.AST]] = {}
        self.parents: dict[int, ast.AST] = {}
        for node in walk_tree(scope):
            for child in child_nodes(node):
                self.parents[id(child)] = node
        for _ in range(3):  # containers of containers, in any order of the source
            before = (len(self.hooks), len(self.containers))
            for node in walk_tree(scope):
                self._learn(node)
            if (len(self.hooks), len(self.containers)) == before:
                break

    def _source(self, expr: ast.AST) -> tuple[ast.AST, int | None] | None:
        """What iterating ``expr`` yields: hooks (position None) or tuples holding
        a hook at a position, read from a hook dict."""
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "tuple",
                                                                                               "reversed") \
                and len(expr.args) == 1:
            return self._source(expr.args[0])
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args:
            method, owner = expr.func.attr, expr.func.value
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Attribute) and owner.func.attr == "copy":
                owner = owner.func.value
            owner = _hook_dict(owner)
            if owner is not None:
                if method == "values":
                    return owner, None
                if method == "items":
                    return owner, 1
        key = _key(expr)
        if key is not None and key in self.containers:
            return self.containers[key]
        return None

    def _bind_target(self, loop: ast.AST, target: ast.AST, found: tuple[ast.AST, int | None]) -> None:
        source, position = found
        key = None
        if position is None:
            key = _key(target)
        elif isinstance(target, (ast.Tuple, ast.List)) and position < len(target.elts):
            key = _key(target.elts[position])
        if key is not None:
            self.hooks[key] = source
            self.loop_hooks.setdefault(id(loop), {})[key] = source

    def _element(self, value: ast.AST) -> tuple[ast.AST, int | None] | None:
        """An element put in a container: a hook, or a tuple holding one."""
        key = _key(value)
        if key is not None and key in self.hooks:
            return self._reaching(value, key), None
        if isinstance(value, ast.Tuple):
            for index, elt in enumerate(value.elts):
                key = _key(elt)
                if key is not None and key in self.hooks:
                    return self._reaching(elt, key), index
        return None

    def _learn(self, node: ast.AST) -> None:
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            found = self._source(node.iter)
            if found is not None:
                loop = self.parents.get(id(node), node) if isinstance(node, ast.comprehension) else node
                self._bind_target(loop, node.target, found)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            key = _key(target)
            if key is None:
                return
            if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
                element = self._element(value.elt)
                if element is not None:
                    self.containers[key] = element
            elif isinstance(value, ast.Subscript) and _hook_dict(value.value) is not None:
                self.hooks[key] = _hook_dict(value.value)
            else:
                found = self._source(value)
                if found is not None and isinstance(value, ast.Call):
                    self.containers[key] = found
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            key = _key(node.func.value)
            if key is None:
                return
            if node.func.attr in ("append", "add", "insert"):
                element = self._element(node.args[-1])
                if element is not None:
                    self.containers.setdefault(key, element)
            elif node.func.attr == "extend":
                found = self._source(node.args[0])
                if found is not None:
                    self.containers.setdefault(key, found)

    def _reaching(self, node: ast.AST, key: str) -> ast.AST:
        """The source of the loop around ``node`` that binds ``key``, else the last one learned."""
        cur = self.parents.get(id(node))
        while cur is not None:
            bound = self.loop_hooks.get(id(cur), {})
            if key in bound:
                return bound[key]
            cur = self.parents.get(id(cur))
        return self.hooks[key]

    def _filtered(self, call: ast.AST, key: str) -> bool:
        """A test of the hook itself guards the call: an enclosing ``if``, or an
        ``assert`` / ``if ...: continue`` earlier in an enclosing block."""
        child, cur = call, self.parents.get(id(call))
        while cur is not None:
            if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test and _mentions(cur.test, key):
                return True
            for field in ("body", "orelse"):
                block = getattr(cur, field, None)
                if isinstance(block, list) and child in block:
                    for earlier in block[:block.index(child)]:
                        if isinstance(earlier, ast.Assert) and _mentions(earlier.test, key):
                            return True
                        if isinstance(earlier, ast.If) and _mentions(earlier.test, key) and earlier.body \
                                and isinstance(earlier.body[-1], (ast.Continue, ast.Raise, ast.Return)):
                            return True
            if key in self.loop_hooks.get(id(cur), {}):
                return False
            child, cur = cur, self.parents.get(id(cur))
        return False

    def calls(self) -> list[ReplayedHook]:
        out = []
        for node in ast.walk(self.scope):
            if not isinstance(node, ast.Call):
                continue
            key = _key(node.func)
            if key is None or key not in self.hooks:
                continue
            if self._filtered(node, key):
                continue  # the code picks the hooks it calls (`assert inspect.getmodule(hook) == ddp`)
            source = self._reaching(node, key)
            kind, with_kwargs_set, _, _ = HOOK_DICTS[dict_name(source)]
            second = node.args[1] if len(node.args) > 1 else None
            non_tuple = ast.unparse(second) if isinstance(second, (ast.Constant, ast.Dict, ast.DictComp)) \
                and not (isinstance(second, ast.Constant) and isinstance(second.value, tuple)) else None
            out.append(ReplayedHook(node, source, kind, with_kwargs_set, non_tuple))
        return out
