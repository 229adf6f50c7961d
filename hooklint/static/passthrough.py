"""Whether a hook computes anything from one of its arguments, or only hands it on.

A hook that returns its argument as it came, or gives it, at most detached,
to a function its caller chose, makes no use of the value itself: what the
value means is the business of code the hook cannot see.  Two kinds of
caller-chosen functions are recognised:

* callbacks taken from a container at run time (``for hook in self.hooks:
  hook(m, grad_input, grad_output)``, autograd-lib);
* a callable the object was given by its caller: ``self.hook_func(...)``
  where ``self.hook_func`` is assigned once, in ``__init__``, from one of its
  parameters (fastai's ``Hook(m, hook_func, ...)``), or never assigned where
  it can be seen but stored with the other arguments in one call
  (``store_attr('hook_func,detach')``, ``self.__dict__.update(...)``).

On the way, only steps that keep the value are allowed: ``x.detach()``, a
copy (``x.cpu()``, ``x.clone()``, ``x.contiguous()``, ``x.to(...)``),
``(o.detach() for o in x)`` (also in a list, ``tuple(...)`` or ``list(...)``),
a helper of another file applied alike to another of the hook's arguments in
the same statement (``to_detach(input, cpu=c), to_detach(output, cpu=c)``:
a conversion every argument goes through, which reads none of them as what
it is), a conditional expression choosing between such forms, an
assignment to a name (or its place in ``a, b = x, y``) whose every read is
handed on in turn, and type tests (``isinstance(x,
...)``, ``type(x)``, and a one-argument call used only as the test of a
conditional whose branches both detach ``x``, as in ``x.detach() if
is_listy(x) else ...``).  Anything else (an index, arithmetic, a call of a
function the hook names itself) counts as a use.
"""

from __future__ import annotations

import ast

from hooklint.static.bodies import name_uses
from hooklint.static.semantic import FunctionNode as FUNCTION_NODES, SemanticModel, is_staticmethod, positional_params

_KEEPING_CALLS = frozenset({"builtins.tuple", "builtins.list"})
_TYPE_TESTS = frozenset({"builtins.isinstance", "builtins.type"})
# Tensor methods that give the same values (a copy, on another device or of another layout)
_KEEPING_METHODS = frozenset({"cpu", "clone", "contiguous", "to"})


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
    if not assigned:
        return _stored_in_bulk(model, cls, attr.attr)
    if len(assigned) != 1:
        return None
    value, scope, _node = assigned[0]
    method = scope.node
    if getattr(method, "name", "") != "__init__" or not isinstance(value, ast.Name):
        return None
    params = set(positional_params(method)[1:]) | {a.arg for a in method.args.kwonlyargs}  # type: ignore[attr-defined]
    return (method, value.id) if value.id in params else None


def _stored_in_bulk(model: SemanticModel, cls, attr: str) -> tuple[ast.AST, str] | None:
    """``self.<attr>`` never assigned where it can be seen, but ``__init__``
    has a parameter of that name and stores its arguments in one call:
    fastcore's ``store_attr('hook_func,detach')`` (or ``store_attr()``, every
    argument), ``self.__dict__.update(...)``, ``vars(self).update(...)``."""
    init = cls.method("__init__")
    if init is None or model.enclosing_class(init) is not cls:
        return None
    params = positional_params(init)[1:] + [a.arg for a in init.args.kwonlyargs]
    if attr not in params:
        return None
    for node in ast.walk(init):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "store_attr":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not node.args and not node.keywords or any(
                    attr in (n.strip() for n in text.split(",")) for text in names):
                return init, attr
        elif isinstance(func, ast.Attribute) and func.attr == "update" and (
                (isinstance(func.value, ast.Attribute) and func.value.attr == "__dict__"
                 and isinstance(func.value.value, ast.Name) and func.value.value.id == positional_params(init)[0])
                or (isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
                    and func.value.func.id == "vars" and len(func.value.args) == 1
                    and isinstance(func.value.args[0], ast.Name)
                    and func.value.args[0].id == positional_params(init)[0])):
            return init, attr
    return None


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
    target_node = _assigned_name(expr)
    if target_node is not None:
        target = target_node.id
        if target in names:
            return True  # its reads are among the ones being checked
        reads = name_uses(hook, target)
        names.add(target)
        return bool(reads) and all(_handed_on(model, hook, read, names) for read in reads)
    if isinstance(parent, ast.keyword):
        parent = _parent(parent)
    if not (isinstance(parent, ast.Call) and (expr in parent.args or any(k.value is expr for k in parent.keywords))):
        return False
    return _callee_chosen_by_caller(model, parent.func) or _unused_by_own_helper(model, parent, expr)


def _own_callee(model: SemanticModel, call: ast.Call) -> tuple[ast.AST, int] | None:
    """The function of this file ``call`` runs, with the number of its leading
    parameters the call does not fill (1 for ``self.helper(...)``): a method
    of the caller's class, or a module-level function."""
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and is_self(model, func.value):
        cls = model.enclosing_class(call)
        method = cls.method(func.attr) if cls is not None else None
        if method is None or is_staticmethod(method) or any(
                isinstance(d, ast.Name) and d.id == "classmethod" for d in method.decorator_list):
            return None
        return method, 1
    if isinstance(func, ast.Name):
        bindings = model.bindings_at(func)
        if len(bindings) == 1 and bindings[0].kind == "def" and isinstance(bindings[0].node, FUNCTION_NODES) \
                and isinstance(_parent(bindings[0].node), ast.Module):
            return bindings[0].node, 0
    return None


def _call_arguments(call: ast.Call, func: ast.AST, skip: int) -> dict[str, ast.expr] | None:
    """Parameter name -> argument expression of ``call`` to ``func`` (None
    when a starred argument or ``**kwargs`` hides the mapping)."""
    params = positional_params(func)[skip:]
    kwonly = [a.arg for a in func.args.kwonlyargs]  # type: ignore[attr-defined]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords) \
            or len(call.args) > len(params):
        return None
    mapping = dict(zip(params, call.args))
    for k in call.keywords:
        if k.arg not in params and k.arg not in kwonly:
            return None
        mapping[k.arg] = k.value  # type: ignore[index]
    return mapping


def _unused_by_own_helper(model: SemanticModel, call: ast.Call, expr: ast.expr) -> bool:
    """The hook hands the value to a helper of its own file that never uses
    it: every read in the helper only tests its type or length, re-binds the
    name to an element of itself, passes it to the helper again, or sits in a
    branch the call's constant arguments rule out.  fairseq's NanDetector
    shares one ``_apply(module, inp, x, backward)`` between its forward and
    backward hooks and reads ``inp`` only ``if ... and not backward``."""
    callee = _own_callee(model, call)
    if callee is None:
        return False
    func, skip = callee
    mapping = _call_arguments(call, func, skip)
    if mapping is None:
        return False
    param = next((name for name, arg in mapping.items() if arg is expr), None)
    if param is None:
        return False
    stored = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    consts = {name: arg.value for name, arg in mapping.items()
              if isinstance(arg, ast.Constant) and name not in stored}
    for read in name_uses(func, param):
        if _is_type_test(model, read) or _is_size_test(model, read) or _rebinds_element(read, param) \
                or _dead_under(func, read, consts) or _recurses(model, func, read, param, consts):
            continue
        return False
    return True


_STRUCTURE_TESTS = frozenset({"builtins.len", "torch.is_tensor", "torch.is_floating_point"})


def _is_size_test(model: SemanticModel, use: ast.Name) -> bool:
    """``len(x)``, ``torch.is_tensor(x)``: what x is, not what it holds."""
    call = _parent(use)
    return isinstance(call, ast.Call) and call.args == [use] and not call.keywords \
        and model.qualify(call.func) in _STRUCTURE_TESTS


def _rebinds_element(use: ast.Name, name: str) -> bool:
    """``x = x[0]``: the later reads of ``x`` are checked in their turn."""
    sub = _parent(use)
    if not (isinstance(sub, ast.Subscript) and sub.value is use and isinstance(sub.slice, ast.Constant)):
        return False
    assign = _parent(sub)
    return isinstance(assign, ast.Assign) and assign.value is sub and len(assign.targets) == 1 \
        and isinstance(assign.targets[0], ast.Name) and assign.targets[0].id == name


def _truth(test: ast.expr, consts: dict[str, object]) -> bool | None:
    """The value of a branch test given constant parameters, or None."""
    if isinstance(test, ast.Name) and test.id in consts:
        return bool(consts[test.id])
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _truth(test.operand, consts)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [_truth(v, consts) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in values else (True if all(v is True for v in values) else None)
        return True if True in values else (False if all(v is False for v in values) else None)
    return None


def _dead_under(func: ast.AST, use: ast.Name, consts: dict[str, object]) -> bool:
    """Does ``use`` sit in a branch that the constant parameters rule out?"""
    if not consts:
        return False
    child: ast.AST = use
    node = _parent(use)
    while node is not None and node is not func:
        if isinstance(node, (ast.If, ast.IfExp)) and child is not node.test:
            truth = _truth(node.test, consts)
            in_body = child in node.body if isinstance(node, ast.If) else child is node.body
            if truth is not None and truth != in_body:
                return True
        child, node = node, _parent(node)
    return False


def _recurses(model: SemanticModel, func: ast.AST, use: ast.Name, param: str, consts: dict[str, object]) -> bool:
    """The helper hands the value to itself again, in the same parameter,
    with its constant parameters passed on unchanged."""
    call = _parent(use)
    if not isinstance(call, ast.Call):
        return False
    callee = _own_callee(model, call)
    if callee is None or callee[0] is not func:
        return False
    mapping = _call_arguments(call, func, callee[1])
    if mapping is None or mapping.get(param) is not use:
        return False
    return all(isinstance(mapping.get(name), ast.Name) and mapping[name].id == name  # type: ignore[union-attr]
               for name in consts)


def _assigned_name(expr: ast.expr) -> ast.Name | None:
    """The name ``expr`` is assigned to: ``x = expr``, or its place in
    ``a, b = expr, other``."""
    parent = _parent(expr)
    if isinstance(parent, ast.Assign) and parent.value is expr and len(parent.targets) == 1 \
            and isinstance(parent.targets[0], ast.Name):
        return parent.targets[0]
    if isinstance(parent, ast.Tuple) and expr in parent.elts:
        assign = _parent(parent)
        if isinstance(assign, ast.Assign) and assign.value is parent and len(assign.targets) == 1 \
                and isinstance(assign.targets[0], ast.Tuple) and len(assign.targets[0].elts) == len(parent.elts):
            target = assign.targets[0].elts[parent.elts.index(expr)]
            return target if isinstance(target, ast.Name) else None
    return None


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
        if isinstance(parent, ast.Attribute) and parent.attr in _KEEPING_METHODS and parent.value is expr:
            call = _parent(parent)
            if isinstance(call, ast.Call) and call.func is parent and not _mentions(call, use.id):
                expr = call  # `grad_input[0].cpu()` is an index (a use) first; `x.cpu()`, `x.to(device)` keep x
                continue
        if isinstance(parent, ast.Call) and parent.args[:1] == [expr] and _converts_alike(model, parent, use):
            expr = parent
            continue
        if isinstance(parent, ast.IfExp) and expr is not parent.test:
            expr = parent
            continue
        return expr


def _mentions(call: ast.Call, name: str) -> bool:
    """Do the call's arguments read ``name``?"""
    return any(isinstance(n, ast.Name) and n.id == name
               for arg in list(call.args) + [k.value for k in call.keywords] for n in ast.walk(arg))


def _converts_alike(model: SemanticModel, call: ast.Call, use: ast.Name) -> bool:
    """``to_detach(input, cpu=c), to_detach(output, cpu=c)``: a helper the hook
    does not define, applied in the same statement, with the same other
    arguments, to another of the hook's arguments too.  A conversion every
    argument goes through alike (detach, move, gather) reads none of them as
    what it is; the values are handed on, not used."""
    if isinstance(call.func, ast.Name):
        bindings = model.bindings_at(call.func)
        if any(b.kind in ("def", "assign", "param") for b in bindings):
            return False  # a function of this file (its body could be read) or a value chosen here
    elif not isinstance(call.func, ast.Attribute):
        return False
    if _mentions(ast.Call(func=call.func, args=call.args[1:], keywords=call.keywords), use.id):
        return False
    hook = _hook_of(use)
    if hook is None:
        return False
    params = set(positional_params(hook))
    rest = ast.dump(ast.Call(func=call.func, args=call.args[1:], keywords=call.keywords))
    stmt = call
    while stmt is not None and not isinstance(stmt, ast.stmt):
        stmt = _parent(stmt)
    if stmt is None:
        return False
    for other in ast.walk(stmt):
        if other is call or not isinstance(other, ast.Call) or not other.args:
            continue
        first = other.args[0]
        if isinstance(first, ast.Name) and first.id != use.id and first.id in params \
                and ast.dump(ast.Call(func=other.func, args=other.args[1:], keywords=other.keywords)) == rest:
            return True
    return False


def _hook_of(use: ast.Name) -> ast.AST | None:
    node = _parent(use)
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        node = _parent(node)
    return node


def _is_detached(expr: ast.expr, name: str) -> bool:
    """``name``, ``name.detach()``, or a copy of it (``name.cpu()``, ``name.to(device)``)."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and (
            (expr.func.attr == "detach" and not expr.args and not expr.keywords)
            or (expr.func.attr in _KEEPING_METHODS and not _mentions(expr, name))):
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
