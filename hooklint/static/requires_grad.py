"""Tensors that may not require grad, and the checks that make sure they do.

``Tensor.register_hook`` and ``register_post_accumulate_grad_hook`` raise
"cannot register a hook on a tensor that doesn't require gradient" on a
tensor with ``requires_grad=False``; a module whose output needs no grad
never runs its backward hooks.  The parameters a caller hands a library (its
model's ``parameters()``, an optimizer's ``param_groups``) may be frozen:
fine-tuning, adapters and partial freezing are ordinary.  This module says
where a loop variable comes from such a collection and whether the code
checks ``requires_grad`` (or sets it) on the way to a given node.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.flow import contains, executed_nodes
from hooklint.static.outside import outside_root
from hooklint.static.semantic import FunctionNode, SemanticModel
from hooklint.static.values import Inference

_PARAM_ITERATORS = {"parameters": (), "named_parameters": (1,)}
_MAX_DEPTH = 4


@dataclass(frozen=True)
class CallerParameter:
    """A name that holds, in turn, each parameter of a collection the caller supplies."""

    name: ast.Name  # the use (the hooked receiver)
    source: str  # "each parameter of `module` (the argument `module` of `Hook._backward_apply`)"
    loop: ast.For
    owner: ast.expr | None = None  # the module whose parameters these are (None for param_groups)


def caller_parameter(model: SemanticModel, inference: Inference, expr: ast.AST) -> CallerParameter | None:
    """``expr`` is a loop variable over the caller's parameters: ``for p in
    model.parameters()`` with ``model`` from the caller, ``for _, p in
    params`` with ``params = module.named_parameters()``, or ``for p in
    group["params"]`` for each ``group`` of an optimizer's ``param_groups``."""
    if not isinstance(expr, ast.Name) or not hasattr(expr, "_hl_scope"):
        return None
    bindings = model.bindings_at(expr)
    if len(bindings) != 1 or bindings[0].kind != "for" or not isinstance(bindings[0].node, ast.For):
        return None
    binding = bindings[0]
    loop: ast.For = binding.node  # type: ignore[assignment]
    found = _collection(model, inference, binding.value, binding.path, 0)  # type: ignore[arg-type]
    return CallerParameter(expr, found[0], loop, found[1]) if found is not None else None


def _collection(model: SemanticModel, inference: Inference, iterable: ast.AST, path: tuple[int, ...],
                depth: int) -> tuple[str, ast.expr | None] | None:
    """(words for the collection, the module that owns it or None)."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" \
            and iterable.args and path[:1] == (1,):
        return _collection(model, inference, iterable.args[0], path[1:], depth + 1)
    if isinstance(iterable, ast.Name):
        bindings = model.bindings_at(iterable)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.AST):
            return _collection(model, inference, bindings[0].value, path, depth + 1)
        return None
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
            and _PARAM_ITERATORS.get(iterable.func.attr) == path:
        owner = iterable.func.value
        found = outside_root(model, inference, owner)
        if found is None:
            return None
        return f"each parameter of `{ast.unparse(owner)}` ({found[0]})", owner
    # `group["params"]` with `group` drawn from `<optimizer>.param_groups`
    if isinstance(iterable, ast.Subscript) and path == () and _is_str(iterable.slice, "params"):
        group = iterable.value
        if isinstance(group, ast.Name):
            bindings = model.bindings_at(group)
            if len(bindings) == 1 and bindings[0].kind == "for" and _param_groups(bindings[0].value, bindings[0].path):
                return f"each parameter in the `param_groups` of `{_owner_text(bindings[0].value)}`", None
        if isinstance(group, ast.Subscript) and isinstance(group.value, ast.Attribute) \
                and group.value.attr == "param_groups":
            return f"each parameter in the `param_groups` of `{ast.unparse(group.value.value)}`", None
    caller_groups = _params_of_callers_group(model, inference, iterable, path, depth)
    if caller_groups is not None:
        return caller_groups, None
    return None


def _params_of_callers_group(model: SemanticModel, inference: Inference, iterable: ast.AST,
                             path: tuple[int, ...], depth: int) -> str | None:
    """``group["params"]``, ``group.pop("params")`` or ``group.get("params", ...)``
    of a group the caller handed over (see :func:`_group_of_callers`)."""
    if path:
        return None
    group = None
    if isinstance(iterable, ast.Subscript) and _is_str(iterable.slice, "params"):
        group = iterable.value
    elif isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
            and iterable.func.attr in ("pop", "get") and iterable.args and _is_str(iterable.args[0], "params"):
        group = iterable.func.value
    if not isinstance(group, ast.Name):
        return None
    return _group_of_callers(model, inference, group, depth + 1)


def _group_of_callers(model: SemanticModel, inference: Inference, group: ast.Name, depth: int) -> str | None:
    """``group`` runs over parameter groups the caller handed over, as
    ``torch.optim.Optimizer`` takes them: ``for group in param_groups`` with
    ``param_groups`` the caller's ``params`` argument, ``list(params)`` of
    it, or ``[{"params": params}]`` wrapping a plain list of its tensors."""
    bindings = model.bindings_at(group)
    if len(bindings) != 1 or bindings[0].kind != "for" or bindings[0].path or not isinstance(bindings[0].value, ast.AST):
        return None
    return _callers_groups(model, inference, bindings[0].value, depth + 1)  # type: ignore[arg-type]


def _callers_groups(model: SemanticModel, inference: Inference, expr: ast.AST, depth: int) -> str | None:
    if depth > 2 * _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "tuple") \
            and len(expr.args) == 1 and not expr.keywords:
        return _callers_groups(model, inference, expr.args[0], depth + 1)
    if isinstance(expr, (ast.List, ast.Tuple)) and expr.elts:
        # `[{"params": params}]`: every group's "params" entry is the caller's
        texts = []
        for elt in expr.elts:
            if not isinstance(elt, ast.Dict):
                return None
            entry = next((v for k, v in zip(elt.keys, elt.values) if k is not None and _is_str(k, "params")), None)
            if entry is None:
                return None
            texts.append(_callers_groups(model, inference, entry, depth + 1))
        return texts[0] if all(t is not None for t in texts) else None
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        bindings = model.bindings_at(expr)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.AST):
            return _callers_groups(model, inference, bindings[0].value, depth + 1)  # type: ignore[arg-type]
        if len(bindings) == 1 and bindings[0].kind == "param":
            found = outside_root(model, inference, expr)
            if found is not None:
                return f"each parameter in the groups of {found[0]}"
    return None


def _param_groups(iterable: object, path: tuple[int, ...]) -> bool:
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" \
            and iterable.args and path[:1] == (1,):
        return _param_groups(iterable.args[0], path[1:])
    return isinstance(iterable, ast.Attribute) and iterable.attr == "param_groups" and path == ()


def _owner_text(iterable: object) -> str:
    if isinstance(iterable, ast.Call) and iterable.args:
        iterable = iterable.args[0]
    return ast.unparse(iterable.value) if isinstance(iterable, ast.Attribute) else "the optimizer"  # type: ignore[arg-type]


def _is_str(node: ast.AST, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def checks_requires_grad(node: ast.AST, name: str, loop: ast.AST) -> bool:
    """On the way from ``loop`` to ``node``: a test that mentions
    ``requires_grad`` (an enclosing ``if``, an earlier ``if ...: continue``),
    ``name.requires_grad_(...)`` / ``name.requires_grad = ...``, or a ``try``
    that catches the error."""
    cur = getattr(node, "_hl_parent", None)
    child = node
    while cur is not None:
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test and _mentions_requires_grad(cur.test):
            return True
        if isinstance(cur, ast.Try) and child in cur.body and any(
                h.type is None or _caught_name(h.type) & {"RuntimeError", "Exception", "BaseException"}
                for h in cur.handlers):
            return True
        if cur is loop or isinstance(cur, FunctionNode):
            break
        child, cur = cur, getattr(cur, "_hl_parent", None)
    body = getattr(loop, "body", [])
    for stmt in body:
        if contains(stmt, node):
            break
        if isinstance(stmt, ast.If) and _mentions_requires_grad(stmt.test) and stmt.body \
                and isinstance(stmt.body[-1], (ast.Continue, ast.Return, ast.Raise, ast.Break)):
            return True
        for sub in executed_nodes(stmt):
            if _sets_requires_grad(sub, name):
                return True
    return False


def _mentions_requires_grad(test: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "requires_grad"
               or isinstance(n, ast.Constant) and n.value == "requires_grad" for n in ast.walk(test))


def _sets_requires_grad(node: ast.AST, name: str) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_" \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == name:
        return True
    return isinstance(node, ast.Attribute) and node.attr == "requires_grad" and isinstance(node.ctx, ast.Store) \
        and isinstance(node.value, ast.Name) and node.value.id == name


def _caught_name(expr: ast.AST) -> set[str]:
    items = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    return {getattr(i, "id", None) or getattr(i, "attr", "") for i in items}


def filtered_by_requires_grad(loop: ast.For) -> bool:
    """The loop's collection is already filtered (``filter(lambda p: p.requires_grad, ...)``,
    ``[p for p in ... if p.requires_grad]``) somewhere the loop's iterable shows."""
    return any(_mentions_requires_grad(n) for n in ast.walk(loop.iter) if isinstance(n, (ast.Lambda, ast.comprehension)))


# ------------------------------------------------------------------ embedding layers

_EMBEDDING_CLASSES = ("Embedding", "EmbeddingBag")


def embedding_layer(model: SemanticModel, inference: Inference, expr: ast.AST, depth: int = 0) -> str | None:
    """How ``expr`` is an embedding layer of a model the file does not build
    (words for a message), or None.  An embedding's input is integer ids,
    which never require grad: its output requires grad only when its weight
    does."""
    if depth > _MAX_DEPTH:
        return None
    value = inference.infer(expr)
    if getattr(value, "call", None) is not None or getattr(value, "local_class", None) is not None:
        return None  # built in this file: its weight requires grad unless the file freezes it
    names = getattr(getattr(value, "narrowing", None), "names", ()) or ()
    torch_class = getattr(value, "torch_class", None) or ""
    if getattr(value, "call", None) is None and (
            torch_class.rsplit(".", 1)[-1] in _EMBEDDING_CLASSES or any(n in _EMBEDDING_CLASSES for n in names)):
        return f"`{ast.unparse(expr)}` (an `nn.Embedding`)"
    if isinstance(expr, ast.Call):
        func = expr.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if "embedding" in called.lower() and not called.lower().startswith(("make", "create", "build", "new")):
            return f"`{ast.unparse(expr)}` (the model's embedding layer)"
        return None
    if isinstance(expr, ast.Attribute) and "embed" in expr.attr.lower() and isinstance(expr.ctx, ast.Load):
        if outside_root(model, inference, expr) is not None:
            return f"`{ast.unparse(expr)}` (the model's embedding layer)"
        return None
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        bindings = model.bindings_at(expr)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.AST):
            found = embedding_layer(model, inference, bindings[0].value, depth + 1)
            return found.replace(f"`{ast.unparse(bindings[0].value)}`", f"`{expr.id}` = `{ast.unparse(bindings[0].value)}`", 1) \
                if found else None
    return None


def makes_trainable(scope: ast.AST) -> ast.AST | None:
    """A place in ``scope`` that switches gradients on (``p.requires_grad = True``,
    ``requires_grad_()`` / ``requires_grad_(True)``), or None."""
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad"
                                                for t in node.targets):
            if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                return node
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_":
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "requires_grad"), None)
            if arg is None or not (isinstance(arg, ast.Constant) and arg.value is False):
                return node
    return None
