"""Conditions whose value is known before the code runs.

The control-flow graphs cut the branch such a condition never takes:
literals (``if False:``, ``while 1:``), ``typing.TYPE_CHECKING`` (false when
the code runs), ``__debug__``, a module-level switch bound once to a boolean
and never declared ``global`` (``DEBUG = False``), and what
:func:`hooklint.static.fallbacks.decide` knows of every torch >= 1.8
(``hasattr(m, "register_full_backward_hook")``, version gates at 1.8 or
below).
"""

from __future__ import annotations

import ast

from hooklint.static.fallbacks import decide
from hooklint.static.semantic import SemanticModel
from hooklint.static.tree_walk import walk_tree

_TYPE_CHECKING = frozenset({"typing.TYPE_CHECKING", "typing_extensions.TYPE_CHECKING"})


def truth(model: SemanticModel, test: ast.AST, depth: int = 0) -> bool | None:
    """The value of ``test`` whenever it runs, or None when it may differ."""
    if depth > 6:
        return None
    if isinstance(test, ast.Constant):
        if test.value is Ellipsis:
            return True
        try:
            return bool(test.value)
        except Exception:  # noqa: BLE001 - an odd constant: unknown
            return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = truth(model, test.operand, depth + 1)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [truth(model, v, depth + 1) for v in test.values]
        if isinstance(test.op, ast.And):
            if any(v is False for v in values):
                # `a and False`: false whatever `a` is (its side effects aside)
                return False
            return True if all(v is True for v in values) else None
        if any(v is True for v in values):
            return True
        return False if all(v is False for v in values) else None
    if isinstance(test, ast.Name):
        if test.id == "__debug__":
            return True
    if isinstance(test, (ast.Name, ast.Attribute)) and _qualify(model, test) in _TYPE_CHECKING:
        return False
    if isinstance(test, (ast.Name, ast.Call, ast.Compare, ast.Attribute)) and hasattr(test, "_hl_parent"):
        try:
            return decide(model, test)
        except RecursionError:
            return None
    return None


def _qualify(model: SemanticModel, expr: ast.AST) -> str | None:
    try:
        return model.qualify(expr) if hasattr(expr, "_hl_scope") or isinstance(expr, ast.Attribute) else None
    except Exception:  # noqa: BLE001 - an expression the model did not visit
        return None


_NO_VALUE = object()


def constructed_attribute(model: SemanticModel, cls, attr: str) -> tuple[bool, object]:
    """(True, value) when every object of ``cls`` (a class of the file) holds
    the literal ``value`` in ``self.<attr>``: the constructor chain the class
    runs sets it from a literal, or from a parameter whose argument (or
    default) along ``super().__init__(...)`` is one, and nothing else in the
    file stores that attribute name (brevitas' ``_BiasCorrection`` builds its
    base with ``call_act_quantizer_impl=False``, so its
    ``if self.call_act_quantizer_impl:`` branch never registers the hook).
    A subclass of another file or a store of another file is not seen: the
    answer only makes a rule quieter."""
    if model._visited and attr not in model.attribute_names:
        return False, None  # never stored (nor named): the walk below would count no store
    stores = 0
    for node in walk_tree(model.tree):
        if isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores += 1
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and not (len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                         and node.args[1].value != attr):
            return False, None  # `setattr(obj, name, v)`: any attribute, this one included
    if stores != 1:
        return False, None  # set in more than one place (or deleted): it may change after construction
    arguments: dict[str, ast.expr] | None = None  # what the constructor being followed was given (None: unknown)
    info = cls
    for _depth in range(8):
        init = info.methods.get("__init__")
        if init is None:
            if len(info.local_bases) != 1:
                return False, None
            info = info.local_bases[0]
            continue
        params = init.args.posonlyargs + init.args.args
        for expr, _scope, assign in info.attributes.get(attr, ()):
            if _holder(assign) is not init:
                return False, None  # set by another method: it may change after construction
            value = _literal_value(expr)
            if value is not _NO_VALUE:
                return True, value
            if isinstance(expr, ast.Name) and arguments is not None:
                given = arguments.get(expr.id)
                if given is None:
                    default = _default_of(init, expr.id)
                    if default is None:
                        return False, None
                    given = default
                value = _literal_value(given)
                return (True, value) if value is not _NO_VALUE else (False, None)
            return False, None
        chained = _base_init_call(init, params)
        if chained is None or len(info.local_bases) != 1:
            return False, None
        call, skip = chained
        base_init = info.local_bases[0].method("__init__")
        if base_init is None:
            return False, None
        base_params = [p.arg for p in (base_init.args.posonlyargs + base_init.args.args)[1:]]
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return False, None
        passed = call.args[skip:]
        if len(passed) > len(base_params):
            return False, None
        arguments = dict(zip(base_params, passed))
        arguments.update({k.arg: k.value for k in call.keywords if k.arg})
        info = info.local_bases[0]
    return False, None


def _holder(node: ast.AST) -> ast.AST | None:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        cur = getattr(cur, "_hl_parent", None)
    return cur


def _literal_value(expr: ast.AST) -> object:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, (bool, int, str, type(None))):
        return expr.value
    return _NO_VALUE


def _default_of(func: ast.AST, name: str) -> ast.expr | None:
    args = func.args
    positional = args.posonlyargs + args.args
    defaults = dict(zip([p.arg for p in positional[len(positional) - len(args.defaults):]], args.defaults))
    defaults.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return defaults.get(name)


def _base_init_call(init: ast.AST, params: list) -> tuple[ast.Call, int] | None:
    """The ``super().__init__(...)`` (or ``super(C, self).__init__``,
    ``Base.__init__(self, ...)``) statement of ``init``'s own body, with the
    number of leading arguments that are not the base's parameters."""
    found = None
    for stmt in init.body:
        if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
            continue
        call = stmt.value
        f = call.func
        if not (isinstance(f, ast.Attribute) and f.attr == "__init__"):
            continue
        if isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Name) and f.value.func.id == "super":
            skip = 0
        elif isinstance(f.value, ast.Name) and params and call.args and isinstance(call.args[0], ast.Name) \
                and call.args[0].id == params[0].arg:
            skip = 1
        else:
            continue
        if found is not None:
            return None
        found = (call, skip)
    return found
