"""Which expressions in a tensor hook's body stand for the tensor the hook is registered on.

``p.register_hook(noise)`` with ``def noise(grad, p=p): p.grad.add_(...)``: the
``p`` inside ``noise`` is the hooked tensor, reached through a default argument.
The same tensor is reached through a closure over the registration's variable,
``functools.partial(noise, p=p)`` or ``partial(noise, p)``, a factory call's
argument (``make_hook(p)`` returning a closure over its parameter), or the
``self`` of a bound method (``self.weight.register_hook(self._hook)`` and
``self.weight`` in ``_hook``).

Two expressions are the same reference when they are the same chain of
attributes on a root name whose bindings are the same (the same loop variable,
the same parameter, the same assignment).  Anything else is not the hooked
tensor as far as this module can tell: rules built on it stay quiet there.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.bodies import body_nodes
from hooklint.static.semantic import FunctionNode, SemanticModel, is_staticmethod, positional_params

_MAX_DEPTH = 6


@dataclass(frozen=True)
class Reference:
    """A name's bindings (by identity) and the attributes read off it."""

    bindings: frozenset[int]
    attrs: tuple[str, ...]


@dataclass(frozen=True)
class HookedTensorUse:
    """An expression in the hook body that is the hooked tensor, and how it got there."""

    node: ast.expr
    how: str  # "default argument", "closure", "functools.partial", "factory argument", "bound method"
    # a closure over a loop variable: the hook sees the variable's value when it runs (the last item)
    late_bound: bool = False


def _chain(expr: ast.AST) -> tuple[ast.Name, tuple[str, ...]] | None:
    """``model[2].bias`` -> (``model``, ("[2]", "bias")); None for anything but names,
    attributes and constant subscripts."""
    attrs: list[str] = []
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        if isinstance(expr, ast.Attribute):
            attrs.append(expr.attr)
        elif isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, (int, str)):
            attrs.append(f"[{expr.slice.value!r}]")
        else:
            return None
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return expr, tuple(reversed(attrs))


class _Resolver:
    def __init__(self, model: SemanticModel, aliases: dict[int, tuple[ast.expr, str]]):
        self.model = model
        self.aliases = aliases  # id(param Binding) -> (expression it stands for, how)

    def resolve(self, expr: ast.AST, depth: int = 0) -> tuple[Reference, str] | None:
        """The reference ``expr`` stands for, and the alias it went through ("" when none)."""
        chain = _chain(expr)
        if chain is None or depth > _MAX_DEPTH:
            return None
        root, attrs = chain
        bindings = self.model.bindings_at(root)
        if not bindings:
            return None
        if len(bindings) == 1:
            only = bindings[0]
            alias = self.aliases.get(id(only))
            if alias is not None:
                inner = self.resolve(alias[0], depth + 1)
                if inner is None:
                    return None
                return Reference(inner[0].bindings, inner[0].attrs + attrs), alias[1]
            # `w = model.fc.weight`: the same reference as `model.fc.weight`
            if only.kind == "assign" and not only.path and isinstance(only.value, (ast.Name, ast.Attribute)) \
                    and only.value is not root:
                inner = self.resolve(only.value, depth + 1)
                if inner is not None:
                    return Reference(inner[0].bindings, inner[0].attrs + attrs), inner[1]
        return Reference(frozenset(id(b) for b in bindings), attrs), ""


def _param_bindings(model: SemanticModel, func: ast.AST) -> dict[str, int]:
    scope = model.scopes.get(func)
    if scope is None:
        return {}
    out = {}
    for name, bindings in scope.bindings.items():
        for b in bindings:
            if b.kind == "param":
                out[name] = id(b)
    return out


def _defaults(func: ast.AST) -> list[tuple[str, ast.expr]]:
    args: ast.arguments = func.args  # type: ignore[attr-defined]
    positional = list(args.posonlyargs) + list(args.args)
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return [(a.arg, d) for a, d in pairs]


def _call_arguments(call: ast.Call, params: list[str], skip: int = 0) -> list[tuple[str, ast.expr]]:
    """(parameter, argument) pairs a call supplies, its first ``skip`` arguments left out."""
    out = []
    for name, arg in zip(params, call.args[skip:]):
        if isinstance(arg, ast.Starred):
            break
        out.append((name, arg))
    out += [(k.arg, k.value) for k in call.keywords if k.arg]
    return out


def _hook_call(model: SemanticModel, expr: ast.expr | None) -> ast.Call | None:
    """The call that made the hook: the expression itself, or a name's only assignment."""
    if isinstance(expr, ast.Call):
        return expr
    if isinstance(expr, ast.Name):
        bindings = model.bindings_at(expr)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.Call):
            return bindings[0].value
    return None


def hooked_tensor_uses(model: SemanticModel, receiver: ast.expr, hook_expr: ast.expr | None,
                       func: ast.AST, via: str) -> list[HookedTensorUse]:
    """Expressions in ``func``'s body (the hook registered as ``receiver.register_hook(hook_expr)``)
    that are ``receiver`` itself, in source order.  ``via`` is ``CallableValue.via``."""
    aliases: dict[int, tuple[ast.expr, str]] = {}
    params = _param_bindings(model, func)
    for name, default in _defaults(func):
        if name in params:
            aliases[params[name]] = (default, "default argument")
    call = _hook_call(model, hook_expr)
    if via == "partial" and call is not None and call.args:
        for name, arg in _call_arguments(call, positional_params(func), skip=1):
            if name in params:
                aliases[params[name]] = (arg, "functools.partial")
    elif via == "factory" and call is not None:
        factory = model.enclosing_function(func)
        if isinstance(factory, FunctionNode):
            factory_params = _param_bindings(model, factory)
            names = positional_params(factory)
            scope = model.scopes.get(factory)
            if scope is not None and scope.parent is not None and scope.parent.kind == "class" \
                    and not is_staticmethod(factory):
                names = names[1:]  # `self.make_hook(p)`: the call does not pass `self`
            for name, arg in _call_arguments(call, names):
                if name in factory_params:
                    aliases[factory_params[name]] = (arg, "factory argument")
    elif via == "method" and isinstance(hook_expr, ast.Attribute):
        first = positional_params(func)[:1]
        if first and first[0] in params:
            aliases[params[first[0]]] = (hook_expr.value, "bound method")
    resolver = _Resolver(model, aliases)
    target = resolver.resolve(receiver)
    if target is None:
        return []
    out = []
    for node in body_nodes(func):
        if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) or not isinstance(node.ctx, ast.Load):
            continue
        found = resolver.resolve(node)
        if found is None or found[0] != target[0]:
            continue
        how = found[1] or "closure"
        late = how == "closure" and any(b.kind in ("for", "comprehension") for b in model.bindings_at(
            _chain(node)[0]))  # type: ignore[index]
        out.append(HookedTensorUse(node, how, late))
    out.sort(key=lambda u: (u.node.lineno, u.node.col_offset))
    return out
