"""A module's forward that needs gradients to be enabled, and never checks that they are.

``nn.Module.forward`` runs under ``torch.no_grad()`` and ``torch.inference_mode()``
as well: evaluation loops, ``Trainer.evaluate``, inference servers.  There, a
tensor the forward computes has no autograd graph (``requires_grad`` is False,
``grad_fn`` is None), so (tests/behaviour/test_grad_mode_forward.py, real torch):

- ``t.register_hook(fn)`` raises "cannot register a hook on a tensor that
  doesn't require gradient";
- ``t.backward()`` / ``torch.autograd.backward(t)`` / ``torch.autograd.grad(t, ...)``
  raise "element 0 of tensors does not require grad and does not have a grad_fn".

A forward (or a method of its class it calls) that does either on a value it
computes, with no test of the grad mode anywhere (``torch.is_grad_enabled()``,
``x.requires_grad``, ``self.training``, a ``torch.enable_grad()`` /
``set_grad_enabled`` block or decorator, ``inference_mode``), fails when the
module is evaluated under ``no_grad``.  A tensor made a leaf that requires grad
(``requires_grad_()``, ``requires_grad=True``, an ``nn.Parameter``), a parameter
of the function (the caller's tensor) and an attribute of ``self`` are not
"computed": their flag does not depend on the grad mode in the same way, so
they are left alone, and so is a call under an ``if`` on a flag of the caller's
(a parameter, an attribute of the object: ``if register_hook:``), which the
caller sets when it wants the hook.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from hooklint.static.bodies import own_nodes as _own_nodes
from hooklint.static.semantic import ClassInfo, FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

# words whose presence in a function means its author thought about the grad mode
_GRAD_MODE_WORDS = frozenset({"is_grad_enabled", "requires_grad", "enable_grad", "set_grad_enabled", "training",
                              "is_inference_mode_enabled", "inference_mode", "is_inference", "grad_enabled"})
_GRAD_FUNCTIONS = ("torch.autograd.grad", "torch.autograd.backward")


@dataclass(frozen=True)
class GradModeNeed:
    cls: ClassInfo
    forward: FunctionNode
    site: ast.Call  # in forward: the call that needs gradients, or the call of the method that makes it
    inner: ast.Call  # the register_hook / backward / autograd.grad call itself
    what: str  # "registers a tensor hook on `attn`" ...
    helper: FunctionNode | None  # the method of the class that makes the inner call, when not forward
    failure: str  # the error torch raises


def grad_mode_needs(ctx: "FileContext") -> list[GradModeNeed]:
    out: list[GradModeNeed] = []
    model = ctx.model
    for info in model.classes.values():
        forward = info.node and _own_method(info, "forward")
        if forward is None or model.is_module_class(info) is not True:
            continue
        if _checks_grad_mode(forward):
            continue
        methods = _method_names(info)
        for call, what, failure in _needs_in(ctx, forward, methods):
            out.append(GradModeNeed(info, forward, call, call, what, None, failure))
        for call in _self_method_calls(forward):
            method = info.method(call.func.attr)
            if not isinstance(method, FunctionNode) or method is forward or _checks_grad_mode(method):
                continue
            if not ctx.core.can_run(call):
                continue
            first = next(iter(_needs_in(ctx, method, methods)), None)
            if first is not None:
                inner, what, failure = first
                out.append(GradModeNeed(info, forward, call, inner, what, method, failure))
    return out


def _method_names(info: ClassInfo) -> frozenset[str]:
    names: set[str] = set()
    seen: set[int] = set()
    stack = [info]
    while stack:
        cls = stack.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        names.update(stmt.name for stmt in cls.node.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)))
        stack.extend(getattr(cls, "local_bases", ()) or ())
    return frozenset(names)


def _own_method(info: ClassInfo, name: str) -> FunctionNode | None:
    for stmt in info.node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
    return None


def _checks_grad_mode(func: FunctionNode) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and node.attr in _GRAD_MODE_WORDS:
            return True
        if isinstance(node, ast.Name) and node.id in _GRAD_MODE_WORDS:
            return True
        if isinstance(node, ast.keyword) and node.arg == "requires_grad":
            return True
    return False


def _self_method_calls(func: FunctionNode) -> Iterator[ast.Call]:
    self_name = func.args.args[0].arg if func.args.args else "self"
    for node in _own_nodes(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == self_name:
            yield node



def _needs_in(ctx: "FileContext", func: FunctionNode, methods: frozenset[str]) -> list[tuple[ast.Call, str, str]]:
    out: list[tuple[ast.Call, str, str]] = []
    computed = _computed_locals(func, methods)
    for node in _own_nodes(func):
        if not isinstance(node, ast.Call):
            continue
        func_expr = node.func
        if isinstance(func_expr, ast.Attribute) and func_expr.attr in ("register_hook", "backward") \
                and isinstance(func_expr.value, ast.Name) and func_expr.value.id in computed:
            name = func_expr.value.id
            if func_expr.attr == "register_hook":
                what = f"registers a tensor hook on `{name}`"
                failure = "cannot register a hook on a tensor that doesn't require gradient"
            else:
                what = f"runs `{name}.backward()`"
                failure = "element 0 of tensors does not require grad and does not have a grad_fn"
        else:
            qual = ctx.model.qualify(func_expr)
            if qual not in _GRAD_FUNCTIONS or not node.args:
                continue
            first = node.args[0]
            names = [e.id for e in (first.elts if isinstance(first, (ast.Tuple, ast.List)) else [first])
                     if isinstance(e, ast.Name)]
            if not names or any(n not in computed for n in names):
                continue
            what = f"runs `{qual}` on `{', '.join(names)}`"
            failure = "element 0 of tensors does not require grad and does not have a grad_fn"
        if ctx.core.can_run(node) and not _opted_in(node, func):
            out.append((node, what, failure))
    return out


def _opted_in(node: ast.AST, func: FunctionNode) -> bool:
    """Under an `if` testing a flag of the caller's (a parameter of the function, an attribute of the object):
    `if register_hook: attn.register_hook(...)`, `if self._stash_activations: ...`: the caller asks for the hook
    or the backward, and chooses when."""
    params = {a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs}
    self_name = func.args.args[0].arg if func.args.args else None
    current = getattr(node, "_hl_parent", None)
    while current is not None and current is not func:
        if isinstance(current, (ast.If, ast.IfExp, ast.While)):
            for sub in ast.walk(current.test):
                if isinstance(sub, ast.Name) and sub.id in params and sub.id != self_name:
                    return True
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == self_name:
                    return True
        current = getattr(current, "_hl_parent", None)
    return False


def _computed_locals(func: FunctionNode, methods: frozenset[str]) -> set[str]:
    """Local names every assignment of which computes a tensor with torch operations (operators, tensor
    methods, torch functions), none making a leaf that requires grad."""
    params = {a.arg for a in func.args.args + func.args.kwonlyargs + func.args.posonlyargs}
    assigned: dict[str, list[ast.expr | None]] = {}
    for node in _own_nodes(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
                else:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            assigned.setdefault(sub.id, []).append(None)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            assigned.setdefault(node.target.id, []).append(getattr(node, "value", None))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.NamedExpr, ast.comprehension)):
            for sub in ast.walk(getattr(node, "target", None) or ast.Pass()):
                if isinstance(sub, ast.Name):
                    assigned.setdefault(sub.id, []).append(None)
            for item in getattr(node, "items", ()) or ():
                if item.optional_vars is not None:
                    for sub in ast.walk(item.optional_vars):
                        if isinstance(sub, ast.Name):
                            assigned.setdefault(sub.id, []).append(None)
    out: set[str] = set()
    changed = True
    while changed:  # `b = a * 2` is computed when `a` is
        changed = False
        for name, values in assigned.items():
            if name in out or name in params or not values:
                continue
            if all(v is not None and _is_tensor_computation(v, methods, out) for v in values):
                out.add(name)
                changed = True
    return out


def _is_tensor_computation(expr: ast.expr, methods: frozenset[str], computed: set[str]) -> bool:
    text_words = {n.attr for n in ast.walk(expr) if isinstance(n, ast.Attribute)} | \
                 {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} | \
                 {k.arg for n in ast.walk(expr) if isinstance(n, ast.Call) for k in n.keywords if k.arg}
    if text_words & {"requires_grad_", "requires_grad", "Parameter", "detach", "item", "tolist", "numpy"}:
        return False
    if isinstance(expr, ast.BinOp):
        return _is_tensor_computation(expr.left, methods, computed) or \
            _is_tensor_computation(expr.right, methods, computed)
    if isinstance(expr, ast.Name):
        return expr.id in computed
    if isinstance(expr, ast.UnaryOp):
        return _is_tensor_computation(expr.operand, methods, computed)
    if isinstance(expr, ast.Call):
        func = expr.func
        if not isinstance(func, ast.Attribute):
            return False  # a function of the project, a builtin: what it returns is not known here
        base = func.value
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and base.id in ("torch", "F"):
            return True
        if isinstance(base, ast.Name) and base.id == "self":
            # a submodule's output is computed; a method of the class may return anything (a fresh leaf)
            return isinstance(func.value, ast.Name) and func.attr not in methods
        return isinstance(func.value, (ast.Name, ast.Subscript, ast.Call, ast.BinOp, ast.Attribute))
    if isinstance(expr, ast.Subscript):
        return False
    return False
