"""Whether a hook computes anything from one of its arguments, or only hands it on.

A hook that returns its argument as it came, or gives it, at most detached,
to a function its caller chose, makes no use of the value itself: what the
value means is the business of code the hook cannot see.  Two kinds of
caller-chosen functions are recognised:

* callbacks taken from a container at run time (``for hook in self.hooks:
  hook(m, grad_input, grad_output)``, autograd-lib);
* a callable the object was given by its caller: ``self.hook_func(...)``
  where ``self.hook_func`` is assigned once, in ``__init__``, from one of its
  parameters (fastai's ``Hook(m, hook_func, ...)``).

On the way, only steps that keep the value are allowed: ``x.detach()``,
``(o.detach() for o in x)`` (also in a list, ``tuple(...)`` or ``list(...)``),
a conditional expression choosing between such forms, an assignment to a
name whose every read is handed on in turn, and type tests (``isinstance(x,
...)``, ``type(x)``, and a one-argument call used only as the test of a
conditional whose branches both detach ``x``, as in ``x.detach() if
is_listy(x) else ...``).  Anything else (an index, arithmetic, a call of a
function the hook names itself) counts as a use.
"""

from __future__ import annotations

import ast

from hooklint.static.bodies import name_uses
from hooklint.static.semantic import SemanticModel, is_staticmethod, positional_params

_KEEPING_CALLS = frozenset({"builtins.tuple", "builtins.list"})
_TYPE_TESTS = frozenset({"builtins.isinstance", "builtins.type"})


def passed_on_unchanged(model: SemanticModel, hook: ast.AST, use: ast.Name) -> bool:
    """True when this read of a hook argument only hands the value on (see the
    module docstring); ``hook`` is the hook function the read is in."""
    return _handed_on(model, hook, use, {use.id})


def stored_init_parameter(model: SemanticModel, attr: ast.Attribute) -> tuple[ast.AST, str] | None:
    """(``__init__``, parameter) when ``self.<attr>`` is assigned once in its
    class (or a base of the same file), in ``__init__``, from one of its
    parameters: a value the object's caller chose."""
    cls = model.enclosing_class(attr)
    if cls is None:
        return None
    assigned = cls.attribute(attr.attr)
    if len(assigned) != 1:
        return None
    value, scope, _node = assigned[0]
    method = scope.node
    if getattr(method, "name", "") != "__init__" or not isinstance(value, ast.Name):
        return None
    params = set(positional_params(method)[1:]) | {a.arg for a in method.args.kwonlyargs}  # type: ignore[attr-defined]
    return (method, value.id) if value.id in params else None


def is_self(model: SemanticModel, name: ast.Name) -> bool:
    """``name`` is the first parameter of a method (not a static method)."""
    bindings = model.bindings_at(name)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return False
    func = bindings[0].scope.node
    params = positional_params(func)
    return bool(params) and params[0] == name.id and not is_staticmethod(func) \
        and isinstance(getattr(func, "_hl_parent", None), ast.ClassDef)


def _handed_on(model: SemanticModel, hook: ast.AST, use: ast.Name, names: set[str]) -> bool:
    if _is_type_test(model, use) or _chooses_between_detaches(use):
        return True
    expr = _kept(model, use)
    parent = _parent(expr)
    if isinstance(parent, ast.Return):
        return expr is use  # `return grad_input`: the legacy hook then changes nothing
    if isinstance(parent, ast.Assign) and parent.value is expr and len(parent.targets) == 1 \
            and isinstance(parent.targets[0], ast.Name):
        target = parent.targets[0].id
        if target in names:
            return True  # its reads are among the ones being checked
        reads = name_uses(hook, target)
        names.add(target)
        return bool(reads) and all(_handed_on(model, hook, read, names) for read in reads)
    if isinstance(parent, ast.keyword):
        parent = _parent(parent)
    if not (isinstance(parent, ast.Call) and (expr in parent.args or any(k.value is expr for k in parent.keywords))):
        return False
    return _callee_chosen_by_caller(model, parent.func)


def _callee_chosen_by_caller(model: SemanticModel, callee: ast.expr) -> bool:
    if isinstance(callee, ast.Name):
        bindings = model.bindings_at(callee)
        return bool(bindings) and all(b.kind == "for" for b in bindings)
    if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and is_self(model, callee.value):
        return stored_init_parameter(model, callee) is not None
    return False


def _kept(model: SemanticModel, use: ast.Name) -> ast.expr:
    """The outermost expression around ``use`` that holds the same values:
    through ``.detach()``, detaching comprehensions, ``tuple``/``list`` of
    them and the branches of a conditional expression."""
    expr: ast.expr = use
    while True:
        parent = _parent(expr)
        if isinstance(parent, ast.Attribute) and parent.attr == "detach" and parent.value is expr:
            call = _parent(parent)
            if isinstance(call, ast.Call) and call.func is parent and not call.args and not call.keywords:
                expr = call
                continue
        # the semantic model makes the comprehension the parent of its first iterable
        if isinstance(parent, (ast.GeneratorExp, ast.ListComp)) and len(parent.generators) == 1:
            gen = parent.generators[0]
            if gen.iter is expr and not gen.ifs and isinstance(gen.target, ast.Name) \
                    and _is_detached(parent.elt, gen.target.id):
                expr = parent
                continue
        if isinstance(parent, ast.Call) and parent.args == [expr] and not parent.keywords \
                and model.qualify(parent.func) in _KEEPING_CALLS:
            expr = parent
            continue
        if isinstance(parent, ast.IfExp) and expr is not parent.test:
            expr = parent
            continue
        return expr


def _is_detached(expr: ast.expr, name: str) -> bool:
    """``name`` or ``name.detach()``."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "detach" \
            and not expr.args and not expr.keywords:
        expr = expr.func.value
    return isinstance(expr, ast.Name) and expr.id == name


def _is_type_test(model: SemanticModel, use: ast.Name) -> bool:
    call = _parent(use)
    return isinstance(call, ast.Call) and bool(call.args) and call.args[0] is use \
        and model.qualify(call.func) in _TYPE_TESTS


def _chooses_between_detaches(use: ast.Name) -> bool:
    """``x.detach() if is_listy(x) else (o.detach() for o in x)``: the test
    only picks how to detach ``x``, both branches keep its values."""
    call = _parent(use)
    if not (isinstance(call, ast.Call) and call.args == [use] and not call.keywords):
        return False
    cond = _parent(call)
    if not (isinstance(cond, ast.IfExp) and cond.test is call):
        return False
    return all(_detaches(branch, use.id) for branch in (cond.body, cond.orelse))


def _detaches(expr: ast.expr, name: str) -> bool:
    """``name.detach()``, ``name``, or a comprehension detaching each element of ``name``."""
    if _is_detached(expr, name):
        return True
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("tuple", "list") \
            and len(expr.args) == 1 and not expr.keywords:
        expr = expr.args[0]
    if isinstance(expr, (ast.GeneratorExp, ast.ListComp)) and len(expr.generators) == 1:
        gen = expr.generators[0]
        return not gen.ifs and isinstance(gen.target, ast.Name) and _is_detached(gen.iter, name) \
            and _is_detached(expr.elt, gen.target.id)
    return False


def _parent(node: ast.AST) -> ast.AST | None:
    return getattr(node, "_hl_parent", None)
