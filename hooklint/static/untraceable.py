"""What a module hook does that TorchDynamo cannot put in a graph (HKL704, docs/compile.md).

Dynamo inlines the forward hooks and forward pre-hooks of the modules inside
the code it traces.  Two things a hook can do stop it (torch 2.13, verified in
tests/behaviour/test_untraceable_hooks.py):

- switch `requires_grad` on a tensor it was handed: `x.requires_grad_()` on
  a tensor that does not require grad yet ("returning intermediate with
  requires_grad_()"; on one that already does it is a no-op Dynamo
  accepts), `x.requires_grad = True` always ("setattr() on
  Tensor.requires_grad"): a graph break, a hard error under `fullgraph=True`;
- be wrapped in `torch.compiler.disable` / `torch._dynamo.disable`: "Skip
  calling `torch.compiler.disable()`d function", a graph break, a hard error
  under `fullgraph=True`.

A hook that tests `torch.compiler.is_compiling()` (or dynamo's) knows it can
run under compile and is left alone.  Never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode, SemanticModel

DISABLE_FUNCTIONS = frozenset({"torch.compiler.disable", "torch._dynamo.disable", "torch._disable_dynamo"})
_IS_COMPILING = frozenset({"is_compiling", "is_dynamo_compiling"})


@dataclass(frozen=True)
class Untraceable:
    node: ast.AST       # the call, assignment or decorator
    what: str           # "requires_grad" or "disable"
    text: str           # as written


def _own_nodes(func: ast.AST):
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _root_name(expr: ast.AST) -> str | None:
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _tensor_names(func: ast.AST, params: list[str]) -> set[str]:
    """The hook's tensor arguments and the local names taken from them (items,
    attributes, loop variables over them, `kwargs.get(...)`), to a fixpoint."""
    names = set(params)
    changed = True
    while changed:
        changed = False
        for node in _own_nodes(func):
            targets: list[ast.AST] = []
            source: ast.AST | None = None
            if isinstance(node, ast.Assign):
                targets, source = node.targets, node.value
            elif isinstance(node, (ast.For, ast.comprehension)):
                targets, source = [node.target], node.iter
            elif isinstance(node, ast.NamedExpr):
                targets, source = [node.target], node.value
            if source is None:
                continue
            inner = source
            while isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute):
                inner = inner.func.value  # kwargs.get(k), kwargs.items(), args.values()
            if _root_name(inner) not in names:
                continue
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and name.id not in names:
                        names.add(name.id)
                        changed = True
    return names


def tests_is_compiling(func: ast.AST) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr in _IS_COMPILING
               or isinstance(node, ast.Name) and node.id in _IS_COMPILING
               for node in _own_nodes(func))


def disabled_by(model: SemanticModel, func: ast.AST | None, hook_expr: ast.AST | None) -> ast.AST | None:
    """The decorator or wrapping call that makes the hook opaque to dynamo (``func``: the hook, when known)."""
    for dec in getattr(func, "decorator_list", ()):
        head = dec.func if isinstance(dec, ast.Call) else dec
        if model.qualify(head) in DISABLE_FUNCTIONS:
            return dec
    if isinstance(hook_expr, ast.Call) and model.qualify(hook_expr.func) in DISABLE_FUNCTIONS:
        return hook_expr
    return None


def untraceable_in_hook(model: SemanticModel, func: ast.AST, tensor_params: list[str],
                        hook_expr: ast.AST | None = None) -> list[Untraceable]:
    """What in the hook ``func`` Dynamo cannot trace; ``tensor_params``: its
    parameters that receive the module's inputs and output (not the module)."""
    if not isinstance(func, FunctionNode + (ast.Lambda,)):
        return []
    out: list[Untraceable] = []
    disabled = disabled_by(model, func, hook_expr)
    if disabled is not None:
        out.append(Untraceable(disabled, "disable", ast.unparse(disabled)))
    if tests_is_compiling(func):
        return out
    names = _tensor_names(func, tensor_params)
    for node in _own_nodes(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "requires_grad_" and _root_name(node.func.value) in names:
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value is False:
                continue
            out.append(Untraceable(node, "requires_grad", ast.unparse(node)))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr == "requires_grad" \
                        and _root_name(target.value) in names \
                        and not (isinstance(node.value, ast.Constant) and node.value.value is False):
                    out.append(Untraceable(node, "requires_grad", ast.unparse(node).strip()))
    out.sort(key=lambda u: (u.node.lineno, u.node.col_offset))
    return out
