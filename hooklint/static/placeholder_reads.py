"""Hooks that use a closure variable's placeholder before they themselves replace it.

A hook defined inside a function can keep state in that function's variables
(``nonlocal v``).  When the hook is the only code that gives ``v`` a real value
(the enclosing function binds it to ``None`` or a 0-dim placeholder such as
``torch.empty([])``), and the hook *uses* ``v`` (or a variable the enclosing
function sets from ``v`` before running the model) earlier in its body than
the line that replaces it, then on its first call the hook operates on the
placeholder: ``None`` raises ``TypeError`` / ``AttributeError``; a 0-dim tensor
raises ``IndexError`` for any dimension argument it does not have
(``flatten(0, 1)``, ``size(0)``, ``shape[1]``, ``transpose(0, 1)``...), verified in
tests/behaviour/test_placeholder_reads.py with real torch.

A use guarded by a test of the variable (``if v is None``, ``v.dim()`` in a
condition) is the author's check and is not reported, nor is a use inside a
branch or loop of the hook (it may not run on the first call).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.bodies import own_nodes as _own_nodes
from hooklint.static.semantic import FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

# tensor methods whose positional integer arguments (or `dim=`) name dimensions
_DIM_METHODS = frozenset({"flatten", "transpose", "swapaxes", "movedim", "permute", "squeeze", "unsqueeze", "unbind",
                          "select", "narrow", "sum", "mean", "amax", "amin", "softmax", "log_softmax", "cumsum",
                          "split", "chunk", "argmax", "argmin", "norm", "std", "var", "flip", "roll"})
# their arguments that are not dimensions
_NON_DIM_POSITIONS = {"select": (1,), "narrow": (1, 2), "split": (0,), "chunk": (0,), "roll": (0,)}
_ZERO_DIM_FACTORIES = frozenset({"empty", "zeros", "ones", "full", "rand", "randn"})


@dataclass(frozen=True)
class PlaceholderUse:
    hook: FunctionNode
    variable: str  # the closure variable the hook replaces
    placeholder: ast.expr  # its value in the enclosing function
    placeholder_kind: str  # "None" | "0-dim tensor"
    local_name: str  # the name the failing operation is applied to (the read name, or a local copy of it)
    read_name: str  # the closure name the hook reads (the variable, or an alias the enclosing function sets)
    alias_from: ast.expr | None  # the enclosing function's assignment making the alias, when one
    use: ast.expr  # the failing operation
    write: ast.stmt  # the hook's own replacement, later in its body


def placeholder_uses(ctx: "FileContext") -> list[PlaceholderUse]:
    out: list[PlaceholderUse] = []
    seen: set[int] = set()
    for reg in ctx.hooks.instances:
        hook = reg.hook
        if hook is None or not isinstance(hook.node, FunctionNode) or id(hook.node) in seen:
            continue
        seen.add(id(hook.node))
        outer = ctx.model.enclosing_function(hook.node)
        if not isinstance(outer, FunctionNode):
            continue
        found = _placeholder_use(ctx, hook.node, outer)
        if found is not None:
            out.append(found)
    return out


def _placeholder_use(ctx: "FileContext", hook: FunctionNode, outer: FunctionNode) -> PlaceholderUse | None:
    declared = {name for node in _own_nodes(hook) if isinstance(node, ast.Nonlocal) for name in node.names}
    if not declared:
        return None
    outer_assigns = _assignments(outer)
    writers = _nonlocal_writers(outer, exclude=hook)
    hook_locals = {n.id for n in _own_nodes(hook) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    params = {a.arg for a in hook.args.posonlyargs + hook.args.args + hook.args.kwonlyargs}
    for variable in sorted(declared):
        writes = [s for s in hook.body if _assigns(s, variable)] + \
                 [s for s in _own_nodes(hook) if isinstance(s, (ast.Assign, ast.AugAssign)) and _assigns(s, variable)]
        values = outer_assigns.get(variable, [])
        if not writes or not values or variable in writers:
            continue
        kinds = {_placeholder_kind(v) for v in values}
        if len(kinds) != 1 or None in kinds:
            continue
        kind = kinds.pop()
        write = min(writes, key=lambda s: (s.lineno, s.col_offset))
        # names through which the hook reads the variable: itself, and closure variables set from it
        sources: dict[str, ast.expr | None] = {variable: None}
        for name, assigned in outer_assigns.items():
            if name == variable or name in hook_locals or name in params or name in writers:
                continue
            if assigned and all(_takes(v, variable) for v in assigned):
                sources[name] = assigned[0]
        use = _first_failing_use(hook, sources, kind, write)
        if use is None:
            continue
        local_name, read_name, node = use
        if not ctx.core.can_run(node):
            continue
        return PlaceholderUse(hook, variable, values[0], kind, local_name, read_name, sources.get(read_name), node,
                              write)
    return None



def _assignments(func: FunctionNode) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    for node in _own_nodes(func):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
                else:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                            out.setdefault(sub.id, []).append(ast.Constant(...))  # unknown value
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name) \
                and node.value is not None:
            out.setdefault(node.target.id, []).append(ast.Constant(...))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            for sub in ast.walk(node.target):
                if isinstance(sub, ast.Name):
                    out.setdefault(sub.id, []).append(ast.Constant(...))
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                for sub in ast.walk(item.optional_vars or ast.Pass()):
                    if isinstance(sub, ast.Name):
                        out.setdefault(sub.id, []).append(ast.Constant(...))
        elif isinstance(node, ast.NamedExpr):
            out.setdefault(node.target.id, []).append(ast.Constant(...))
    return out


def _nonlocal_writers(outer: FunctionNode, exclude: FunctionNode) -> set[str]:
    """Variables of `outer` that another nested function declares nonlocal (it may set them first)."""
    names: set[str] = set()
    for node in ast.walk(outer):
        if node is exclude or node is outer or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if any(node is inner for inner in ast.walk(exclude)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Nonlocal):
                names.update(inner.names)
    return names


def _assigns(stmt: ast.AST, name: str) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else \
        [stmt.target] if isinstance(stmt, (ast.AugAssign, ast.AnnAssign)) else []
    return any(isinstance(sub, ast.Name) and sub.id == name for t in targets for sub in ast.walk(t))


def _placeholder_kind(value: ast.expr) -> str | None:
    if isinstance(value, ast.Constant) and value.value is None:
        return "None"
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Name) \
            and value.func.value.id == "torch":
        name = value.func.attr
        args = value.args
        if name in _ZERO_DIM_FACTORIES and args and isinstance(args[0], (ast.List, ast.Tuple)) and not args[0].elts:
            return "0-dim tensor"
        if name in _ZERO_DIM_FACTORIES and not args and any(
                k.arg == "size" and isinstance(k.value, (ast.List, ast.Tuple)) and not k.value.elts
                for k in value.keywords):
            return "0-dim tensor"
    return None


def _takes(value: ast.expr, variable: str) -> bool:
    """`value` is the variable, or a conditional expression with it as one branch."""
    if isinstance(value, ast.Name):
        return value.id == variable
    if isinstance(value, ast.IfExp):
        return _takes(value.body, variable) or _takes(value.orelse, variable)
    return False


def _first_failing_use(hook: FunctionNode, sources: dict[str, ast.expr | None], kind: str,
                       write: ast.stmt) -> tuple[str, str, ast.expr] | None:
    tested = _tested_names(hook)
    tracked: dict[str, str] = {name: name for name in sources if name not in tested}  # local alias -> source
    for stmt in hook.body:
        if stmt.lineno >= write.lineno:
            return None
        if isinstance(stmt, (ast.Return, ast.Raise)):
            return None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target = stmt.targets[0].id
            if isinstance(stmt.value, ast.Name) and stmt.value.id in tracked and target not in tested:
                tracked[target] = tracked[stmt.value.id]
                continue
        if isinstance(stmt, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign)):
            use = _failing_use_in(stmt, tracked, kind)
            if use is not None:
                return use[0], tracked[use[0]], use[1]
            # a top-level rebinding ends the alias
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            tracked.pop(sub.id, None)
    return None


def _tested_names(hook: FunctionNode) -> set[str]:
    names: set[str] = set()
    for node in _own_nodes(hook):
        test = getattr(node, "test", None) if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)) else None
        if isinstance(node, ast.BoolOp):
            test = node
        if test is not None:
            names.update(n.id for n in ast.walk(test) if isinstance(n, ast.Name))
    return names


def _failing_use_in(stmt: ast.stmt, tracked: dict[str, str], kind: str) -> tuple[str, ast.expr] | None:
    candidates: list[tuple[str, ast.expr]] = []
    for node in ast.walk(stmt.value if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr))
                         and stmt.value is not None else stmt):
        if kind == "None":
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in tracked:
                candidates.append((node.value.id, node))
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in tracked:
                candidates.append((node.value.id, node))
            elif isinstance(node, ast.BinOp) and any(isinstance(side, ast.Name) and side.id in tracked
                                                     for side in (node.left, node.right)):
                side = node.left if isinstance(node.left, ast.Name) and node.left.id in tracked else node.right
                candidates.append((side.id, node))
        else:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in tracked:
                method = node.func.attr
                if method == "size" and (node.args or node.keywords):
                    candidates.append((node.func.value.id, node))
                elif method in _DIM_METHODS and _names_missing_dim(node, method):
                    candidates.append((node.func.value.id, node))
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "shape" and isinstance(node.value.value, ast.Name) \
                    and node.value.value.id in tracked:
                candidates.append((node.value.value.id, node))
    if not candidates:
        return None
    return min(candidates, key=lambda c: (c[1].lineno, c[1].col_offset))


def _names_missing_dim(call: ast.Call, method: str) -> bool:
    """A literal dimension a 0-dim tensor does not have (valid there: 0 and -1)."""
    skip = _NON_DIM_POSITIONS.get(method, ())
    dims = [a for i, a in enumerate(call.args) if i not in skip]
    dims += [k.value for k in call.keywords if k.arg in ("dim", "dim0", "dim1", "start_dim", "end_dim", "source",
                                                          "destination")]
    for dim in dims:
        value = _int_literal(dim)
        if value is not None and (value >= 1 or value <= -2):
            return True
    return False


def _int_literal(expr: ast.expr) -> int | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = _int_literal(expr.operand)
        return -inner if inner is not None else None
    return None
