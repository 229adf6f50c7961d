"""Tensor hooks registered per call that read, at backward time, state the next call overwrites.

A tensor hook registered inside a method (a module's ``forward``, a loss) on a
tensor of that call belongs to that call's graph, but it runs only when
``backward`` reaches the tensor.  When its callable reads the owner's
attributes (``partial(fn, owner=self)`` with ``fn`` reading ``owner.cache``, a
bound method reading ``self.cache``, a closure reading ``self.cache``) and the
same method (or a method of the class it calls) assigns those attributes
afresh on every call, a second call before the first backward (two losses
summed, a shared encoder run on two inputs, gradient caching over several
batches) rebinds them, and the first call's hook reads the second call's
values: wrong gradients, no error (tests/behaviour/test_per_call_hook_state.py,
real torch).  Capturing the values themselves (``partial(fn, cache=self.cache)``)
keeps each hook with its own call's state.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from hooklint.static.bodies import own_nodes as _own_nodes
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.semantic import ClassInfo, FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

_MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "__setitem__"})


# methods that run once per object: hooks they register are the object's, not a call's
_ONCE_METHODS = frozenset({"__init__", "__new__", "__post_init__", "__setstate__"})


@dataclass(frozen=True)
class PerCallStateRead:
    registration: Registration
    method: FunctionNode  # the method that registers the hook and writes the state
    cls: ClassInfo
    hook: ast.AST  # the hook's function
    attributes: tuple[str, ...]  # the attributes read at backward time and written per call
    first_read: ast.Attribute
    writes: tuple[ast.stmt, ...]  # where the method (or its helpers) writes them


def per_call_state_reads(ctx: "FileContext") -> list[PerCallStateRead]:
    out: list[PerCallStateRead] = []
    model = ctx.model
    for reg in ctx.hooks.registrations:
        if reg.kind is not HookKind.TENSOR or reg.hook is None or reg.hook_expr is None:
            continue
        method = model.enclosing_function(reg.call)
        cls = model.enclosing_class(reg.call)
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or cls is None \
                or not method.args.args or cls.methods.get(method.name) is not method:
            continue
        self_name = method.args.args[0].arg
        if method.name in _ONCE_METHODS or not _tensor_of_the_call(reg.receiver, method):
            continue
        owner = _owner_alias(reg, method, self_name)
        if owner is None:
            continue
        hook_node, alias = owner
        reads = _attribute_reads(hook_node, alias)
        if not reads:
            continue
        if _runs_backward_after(ctx, method, reg.call):
            continue  # the call runs its own backward: the hook fires before the next call can rebind anything
        written = _per_call_writes(cls, method, self_name)
        hit = [(name, node) for name, node in reads if name in written]
        if not hit or not ctx.core.can_run(reg.call):
            continue
        names = tuple(dict.fromkeys(name for name, _ in hit))
        writes = tuple(stmt for name in names for stmt in written[name][:1])
        out.append(PerCallStateRead(reg, method, cls, hook_node, names, hit[0][1], writes))
    return out


def _runs_backward_after(ctx: "FileContext", method: FunctionNode, call: ast.Call) -> bool:
    """`out.backward()` / `torch.autograd.grad(out, ...)` later in the method (captum's attribution methods):
    the hook runs inside this call."""
    for node in _own_nodes(method):
        if not isinstance(node, ast.Call) or (node.lineno, node.col_offset) <= (call.lineno, call.col_offset):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr == "backward":
            return True
        if ctx.model.qualify(node.func) in ("torch.autograd.grad", "torch.autograd.backward"):
            return True
    return False


def _tensor_of_the_call(receiver: ast.expr | None, method: FunctionNode) -> bool:
    """The hooked tensor is a local the call computes (not the caller's argument, not an attribute)."""
    if not isinstance(receiver, ast.Name):
        return False
    for node in _own_nodes(method):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == receiver.id for t in node.targets):
            return True
    return False


def _owner_alias(reg: Registration, method: FunctionNode, self_name: str) -> tuple[ast.AST, str] | None:
    """(the hook's function, the name it reads the owner through)."""
    hook = reg.hook
    node = hook.node
    expr = reg.hook_expr
    if hook.via == "partial" and isinstance(expr, ast.Call):
        params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
        for keyword in expr.keywords:
            if isinstance(keyword.value, ast.Name) and keyword.value.id == self_name and keyword.arg in params:
                return node, keyword.arg
        positional = [a.arg for a in node.args.posonlyargs + node.args.args]
        for index, arg in enumerate(expr.args[1:]):
            if isinstance(arg, ast.Name) and arg.id == self_name and index < len(positional):
                return node, positional[index]
        return None
    if hook.via == "method" and isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) \
            and expr.value.id == self_name and node.args.args:
        return node, node.args.args[0].arg
    if _inside(node, method):  # a lambda or closure of the method, reading `self` from it
        params = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
        if self_name not in params:
            return node, self_name
    return None


def _inside(node: ast.AST, outer: ast.AST) -> bool:
    return any(n is node for n in ast.walk(outer))


def _attribute_reads(func: ast.AST, alias: str) -> list[tuple[str, ast.Attribute]]:
    """`alias.attr` read as a value in the hook's body: not a method call, not the receiver of a mutation,
    not a store."""
    out: list[tuple[str, ast.Attribute]] = []
    parents: dict[int, ast.AST] = {}
    body = func.body if isinstance(func.body, list) else [func.body]
    for root in body:
        for parent in ast.walk(root):
            for child in ast.iter_child_nodes(parent):
                parents[id(child)] = parent
    for root in body:
        for node in ast.walk(root):
            if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                    and isinstance(node.value, ast.Name) and node.value.id == alias):
                continue
            parent = parents.get(id(node))
            if isinstance(parent, ast.Call) and parent.func is node:
                continue  # `owner.method(...)`
            if isinstance(parent, ast.Attribute) and parent.attr in _MUTATORS:
                continue  # `owner.records.append(...)`: the hook writes, it does not read the call's state
            if isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Store):
                continue
            out.append((node.attr, node))
    return out


def _per_call_writes(cls: ClassInfo, method: FunctionNode, self_name: str) -> dict[str, list[ast.stmt]]:
    """Attributes of `self` the method (or a method of the class it calls on `self`) binds to a value computed
    by the call, or binds and then fills (`self.x = []` and `self.x.append(...)`)."""
    functions: list[tuple[FunctionNode, str]] = [(method, self_name)]
    for node in _own_nodes(method):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == self_name:
            helper = cls.method(node.func.attr)
            if isinstance(helper, (ast.FunctionDef, ast.AsyncFunctionDef)) and helper is not method \
                    and helper.args.args and all(helper is not f for f, _ in functions):
                functions.append((helper, helper.args.args[0].arg))
    assigned: dict[str, list[tuple[ast.stmt, bool]]] = {}
    filled: set[str] = set()
    for func, name in functions:
        for node in _own_nodes(func):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == name and node.value is not None:
                        assigned.setdefault(target.attr, []).append((node, _computed(node.value)))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _MUTATORS and isinstance(node.func.value, ast.Attribute) \
                    and isinstance(node.func.value.value, ast.Name) and node.func.value.value.id == name:
                filled.add(node.func.value.attr)
    out: dict[str, list[ast.stmt]] = {}
    for attr, writes in assigned.items():
        if any(computed for _, computed in writes) or attr in filled:
            out[attr] = [stmt for stmt, _ in writes]
    return out


def _computed(value: ast.expr) -> bool:
    """A value that can differ from call to call: not a literal, `None`, or an empty container."""
    if isinstance(value, ast.Constant):
        return False
    if isinstance(value, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
        return bool(getattr(value, "elts", None) or getattr(value, "keys", None))
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("list", "dict", "set") \
            and not value.args and not value.keywords:
        return False
    return True

