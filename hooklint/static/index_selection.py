"""Hooks placed by position: a loop counter tested against indices the caller chose.

Code that hooks "layers 3, 7 and -1" of a model often walks the layers with
``enumerate`` (or ``range``) and registers where the position is in the
caller's list::

    for i, block in enumerate(model.blocks):
        if i not in layer_ids:
            continue
        handles.append(block.register_forward_hook(record))

A position is never negative, while Python's indexing lets a caller say
``-1`` for the last layer.  Unless the code maps negative indices to positions
first (``i - len(blocks) in layer_ids``, ``{k % n for k in layer_ids}``,
a check that rejects them), the layer such an index names is never hooked,
and nothing says so.

This module finds, for each registration, the test on a loop position that
decides whether it runs (the ``if`` around it, an earlier ``continue``, or the
filter of the comprehension its module came from), where the indices come
from (a parameter of the function, or an attribute of ``self`` set from a
parameter), and whether anything in the code normalizes or rejects negative
indices.  It never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind
from hooklint.static.identity import holding_tests
from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import walk_tree

__all__ = ["PositionSelection", "negative_blind_selections"]


@dataclass(frozen=True)
class PositionSelection:
    """A registration that runs only where a loop position is in the caller's indices."""

    registration: ast.Call
    kind: HookKind
    test: ast.Compare  # `i in layer_ids`, `i not in layer_ids`, `i == layer_idx`
    counter: str  # the position's name
    producer: ast.Call  # the `enumerate(...)` / `range(...)` giving the positions
    selection: ast.expr  # the indices, as the test spells them
    origin: str  # where they come from, in words


def negative_blind_selections(ctx: FileContext) -> list[PositionSelection]:
    found: list[PositionSelection] = []
    seen: set[int] = set()
    for reg in ctx.hooks.registrations:
        if reg.is_global or id(reg.call) in seen:
            continue
        func = ctx.model.enclosing_function(reg.call)
        if not isinstance(func, FunctionNode):
            continue
        hit = _by_enclosing_test(ctx, reg.call, func) or _by_comprehension_filter(ctx, reg, func)
        if hit is not None:
            seen.add(id(reg.call))
            found.append(PositionSelection(reg.call, reg.kind, *hit))
    return found


# -- the test that decides the registration ------------------------------------


def _by_enclosing_test(ctx: FileContext, call: ast.Call, func: ast.AST) -> tuple | None:
    for test in holding_tests(call):
        for compare in _membership_facts(test, positive=True):
            hit = _judge(ctx, call, compare, func, scope_node=call)
            if hit is not None:
                return hit
        for predicate, positive in _predicate_calls(test, positive=True):
            hit = _by_predicate(ctx, call, predicate, positive)
            if hit is not None:
                return hit
    return None


def _predicate_calls(test: ast.expr, positive: bool) -> Iterator[tuple[ast.Call, bool]]:
    """Calls whose truth the test decides: ``self._wanted(i)``, ``not keep(i)``, in ``and`` chains."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _predicate_calls(test.operand, not positive)
    elif isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) == positive:
        for value in test.values:
            yield from _predicate_calls(value, positive)
    elif isinstance(test, ast.Call):
        yield test, positive


def _by_predicate(ctx: FileContext, call: ast.Call, predicate: ast.Call, positive: bool) -> tuple | None:
    """``if self._is_selected(i):`` where the helper returns ``i in self.layers``."""
    value = ctx.inference.infer(predicate.func)
    helper = getattr(value, "node", None)
    if not isinstance(helper, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    params = [a.arg for a in helper.args.posonlyargs + helper.args.args]
    if params and params[0] in ("self", "cls") and isinstance(predicate.func, ast.Attribute):
        params = params[1:]
    for index, arg in enumerate(predicate.args):
        if not isinstance(arg, ast.Name) or index >= len(params):
            continue
        producer = _position_producer(arg.id, call, predicate)
        if producer is None:
            continue
        inner = params[index]
        for ret in (n for n in ast.walk(helper) if isinstance(n, ast.Return) and n.value is not None):
            if ctx.model.enclosing_function(ret) is not helper:
                continue
            for compare in _membership_facts(ret.value, positive):
                sides = [(compare.left, compare.comparators[0])]
                if isinstance(compare.ops[0], (ast.Eq, ast.NotEq)):
                    sides.append((compare.comparators[0], compare.left))
                for counter, selection in sides:
                    if not (isinstance(counter, ast.Name) and counter.id == inner):
                        continue
                    origin = _caller_supplied(ctx, selection, helper)
                    if origin is None or _negatives_handled(ctx, selection, inner, helper):
                        continue
                    return compare, arg.id, producer, selection, origin
    return None


def _membership_facts(test: ast.expr, positive: bool) -> Iterator[ast.Compare]:
    """Comparisons that, when ``test`` holds (``positive``) or fails, say a
    position is in the indices (``i in s``, ``i == k``; negated: ``i not in s``)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _membership_facts(test.operand, not positive)
        return
    if isinstance(test, ast.BoolOp):
        conjunctive = isinstance(test.op, ast.And) == positive
        if conjunctive:  # every operand holds (or, negated, fails)
            for value in test.values:
                yield from _membership_facts(value, positive)
            return
        # `not (s is not None and i not in s)`: when indices are given, the position is in them
        for value in test.values:
            others = [v for v in test.values if v is not value]
            facts = list(_membership_facts(value, positive))
            if facts and all(_only_about(other, facts[0]) for other in others):
                yield from facts
        return
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = test.ops[0]
        if (positive and isinstance(op, (ast.In, ast.Eq))) or (not positive and isinstance(op, (ast.NotIn, ast.NotEq))):
            yield test


def _only_about(test: ast.expr, compare: ast.Compare) -> bool:
    """A presence check of the indices themselves (`s is not None`, `s`, `len(s) > 0`)."""
    selection_names = {_text(compare.comparators[0])} - {""}
    names = [n for n in ast.walk(test) if isinstance(n, (ast.Name, ast.Attribute))]
    if not names:
        return False
    return any(_text(n) in selection_names for n in names) and all(
        _text(n) in selection_names or (isinstance(n, ast.Name) and n.id == "len")
        or _inside_selection(n, selection_names) for n in names)


def _inside_selection(node: ast.AST, names: set[str]) -> bool:
    parent = getattr(node, "_hl_parent", None)
    while isinstance(parent, ast.Attribute):
        if _text(parent) in names:
            return True
        parent = getattr(parent, "_hl_parent", None)
    return False


def _judge(ctx: FileContext, call: ast.Call, compare: ast.Compare, func: ast.AST,
           scope_node: ast.AST) -> tuple | None:
    left, right = compare.left, compare.comparators[0]
    candidates = [(left, right)]
    if isinstance(compare.ops[0], (ast.Eq, ast.NotEq)):
        candidates.append((right, left))
    for counter, selection in candidates:
        if not isinstance(counter, ast.Name):
            continue
        producer = _position_producer(counter.id, scope_node, compare)
        if producer is None:
            continue
        origin = _caller_supplied(ctx, selection, func)
        if origin is None:
            continue
        if _negatives_handled(ctx, selection, counter.id, func):
            continue
        return (compare, counter.id, producer, selection, origin)
    return None


# -- positions -----------------------------------------------------------------


def _position_producer(counter: str, node: ast.AST, compare: ast.Compare) -> ast.Call | None:
    """The ``enumerate``/``range`` call whose non-negative position ``counter``
    is, for a ``for`` loop around ``node`` or the comprehension ``compare`` filters."""
    parent = getattr(compare, "_hl_parent", None)
    while parent is not None and not isinstance(parent, FunctionNode + (ast.ClassDef, ast.Module)):
        if isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in parent.generators:
                producer = _positions(gen.target, gen.iter, counter)
                if producer is not None:
                    return producer
        parent = getattr(parent, "_hl_parent", None)
    child, parent = node, getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(parent, FunctionNode + (ast.ClassDef, ast.Module)):
        if isinstance(parent, (ast.For, ast.AsyncFor)) and any(child is s for s in parent.body):
            producer = _positions(parent.target, parent.iter, counter)
            if producer is not None:
                return producer
        child, parent = parent, getattr(parent, "_hl_parent", None)
    return None


def _positions(target: ast.expr, iterable: ast.expr, counter: str) -> ast.Call | None:
    if not isinstance(iterable, ast.Call) or not isinstance(iterable.func, ast.Name):
        return None
    name = iterable.func.id
    if name == "enumerate" and isinstance(target, ast.Tuple) and target.elts \
            and isinstance(target.elts[0], ast.Name) and target.elts[0].id == counter:
        start = iterable.args[1] if len(iterable.args) > 1 else next(
            (k.value for k in iterable.keywords if k.arg == "start"), None)
        return iterable if start is None or _non_negative_constant(start) else None
    if name == "range" and isinstance(target, ast.Name) and target.id == counter and iterable.args:
        if len(iterable.args) == 1 or _non_negative_constant(iterable.args[0]):
            step = iterable.args[2] if len(iterable.args) > 2 else None
            return iterable if step is None or _non_negative_constant(step) else None
    return None


def _non_negative_constant(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and isinstance(expr.value, int) and expr.value >= 0


# -- where the indices come from -----------------------------------------------


def _caller_supplied(ctx: FileContext, selection: ast.expr, func: ast.AST, depth: int = 0) -> str | None:
    """Words for the origin of ``selection`` when the caller chooses it: a
    parameter, a local copied from one, or ``self.x`` set from a parameter."""
    if isinstance(selection, ast.Name):
        if selection.id in _param_names(func):
            return f"the parameter `{selection.id}`"
        if depth < 2:
            values = _assigned_values(selection.id, func)
            if len(values) == 1:
                for name in _names_in(values[0]) + _self_attributes_in(values[0]):
                    origin = _caller_supplied(ctx, name, func, depth + 1)
                    if origin is not None:
                        return f"`{selection.id}`, from {origin}"
        return None
    if isinstance(selection, ast.Attribute) and isinstance(selection.value, ast.Name) \
            and selection.value.id == "self":
        cls = ctx.model.enclosing_class(selection)
        if cls is None:
            return None
        for method in _methods(cls.node):
            for value in _self_assignments(method, selection.attr):
                for name in _names_in(value):
                    if name.id in _param_names(method):
                        return f"`self.{selection.attr}`, set from `{method.name}`'s parameter `{name.id}`"
    return None


def _param_names(func: ast.AST) -> set[str]:
    args = getattr(func, "args", None)
    if args is None:
        return set()
    every = args.posonlyargs + args.args + args.kwonlyargs
    return {a.arg for a in every} - {"self", "cls"}


def _assigned_values(name: str, func: ast.AST) -> list[ast.expr]:
    values = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            values.append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name) \
                and node.target.id == name and node.value is not None:
            values.append(node.value)
    return values


def _names_in(expr: ast.expr) -> list[ast.Name]:
    """The variables ``expr`` reads (not the functions it calls)."""
    return [n for n in ast.walk(expr) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and not (isinstance(getattr(n, "_hl_parent", None), ast.Call) and n._hl_parent.func is n)]


def _self_attributes_in(expr: ast.expr) -> list[ast.Attribute]:
    return [n for n in ast.walk(expr) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self"]


def _methods(cls: ast.ClassDef) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _self_assignments(method: ast.AST, attr: str) -> list[ast.expr]:
    values = []
    for node in ast.walk(method):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) \
                        and len(target.elts) == len(node.value.elts):
                    pairs = list(zip(target.elts, node.value.elts))  # `self.model, self.ids = model, ids`
                values += [value for t, value in pairs if isinstance(t, ast.Attribute) and t.attr == attr
                           and isinstance(t.value, ast.Name) and t.value.id == "self"]
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Attribute) \
                and node.target.attr == attr and isinstance(node.target.value, ast.Name) \
                and node.target.value.id == "self":
            values.append(node.value)
    return values


# -- negative indices taken care of --------------------------------------------


def _negatives_handled(ctx: FileContext, selection: ast.expr, counter: str, func: ast.AST) -> bool:
    """Anything that maps negative indices to positions or rejects them, where
    the indices are read: the function (and, for ``self.x``, every method of
    the class), in the expressions that mention the indices or the position."""
    names = {_text(selection)}
    scopes: list[ast.AST] = [func]
    if isinstance(selection, ast.Name):
        values = _assigned_values(selection.id, func)
        for value in values:
            names.update(_text(n) for n in _names_in(value))
            if _normalizes(value):
                return True
    if isinstance(selection, ast.Attribute):
        cls = ctx.model.enclosing_class(selection)
        if cls is not None:
            scopes = list(_methods(cls.node))
            for method in scopes:
                for value in _self_assignments(method, selection.attr):
                    if _normalizes(value):
                        return True
    for scope in scopes:
        names |= _iterating_names(scope, names)  # `for k in layer_ids: if k < 0: raise ...`
        for expr in _reading_expressions(scope, names):
            if _normalizes(expr):
                return True
    # the test on the position itself accounts for negatives (`i - len(blocks) in ids`)
    for expr in _reading_expressions(func, {counter}):
        if isinstance(expr, (ast.Compare, ast.BoolOp, ast.UnaryOp)) and _normalizes(expr):
            return True
    return False


def _iterating_names(scope: ast.AST, names: set[str]) -> set[str]:
    """Names bound to each index in turn: loop and comprehension targets over the indices."""
    found: set[str] = set()
    for node in walk_tree(scope):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) and _text(node.iter) in names:
            found.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
    return found


def _reading_expressions(scope: ast.AST, names: set[str]) -> Iterator[ast.AST]:
    """The smallest statement-level expression around each mention of ``names``
    (an ``if``'s test, a loop's iterable, a simple statement)."""
    for node in walk_tree(scope):
        if isinstance(node, (ast.Name, ast.Attribute)) and _text(node) in names:
            yield _expression_of(node)


def _expression_of(node: ast.AST) -> ast.AST:
    child, parent = node, getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(parent, ast.stmt):
        child, parent = parent, getattr(parent, "_hl_parent", None)
    if isinstance(parent, (ast.If, ast.While, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
        return child  # the header expression, not the body
    return parent if parent is not None else child


def _normalizes(expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("len", "abs"):
            return True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return True  # `-1 in ids`, `n - k` spelled `-k + n`: the code thinks of negative indices
        if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Constant) and c.value == 0 and not isinstance(c.value, bool)
                for c in [node.left, *node.comparators]) and any(
                isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in node.ops):
            return True
    return False


def _text(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _text(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


# -- the module comes from a filtered comprehension --------------------------------


def _by_comprehension_filter(ctx: FileContext, reg, func: ast.AST) -> tuple | None:
    """``chosen = [b for i, b in enumerate(blocks) if i in ids]`` then
    ``for b in chosen: b.register_forward_hook(...)``."""
    receiver = reg.receiver
    if not isinstance(receiver, ast.Name):
        return None
    loop = _loop_binding(receiver.id, reg.call)
    if loop is None:
        return None
    source = loop.iter
    if isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) \
            and source.func.attr in ("values", "items") and not source.args:
        source = source.func.value
    comp = source
    if isinstance(source, ast.Name):
        values = _assigned_values(source.id, func)
        if len(values) != 1:
            return None
        comp = values[0]
    if not isinstance(comp, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        return None
    for gen in comp.generators:
        for test in gen.ifs:
            for compare in _membership_facts(test, positive=True):
                hit = _judge(ctx, reg.call, compare, func, scope_node=compare)
                if hit is not None:
                    return hit
    return None


def _loop_binding(name: str, node: ast.AST) -> ast.For | ast.AsyncFor | None:
    child, parent = node, getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(parent, FunctionNode + (ast.ClassDef, ast.Module)):
        if isinstance(parent, (ast.For, ast.AsyncFor)) and any(child is s for s in parent.body):
            targets = [parent.target] if isinstance(parent.target, ast.Name) else \
                list(parent.target.elts) if isinstance(parent.target, ast.Tuple) else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return parent
        child, parent = parent, getattr(parent, "_hl_parent", None)
    return None
