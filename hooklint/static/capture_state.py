"""State a hook or capture keeps across calls, keyed by name.

A forward hook, a pre-hook and a function stored as a module's ``forward``
run once per call of the module (once per calibration sample, per step).
When one of them keeps a dict of per-key records across calls, the first
call creates each entry and the later calls extend it: the entry must have
the shape the later calls assume on *every* path that creates it.  A first
call that stores the value itself (``None``, a tensor) on one path, where
later calls ``.append`` to the entry, fails on the first later call that
reaches the append (``AttributeError: 'NoneType' object has no attribute
'append'``), and only for the inputs that took that path first.  Never
imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import child_nodes, walk_tree

_EXTENDERS = frozenset({"append", "extend"})
_SCOPES = FunctionNode + (ast.Lambda, ast.ClassDef)


@dataclass(frozen=True)
class FirstValueThenAppend:
    store: ast.Assign  # the first call's store of a bare value
    extend: ast.Call  # the later calls' `.append` / `.extend` on the same entry
    entry: str  # the entry as written (`self.inputs[name][key]`)


def _own(func: ast.AST):
    stack = child_nodes(func)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(child_nodes(node))


def _first_call_test(test: ast.AST) -> tuple[str, str] | None:
    """(key, dict) of ``key not in d`` / ``key not in d.keys()``."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn):
        container = test.comparators[0]
        if isinstance(container, ast.Call) and isinstance(container.func, ast.Attribute) \
                and container.func.attr == "keys" and not container.args:
            container = container.func.value
        return ast.unparse(test.left), ast.unparse(container)
    return None


def _builds_sequence(value: ast.AST) -> bool:
    if isinstance(value, (ast.List, ast.ListComp, ast.Tuple)):
        return True
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("list", "deque"):
        return True
    if isinstance(value, ast.BinOp):
        return _builds_sequence(value.left) or _builds_sequence(value.right)
    if isinstance(value, ast.IfExp):
        return _builds_sequence(value.body) and _builds_sequence(value.orelse)
    return False


def _fresh(value: ast.AST) -> bool:
    return isinstance(value, (ast.Dict, ast.DictComp, ast.List, ast.ListComp)) or isinstance(value, ast.Call) \
        and isinstance(value.func, ast.Name) and value.func.id in ("dict", "defaultdict", "OrderedDict", "list")


def _may_hold_first_call_test(func: ast.AST) -> bool:
    """Can ``func``'s own nodes hold an ``if k not in d: ... else: ...``?
    Answered from the file's list of such ``if`` statements (made once per
    tree from its node list, kept on it), going up from each to the first
    function, lambda or class: the rule asks about every hook body of a file
    (1,529 over the corpus of bench/corpus.py), nearly all without one, and
    walking each cost more than the rest of the rule.  True when the parent
    links are missing (the body is walked then)."""
    root = func
    while (up := getattr(root, "_hl_parent", None)) is not None:
        root = up
    if type(root) is not ast.Module or root is func:
        return True
    found = root.__dict__.get("_hl_not_in_ifs")
    if found is None:
        found = []
        for node in walk_tree(root):
            if isinstance(node, ast.If) and node.orelse and isinstance(node.test, ast.Compare) \
                    and len(node.test.ops) == 1 and isinstance(node.test.ops[0], ast.NotIn):
                owner = getattr(node, "_hl_parent", None)
                while owner is not None and not isinstance(owner, _SCOPES):
                    owner = getattr(owner, "_hl_parent", None)
                found.append(owner)
        root._hl_not_in_ifs = found  # type: ignore[attr-defined]
    return any(owner is func for owner in found)


def _locals(func: ast.AST) -> set[str]:
    """Names bound in ``func`` to a container made in this call (``records = {}``);
    ``records = state.setdefault(name, {})`` reaches state that outlives it."""
    names = set()
    for node in _own(func):
        if isinstance(node, ast.Assign) and _fresh(node.value):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
    return names


def _kinds(value: ast.AST) -> set[str]:
    """"seq" when the stored value is a list made here, "bare" when it is the value itself."""
    if isinstance(value, ast.IfExp):
        return _kinds(value.body) | _kinds(value.orelse)
    return {"seq"} if _builds_sequence(value) else {"bare"}


def _root(text_node: ast.AST) -> str | None:
    node = text_node
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _mentions(test: ast.AST, entry: str) -> bool:
    return any(isinstance(n, ast.expr) and ast.unparse(n) == entry for n in ast.walk(test))


def _guarded(call: ast.AST, entry: str, stop: ast.AST) -> bool:
    """A test of the entry itself before the extension (``if d[k] is None:
    d[k] = []``, ``isinstance(d[k], list)``) on the way up to ``stop``."""
    child, cur = call, getattr(call, "_hl_parent", None)
    while cur is not None:
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test and _mentions(cur.test, entry):
            return True
        for field in ("body", "orelse"):
            block = getattr(cur, field, None)
            if isinstance(block, list) and child in block:
                for earlier in block[:block.index(child)]:
                    if isinstance(earlier, ast.If) and _mentions(earlier.test, entry):
                        return True
        if cur is stop:
            break
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


def _operands(test: ast.AST) -> set[str]:
    """The whole names and attribute paths a test reads (`self.flag`, `data`), not their prefixes;
    of an `or`, only those every alternative reads (any one of them selects the branch)."""
    if isinstance(test, ast.BoolOp):
        parts = [_operands(v) for v in test.values]
        return set.intersection(*parts) if isinstance(test.op, ast.Or) else set().union(*parts)
    out = set()
    for n in ast.walk(test):
        parent = getattr(n, "_hl_parent", None)
        if isinstance(n, (ast.Attribute, ast.Name)) and not isinstance(parent, ast.Attribute):
            out.add(ast.unparse(n))
    return out


def _conditions(node: ast.AST, stop: ast.AST) -> set[str]:
    """What the tests that select ``node`` (below ``stop``) read: a bare store
    and an append selected by the same flag (`[x] if self.per_sample else x`,
    then `elif self.per_sample: d[k].append`) never meet."""
    out: set[str] = set()
    child, cur = node, getattr(node, "_hl_parent", None)
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):
        out |= _operands(node.value.test)
    while cur is not None and cur is not stop:
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test:
            out |= _operands(cur.test)
        child, cur = cur, getattr(cur, "_hl_parent", None)
    if isinstance(stop, ast.If) and child in stop.orelse:
        pass  # the `key not in records` test itself is shared by both sides
    return out


def first_value_then_append(func: ast.AST) -> list[FirstValueThenAppend]:
    """In ``func`` (a hook or capture body): ``if k not in d:`` branches that
    store a bare value in ``d[k]`` on some path while the ``else`` branch
    appends to ``d[k]`` with nothing testing the entry first; ``d`` outlives
    the call (not a local of ``func``)."""
    out: list[FirstValueThenAppend] = []
    if not _may_hold_first_call_test(func):
        return out
    tests = [(node, found) for node in _own(func) if isinstance(node, ast.If) and node.orelse
             and (found := _first_call_test(node.test)) is not None]
    if not tests:
        return out  # most bodies: no `if k not in d: ... else: ...`, and no need for their locals
    local_names = _locals(func)
    for node, found in tests:
        key, container = found
        entry = f"{container}[{key}]"
        root = _root(node.test.comparators[0])
        if root is None or root in local_names:
            continue  # a dict made in this call: nothing carries over to the next one
        stores = [n for block in node.body for n in ast.walk(block)
                  if isinstance(n, ast.Assign) and len(n.targets) == 1 and ast.unparse(n.targets[0]) == entry]
        bare = [s for s in stores if "bare" in _kinds(s.value)]
        if not bare or not any("seq" in _kinds(s.value) for s in stores):
            continue  # every path stores the value itself (a record, not a list), or none does
        bare_conditions = set().union(*(_conditions(s, node) for s in bare))
        for block in node.orelse:
            for sub in ast.walk(block):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in _EXTENDERS \
                        and ast.unparse(sub.func.value) == entry and not _guarded(sub, entry, node) \
                        and not (_conditions(sub, node) & bare_conditions - {key}):
                    out.append(FirstValueThenAppend(bare[0], sub, entry))
                    break
            else:
                continue
            break
    return out
