"""Hooks on autograd Nodes whose callable refers to an object that holds the Node.

A hook registered on the autograd Node a tensor owns (``t.grad_fn
.register_hook``, ``register_prehook``) is kept by the C++ Node, which the
tensor keeps in C++ too: Python's cycle collector follows neither link.
When the hook refers to an object (``functools.partial(fn, self)``, a
closure or lambda using ``self``, a bound method ``self.on_grad``) and that
object keeps the tensor (``self.cache = t``, ``self.outputs.append(t)``, a
method whose result a caching decorator stores on ``self``), the cycle
object -> tensor -> Node -> hook -> object is invisible to ``gc``: nothing frees it while the handle is not
removed (tests/behaviour/test_node_hook_cycles.py shows it on torch 2.13).

This module finds, in one file, such registrations whose handle is
dropped.  It answers from the function's own body (and the bodies of the
functions it is nested in), and from the methods of the same class that
return the registering method's result under a caching decorator; an
object that keeps the tensor in another function (a caller storing the
returned tensor on the object) is not followed.

Nothing here imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable, Iterator

# Words a file must contain for a Node hook to be spelled in it.
TRIGGERS = ("grad_fn",)
TRIGGER_PATTERN = r"register_(?:pre)?hook\("

_REGISTER = frozenset({"register_hook", "register_prehook"})
_STORE_METHODS = frozenset({"append", "add", "insert", "setdefault", "extend", "appendleft"})
_CACHE_WORDS = ("cache", "memoize")


@dataclass(frozen=True, eq=False)
class NodeHookCycle:
    call: ast.Call  # the register_hook / register_prehook call, its handle dropped
    node_text: str  # how the Node is spelled ("res.grad_fn", "grad_acc")
    owner: str  # the name the hook refers to and that holds the Node
    hook_text: str  # how the hook is spelled
    kept: ast.AST  # the statement (or decorator) by which the owner keeps the Node or tensor
    kept_how: str  # in words


def _parent(node: ast.AST) -> ast.AST | None:
    return getattr(node, "_hl_parent", None)


def _functions_out(node: ast.AST) -> list[ast.AST]:
    """The functions (and lambdas) enclosing ``node``, innermost first."""
    out = []
    cur = _parent(node)
    while cur is not None:
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out.append(cur)
        cur = _parent(cur)
    return out


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``func``'s body, nested functions included (closures share names)."""
    body = func.body if isinstance(func.body, list) else [func.body]
    for stmt in body:
        yield from ast.walk(stmt)


def _assignments(func: ast.AST, name: str) -> list[ast.expr]:
    """Values a plain ``name = value`` in ``func`` (nested defs included) binds."""
    values = []
    for node in _own_nodes(func):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            values.append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name and node.value:
            values.append(node.value)
    return values


def _grad_fn_of(expr: ast.expr) -> str | None:
    """The tensor name whose ``grad_fn`` ``expr`` is (``t.grad_fn``), else None."""
    if isinstance(expr, ast.Attribute) and expr.attr == "grad_fn" and isinstance(expr.value, ast.Name):
        return expr.value.id
    return None


def _node_of(receiver: ast.expr, funcs: list[ast.AST]) -> tuple[str, list[str]] | None:
    """Whether ``receiver`` is the ``grad_fn`` of a tensor, and the names of that tensor.

    Only a Node a tensor owns counts: the tensor keeps it in C++, where the
    collector cannot follow.  A Node kept only by its Python object (an
    ``AccumulateGrad`` node from ``next_functions`` appended to a list) is
    traversed by the collector when that object is its only owner, and such
    cycles are freed.
    """
    tensor = _grad_fn_of(receiver)
    if tensor is not None:
        return ast.unparse(receiver), [tensor]
    if isinstance(receiver, ast.Name) and funcs:
        for func in funcs:
            values = _assignments(func, receiver.id)
            if values:
                tensors = {_grad_fn_of(v) for v in values}
                if len(tensors) == 1 and None not in tensors:
                    return receiver.id, [tensors.pop()]
                return None
    return None


def _free_names(func: ast.AST) -> set[str]:
    """Names a nested function or lambda reads that it does not bind itself."""
    args = func.args
    bound = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    bound |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    read = set()
    for node in _own_nodes(func):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                read.add(node.id)
            else:
                bound.add(node.id)
    return read - bound


def _callee_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _referred(hook: ast.expr, funcs: list[ast.AST], depth: int = 0) -> set[str]:
    """Names of objects the hook callable keeps a strong reference to."""
    if depth > 3:
        return set()
    if isinstance(hook, ast.Call) and _callee_name(hook) == "partial":
        names = set()
        for arg in hook.args[1:] + [k.value for k in hook.keywords]:
            if isinstance(arg, ast.Name):
                names.add(arg.id)
        if hook.args:
            names |= _referred(hook.args[0], funcs, depth + 1)
        return names
    if isinstance(hook, ast.Lambda):
        return _free_names(hook)
    if isinstance(hook, ast.Attribute) and isinstance(hook.value, ast.Name):
        return {hook.value.id}  # a bound method keeps its object
    if isinstance(hook, ast.Name):
        for func in funcs:
            for node in _own_nodes(func):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == hook.id:
                    return _free_names(node)
            values = _assignments(func, hook.id)
            if values:
                names = set()
                for value in values:
                    names |= _referred(value, funcs, depth + 1)
                return names
    return set()


def _is_name(expr: ast.AST, names: set[str]) -> bool:
    return isinstance(expr, ast.Name) and expr.id in names


def _is_held(expr: ast.AST, held: set[str]) -> bool:
    """``expr`` is one of the held tensors (not its ``grad_fn``: see ``_node_of``)."""
    return _is_name(expr, held)


def _root_name(expr: ast.expr) -> str | None:
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _stores(func: ast.AST, owner: str, held: set[str]) -> ast.AST | None:
    """A statement of ``func`` by which ``owner`` keeps one of ``held``."""
    for node in _own_nodes(func):
        if isinstance(node, ast.Assign) and _is_held(node.value, held):
            for target in node.targets:
                if isinstance(target, (ast.Attribute, ast.Subscript)) and _root_name(target) == owner:
                    return node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _STORE_METHODS and _root_name(node.func.value) == owner \
                    and any(_is_held(a, held) for a in node.args):
                return node
            if node.func.attr == "__setitem__" and _root_name(node.func.value) == owner \
                    and any(_is_held(a, held) for a in node.args[1:]):
                return node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if len(node.args) == 3 and _is_name(node.args[0], {owner}) and _is_held(node.args[2], held):
                return node
    return None


def _caching_decorator(func: ast.AST) -> ast.expr | None:
    for deco in getattr(func, "decorator_list", []):
        text = ast.unparse(deco).lower()
        if any(word in text for word in _CACHE_WORDS):
            return deco
    return None


def _returns(func: ast.AST, held: set[str]) -> bool:
    for node in _own_nodes(func):
        if isinstance(node, ast.Return) and node.value is not None and _is_name(node.value, held):
            if _functions_out(node)[:1] == [func]:
                return True
    return False


def _cached_return(method: ast.AST, held: set[str], class_node: ast.ClassDef | None) -> tuple[ast.AST, str] | None:
    """The caching decorator that stores ``method``'s result (one of ``held``) on its object."""
    if not _returns(method, held):
        return None
    deco = _caching_decorator(method)
    if deco is not None:
        return deco, f"`{method.name}` returns it under `@{ast.unparse(deco)}`, which keeps it on the object"
    if class_node is None:
        return None
    for other in class_node.body:
        if not isinstance(other, (ast.FunctionDef, ast.AsyncFunctionDef)) or other is method:
            continue
        other_deco = _caching_decorator(other)
        if other_deco is None:
            continue
        for node in ast.walk(other):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Call) \
                    and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == method.name \
                    and _is_name(node.value.func.value, {"self"}):
                return other_deco, (f"`{other.name}` returns `self.{method.name}(...)` under "
                                    f"`@{ast.unparse(other_deco)}`, which keeps it on the object")
    return None


def node_hook_cycles(calls: Iterable[ast.Call]) -> Iterator[NodeHookCycle]:
    """The cycles among ``calls`` (the file's ``.register_hook`` / ``.register_prehook`` calls)."""
    for call in calls:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr in _REGISTER and len(call.args) == 1 and not call.keywords):
            continue
        if not isinstance(_parent(call), ast.Expr):
            continue  # the handle is kept: its owner can remove the hook and break the cycle
        funcs = _functions_out(call)
        node = _node_of(call.func.value, funcs)
        if node is None:
            continue
        node_text, held_names = node
        held = set(held_names)
        if not held:
            continue
        hook = call.args[0]
        owners = _referred(hook, funcs)
        if not owners:
            continue
        found = _kept_by(owners, held, funcs)
        if found is None:
            continue
        owner, kept, how = found
        yield NodeHookCycle(call, node_text, owner, ast.unparse(hook), kept, how)


def _kept_by(owners: set[str], held: set[str], funcs: list[ast.AST]) -> tuple[str, ast.AST, str] | None:
    for owner in sorted(owners):
        for func in funcs:
            if isinstance(func, ast.Lambda):
                continue
            stored = _stores(func, owner, held)
            if stored is not None and not _released_elsewhere(stored, func):
                return owner, stored, f"`{ast.unparse(stored)[:60]}` keeps it on `{owner}`"
        method = next((f for f in reversed(funcs) if not isinstance(f, ast.Lambda)), None)
        if method is None or owner != "self" or method is not funcs[0]:
            continue
        params = method.args.posonlyargs + method.args.args
        if not params or params[0].arg != "self":
            continue
        class_node = _parent(method)
        cached = _cached_return(method, held, class_node if isinstance(class_node, ast.ClassDef) else None)
        if cached is not None:
            return owner, cached[0], cached[1]
    return None


_RELEASE_METHODS = frozenset({"clear", "pop", "popitem", "remove", "popleft"})


def _stored_attribute(stored: ast.AST) -> str | None:
    """The ``self.<attr>`` a store writes (``self.cache = t``, ``self.accs.append(acc)``)."""
    target = None
    if isinstance(stored, ast.Assign):
        target = stored.targets[0]
    elif isinstance(stored, ast.Call) and isinstance(stored.func, ast.Attribute):
        target = stored.func.value
    while isinstance(target, ast.Subscript):
        target = target.value
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return target.attr
    return None


def _released_elsewhere(stored: ast.AST, func: ast.AST) -> bool:
    """Whether another method of the class empties or rebinds the attribute the Node is kept in.

    Such a method (``destroy()``, ``reset()``) breaks the cycle when it runs:
    whether it does is the caller's business, so the store is not reported.
    """
    attr = _stored_attribute(stored)
    if attr is None:
        return False
    method = next((f for f in reversed(_functions_out(stored)) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    class_node = _parent(method) if method is not None else None
    if not isinstance(class_node, ast.ClassDef):
        return False
    for other in class_node.body:
        if not isinstance(other, (ast.FunctionDef, ast.AsyncFunctionDef)) or other is method or other.name == "__init__":
            continue
        for node in ast.walk(other):
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
                if any(isinstance(t, ast.Attribute) and t.attr == attr and _is_name(t.value, {"self"}) for t in targets):
                    return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _RELEASE_METHODS:
                inner = node.func.value
                if isinstance(inner, ast.Attribute) and inner.attr == attr and _is_name(inner.value, {"self"}):
                    return True
    return False
