"""State-dict hooks of a module that use, as a tensor, an attribute its
constructor can set to a plain Python number.

A module often keeps an optional learned value either as a tensor (a
``Parameter`` when the option is on) or as a number (``self.scale = 1.0``
when it is off).  Its forward copes (``x * self.scale`` works for both), but
a state-dict or load-state-dict hook that rebuilds or copies the value with
a tensor-only API (``torch.ones_like(self.scale)``, ``self.scale.data``,
``self.scale.copy_(...)``) raises on every module built with the option off:
``ones_like(): argument 'input' must be Tensor, not float``, or
``AttributeError: 'float' object has no attribute 'data'``.

Only what the class shows is used: every assignment of the attribute is in
the constructor (or in the hook itself, after the use), one of them a number
literal, and the hook's use is not under a test (``if``, ``isinstance``,
a conditional expression, ``try``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import SemanticModel, positional_params
from hooklint.static.state_dict import STATE_DICT_HOOK_METHODS

# torch functions whose first argument must be a tensor (a number raises TypeError).
_TENSOR_ONLY_FUNCTIONS = frozenset({
    "torch.ones_like", "torch.zeros_like", "torch.empty_like", "torch.full_like", "torch.rand_like",
    "torch.randn_like", "torch.randint_like", "torch.clone", "torch.nn.Parameter",
    "torch.nn.parameter.Parameter", "torch.nn.init.constant_", "torch.nn.init.zeros_", "torch.nn.init.ones_",
})
# Attributes a tensor has and a Python int or float has not (AttributeError on a number).
_TENSOR_ONLY_ATTRIBUTES = frozenset({
    "data", "detach", "clone", "copy_", "fill_", "zero_", "to", "shape", "dtype", "device", "numel",
    "requires_grad", "requires_grad_", "size", "mul_", "add_", "cpu", "cuda", "item", "dim", "view",
    "reshape", "expand", "grad",
})
_GUARDS = (ast.If, ast.IfExp, ast.Try, ast.While, ast.Assert, ast.BoolOp, ast.Match, ast.With)


@dataclass(frozen=True)
class NumberAsTensor:
    use: ast.AST  # the expression using the attribute as a tensor
    attr: str
    number: ast.Constant  # the constructor's number literal
    hook: ast.AST  # the hook's function
    registration: ast.Call
    api: str
    how: str  # what the use needs, in words


def _number(value: ast.AST) -> ast.Constant | None:
    """The number literal ``value`` is, or one branch of a conditional expression is."""
    if isinstance(value, ast.Constant) and type(value.value) in (int, float):
        return value
    if isinstance(value, ast.IfExp):
        return _number(value.body) or _number(value.orelse)
    return None


def _guarded(node: ast.AST, stop: ast.AST, names: set[str]) -> bool:
    """Under a test that may tell the number from the tensor: one reading the
    module (a type test, a flag of the module's), any ``try``, ``with`` or
    ``match``.  A test of something else (``if key in state_dict``) does not."""
    parent = getattr(node, "_hl_parent", None)
    while parent is not None and parent is not stop:
        if isinstance(parent, _GUARDS):
            test = getattr(parent, "test", None)
            if isinstance(parent, ast.BoolOp):
                test = parent
            if test is None or _reads_module(test, names):
                return True
        parent = getattr(parent, "_hl_parent", None)
    return False


def _reads_module(test: ast.AST, names: set[str]) -> bool:
    for sub in ast.walk(test):
        if isinstance(sub, ast.Name) and (sub.id in names or sub.id in ("isinstance", "hasattr", "getattr",
                                                                          "callable", "type")):
            return True
    return False


def _own_nodes(func: ast.AST):
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def number_as_tensor(model: SemanticModel, inference) -> list[NumberAsTensor]:
    out: list[NumberAsTensor] = []
    for call in model.calls_of_method(*STATE_DICT_HOOK_METHODS):
        func = call.func
        if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name) or not call.args:
            continue
        info = model.enclosing_class(call)
        owner = model.enclosing_function(call)
        if info is None or owner is None or model.is_module_class(info) is not True:
            continue
        if positional_params(owner)[:1] != [func.value.id]:
            continue  # registered on the module itself (`self.register_...`)
        hook = inference.callable_of(call.args[0])
        if hook is None or not isinstance(hook.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = positional_params(hook.node)
        names: set[str] = set()
        if hook.via == "method" and hook.bound and params:
            names.add(params[0])
        with_module = STATE_DICT_HOOK_METHODS[func.attr][1]
        rest = params[hook.bound:]
        if with_module and rest:
            names.add(rest[0])
        if hook.via != "method" and model.enclosing_function(hook.node) is owner:
            names.add(func.value.id)  # a closure over `self`
        if not names:
            continue
        for use, attr, how in _tensor_uses(model, hook.node, names):
            number = _number_set_by_constructor(info, attr, hook.node)
            if number is None:
                continue
            out.append(NumberAsTensor(use, attr, number, hook.node, call, func.attr, how))
    return out


def _tensor_uses(model: SemanticModel, func: ast.AST, names: set[str]):
    for node in _own_nodes(func):
        target = how = None
        if isinstance(node, ast.Call) and node.args:
            qual = model.qualify(node.func) or ""
            if qual in _TENSOR_ONLY_FUNCTIONS:
                target, how = node.args[0], f"`{qual.split('.')[-1]}` needs a tensor"
        elif isinstance(node, ast.Attribute) and node.attr in _TENSOR_ONLY_ATTRIBUTES \
                and isinstance(node.value, ast.Attribute):
            target, how = node.value, f"`.{node.attr}` exists on tensors only"
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                and target.value.id in names):
            continue
        if _guarded(node, func, names):
            continue
        yield node, target.attr, how


def _number_set_by_constructor(info, attr: str, hook: ast.AST) -> ast.Constant | None:
    """The number literal the constructor may store in ``self.<attr>``, when
    no method but the constructor (and the hook itself) assigns it."""
    found = None
    for value, scope, _node in info.attribute(attr):
        func = scope.node
        if func is hook:
            continue
        if getattr(func, "name", "") != "__init__":
            return None
        found = found or _number(value)
    return found
