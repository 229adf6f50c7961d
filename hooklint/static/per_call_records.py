"""Hooks that record a fact of the module once per *call*.

A forward hook runs once per call of its module, and a module can be called
several times in one forward (a shared layer, an activation module reused by
a block, a block applied twice): `Module.modules()` yields it once, so a
summary walks it once but its hook fires once per call.  A hook that adds a
new record on every call (a list append, a key made from `len(records)` or a
counter) and puts into it something that belongs to the module and not to the
call (its parameter count) counts that module once per call: its parameters
are added to the totals twice.  The fix is a guard on the module's identity
(`if id(module) in seen: return`), or a key that is the module itself.

:func:`per_call_parameter_records` answers, for one hook body: does it read
the module's parameters' sizes, add a record per call, and never compare the
module's identity with anything?
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode, positional_params

_PARAM_READS = frozenset({"parameters", "named_parameters"})
_PARAM_ATTRS = frozenset({"weight", "bias", "_parameters"})
_SIZE_READS = frozenset({"numel", "nelement", "size", "shape", "prod"})


@dataclass(frozen=True)
class PerCallRecord:
    params_read: ast.AST  # where the hook reads the module's parameters
    record: ast.AST  # where it adds a record per call
    how: str  # "appends to `layers`", "a key made from `len(summary)`"


def _root(expr: ast.AST) -> str | None:
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _locals(func: FunctionNode) -> set[str]:
    """Names the hook binds itself (parameters, assignments, loop targets)."""
    names = set(positional_params(func))
    args = func.args
    for extra in (args.vararg, args.kwarg):
        if extra is not None:
            names.add(extra.arg)
    declared_outer: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, (ast.Nonlocal, ast.Global)):
            declared_outer.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names - declared_outer


def _identity_exprs(func: FunctionNode, module: str) -> set[str]:
    """Source texts standing for the module's identity in the body: the
    module, `id(module)`, and what is assigned from them (`info["id"] = id(m)`)."""
    texts = {module, f"id({module})"}
    for _ in range(2):
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and ast.unparse(node.value) in texts:
                texts.update(ast.unparse(t) for t in node.targets)
    return texts


def _compares_identity(func: FunctionNode, module: str) -> bool:
    texts = _identity_exprs(func, module)
    for node in ast.walk(func):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(ast.unparse(o) in texts for o in operands):
                return True
            # an identity test of anything (`id(p) not in param_ids`, `seen.get(id(module)) is None`):
            # the hook deduplicates what it counts
            if any(isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "id"
                   for o in operands for sub in ast.walk(o)):
                return True
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr" \
                and len(node.args) == 2 and ast.unparse(node.args[0]) == module \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in _flags_set(func, module):
            return True  # a flag the hook sets on the module (`if hasattr(m, "_counted"): return`)
    return False


def _flags_set(func: FunctionNode, module: str) -> set[str]:
    flags: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                and isinstance(node.value, ast.Name) and node.value.id == module:
            flags.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) == 3 and ast.unparse(node.args[0]) == module \
                and isinstance(node.args[1], ast.Constant):
            flags.add(node.args[1].value)
    return flags


def _reads_parameter_sizes(func: FunctionNode, module: str) -> ast.AST | None:
    read: ast.AST | None = None
    sized = False
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _PARAM_READS and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == module:
            read = read or node
        elif isinstance(node, ast.Attribute) and node.attr in _PARAM_ATTRS and isinstance(node.value, ast.Name) \
                and node.value.id == module:
            read = read or node
        if isinstance(node, ast.Attribute) and node.attr in _SIZE_READS:
            sized = True
    return read if sized else None


def _per_call_keys(func: FunctionNode, outer: set[str]) -> set[str]:
    """Local names whose value is new on every call: made from `len(<outer>)`
    or from an outer counter."""
    fresh: set[str] = set()
    for _ in range(2):
        for node in ast.walk(func):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                continue
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "len" \
                        and sub.args and _root(sub.args[0]) in outer:
                    fresh.add(node.targets[0].id)
                elif isinstance(sub, ast.Name) and sub.id in fresh:
                    fresh.add(node.targets[0].id)
                elif isinstance(sub, (ast.Name, ast.Attribute)) and _root(sub) in outer and _counter(func, sub):
                    fresh.add(node.targets[0].id)
    return fresh


def _counter(func: FunctionNode, expr: ast.expr) -> bool:
    """The hook increments this outer name or attribute (`count += 1`, `self.calls += 1`)."""
    text = ast.unparse(expr)
    return any(isinstance(n, ast.AugAssign) and ast.unparse(n.target) == text for n in ast.walk(func))


def _adds_per_call(func: FunctionNode) -> tuple[ast.AST, str] | None:
    local = _locals(func)
    outer = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and n.id not in local}
    outer.add("self")
    fresh = _per_call_keys(func, outer)
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" \
                and _root(node.func.value) in outer:
            return node, f"appends to `{ast.unparse(node.func.value)}`"
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _root(target.value) in outer \
                        and any(isinstance(s, ast.Name) and s.id in fresh for s in ast.walk(target.slice)):
                    return node, f"stores a new entry of `{ast.unparse(target.value)}`"
    return None


def per_call_parameter_records(func: FunctionNode, module: str | None) -> PerCallRecord | None:
    if module is None:
        return None
    read = _reads_parameter_sizes(func, module)
    if read is None or _compares_identity(func, module):
        return None
    added = _adds_per_call(func)
    if added is None:
        return None
    return PerCallRecord(read, added[0], added[1])
