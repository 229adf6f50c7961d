"""What a custom ``autograd.Function``'s ``forward`` returns and what its
``backward`` writes, on the syntax of one file.

Two questions, for HKL504 and HKL505:

- :func:`returned_views`: outputs of ``forward`` that are surely views of a
  tensor ``forward`` made: a view op (``.view``, ``.t()``, ``.transpose``, basic slicing...), followed
  through local names and through a local callable that may be the
  identity (``clone = torch.clone if c else lambda x: x``).  Ops whose
  result may or may not alias (``reshape``, ``flatten``, ``contiguous``)
  are not views here: the static layer cannot tell which.
- :func:`outer_grad_writes`: places where ``backward`` writes the gradient
  of a tensor that ``forward`` was given (a ``ctx`` attribute or a saved
  tensor, by alias), and returns it too: a nested ``backward()`` that
  accumulates into it, ``.grad`` assigned or edited in place.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import FunctionNode, positional_params

# Tensor methods (and torch functions of the same name) whose result is always a view of their receiver.
VIEW_METHODS = frozenset({
    "view", "view_as", "t", "transpose", "permute", "expand", "expand_as", "narrow", "squeeze", "unsqueeze",
    "unflatten", "as_strided", "diagonal", "select", "unfold", "movedim", "moveaxis", "swapaxes", "swapdims",
    "unbind", "split", "chunk", "tensor_split", "hsplit", "vsplit", "view_as_real", "view_as_complex",
})
# `torch.<name>(x, ...)` forms; `split`/`chunk`/`unbind` return tuples of views, handled by the caller.
_VIEW_FUNCTIONS = frozenset({"torch." + n for n in VIEW_METHODS if n not in ("view", "view_as", "expand_as")})
_VIEW_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "real", "imag"})
_TUPLE_OF_VIEWS = frozenset({"unbind", "split", "chunk", "tensor_split", "hsplit", "vsplit"})
_MAX_DEPTH = 6


@dataclass(frozen=True)
class ReturnedView:
    node: ast.AST  # the returned expression (or tuple element)
    what: str  # "a view (`out.view(...)`)"
    index: int | None  # output position in a returned tuple, or None for a single output
    conditional: str = ""  # "when `clone_func` is the identity lambda" (the path that returns it)
    outputs: tuple[ast.AST, ...] = ()  # every element of the returned tuple (empty for a single output)


def returned_views(forward: ast.AST, inputs: list[str]) -> list[ReturnedView]:
    """Outputs of ``forward`` that are surely views; ``inputs`` are its
    tensor-or-not inputs without ``ctx``."""
    dirty = _marked_dirty(forward)
    out: list[ReturnedView] = []
    for ret in _returns(forward):
        value = ret.value
        if value is None:
            continue
        items: list[tuple[ast.AST, int | None]]
        if isinstance(value, (ast.Tuple, ast.List)):
            items = [(e, i) for i, e in enumerate(value.elts)]
        else:
            items = [(value, None)]
        outputs = tuple(value.elts) if isinstance(value, (ast.Tuple, ast.List)) else ()
        for expr, index in items:
            found = _view(expr, forward, set(inputs), dirty, 0)
            if found is not None:
                out.append(ReturnedView(expr, found[0], index, found[1], outputs))
    return out


def tensor_outputs(view: ReturnedView, forward: ast.AST, inputs: list[str]) -> int | None:
    """How many outputs of the tuple ``view`` is part of are tensors: torch words the in-place error
    differently for one tensor output and for several.  None when an output may or may not be one
    (a name, a call): only literals are surely not tensors and only views surely are."""
    if not view.outputs:
        return 1
    dirty = _marked_dirty(forward)
    tensors = 0
    for expr in view.outputs:
        if isinstance(expr, ast.Constant):
            continue
        if expr is view.node or _view(expr, forward, set(inputs), dirty, 0) is not None:
            tensors += 1
            continue
        return None
    return tensors


def _view(expr: ast.AST, func: ast.AST, inputs: set[str], dirty: set[str], depth: int) -> tuple[str, str] | None:
    """(what, condition) when ``expr`` is surely a view, else None."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Name):
        if expr.id in inputs:
            # an input returned as-is (Megatron's copy-to-region, dropout at eval): autograd makes
            # it a view too, but identity Functions are common and intended; not reported
            return None
        values = _local_values(expr.id, func, expr)
        if values and all(_view(v, func, inputs, dirty, depth + 1) for v in values):
            return _view(values[-1], func, inputs, dirty, depth + 1)
        return None
    if isinstance(expr, ast.Call):
        callee = expr.func
        if isinstance(callee, ast.Attribute) and callee.attr in VIEW_METHODS and callee.attr not in _TUPLE_OF_VIEWS:
            if _receiver_dirty(callee.value, dirty) or _integer_tensor(callee.value, func):
                return None
            if isinstance(callee.value, ast.Name) and callee.value.id in inputs:
                return None  # a view of an input (`x.view_as(x)` in a gradient-reversal Function): an identity idiom
            return f"a view (`{_head(expr)}`)", ""
        qual = _dotted(callee)
        if qual in _VIEW_FUNCTIONS and qual.rsplit(".", 1)[1] not in _TUPLE_OF_VIEWS and expr.args:
            if isinstance(expr.args[0], ast.Name) and expr.args[0].id in inputs:
                return None
            return f"a view (`{_head(expr)}`)", ""
        # `clone_func(x)` with `clone_func = torch.clone if c else lambda x: x`
        if isinstance(callee, ast.Name) and len(expr.args) == 1 and not expr.keywords:
            identity = _identity_choice(callee, func)
            if identity is not None:
                inner = _view(expr.args[0], func, inputs, dirty, depth + 1)
                if inner is not None:
                    return inner[0], f"when `{callee.id}` is `{identity}`"
        return None
    if isinstance(expr, ast.Attribute) and expr.attr in _VIEW_ATTRIBUTES:
        return f"a view (`{ast.unparse(expr)}`)", ""
    if isinstance(expr, ast.Subscript) and _basic_index(expr.slice) and not isinstance(expr.value, (ast.Tuple, ast.List)):
        base = expr.value
        if isinstance(base, ast.Name) and _tuple_like(base.id, func):
            return None  # `outs[0]` of a tuple or list: the element itself, not a view
        if isinstance(base, ast.Attribute) and base.attr == "saved_tensors":
            return None
        if _integer_tensor(base, func):
            return None
        return f"a slice (`{ast.unparse(expr)}`)", ""
    return None


_INTEGER_DTYPES = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "short", "int", "long", "uint16",
                             "uint32", "uint64"})


def _integer_tensor(base: ast.AST, func: ast.AST) -> bool:
    """A local made with an integer or bool dtype (``torch.empty(n, dtype=torch.int32)``, ``x.long()``):
    such a tensor never requires grad, so autograd puts no in-place restriction on its views (vllm's
    routing indices)."""
    if not isinstance(base, ast.Name):
        return False
    values = _local_values(base.id, func, base)
    return bool(values) and all(_integer_made(v) for v in values)


def _integer_made(value: ast.AST) -> bool:
    if not isinstance(value, ast.Call):
        return False
    for keyword in value.keywords:
        if keyword.arg == "dtype":
            return _integer_dtype(keyword.value)
    callee = value.func
    if isinstance(callee, ast.Attribute):
        if callee.attr in ("long", "int", "short", "bool", "byte", "char") and not value.args:
            return True
        if callee.attr == "to" and value.args:
            return _integer_dtype(value.args[0])
    return False


def _integer_dtype(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "torch" \
        and expr.attr in _INTEGER_DTYPES


def _identity_choice(name: ast.Name, func: ast.AST) -> str | None:
    """The identity lambda a local callable may be: ``f = g if c else lambda x: x``."""
    values = _local_values(name.id, func, name)
    for value in values:
        branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        for branch in branches:
            if isinstance(branch, ast.Lambda) and len(branch.args.args) == 1 and not branch.args.vararg \
                    and isinstance(branch.body, ast.Name) and branch.body.id == branch.args.args[0].arg:
                return ast.unparse(branch)
    return None


def _basic_index(index: ast.AST) -> bool:
    """Basic indexing (a view): slices, ``...``, ``None``, integer literals."""
    if isinstance(index, ast.Tuple):
        return bool(index.elts) and all(_basic_index(e) for e in index.elts) \
            and any(isinstance(e, ast.Slice) or _is_const(e, type(...)) for e in index.elts)
    return isinstance(index, ast.Slice)


def _is_const(node: ast.AST, kind: type) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, kind)


def _tuple_like(name: str, func: ast.AST) -> bool:
    for node in executed_nodes(func):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            parent = getattr(node, "_hl_parent", None)
            if isinstance(parent, (ast.Assign, ast.AnnAssign)) and isinstance(
                    parent.value, (ast.Tuple, ast.List, ast.ListComp)):
                return True
    return False


def _local_values(name: str, func: ast.AST, before: ast.AST) -> list[ast.AST]:
    """The values ``name`` is assigned in ``func`` (plain assignments only; []
    when it is also bound otherwise: a loop, an unpacking, a parameter)."""
    values: list[ast.AST] = []
    for node in executed_nodes(func):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            parent = getattr(node, "_hl_parent", None)
            if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and parent.targets[0] is node:
                values.append(parent.value)
            elif isinstance(parent, ast.AnnAssign) and parent.value is not None:
                values.append(parent.value)
            else:
                return []
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return []
    if name in positional_params(func):
        return []
    return values


def _marked_dirty(func: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in executed_nodes(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "mark_dirty":
            out |= {a.id for a in node.args if isinstance(a, ast.Name)}
    return out


def _receiver_dirty(expr: ast.AST, dirty: set[str]) -> bool:
    return isinstance(expr, ast.Name) and expr.id in dirty


def _returns(func: ast.AST) -> list[ast.Return]:
    return [n for n in executed_nodes(func) if isinstance(n, ast.Return)]


def _dotted(expr: ast.AST) -> str:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return ""


def _head(call: ast.Call) -> str:
    text = ast.unparse(call)
    return text if len(text) <= 40 else ast.unparse(call.func) + "(...)"


# ------------------------------------------------------------------ backward writes

@dataclass(frozen=True)
class OuterGradWrite:
    """``backward`` writes the gradient of a tensor ``forward`` was given."""

    node: ast.AST  # the nested backward call, or the `.grad` write
    tensor: str  # the name it is known by in backward
    origin: str  # "`ctx.lm_head`"
    how: str  # "a nested `torch.autograd.backward(...)`" / "`.grad` assigned"
    returned: ast.AST | None  # the `<tensor>.grad` that backward also returns


def outer_grad_writes(backward: ast.AST, qualify) -> list[OuterGradWrite]:
    """Writes into ``.grad`` of tensors that reach ``backward`` from ``ctx``
    (attributes, ``saved_tensors``), when ``backward`` also returns that
    ``.grad``: the engine then accumulates it a second time."""
    if not isinstance(backward, FunctionNode):
        return []
    params = positional_params(backward)
    if not params:
        return []
    ctx_name = params[0]
    outer = _ctx_aliases(backward, ctx_name)
    returned = _returned_grads(backward, outer, ctx_name)
    if not returned:
        return []
    out: list[OuterGradWrite] = []
    nested = [n for n in executed_nodes(backward) if isinstance(n, ast.Call) and _is_backward_call(n, qualify)]
    for name, (origin, grad_node) in returned.items():
        if nested:
            call = nested[0]
            out.append(OuterGradWrite(call, name, origin, f"a nested `{_head(call)}`", grad_node))
            continue
        write = _grad_write(backward, name)
        if write is not None:
            out.append(OuterGradWrite(write, name, origin, "its `.grad` is written here", grad_node))
    return out


def _ctx_aliases(func: ast.AST, ctx_name: str) -> dict[str, str]:
    """Local names bound (only) to ``ctx.<attr>`` or items of ``ctx.saved_tensors``, with that origin."""
    out: dict[str, str] = {}
    stores: dict[str, int] = {}
    for node in executed_nodes(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            stores[node.id] = stores.get(node.id, 0) + 1
    for node in executed_nodes(func):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and _is_ctx_attr(value, ctx_name):
            out[target.id] = f"`{ast.unparse(value)}`"
        elif isinstance(target, (ast.Tuple, ast.List)) and _is_saved_tensors(value, ctx_name):
            for elt in target.elts:
                if isinstance(elt, ast.Name):
                    out[elt.id] = f"`{ctx_name}.saved_tensors`"
        elif isinstance(target, ast.Name) and isinstance(value, ast.Subscript) \
                and _is_saved_tensors(value.value, ctx_name):
            out[target.id] = f"`{ctx_name}.saved_tensors`"
    return {name: origin for name, origin in out.items() if stores.get(name) == 1}


def _is_ctx_attr(expr: ast.AST, ctx_name: str) -> bool:
    return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == ctx_name \
        and expr.attr not in ("saved_tensors", "needs_input_grad")


def _is_saved_tensors(expr: ast.AST, ctx_name: str) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == "saved_tensors" and isinstance(expr.value, ast.Name) \
        and expr.value.id == ctx_name


def _returned_grads(func: ast.AST, outer: dict[str, str], ctx_name: str) -> dict[str, tuple[str, ast.AST]]:
    """``<alias>.grad`` (or ``ctx.<attr>.grad``) among the values ``backward`` returns."""
    out: dict[str, tuple[str, ast.AST]] = {}
    for ret in _returns(func):
        if ret.value is None:
            continue
        for node in ast.walk(ret.value):
            if isinstance(node, ast.Attribute) and node.attr == "grad":
                base = node.value
                if isinstance(base, ast.Name) and base.id in outer:
                    out.setdefault(base.id, (outer[base.id], node))
                elif _is_ctx_attr(base, ctx_name):
                    out.setdefault(ast.unparse(base), (f"`{ast.unparse(base)}`", node))
    return out


def _is_backward_call(call: ast.Call, qualify) -> bool:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "backward":
        qual = qualify(func)
        return qual in (None, "torch.autograd.backward") or not (qual or "").startswith("torch.")
    return qualify(func) == "torch.autograd.backward"


def _grad_write(func: ast.AST, name: str) -> ast.AST | None:
    for node in executed_nodes(func):
        if isinstance(node, ast.Attribute) and node.attr == "grad" and ast.unparse(node.value) == name:
            parent = getattr(node, "_hl_parent", None)
            if isinstance(node.ctx, ast.Store):
                return node
            if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr.endswith("_") \
                    and not parent.attr.startswith("_") and isinstance(getattr(parent, "_hl_parent", None), ast.Call):
                return parent._hl_parent  # type: ignore[attr-defined]
            if isinstance(parent, ast.AugAssign) and parent.target is node:
                return parent
    return None
