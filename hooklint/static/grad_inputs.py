"""``torch.autograd.grad`` asked for the gradient of every parameter of a module.

``torch.autograd.grad(outputs, inputs)`` raises ``RuntimeError: One of the
differentiated Tensors does not require grad`` as soon as one tensor of
``inputs`` has ``requires_grad=False``; ``allow_unused=True`` does not help
(tests/behaviour/test_grad_inputs.py).  ``module.parameters()`` yields frozen
parameters too, so inputs built from it fail on any model with a frozen part
unless they are filtered on ``p.requires_grad``.

The inputs are followed by name, through the bindings of the function that
calls ``grad`` and the functions around it (a tuple, ``+``, ``tuple(...)``,
``list(...)``, ``*`` unpacking), and through a custom ``autograd.Function``:
a name unpacked from ``ctx.saved_tensors`` in its ``backward`` is traced to
the ``*args`` of ``forward`` that ``save_for_backward`` stored, and from there
to the ``*name`` the file's ``Fn.apply(...)`` calls pass, and that name's
bindings in the calling function.  A source is ``<x>.parameters()``; the
chain is quiet when a binding of a name on it, or a loop or comprehension
over it, mentions ``requires_grad``.  Only modules the caller hands in (a
parameter of the function around ``parameters()``, not ``self``, not rebound
before, and not one that every call in the file passes freshly built, from a
constructor or ``from_pretrained``, with no ``requires_grad`` change) are
followed: a module the code builds itself is as trainable as the
code made it (torch's own test harness differentiates freshly built modules).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.flow import executed_nodes, function_of
from hooklint.static.semantic import FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

GRAD_FUNCTIONS = frozenset({"torch.autograd.grad"})


@dataclass(frozen=True)
class FrozenParamGrad:
    source: ast.Call  # `func.parameters()`
    grad_call: ast.Call
    through: str  # "" or the Function's name the parameters pass through


def _mentions_requires_grad(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in ("requires_grad", "requires_grad_")
               for n in ast.walk(node))


def _scopes(at: ast.AST) -> list[ast.AST]:
    out = []
    fn = function_of(at)
    while isinstance(fn, FunctionNode + (ast.Lambda,)):
        out.append(fn)
        fn = function_of(fn)
    return out


def _bindings(scope: ast.AST, name: str) -> list[tuple[ast.AST, ast.AST, bool]]:
    """(statement, value, starred) for each assignment of ``name`` in ``scope``'s own code."""
    found = []
    for node in executed_nodes(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    found.append((node, node.value, False))
                elif isinstance(target, (ast.Tuple, ast.List)):
                    for elt in target.elts:
                        if isinstance(elt, ast.Starred) and isinstance(elt.value, ast.Name) and elt.value.id == name:
                            found.append((node, node.value, True))
                        elif isinstance(elt, ast.Name) and elt.id == name:
                            found.append((node, node.value, False))
    return found


def _filtered(scope: ast.AST, name: str) -> bool:
    """A binding, loop or comprehension over ``name`` in ``scope`` that looks at requires_grad."""
    for node in executed_nodes(scope):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Name) \
                and node.iter.id == name:
            parent = node if isinstance(node, ast.For) else getattr(node, "_hl_parent", None)
            if parent is not None and _mentions_requires_grad(parent):
                return True
    return any(_mentions_requires_grad(value) for _, value, _ in _bindings(scope, name))


def _names_in(expr: ast.AST) -> list[str]:
    if isinstance(expr, ast.Name):
        return [expr.id]
    if isinstance(expr, ast.Starred):
        return _names_in(expr.value)
    if isinstance(expr, (ast.Tuple, ast.List)):
        return [n for e in expr.elts for n in _names_in(e)]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _names_in(expr.left) + _names_in(expr.right)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("tuple", "list") \
            and len(expr.args) == 1:
        return _names_in(expr.args[0])
    return []


def _callers_module(call: ast.Call) -> bool:
    """``m.parameters()`` where ``m`` is a parameter of the function around the call (not ``self``):
    a module the caller chose, which may have frozen parts; a module the code builds itself is
    as trainable as the code made it."""
    receiver = call.func.value  # type: ignore[attr-defined]
    if not isinstance(receiver, ast.Name) or receiver.id in ("self", "cls"):
        return False
    for scope in _scopes(call):
        if not isinstance(scope, FunctionNode):
            continue
        args = scope.args
        if receiver.id in [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]:
            if any(isinstance(stmt, ast.Assign) and stmt.lineno < call.lineno
                   and any(isinstance(t, ast.Name) and t.id == receiver.id for t in stmt.targets)
                   for stmt in executed_nodes(scope)):
                return False
            return not _built_by_every_caller(scope, receiver.id)
        if _bindings(scope, receiver.id):
            return False
    return False


def _fresh_module(caller: ast.AST, name: str) -> bool:
    """``name`` in ``caller`` is only ever a module built there (a constructor, ``from_pretrained``)
    and moved or switched (``name.to(...)``, ``name.eval()``), with no ``requires_grad`` change."""
    if _mentions_requires_grad(caller):
        return False
    binds = _bindings(caller, name)
    if not binds:
        return False
    built = False
    for _stmt, value, starred in binds:
        if starred or not isinstance(value, ast.Call):
            return False
        func = value.func
        last = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if last == "from_pretrained" or last[:1].isupper():
            built = True
        elif not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == name):
            return False
    return built


def _built_by_every_caller(fn: ast.AST, param: str) -> bool:
    """Every call of ``fn`` in the file (there is one at least) hands it a module its caller built."""
    if not isinstance(fn, FunctionNode):
        return False
    root = fn
    while getattr(root, "_hl_parent", None) is not None:
        root = root._hl_parent  # type: ignore[attr-defined]
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    calls = [n for n in ast.walk(root) if isinstance(n, ast.Call) and (
        isinstance(n.func, ast.Name) and n.func.id == fn.name)]
    if not calls:
        return False
    for site in calls:
        arg = next((k.value for k in site.keywords if k.arg == param), None)
        if arg is None and param in params and params.index(param) < len(site.args):
            arg = site.args[params.index(param)]
        caller = function_of(site)
        if not isinstance(arg, ast.Name) or not isinstance(caller, FunctionNode) or not _fresh_module(caller, arg.id):
            return False
    return True


def _parameters_call(expr: ast.AST) -> ast.Call | None:
    """``x.parameters()`` itself or wrapped in tuple()/list()/a tuple display, ``x`` the caller's module."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "parameters" \
            and not expr.args:
        return expr if _callers_module(expr) else None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("tuple", "list") \
            and len(expr.args) == 1:
        return _parameters_call(expr.args[0])
    if isinstance(expr, ast.Starred):
        return _parameters_call(expr.value)
    if isinstance(expr, (ast.Tuple, ast.List)):
        for elt in expr.elts:
            found = _parameters_call(elt)
            if found is not None:
                return found
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _parameters_call(expr.left) or _parameters_call(expr.right)
    return None


def _inside(node: ast.AST, stmt: ast.AST) -> bool:
    cur: ast.AST | None = node
    while cur is not None:
        if cur is stmt:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


class _Tracer:
    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx

    def sources(self, expr: ast.AST, at: ast.AST, depth: int = 0) -> list[tuple[ast.Call, str]]:
        direct = _parameters_call(expr)
        if direct is not None:
            return [(direct, "")]
        if depth > 4:
            return []
        out: list[tuple[ast.Call, str]] = []
        for name in _names_in(expr):
            for scope in _scopes(at):
                binds = _bindings(scope, name)
                if not binds:
                    continue
                if _filtered(scope, name):
                    break  # this name's tensors are chosen or set by requires_grad
                for stmt, value, starred in binds:
                    if _inside(at, stmt):
                        continue  # `params = tuple(params)`: the value read is an earlier binding
                    if self._is_saved_tensors(value):
                        out.extend(self._through_function(scope, stmt, name, starred, depth))
                    else:
                        out.extend(self.sources(value, stmt, depth + 1))
                break
        return out

    @staticmethod
    def _is_saved_tensors(value: ast.AST) -> bool:
        return isinstance(value, ast.Attribute) and value.attr == "saved_tensors"

    def _through_function(self, backward: ast.AST, stmt: ast.AST, name: str, starred: bool,
                          depth: int) -> list[tuple[ast.Call, str]]:
        """``t, *params = ctx.saved_tensors`` in a Function's backward: the ``*args`` of forward that
        ``save_for_backward`` stored in that position, and the ``*name`` the file's ``apply`` calls pass."""
        if not starred or not isinstance(backward, FunctionNode) or backward.name != "backward":
            return []
        cls = getattr(backward, "_hl_parent", None)
        if not isinstance(cls, ast.ClassDef):
            return []
        info = self.ctx.model.classes.get(cls)
        if info is None or not self.ctx.model.is_autograd_function_class(info):
            return []
        forward = info.methods.get("forward")
        if not isinstance(forward, FunctionNode) or forward.args.vararg is None:
            return []
        vararg = forward.args.vararg.arg
        saved = [n for n in executed_nodes(forward) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and n.func.attr == "save_for_backward"]
        if not any(isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and a.value.id == vararg
                   for call in saved for a in call.args):
            return []
        out: list[tuple[ast.Call, str]] = []
        for node in ast.walk(self.ctx.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "apply"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == cls.name):
                continue
            stars = [a for a in node.args if isinstance(a, ast.Starred)]
            if len(stars) != 1:
                continue
            for source, _ in self.sources(stars[0].value, node, depth + 1):
                out.append((source, cls.name))
        return out


def frozen_param_grads(ctx: "FileContext") -> list[FrozenParamGrad]:
    tracer = _Tracer(ctx)
    found: list[FrozenParamGrad] = []
    seen: set[int] = set()
    for node in ast.walk(ctx.tree):
        if not isinstance(node, ast.Call):
            continue
        qual = ctx.model.qualify(node.func)
        if qual not in GRAD_FUNCTIONS:
            continue
        inputs = next((k.value for k in node.keywords if k.arg == "inputs"), None)
        if inputs is None and len(node.args) >= 2:
            inputs = node.args[1]
        if inputs is None:
            continue
        for source, through in tracer.sources(inputs, node):
            if id(source) in seen:
                continue
            seen.add(id(source))
            found.append(FrozenParamGrad(source, node, through))
    return found
