"""Forward hooks that keep a running total of graph-attached values across forwards.

A forward hook's ``input`` and ``output`` carry the forward's autograd graph
when gradients are enabled.  ``state.total = state.total + output.mean()``
(or ``+=``, or ``state.total.add_(...)`` on a buffer) on state that outlives the call (an attribute of the hooked
module, of the hook's owner, an entry of a dict the hook closes over) makes
the new total a node whose inputs are the old total and this forward's
graph: after N forwards the total reaches back through all N graphs, which
stay alive until the attribute is rebound to a fresh value.  Memory grows
per batch, and a backward through the total after a training step's own
backward raises "Trying to backward through the graph a second time"
(tests/behaviour/test_graph_accumulators.py, real torch).

What makes a total span forwards rather than one step: the same hook counts
the calls it sums over (``state.n = state.n + 1``, ``+= x.shape[0]``) on
the same owner: a mean over batches, which is what statistics collectors
compute.  A differentiable accumulator meant for one step (a regulariser
summed over layers, reset after each backward) rarely counts its calls; it
is not reported without the counter.

Values stop carrying the graph through ``.detach()``, ``.item()``,
``.data``, shapes and sizes, comparisons, integer casts, Python numbers
(``float()``, ``len()``) and functions that are not torch's; a hook body
under ``torch.no_grad()`` / ``inference_mode`` (or a hook decorated with
them) carries none.

A statistic collected over one bounded pass (the registering code removes
the handles after running the model, or returns them to its caller) is a
calibration, run under ``no_grad`` by convention (auto-round's and peft's
covariance hooks: the callers in other files decorate the pass with
``torch.no_grad()``): only hooks that stay registered for the collector's
lifetime (handle dropped, or kept on an object) are reported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.hooks import HookKind
from hooklint.static.semantic import FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

# tensor methods / attributes whose result carries no autograd graph
_DETACHING_METHODS = frozenset({
    "detach", "detach_", "item", "tolist", "numpy", "numel", "nelement", "dim", "size", "element_size",
    "argmax", "argmin", "bool", "long", "int", "short", "byte", "count_nonzero", "nonzero", "eq", "ne", "gt",
    "ge", "lt", "le", "isnan", "isinf", "isfinite", "sign_", "any", "all", "data_ptr", "stride", "get_device",
    "equal", "is_contiguous", "unique", "bincount", "histc",
})
_DETACHING_ATTRIBUTES = frozenset({"data", "shape", "ndim", "dtype", "device", "requires_grad", "grad_fn", "is_cuda",
                                   "is_leaf", "layout", "T_not_a_tensor"})
_NO_GRAD = frozenset({"no_grad", "inference_mode"})


@dataclass(frozen=True)
class GraphAccumulation:
    hook: FunctionNode  # the hook function
    statement: ast.stmt  # `total = total + value` / `total += value`
    total: str  # the total's text
    value: ast.expr  # what is added
    source: str  # the hook parameter the value is computed from
    counter: ast.stmt  # the counting statement on the same owner
    counter_text: str


def graph_accumulations(ctx: "FileContext") -> list[GraphAccumulation]:
    out: list[GraphAccumulation] = []
    seen: set[int] = set()
    for reg in ctx.hooks.instances_by_kind(HookKind.FORWARD, HookKind.FORWARD_PRE):
        hook = reg.hook
        if hook is None or not isinstance(hook.node, FunctionNode) or id(hook.node) in seen:
            continue
        seen.add(id(hook.node))
        if not _stays_registered(ctx, hook.node):
            continue
        sources = [p for p in (reg.param("input"), reg.param("output")) if p]
        if reg.with_kwargs:
            sources += [p for p in (reg.param("kwargs"),) if p]
        if not sources or _decorated_no_grad(hook.node):
            continue
        out += _accumulations_in(ctx, hook.node, set(sources))
    return out


def _stays_registered(ctx: "FileContext", hook: FunctionNode) -> bool:
    """Does some registration of the hook stay on its module beyond the call that makes it (handle dropped,
    or kept on an object: the collector's lifetime, training included)?  Hooks whose handles the registering
    code removes after a pass, or returns for its caller to remove, collect over one bounded pass, a
    calibration that runs under `no_grad` by convention: left alone."""
    fates = []
    for reg in ctx.hooks.registrations:
        if reg.hook is None or reg.hook.node is not hook or reg.kind not in (HookKind.FORWARD, HookKind.FORWARD_PRE):
            continue
        fates.append(ctx.core.fate(reg.call, ctx.model.enclosing_function(reg.call)))
    return any(fate == "drop" or fate.startswith("at:") for fate in fates)


def _decorated_no_grad(func: FunctionNode) -> bool:
    for dec in func.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in _NO_GRAD:
            return True
    return False


def _own_statements(func: FunctionNode) -> list[tuple[ast.stmt, bool]]:
    """The hook's statements in source order (nested functions and classes left out), each with
    whether it runs under `with torch.no_grad()` / `inference_mode()`."""
    out: list[tuple[ast.stmt, bool]] = []

    def visit(stmts: list[ast.stmt], no_grad: bool) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            out.append((stmt, no_grad))
            inner = no_grad
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                inner = no_grad or any(_is_no_grad_context(item.context_expr) for item in stmt.items)
            for field in ("body", "orelse", "finalbody"):
                block = getattr(stmt, field, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    visit(block, inner)
            for handler in getattr(stmt, "handlers", ()) or ():
                visit(handler.body, inner)
            for case in getattr(stmt, "cases", ()) or ():
                visit(case.body, inner)

    visit(func.body, False)
    return out


def _is_no_grad_context(expr: ast.expr) -> bool:
    target = expr.func if isinstance(expr, ast.Call) else expr
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    if name in _NO_GRAD:
        return True
    # torch.set_grad_enabled(False)
    return (name == "set_grad_enabled" and isinstance(expr, ast.Call) and expr.args
            and isinstance(expr.args[0], ast.Constant) and expr.args[0].value is False)


def _accumulations_in(ctx: "FileContext", func: FunctionNode, sources: set[str]) -> list[GraphAccumulation]:
    statements = _own_statements(func)
    local_names = _assigned_names(func)
    carriers: dict[str, str] = {name: name for name in sources}  # name -> the hook parameter it comes from
    found: list[tuple[ast.stmt, str, ast.expr, str]] = []
    counters: list[tuple[ast.stmt, str]] = []
    for stmt, no_grad in statements:
        if isinstance(stmt, ast.Assign) and not no_grad:
            origin = _carried(stmt.value, carriers)
            for target in stmt.targets:
                for name in _target_names(target):
                    if origin is not None:
                        carriers[name] = origin
                    else:
                        carriers.pop(name, None)  # `input = input[0].detach()` carries nothing from here on
        elif isinstance(stmt, ast.Assign) and no_grad:
            for target in stmt.targets:
                for name in _target_names(target):
                    carriers.pop(name, None)
        total, value = _accumulation(stmt)
        if total is None or value is None or not _outlives_call(total, local_names, sources):
            continue
        text = ast.unparse(total)
        if _is_count(value, carriers):
            counters.append((stmt, text))
            continue
        if no_grad or not ctx.core.can_run(stmt):
            continue
        origin = _carried(value, carriers)
        if origin is not None:
            found.append((stmt, text, value, origin))
    out: list[GraphAccumulation] = []
    for stmt, text, value, origin in found:
        owner = _owner_text(text)
        counter = next(((c, t) for c, t in counters if _owner_text(t) == owner and t != text), None)
        if counter is None:
            continue
        out.append(GraphAccumulation(func, stmt, text, value, origin, counter[0], counter[1]))
    return out


def _assigned_names(func: FunctionNode) -> set[str]:
    names: set[str] = set()
    declared: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, (ast.Nonlocal, ast.Global)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names - declared


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _target_names(elt)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _accumulation(stmt: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    """(total, added value) of `total += value` / `total = total + value` (either side), else (None, None)."""
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add):
        return stmt.target, stmt.value
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Attribute) \
            and stmt.value.func.attr == "add_" and len(stmt.value.args) == 1 \
            and isinstance(stmt.value.func.value, (ast.Attribute, ast.Subscript)):
        # `buffer.add_(value)`: in place, a total that did not require grad starts to, and chains every graph
        return stmt.value.func.value, stmt.value.args[0]
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.BinOp) \
            and isinstance(stmt.value.op, ast.Add):
        target = stmt.targets[0]
        wanted = ast.dump(target, annotate_fields=False).replace("Store()", "Load()")
        operands = _add_operands(stmt.value)
        rest = [op for op in operands if ast.dump(op, annotate_fields=False) != wanted]
        if len(rest) == len(operands) - 1:
            if len(rest) == 1:
                return target, rest[0]
            value: ast.expr = rest[0]
            for op in rest[1:]:
                value = ast.BinOp(value, ast.Add(), op)
            return target, value
    return None, None


def _add_operands(expr: ast.expr) -> list[ast.expr]:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _add_operands(expr.left) + _add_operands(expr.right)
    return [expr]


def _outlives_call(total: ast.expr, local_names: set[str], sources: set[str]) -> bool:
    """An attribute or item of something the hook did not create: the module it is given, its owner
    (`self`), an object or container it closes over."""
    if not isinstance(total, (ast.Attribute, ast.Subscript)):
        return False
    base = total
    while isinstance(base, (ast.Attribute, ast.Subscript)):
        base = base.value
    if not isinstance(base, ast.Name):
        return False
    if base.id in sources:
        return False  # an attribute of the activation itself
    return base.id not in local_names


def _owner_text(total_text: str) -> str:
    """`self.stats["a"].sum` -> `self.stats["a"]`; `layer.synops` -> `layer`."""
    try:
        node = ast.parse(total_text, mode="eval").body
    except SyntaxError:  # pragma: no cover - the text came from ast.unparse
        return total_text
    if isinstance(node, (ast.Attribute, ast.Subscript)):
        return ast.unparse(node.value)
    return total_text


def _is_count(value: ast.expr, carriers: dict[str, str]) -> bool:
    """A number of calls or of samples: `1`, `x.shape[0]`, `x.size(0)`, `len(x)`."""
    if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return value.value > 0
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Attribute) and value.value.attr == "shape":
        return True
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Name) and func.id == "len":
            return True
        if isinstance(func, ast.Attribute) and func.attr in ("size", "numel") and _carried(func.value, carriers):
            return True
    return False


def _carried(expr: ast.expr, carriers: dict[str, str]) -> str | None:
    """The hook parameter whose autograd graph `expr` carries, or None."""
    if isinstance(expr, ast.Name):
        return carriers.get(expr.id)
    if isinstance(expr, ast.Starred):
        return _carried(expr.value, carriers)
    if isinstance(expr, ast.Subscript):
        return _carried(expr.value, carriers)
    if isinstance(expr, ast.Attribute):
        if expr.attr in _DETACHING_ATTRIBUTES:
            return None
        return _carried(expr.value, carriers) if expr.attr in ("T", "mT", "real", "imag") else None
    if isinstance(expr, ast.BinOp):
        return _carried(expr.left, carriers) or _carried(expr.right, carriers)
    if isinstance(expr, ast.UnaryOp):
        return None if isinstance(expr.op, ast.Not) else _carried(expr.operand, carriers)
    if isinstance(expr, ast.IfExp):
        return _carried(expr.body, carriers) or _carried(expr.orelse, carriers)
    if isinstance(expr, (ast.Tuple, ast.List)):
        for elt in expr.elts:
            origin = _carried(elt, carriers)
            if origin:
                return origin
        return None
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute):
            if func.attr in _DETACHING_METHODS:
                return None
            receiver = _carried(func.value, carriers)
            if receiver is not None:
                return receiver  # a tensor method of a carrier: `output.mean()`, `x.reshape(...)`
            if _is_torch(func.value):  # torch.sum(x), torch.nn.functional.relu(x)
                for arg in list(expr.args) + [k.value for k in expr.keywords]:
                    origin = _carried(arg, carriers)
                    if origin:
                        return origin
        return None
    return None  # comparisons, constants, f-strings, calls of other functions


def _is_torch(expr: ast.expr) -> bool:
    while isinstance(expr, ast.Attribute):
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id in ("torch", "F", "functional")
