"""Methods that only set an object up: they hook the object's own modules and run nothing.

HKL304 reports a public method that hooks the object's own module
(``self.model.layer4``) as a *warning* when no call in the checked files
repeats it: its users call it again.  That holds for a method that hooks and
then runs the hooked module (``extract(x)`` registers, calls ``self.model(x)``
and returns the features): every use registers again.  It does not hold for a
method that only configures the object (a deferred constructor such as a
mixin's ``init_adapters``: it builds layers, hooks the object's own
submodules and runs none of them): calling it again is calling the set-up
again, like calling ``register_forward_hook`` twice.

:func:`only_sets_up` answers from the method's own body (nested functions
excluded): no call runs the object or one of its attributes as a callable
(``self(...)``, ``self.model(x)``, ``self.model.generate(...)``,
``x.forward(...)``), only the object's own methods, registrations and
container bookkeeping are called on it.  HKL304 also asks that the file
call the method only from a constructor or from the same method of a
subclass, or from a method that is itself only a set-up called that way
(:func:`called_only_to_set_up`: a model mixin's ``_init_adapters_submodules``
walking its submodules and calling their ``init_adapters``); a helper that
registers before each batch's forward is a step of that action, not a
set-up.

Nothing here imports torch.
"""

from __future__ import annotations

import ast
from typing import Callable

# Calls on the object's attributes that configure or walk, never run, a module.
_CONFIGURING = frozenset({
    "append", "extend", "add", "update", "setdefault", "insert", "pop", "clear", "remove", "items", "keys",
    "values", "get", "copy", "modules", "named_modules", "children", "named_children", "parameters",
    "named_parameters", "buffers", "named_buffers", "get_submodule", "get_parameter", "register_buffer",
    "register_parameter", "register_module", "add_module", "requires_grad_", "train", "eval", "to", "cpu",
    "cuda", "half", "float", "register_forward_hook", "register_forward_pre_hook", "register_backward_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_hook",
    "register_post_accumulate_grad_hook", "register_state_dict_pre_hook", "register_load_state_dict_post_hook",
    "_register_state_dict_hook", "_register_load_state_dict_pre_hook", "format", "join", "startswith",
})
_RUNNING = frozenset({"forward", "generate", "__call__", "backward", "step", "predict", "run"})


def _root_is_self(expr: ast.expr, self_name: str) -> bool:
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id == self_name


def _own_calls(func: ast.AST):
    stack = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def only_sets_up(func: ast.AST, methods: dict[str, ast.AST], _seen: frozenset[int] = frozenset()) -> bool:
    """Whether the method ``func`` runs neither its object nor any of its attributes.

    ``methods``: the methods of the object's class (and of the classes of
    the file it derives from) by name; a call of one of them is followed
    into its body.  A call of a method the file does not show counts as
    running; ``super().<same name>(...)`` chains the same set-up step and
    counts as set-up.
    """
    params = func.args.posonlyargs + func.args.args
    if not params or id(func) in _seen or len(_seen) > 8:
        return False
    seen = _seen | {id(func)}
    self_name = params[0].arg
    for call in _own_calls(func):
        callee = call.func
        if isinstance(callee, ast.Name) and callee.id == self_name:
            return False  # self(...)
        if not isinstance(callee, ast.Attribute):
            continue
        if callee.attr in _RUNNING:
            return False
        if isinstance(callee.value, ast.Call) and isinstance(callee.value.func, ast.Name) \
                and callee.value.func.id == "super":
            if callee.attr != getattr(func, "name", None):
                return False
            continue
        if not _root_is_self(callee.value, self_name):
            continue
        if isinstance(callee.value, ast.Name):  # self.method(...) or self.module(...)
            target = methods.get(callee.attr)
            if target is None or not only_sets_up(target, methods, seen):
                return False
            continue
        if callee.attr not in _CONFIGURING:
            return False  # self.model.something(...): may run the module
    return not any(isinstance(node, ast.While) for node in ast.walk(func))


def attributes_used(func: ast.AST, methods: dict[str, ast.AST], _seen: frozenset[int] = frozenset()) -> set[str]:
    """The attributes ``self.<a>`` the method (and the methods of its class it calls) reads, methods excluded."""
    params = func.args.posonlyargs + func.args.args
    if not params or id(func) in _seen:
        return set()
    self_name = params[0].arg
    seen = _seen | {id(func)}
    used: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self_name:
            target = methods.get(node.attr)
            if target is None:
                used.add(node.attr)
            elif len(seen) <= 8:
                used |= attributes_used(target, methods, seen)
    return used


def given_attributes(methods_of_class: list[ast.AST]) -> set[str]:
    """Attributes a method stores from one of its parameters (``self.model = model``):
    objects the caller gave, which outlive this object and are not its own."""
    given: set[str] = set()
    for func in methods_of_class:
        params = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
        if not params:
            continue
        self_name = params[0].arg
        names = {p.arg for p in params[1:]}
        for node in ast.walk(func):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                value = node.value
                while isinstance(value, (ast.Attribute, ast.Subscript, ast.Call)):
                    value = value.func if isinstance(value, ast.Call) else value.value
                if not (isinstance(value, ast.Name) and value.id in names):
                    continue
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == self_name:
                        given.add(target.attr)
    return given


_CONSTRUCTORS = ("__init__", "__post_init__")


def called_only_to_set_up(model, method: ast.AST, methods_of: Callable[[ast.AST], object],
                          function_of: Callable[[ast.AST], ast.AST | None],
                          _seen: frozenset[int] = frozenset()) -> bool:
    """Whether every call of ``method``'s name in the file comes from set-up
    code: a constructor, the same method (a subclass chaining it), or a
    method of a class of the file that itself only sets up
    (:func:`only_sets_up`) and is in turn called only from set-up code.
    ``methods_of(func)`` gives the methods of ``func``'s class by name
    (``None`` outside a class); ``function_of`` the def holding a node."""
    if id(method) in _seen or len(_seen) > 4:
        return False
    seen = _seen | {id(method)}
    name = getattr(method, "name", None)
    for call in model.calls_of_method(name):
        caller = function_of(call)
        if caller is method:
            continue
        caller_name = getattr(caller, "name", None)
        if caller_name in _CONSTRUCTORS or caller_name == name:
            continue
        methods = methods_of(caller) if caller is not None else None
        if methods is None or not only_sets_up(caller, methods) \
                or not called_only_to_set_up(model, caller, methods_of, function_of, seen):
            return False  # run by code that also runs things: a step of that action, repeated with it
    return True
