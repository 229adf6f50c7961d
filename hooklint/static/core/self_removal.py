"""Hook callables that take themselves off when they run.

A one-shot hook removes its own registration the first time it runs: torch's
``LazyModuleMixin`` (and torch-geometric's lazy layers) remove the
initialising pre-hook from inside it, a hook object's ``__call__`` deletes its
own entry from the module's ``_forward_pre_hooks``, a closure calls
``handle.remove()`` on the handle its registering function bound.  Such a
registration does not stack (each one runs once and is gone) and its removal
is its purpose, not a loss; HKL304 and HKL306 ask this module before
reporting.

What a callable removes when it runs is a list of *marks*:

- ``"dict"``: it deletes an entry of a hook dict of the module it is called
  with (``del mod._forward_pre_hooks[k]``, ``mod._forward_hooks.pop(k)``);
- ``"s.<attr>"``: it removes the handle kept in ``self.<attr>`` (directly or
  through a helper: the function summaries compose it);
- ``"n:<name>"``: it calls ``<name>.remove()`` on a name of an enclosing
  scope (a closure's handle).

The marks of a file's functions and classes (a class: its ``__call__``) are
exported in its summary (``"self_removing"``), so a registration in another
file (``m.register_forward_pre_hook(_OneShot())``, the class imported) is
answered by the project index.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Callable, Iterable

from hooklint.static.hook_dicts import HOOK_DICTS, _is_hook_dict
from hooklint.static.semantic import FunctionNode, positional_params

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.core import Core

DICT = "dict"
_ALL_HOOK_DICTS = frozenset(name for names in HOOK_DICTS.values() for name in names)
_DROPPING = frozenset({"pop", "popitem", "__delitem__"})


def marks_of(core: "Core", func: ast.AST, bound: int) -> list[str]:
    """What ``func`` removes of its own registration when it runs as a hook
    whose first ``bound`` positional parameters are supplied already (``self``
    of a bound method or ``__call__``)."""
    if not isinstance(func, (FunctionNode, ast.Lambda)):
        return []
    out: list[str] = []
    params = positional_params(func)
    module = params[bound] if len(params) > bound else None
    if module is not None and _deletes_from_hook_dict(func, module):
        out.append(DICT)
    if isinstance(func, FunctionNode):
        for removal in core.facts(func).removes:
            if removal.place.startswith("s.") and removal.place not in out:
                out.append(removal.place)
    local = _assigned_names(func)
    for node in _own_nodes(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "remove" \
                and not node.args and isinstance(node.func.value, ast.Name) and node.func.value.id not in local:
            mark = "n:" + node.func.value.id
            if mark not in out:
                out.append(mark)
    return out


def _deletes_from_hook_dict(func: ast.AST, module: str) -> bool:
    """``del <module>._forward_pre_hooks[k]``, ``<module>._forward_hooks.pop(k)``
    (also through a local alias of the dict) in the body of ``func``."""
    def of_module(expr: ast.AST) -> bool:
        return isinstance(expr, ast.Attribute) and expr.attr in _ALL_HOOK_DICTS \
            and isinstance(expr.value, ast.Name) and expr.value.id == module

    aliases = {target.id for node in _own_nodes(func) if isinstance(node, ast.Assign) and of_module(node.value)
               for target in node.targets if isinstance(target, ast.Name)}
    for node in _own_nodes(func):
        if isinstance(node, ast.Delete):
            if any(isinstance(t, ast.Subscript) and (of_module(t.value) or _is_hook_dict(t.value, frozenset(), aliases))
                   for t in node.targets):
                return True
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _DROPPING \
                and (of_module(node.func.value) or _is_hook_dict(node.func.value, frozenset(), aliases)):
            return True
    return False


def _assigned_names(func: ast.AST) -> set[str]:
    """Names bound in ``func`` itself (its parameters included), unless
    declared ``nonlocal`` or ``global``."""
    names: set[str] = set()
    declared: set[str] = set()
    if isinstance(func, (FunctionNode, ast.Lambda)):
        args = func.args
        names |= {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in _own_nodes(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Nonlocal, ast.Global)):
            declared.update(node.names)
    return names - declared


def _own_nodes(func: ast.AST) -> Iterable[ast.AST]:
    """The nodes of ``func``'s body, not those of functions or classes nested in it."""
    body = func.body if isinstance(func.body, list) else [func.body]  # type: ignore[attr-defined]
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def export(core: "Core", tree: ast.AST, qualname: Callable[[ast.AST], str | None]) -> dict[str, list[str]]:
    """The marks of the file's functions (bound methods: ``self`` supplied)
    and classes (their ``__call__``) that remove something when they run, by
    local qualified name, for callers in other files.  Only functions whose
    text can remove anything are looked at."""
    model = core.model
    out: dict[str, list[str]] = {}
    candidates: dict[int, ast.AST] = {}
    for call in model.method_calls.get("remove", ()):
        # a handle's remove() takes no argument (`list.remove(x)` takes one)
        owner = core.places.owner(call) if not call.args and not call.keywords else None
        if isinstance(owner, FunctionNode):
            candidates[id(owner)] = owner
    # deleting from a hook dict needs the dict named as an attribute (`mod._forward_pre_hooks`), directly or
    # through a local alias of it: a file that names none (most files; `dict.pop` is everywhere) has no such
    # deletion, and its `pop` calls and `del` statements need no function summary
    nodes = model._visited or list(ast.walk(tree))
    if not model.attribute_names.isdisjoint(_ALL_HOOK_DICTS) if model._visited else \
            any(isinstance(node, ast.Attribute) and node.attr in _ALL_HOOK_DICTS for node in nodes):
        for name in _DROPPING:
            for call in model.method_calls.get(name, ()):
                owner = core.places.owner(call)
                if isinstance(owner, FunctionNode):
                    candidates[id(owner)] = owner
        for node in nodes:
            if isinstance(node, ast.Delete) and any(isinstance(t, ast.Subscript) for t in node.targets):
                owner = core.places.owner(node)
                if isinstance(owner, FunctionNode):
                    candidates[id(owner)] = owner
    for func in sorted(candidates.values(), key=lambda f: (f.lineno, f.col_offset)):
        cls = model.enclosing_class(func)
        method = cls is not None and func in cls.methods.values()
        marks = marks_of(core, func, 1 if method else 0)
        marks = [m for m in marks if not m.startswith("n:")]  # a closure's handle is its own file's business
        if not marks:
            continue
        local = qualname(func)
        if local is None:
            continue
        out[local] = marks
        if method and func.name == "__call__":  # type: ignore[union-attr]
            owner = qualname(cls.node)  # type: ignore[union-attr]
            if owner is not None:
                out[owner] = marks
    return out
