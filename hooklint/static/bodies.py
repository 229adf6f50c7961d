"""Questions about the body of one function (a hook, usually).

These walk only the function's own code: a nested ``def`` or ``lambda`` that
rebinds the same parameter name is a different variable and is skipped.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable, Iterator

from hooklint.static.semantic import FunctionNode


def body_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """Every node of the function's body (for a lambda, its expression),
    not descending into nested functions or classes."""
    roots = [func.body] if isinstance(func, ast.Lambda) else list(func.body)  # type: ignore[attr-defined]
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes that run when the function runs: nested functions, lambdas
    and classes (their own bodies run at other times) left out, the nested
    def nodes themselves too.  Unordered (a stack walk)."""
    stack: list[ast.AST] = list(func.body) if isinstance(func.body, list) else [func.body]  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def name_uses(func: ast.AST, name: str) -> list[ast.Name]:
    """Loads of ``name`` in the function body, in source order."""
    out = [n for n in body_nodes(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    out.sort(key=lambda n: (n.lineno, n.col_offset))
    return out


def name_stores(func: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in body_nodes(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]


def returns(func: ast.AST) -> list[ast.AST]:
    """The returned expressions (None for a bare ``return``); a lambda returns its body.
    A function that can fall off its end also "returns" None: ``ctx.core.cfg(func).falls_off_end()``."""
    if isinstance(func, ast.Lambda):
        return [func.body]
    return [r.value if r.value is not None else None for r in body_nodes(func) if isinstance(r, ast.Return)]


def return_statements(func: ast.AST) -> list[ast.Return]:
    if isinstance(func, ast.Lambda):
        return []
    return [r for r in body_nodes(func) if isinstance(r, ast.Return)]


def returns_nothing(func: ast.AST) -> bool:
    """True if every return is bare or ``return None`` (the hook changes nothing
    through its return value)."""
    if isinstance(func, ast.Lambda):
        body = func.body
        return isinstance(body, ast.Constant) and body.value is None or _is_none_returning_call(body)
    for value in returns(func):
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            return False
    return True


def _is_none_returning_call(expr: ast.AST) -> bool:
    """``lambda *a: print(...)`` / ``lambda m, i, o: store.append(o)`` return None."""
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id == "print":
            return True
        if isinstance(func, ast.Attribute) and func.attr in ("append", "extend", "update", "add", "put", "write"):
            return True
    return False


def param_names(func: ast.AST) -> list[str]:
    args: ast.arguments = func.args  # type: ignore[attr-defined]
    return [a.arg for a in list(args.posonlyargs) + list(args.args)]


def subscripts_of(func: ast.AST, name: str) -> list[ast.Subscript]:
    return [n for n in body_nodes(func) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id == name]


def attribute_chain(node: ast.AST) -> list[str] | None:
    """``module.weight.grad.data`` -> ["module", "weight", "grad", "data"]."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None


# ------------------------------------------------------------- in-place writes

# Methods whose name ends in "_" but that do not write the tensor's values.
_NOT_VALUE_WRITES = frozenset({"requires_grad_", "share_memory_", "detach_", "retain_grad_"})
# Methods returning a view of their receiver: writing through the view writes
# the receiver.  (reshape/flatten/contiguous may copy, so they are not here.)
_VIEW_METHODS = frozenset({
    "detach", "view", "view_as", "squeeze", "unsqueeze", "t", "transpose", "permute", "narrow", "select",
    "expand", "expand_as", "diagonal", "unflatten", "as_strided", "unfold",
})
# torch.distributed collectives that overwrite their first argument.
_INPLACE_COLLECTIVES = frozenset({
    "torch.distributed.all_reduce", "torch.distributed.broadcast", "torch.distributed.reduce",
})

TENSOR = "tensor"  # the tracked tensor, or a view of it
TUPLE = "tuple"  # a tuple (or list) whose items are tracked tensors (grad_input, a forward hook's input)


def is_inplace_method(name: str) -> bool:
    """``mul_``, ``zero_``, ``index_fill_`` ... (not ``__iadd__`` nor ``requires_grad_``)."""
    return name.endswith("_") and not name.startswith("_") and name not in _NOT_VALUE_WRITES


@dataclass(frozen=True)
class Write:
    """One place where a function writes the values of a tracked tensor in place."""

    node: ast.AST  # the assignment statement, or the call
    target: ast.expr  # the expression naming the written tensor
    how: str  # "augmented assignment", "item assignment", "in-place method `mul_`", ...
    statement: ast.stmt | None  # the statement holding it (None in a lambda)


def inplace_writes(func: ast.AST, tracked: dict[str, str],
                   qualify: Callable[[ast.AST], str | None]) -> list[Write]:
    """In-place writes to the values ``tracked`` names start out holding.

    ``tracked`` maps parameter names to :data:`TENSOR` or :data:`TUPLE`.  Names
    are followed statement by statement (``g = grad_input[0]`` aliases, ``grad
    = grad * 2`` does not); where branches disagree a name counts as not
    aliased, so that uncertainty leads to silence, not to a false report.
    """
    walk = _AliasWalk(qualify)
    state = dict(tracked)
    if isinstance(func, ast.Lambda):
        walk.expr(func.body, state, None)
    else:
        walk.block(func.body, state)  # type: ignore[attr-defined]
    walk.writes.sort(key=lambda w: (w.node.lineno, w.node.col_offset))  # type: ignore[attr-defined]
    return walk.writes


def _is_basic_index(index: ast.AST) -> bool:
    """Indexing that returns a view (ints, slices, None, ...), not a copy."""
    if isinstance(index, ast.Slice):
        return True
    if isinstance(index, ast.Constant):
        return index.value is None or index.value is Ellipsis or (
            isinstance(index.value, int) and not isinstance(index.value, bool))
    if isinstance(index, ast.UnaryOp) and isinstance(index.op, ast.USub):
        return _is_basic_index(index.operand)
    if isinstance(index, ast.Tuple):
        return all(_is_basic_index(e) for e in index.elts)
    return False


class _AliasWalk:
    def __init__(self, qualify: Callable[[ast.AST], str | None]):
        self.qualify = qualify
        self.writes: list[Write] = []

    # -- what an expression is -------------------------------------------
    def kind(self, expr: ast.AST, state: dict[str, str]) -> str | None:
        if isinstance(expr, ast.Name):
            return state.get(expr.id)
        if isinstance(expr, ast.NamedExpr):
            return self.kind(expr.value, state)
        if isinstance(expr, ast.Attribute):
            if expr.attr in ("data", "T", "mT") and self.kind(expr.value, state) == TENSOR:
                return TENSOR
            return None
        if isinstance(expr, ast.Subscript):
            base = self.kind(expr.value, state)
            if base == TUPLE:
                return TUPLE if isinstance(expr.slice, ast.Slice) else TENSOR
            if base == TENSOR and _is_basic_index(expr.slice):
                return TENSOR
            return None
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and self.kind(func.value, state) == TENSOR and (
                    func.attr in _VIEW_METHODS or is_inplace_method(func.attr)):
                return TENSOR  # a view, or the receiver itself (in-place methods return it)
            if isinstance(func, ast.Name) and func.id in ("tuple", "list") and len(expr.args) == 1 \
                    and self.kind(expr.args[0], state) == TUPLE:
                return TUPLE
            return None
        if isinstance(expr, ast.IfExp):
            a, b = self.kind(expr.body, state), self.kind(expr.orelse, state)
            return a if a == b else None
        return None

    def _write(self, node: ast.AST, target: ast.expr, how: str, stmt: ast.stmt | None) -> None:
        self.writes.append(Write(node, target, how, stmt))

    # -- statements --------------------------------------------------------
    def block(self, stmts: list[ast.stmt], state: dict[str, str]) -> dict[str, str]:
        for stmt in stmts:
            state = self.stmt(stmt, state)
        return state

    def stmt(self, s: ast.stmt, state: dict[str, str]) -> dict[str, str]:
        if isinstance(s, (ast.Assign, ast.AnnAssign)):
            value = s.value
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            if value is not None:
                self.expr(value, state, s)
            for target in targets:
                self._store_target(target, s, state)
            if value is not None:
                for target in targets:
                    self._bind(target, value, state)
            return state
        if isinstance(s, ast.AugAssign):
            self.expr(s.value, state, s)
            target = s.target
            if isinstance(target, ast.Name):
                if state.get(target.id) == TENSOR:
                    self._write(s, target, "augmented assignment", s)
            elif isinstance(target, ast.Subscript):
                self.expr(target.slice, state, s)
                self.expr(target.value, state, s)
                if self.kind(target.value, state) == TENSOR or self.kind(target, state) == TENSOR:
                    self._write(s, target, "augmented assignment", s)
            else:
                self.expr(target, state, s)
                if self.kind(target, state) == TENSOR:
                    self._write(s, target, "augmented assignment", s)
            return state
        if isinstance(s, ast.If):
            self.expr(s.test, state, s)
            return _merge(self.block(s.body, dict(state)), self.block(s.orelse, dict(state)))
        if isinstance(s, (ast.For, ast.AsyncFor)):
            self.expr(s.iter, state, s)
            inner = dict(state)
            _kill(s.target, inner)
            element = self._element_kind(s.iter, state)
            if element is not None and isinstance(s.target, ast.Name):
                inner[s.target.id] = element
            elif isinstance(s.target, ast.Tuple) and len(s.target.elts) == 2 and isinstance(s.iter, ast.Call) \
                    and isinstance(s.iter.func, ast.Name) and s.iter.func.id == "enumerate" and s.iter.args \
                    and isinstance(s.target.elts[1], ast.Name) \
                    and self._element_kind(s.iter.args[0], state) is not None:
                inner[s.target.elts[1].id] = self._element_kind(s.iter.args[0], state)  # type: ignore[assignment]
            after = self.block(s.body, inner)
            merged = _merge(state, after)
            return _merge(merged, self.block(s.orelse, dict(merged)))
        if isinstance(s, ast.While):
            self.expr(s.test, state, s)
            merged = _merge(state, self.block(s.body, dict(state)))
            return _merge(merged, self.block(s.orelse, dict(merged)))
        if isinstance(s, (ast.With, ast.AsyncWith)):
            for item in s.items:
                self.expr(item.context_expr, state, s)
                if item.optional_vars is not None:
                    _kill(item.optional_vars, state)
            return self.block(s.body, state)
        if isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            body = self.block(s.body, dict(state))  # type: ignore[attr-defined]
            outs = [body] + [self.block(h.body, dict(state)) for h in s.handlers]  # type: ignore[attr-defined]
            merged = outs[0]
            for other in outs[1:]:
                merged = _merge(merged, other)
            merged = _merge(merged, self.block(s.orelse, dict(body)))  # type: ignore[attr-defined]
            return self.block(s.finalbody, merged)  # type: ignore[attr-defined]
        if isinstance(s, FunctionNode + (ast.ClassDef,)):
            state.pop(s.name, None)
            return state
        if isinstance(s, ast.Delete):
            for target in s.targets:
                _kill(target, state)
            return state
        if isinstance(s, ast.Match):
            outs = [self.block(case.body, dict(state)) for case in s.cases]
            merged = state
            for other in outs:
                merged = _merge(merged, other)
            return merged
        for child in ast.iter_child_nodes(s):
            if isinstance(child, ast.expr):
                self.expr(child, state, s)
        return state

    def _element_kind(self, iterable: ast.AST, state: dict[str, str]) -> str | None:
        return TENSOR if self.kind(iterable, state) == TUPLE else None

    def _store_target(self, target: ast.expr, stmt: ast.stmt, state: dict[str, str]) -> None:
        """Writes made by assigning to ``target`` (``grad[i] = 0``, ``grad.data = ...``)."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._store_target(elt.value if isinstance(elt, ast.Starred) else elt, stmt, state)
            return
        if isinstance(target, ast.Subscript):
            self.expr(target.slice, state, stmt)
            self.expr(target.value, state, stmt)
            if self.kind(target.value, state) == TENSOR:
                self._write(stmt, target, "item assignment", stmt)
        elif isinstance(target, ast.Attribute):
            self.expr(target.value, state, stmt)
            if target.attr == "data" and self.kind(target.value, state) == TENSOR:
                self._write(stmt, target, "`.data` assignment", stmt)

    def _bind(self, target: ast.expr, value: ast.expr, state: dict[str, str]) -> None:
        if isinstance(target, ast.Name):
            kind = self.kind(value, state)
            if kind is None:
                state.pop(target.id, None)
            else:
                state[target.id] = kind
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
                    and not any(isinstance(e, ast.Starred) for e in target.elts + value.elts):
                kinds = [self.kind(v, state) for v in value.elts]
                for t, k in zip(target.elts, kinds):
                    _kill(t, state)
                    if k is not None and isinstance(t, ast.Name):
                        state[t.id] = k
                return
            element = self._element_kind(value, state)
            for t in target.elts:
                _kill(t, state)
                if element is not None and isinstance(t, ast.Name):
                    state[t.id] = element

    # -- expressions -------------------------------------------------------
    def expr(self, e: ast.AST, state: dict[str, str], stmt: ast.stmt | None) -> None:
        stack = [e]
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.Lambda,) + FunctionNode + (ast.ClassDef,)):
                continue  # a nested function's body runs later, or never
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
                self._comprehension(node, state, stmt)
                continue
            if isinstance(node, ast.Call):
                self._call(node, state, stmt)
            elif isinstance(node, ast.NamedExpr):
                self.expr(node.value, state, stmt)
                self._bind(node.target, node.value, state)
                continue
            stack.extend(ast.iter_child_nodes(node))

    def _comprehension(self, node: ast.AST, state: dict[str, str], stmt: ast.stmt | None) -> None:
        inner = dict(state)
        for gen in node.generators:  # type: ignore[attr-defined]
            self.expr(gen.iter, inner, stmt)
            _kill(gen.target, inner)
            element = self._element_kind(gen.iter, inner)
            if element is not None and isinstance(gen.target, ast.Name):
                inner[gen.target.id] = element
            for cond in gen.ifs:
                self.expr(cond, inner, stmt)
        for part in ("elt", "key", "value"):
            sub = getattr(node, part, None)
            if sub is not None:
                self.expr(sub, inner, stmt)

    def _call(self, call: ast.Call, state: dict[str, str], stmt: ast.stmt | None) -> None:
        func = call.func
        if isinstance(func, ast.Attribute) and is_inplace_method(func.attr) \
                and self.kind(func.value, state) == TENSOR:
            self._write(call, func.value, f"in-place method `{func.attr}`", stmt)
            return
        for kw in call.keywords:
            if kw.arg == "out" and self.kind(kw.value, state) == TENSOR:
                self._write(call, kw.value, "`out=` argument", stmt)
                return
        if not call.args or self.kind(call.args[0], state) != TENSOR:
            return
        first = call.args[0]
        if any(kw.arg == "inplace" and isinstance(kw.value, ast.Constant) and kw.value.value is True
               for kw in call.keywords):
            self._write(call, first, "`inplace=True` call", stmt)
            return
        qual = self.qualify(func)
        if qual is None or not qual.startswith("torch."):
            return
        if qual in _INPLACE_COLLECTIVES:
            self._write(call, first, f"collective `{qual.rsplit('.', 1)[-1]}`", stmt)
        elif is_inplace_method(qual.rsplit(".", 1)[-1]) and not qual.startswith("torch.nn.utils."):
            # torch.relu_(g), torch.nn.init.zeros_(g); nn.utils' *_ functions write `.grad`, not the tensor
            self._write(call, first, f"in-place function `{qual.rsplit('.', 1)[-1]}`", stmt)


def _merge(a: dict[str, str], b: dict[str, str]) -> dict[str, str]:
    """Names aliased the same way on both paths; anything else is not followed."""
    return {name: kind for name, kind in a.items() if b.get(name) == kind}


def _kill(target: ast.AST, state: dict[str, str]) -> None:
    for node in ast.walk(target):
        if isinstance(node, ast.Name):
            state.pop(node.id, None)
