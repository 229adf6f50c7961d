"""The shape a custom ``autograd.Function``'s upstream gradient has, against how ``backward`` reads it.

Autograd hands ``backward`` one gradient per output, of that output's shape.
Two questions, on the syntax of one file (HKL509):

- :func:`unreduced_on_some_path`: is output ``k`` of ``forward`` a tensor
  ``t`` on one path and a full reduction of the same ``t`` (``t.sum()``,
  ``torch.mean(t)``, ``torch.sum(t) / n``) on another?  That is the shape
  of a ``reduction="none"`` option: the output, and so its gradient, is
  per element on that path.  Followed through local names, conditional
  expressions, tuple unpacking and helpers of the same file whose returned
  tuple holds the output.
- :func:`gradient_uses`: how the upstream gradient ``backward`` receives
  for output ``k`` is read, followed into the same file's helpers it is
  handed to and through plain aliases: *shape-aware* uses (arithmetic, a
  view, indexing by a slice, its ``shape`` / ``ndim`` / ``stride``, a torch
  op: anything that can broadcast or walk its elements, or tells a kernel
  how to), *scalar* uses (a kernel launch ``kernel[grid](..., g, ...)``
  handed the bare tensor and nothing of its shape, ``g.item()``,
  ``float(g)``) and *neutral* ones (``g is None``, ``torch.equal(g, ...)``,
  its ``device`` or ``dtype``, ``del g``).  A gradient with scalar uses and
  no shape-aware one is read as one number.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from hooklint.static.semantic import SemanticModel, positional_params

_MAX_DEPTH = 4
_REDUCTIONS = frozenset({"sum", "mean", "nansum", "nanmean"})
_SHAPE_ATTRS = frozenset({
    "shape", "ndim", "stride", "size", "dim", "numel", "nelement", "is_contiguous", "storage_offset", "T", "mT",
})
_NEUTRAL_ATTRS = frozenset({"device", "dtype", "is_cuda", "requires_grad", "get_device", "layout", "is_floating_point"})
# Methods whose result is the same tensor's values in another layout or dtype: followed as the gradient itself.
_SAME_VALUES = frozenset({"contiguous", "to", "float", "half", "bfloat16", "double", "detach", "clone", "cuda", "cpu",
                          "type"})
_NEUTRAL_CALLS = frozenset({
    "torch.equal", "torch.allclose", "torch.is_tensor", "builtins.isinstance", "builtins.print", "builtins.id",
    "builtins.type", "warnings.warn", "torch._assert",
})
_SCALAR_CALLS = frozenset({"builtins.float", "builtins.int", "builtins.bool", "math.isclose"})


@dataclass
class GradientUses:
    """Where one upstream gradient is read, by kind."""

    scalar: list[ast.AST] = field(default_factory=list)  # a kernel launch or element read that sees one number
    aware: list[ast.AST] = field(default_factory=list)  # a use that can see the gradient's shape
    handed: list[ast.Call] = field(default_factory=list)  # calls of the file's helpers it was followed into

    @property
    def read_as_scalar(self) -> bool:
        return bool(self.scalar) and not self.aware


def _top_level_functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def file_helper(call: ast.Call, tree: ast.Module, cls: ast.ClassDef | None) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The function of this file a call runs: a module-level function by name, or a static method of the
    Function's own class (``Cls._helper(...)``)."""
    func = call.func
    if isinstance(func, ast.Name):
        return _top_level_functions(tree).get(func.id)
    if cls is not None and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id == cls.name:
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == func.attr:
                return stmt
    return None


def local_bindings(name: str, func: ast.AST) -> list[tuple[ast.AST, int | None]]:
    """Every ``name = value`` of ``func``'s own body, flow-insensitively: (value, index in an unpacked
    tuple or None)."""
    out: list[tuple[ast.AST, int | None]] = []
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id == name:
                out.append((node.value, None))
            elif isinstance(target, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in target.elts):
                for index, elt in enumerate(target.elts):
                    if isinstance(elt, ast.Name) and elt.id == name:
                        out.append((node.value, index))
    return out


def returned_values(func: ast.AST, index: int | None) -> list[ast.AST]:
    """The expressions ``func`` returns, or element ``index`` of the tuples it returns."""
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if index is None:
                out.append(value)
            elif isinstance(value, (ast.Tuple, ast.List)):
                if index < len(value.elts) and not any(isinstance(e, ast.Starred) for e in value.elts[:index + 1]):
                    out.append(value.elts[index])
            elif index == 0:
                out.append(value)
    return out


def _full_reduction(expr: ast.AST, model: SemanticModel) -> ast.AST | None:
    """The tensor a full reduction reduces (``t.sum()``, ``torch.mean(t)``, ``torch.sum(t) / n``), else None."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Div, ast.Mult)):
        return _full_reduction(expr.left, model) or _full_reduction(expr.right, model)
    if not isinstance(expr, ast.Call):
        return None
    if any(k.arg in ("dim", "axis", "keepdim") for k in expr.keywords):
        return None
    func = expr.func
    if isinstance(func, ast.Attribute) and func.attr in _REDUCTIONS:
        if model.qualify(func) == f"torch.{func.attr}":
            return expr.args[0] if len(expr.args) == 1 else None
        return func.value if not expr.args else None
    return None


@dataclass
class _Origins:
    names: set[tuple[int, str]] = field(default_factory=set)  # (id of the function, name) the value passes through
    leaves: list[tuple[ast.AST, ast.AST]] = field(default_factory=list)  # (expression, function it is in)


def _origins(expr: ast.AST, func: ast.AST, tree: ast.Module, cls: ast.ClassDef | None, out: _Origins,
             depth: int = 0) -> None:
    if depth > _MAX_DEPTH:
        return
    if isinstance(expr, ast.IfExp):
        _origins(expr.body, func, tree, cls, out, depth + 1)
        _origins(expr.orelse, func, tree, cls, out, depth + 1)
        return
    if isinstance(expr, ast.Name):
        key = (id(func), expr.id)
        if key in out.names:
            return
        out.names.add(key)
        for value, index in local_bindings(expr.id, func):
            if index is None:
                _origins(value, func, tree, cls, out, depth + 1)
            elif isinstance(value, (ast.Tuple, ast.List)):
                if index < len(value.elts):
                    _origins(value.elts[index], func, tree, cls, out, depth + 1)
            elif isinstance(value, ast.Call):
                helper = file_helper(value, tree, cls)
                if helper is not None:
                    for returned in returned_values(helper, index):
                        _origins(returned, helper, tree, cls, out, depth + 1)
        return
    out.leaves.append((expr, func))


def unreduced_on_some_path(forward: ast.AST, index: int | None, tree: ast.Module, cls: ast.ClassDef | None,
                           model: SemanticModel) -> ast.AST | None:
    """The full reduction (``torch.sum(loss_1d)``) whose unreduced tensor ``forward`` returns as output
    ``index`` on another path, or None."""
    out = _Origins()
    for returned in returned_values(forward, index):
        _origins(returned, forward, tree, cls, out)
    for leaf, func in out.leaves:
        reduced = _full_reduction(leaf, model)
        if isinstance(reduced, ast.Name) and (id(func), reduced.id) in out.names:
            return leaf
    return None


def gradient_uses(func: ast.AST, name: str, tree: ast.Module, cls: ast.ClassDef | None, model: SemanticModel,
                  uses: GradientUses | None = None, depth: int = 0,
                  seen: set[tuple[int, str]] | None = None) -> GradientUses:
    """How ``func`` reads the tensor its local ``name`` holds (see the module docstring)."""
    uses = uses if uses is not None else GradientUses()
    seen = seen if seen is not None else set()
    if (id(func), name) in seen:
        return uses
    seen.add((id(func), name))
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            _classify(node, func, tree, cls, model, uses, depth, seen)
    return uses


def _classify(node: ast.AST, func: ast.AST, tree: ast.Module, cls: ast.ClassDef | None, model: SemanticModel,
              uses: GradientUses, depth: int, seen: set[tuple[int, str]]) -> None:
    parent = getattr(node, "_hl_parent", None)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        call = getattr(parent, "_hl_parent", None)
        called = isinstance(call, ast.Call) and call.func is parent
        if parent.attr in _SHAPE_ATTRS:
            uses.aware.append(parent)
        elif parent.attr in _NEUTRAL_ATTRS:
            pass
        elif parent.attr == "item" and called:
            uses.scalar.append(call)
        elif parent.attr in _SAME_VALUES and called:
            _classify(call, func, tree, cls, model, uses, depth, seen)
        else:
            uses.aware.append(parent)
        return
    if isinstance(parent, ast.Subscript) and parent.value is node:
        uses.aware.append(parent)  # `g[0]` raises on a 0-d gradient: whoever wrote it expected a shape
        return
    if isinstance(parent, ast.keyword):
        parent = getattr(parent, "_hl_parent", None)
        if isinstance(parent, ast.Call):
            _argument(parent, node, func, tree, cls, model, uses, depth, seen)
            return
        uses.aware.append(node)
        return
    if isinstance(parent, ast.Call) and node is not parent.func:
        _argument(parent, node, func, tree, cls, model, uses, depth, seen)
        return
    if isinstance(parent, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops):
        return
    if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1 \
            and isinstance(parent.targets[0], ast.Name):
        gradient_uses(func, parent.targets[0].id, tree, cls, model, uses, depth, seen)
        return
    uses.aware.append(node)


def _argument(call: ast.Call, node: ast.AST, func: ast.AST, tree: ast.Module, cls: ast.ClassDef | None,
              model: SemanticModel, uses: GradientUses, depth: int, seen: set[tuple[int, str]]) -> None:
    if isinstance(call.func, ast.Subscript):
        # `kernel[grid](..., g, ...)`: a compiled kernel gets a pointer; with no shape or stride of the
        # gradient (those are shape-aware uses, seen separately), it can only read a fixed element
        uses.scalar.append(call)
        return
    qual = model.qualify(call.func)
    if qual in _NEUTRAL_CALLS or (qual or "").startswith("logging."):
        return
    if qual in _SCALAR_CALLS:
        uses.scalar.append(call)
        return
    helper = file_helper(call, tree, cls) if depth < _MAX_DEPTH else None
    param = _parameter_for(helper, call, node) if helper is not None else None
    if param is None:
        uses.aware.append(call)
        return
    uses.handed.append(call)
    gradient_uses(helper, param, tree, cls, model, uses, depth + 1, seen)


def _parameter_for(helper: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, node: ast.AST) -> str | None:
    """The parameter of ``helper`` that receives ``node`` at ``call``; None when it cannot be told."""
    params = positional_params(helper)
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            return None
        if arg is node:
            return params[position] if position < len(params) else None
    for keyword in call.keywords:
        if keyword.value is node:
            names = params + [a.arg for a in helper.args.kwonlyargs]
            return keyword.arg if keyword.arg in names else None
    return None
