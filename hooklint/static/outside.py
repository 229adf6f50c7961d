"""Modules that come from outside: what a function's caller hands it.

Library code hooks modules it did not build: a ``target_layer`` parameter,
an argument ``__init__`` stored as ``self.model``, each submodule of the
caller's model.  :func:`caller_supplied` recognises these shapes and says
where the module comes from, in words for a message.
"""

from __future__ import annotations

import ast

from hooklint.static.passthrough import is_self
from hooklint.static.semantic import FunctionNode, SemanticModel, positional_params
from hooklint.static.values import Inference, ModuleValue

_SUBMODULE_ITERATORS = {"modules": (), "named_modules": (1,), "children": (), "named_children": (1,)}


def caller_supplied(model: SemanticModel, inference: Inference, expr: ast.AST) -> str | None:
    """How ``expr`` is (part of) a module the caller passed in, or None."""
    found = outside_root(model, inference, expr)
    return found[0] if found is not None else None


def outside_root(model: SemanticModel, inference: Inference, expr: ast.AST,
                 depth: int = 0) -> tuple[str, ast.expr] | None:
    """(how ``expr`` comes from the caller, the expression naming what the caller
    passed: the parameter, or ``self.attr`` stored from one), or None."""
    if depth > 6:
        return None
    if isinstance(expr, ast.Subscript):
        return _part_of(outside_root(model, inference, expr.value, depth + 1))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get_submodule":
        return _part_of(outside_root(model, inference, expr.func.value, depth + 1))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" and expr.args:
        return _part_of(outside_root(model, inference, expr.args[0], depth + 1))
    if isinstance(expr, ast.Attribute):
        if isinstance(expr.value, ast.Name) and expr.value.id == "self" and is_self(model, expr.value):
            stored = _stored_argument(model, expr)
            return (stored, expr) if stored is not None else None
        return _part_of(outside_root(model, inference, expr.value, depth + 1))
    if not isinstance(expr, ast.Name) or not hasattr(expr, "_hl_scope"):
        return None
    bindings = model.bindings_at(expr)
    if len(bindings) != 1:
        return None
    b = bindings[0]
    if b.kind == "param":
        func = b.scope.node
        if not isinstance(func, FunctionNode):
            return None
        if is_self(model, expr):
            return None
        if func in inference.applied_functions():
            return None  # `net.apply(fn)`: the file shows the modules
        return f"the argument `{expr.id}` of `{_qualified(model, func)}`", expr
    if b.kind == "for" and isinstance(b.value, ast.AST):
        iterable = b.value
        element = _element_of_callers(model, inference, iterable, b.path, depth)
        if element is not None:
            return element
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
            method = iterable.func.attr
            base = iterable.func.value
            if _SUBMODULE_ITERATORS.get(method) == b.path:
                inner = outside_root(model, inference, base, depth + 1)
                return (f"each submodule of {_whole(inner[0])}", inner[1]) if inner else None
            if isinstance(base, ast.Attribute) and base.attr == "_modules" and (
                    (method == "items" and b.path == (1,)) or (method == "values" and b.path == ())):
                inner = outside_root(model, inference, base.value, depth + 1)
                return (f"each child of {_whole(inner[0])}", inner[1]) if inner else None
        return None
    if b.kind == "assign" and not b.path and isinstance(b.value, ast.expr):
        return outside_root(model, inference, b.value, depth + 1)
    return None


def built_in_file(model: SemanticModel, inference: Inference, expr: ast.AST | None) -> bool:
    """The module a call site passes is one this file builds (`net.fc` with
    `net = Net()`, `model = build_model()`), so what it is can be judged here."""
    if expr is None:
        return False
    base = expr
    while isinstance(base, (ast.Attribute, ast.Subscript)):
        base = base.value
    if not hasattr(base, "_hl_scope") or outside_root(model, inference, expr) is not None:
        return False
    value = inference.infer(base)
    if value is None:
        return inference.built_by_local_factory(base)  # `model = build_model()`
    return isinstance(value, ModuleValue) and (value.local_class is not None or value.torch_class is not None)


def chosen_in_file(model: SemanticModel, inference: Inference, resolver, call: ast.AST, root: ast.AST) -> bool:
    """A call in this file hands the registering code a module the file builds
    (``root`` is what :func:`outside_root` found; ``resolver`` the hook index's
    :class:`~hooklint.static.travel.Resolver`): the registration is not a
    library's hook on an unknown caller's model."""
    for env in resolver.envs_at(call, [root]):
        if env.site is not None and built_in_file(model, inference, resolver.origin(root, env)):
            return True
    return False


def _element_of_callers(model: SemanticModel, inference: Inference, iterable: ast.AST, path: tuple[int, ...],
                        depth: int) -> tuple[str, ast.expr] | None:
    """A loop over what the caller handed over: its list of layers (``for
    layer in target_layers``), or a generator of the project that yields parts
    of the caller's model (``for m in self._hookable_modules(model)``), as the
    function summaries of hooklint.static.core place it."""
    if path:
        return None
    if isinstance(iterable, ast.Name) and hasattr(iterable, "_hl_scope"):
        bindings = model.bindings_at(iterable)
        if len(bindings) == 1 and bindings[0].kind == "param" and not is_self(model, iterable) \
                and bindings[0].scope.node not in inference.applied_functions():
            func = bindings[0].scope.node
            return f"each element of the argument `{iterable.id}` of `{_qualified(model, func)}`", iterable
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path:
            # `layers = {m: name for name, m in model.named_modules() if ...}; for m in layers:`
            item = comprehension_item(bindings[0].value)
            if item is not None:
                return outside_root(model, inference, item, depth + 1)
        return None
    if isinstance(iterable, ast.Attribute) and isinstance(iterable.value, ast.Name) \
            and is_self(model, iterable.value):
        # `self.layers = [m for m in model.modules() if ...]` once, then `for m in self.layers:`
        cls = model.enclosing_class(iterable)
        assigned = cls.attribute(iterable.attr) if cls is not None else []
        item = comprehension_item(assigned[0][0]) if len(assigned) == 1 else None
        return outside_root(model, inference, item, depth + 1) if item is not None else None
    if not isinstance(iterable, ast.Call):
        return None
    from hooklint.static.core import core_of

    core = core_of(model, inference)
    func = core.places.owner(iterable)
    place = core.places.element_of(iterable, func)
    if not place.startswith("e:") or core.local_callee(iterable) is None:
        return None  # only generators of this file: `model.modules()` is handled below
    root = place[2:].split(".", 1)[0]
    for arg in list(iterable.args) + [k.value for k in iterable.keywords]:
        inner = outside_root(model, inference, arg, depth + 1)
        if inner is not None and core.places.of(arg, func).split(".", 1)[0] == root:
            return (f"each module `{_call_text(iterable)}` yields from {_whole(inner[0])}", inner[1])
    return None


def comprehension_item(value: object) -> ast.expr | None:
    """What iterating the result of a comprehension gives: its element, or
    the key of a dict comprehension."""
    if isinstance(value, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        return value.elt
    if isinstance(value, ast.DictComp):
        return value.key
    return None


def _call_text(call: ast.Call) -> str:
    try:
        return ast.unparse(call.func) + "(...)"
    except Exception:  # noqa: BLE001 - odd trees must not crash a rule
        return "the generator"


def _stored_argument(model: SemanticModel, expr: ast.Attribute) -> str | None:
    """``self.attr`` assigned once, in ``__init__``, from one of its arguments."""
    cls = model.enclosing_class(expr)
    if cls is None:
        return None
    assigned = cls.attribute(expr.attr)
    if not assigned:
        return _passed_to_base(cls, expr.attr)
    if len(assigned) != 1:
        return None
    value, scope, _node = assigned[0]
    method = scope.node
    if getattr(method, "name", "") != "__init__" or not isinstance(value, ast.Name):
        return None
    params = set(positional_params(method)[1:]) | {a.arg for a in method.args.kwonlyargs}  # type: ignore[attr-defined]
    if value.id not in params:
        return None
    return f"the argument `{value.id}` of `{cls.name}.__init__`"




def _passed_to_base(cls, attr: str) -> str | None:
    """``self.model`` that the class never stores, where its ``__init__``
    hands its own argument ``model`` to the base class's constructor
    (``super().__init__(model, ...)``) and that base is not in this file:
    the base is taken to store it under its name (medcam's ``_BaseWrapper``
    does), a guess from the names."""
    init = cls.methods.get("__init__")
    if init is None or cls.local_bases:
        return None
    params = positional_params(init)[1:] + [a.arg for a in init.args.kwonlyargs]
    if attr not in params:
        return None
    for node in ast.walk(init):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"):
            continue
        base = node.func.value
        if not (isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"):
            continue
        passed = list(node.args) + [k.value for k in node.keywords]
        if any(isinstance(a, ast.Name) and a.id == attr for a in passed):
            return f"the argument `{attr}` of `{cls.name}.__init__`, handed to its base class"
    return None


def _qualified(model: SemanticModel, func: ast.AST) -> str:
    cls = model.enclosing_class(func)
    name = getattr(func, "name", "<lambda>")
    return f"{cls.name}.{name}" if cls is not None and getattr(func, "_hl_parent", None) is cls.node else name


def _whole(text: str) -> str:
    """The module a description is about, without "part of"."""
    return text[len("part of "):] if text.startswith("part of ") else text


def _part_of(found: tuple[str, ast.expr] | None) -> tuple[str, ast.expr] | None:
    if found is None:
        return None
    text, root = found
    return (text if text.startswith("part of ") else f"part of {text}"), root
