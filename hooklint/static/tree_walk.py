"""Every node of a file's tree, in ``ast.walk``'s order, listed once.

A dozen analyses each walk the whole module to find their nodes (classes,
calls, assignments): ``ast.walk`` is a generator built on ``iter_fields``,
and those walks were the largest single cost of the rules over the corpus of
bench/corpus.py (3.4 million nodes visited in the 534 files checked).  The
list is kept on the tree (``_hl_walk``) and goes with it: freed with the
file's other cyclic garbage, or by ``SemanticModel.release``.  Walks of a
part of the tree (a function, an expression) are not listed: they are
short, and lists for every part would hold the tree many times over.
"""

from __future__ import annotations

import ast
from collections import deque
from typing import Iterable, Iterator

WALK_ATTR = "_hl_walk"


def walk_tree(tree: ast.AST) -> Iterable[ast.AST]:
    """``ast.walk(tree)``: for a module, the same nodes in the same order from a
    list made by the first walk (the analysis never edits a tree)."""
    if type(tree) is not ast.Module:
        return walk(tree)
    nodes = tree.__dict__.get(WALK_ATTR)
    if nodes is None:
        nodes = _breadth_first(tree)
        setattr(tree, WALK_ATTR, nodes)
    return nodes


# Fields that never hold a node in a parsed tree (names, numbers, flags; a constant's value).  `ctx` does
# hold one (the shared Load/Store/Del), and ast.walk yields it.
_NO_NODE_FIELDS = frozenset({"id", "attr", "arg", "asname", "module", "level", "kind", "conversion", "is_async",
                             "simple", "type_comment", "value:Constant", "name:alias", "name:FunctionDef",
                             "name:AsyncFunctionDef", "name:ClassDef", "names:Global", "names:Nonlocal"})
_NODE_FIELDS: dict[type, tuple[str, ...]] = {}


def _node_fields(kind: type) -> tuple[str, ...]:
    fields = _NODE_FIELDS[kind] = tuple(
        name for name in kind._fields
        if name not in _NO_NODE_FIELDS and f"{name}:{kind.__name__}" not in _NO_NODE_FIELDS)
    return fields


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk(node)``: the same nodes in the same order (breadth first,
    children in field order), lazily, built on ``child_nodes`` rather than
    ``iter_child_nodes`` over ``iter_fields`` (about half the time: the walks of
    functions and expressions the analyses make cost a second of a cold run
    over the corpus of bench/corpus.py)."""
    todo = deque([node])
    popleft, extend, append = todo.popleft, todo.extend, todo.append
    fields_of, node_type, list_type = _NODE_FIELDS, ast.AST, list
    while todo:
        node = popleft()
        fields = fields_of.get(type(node))
        if fields is None:
            fields = _node_fields(type(node))
        for name in fields:
            value = getattr(node, name, None)
            if type(value) is list_type:
                if value:
                    extend([item for item in value if isinstance(item, node_type)])
            elif isinstance(value, node_type):
                append(value)
        yield node


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))``, without its generators: for the
    walks of a function's own body that must not enter nested scopes."""
    fields = _NODE_FIELDS.get(type(node))
    if fields is None:
        fields = _node_fields(type(node))
    out: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if type(value) is list:
            out += [item for item in value if isinstance(item, ast.AST)]
        elif isinstance(value, ast.AST):
            out.append(value)
    return out


def _breadth_first(tree: ast.AST) -> list[ast.AST]:
    """``list(ast.walk(tree))`` without its generators (``iter_child_nodes``
    over ``iter_fields``), a quarter of the time: the same breadth-first
    order, children in field order."""
    out = [tree]
    fields_of = _NODE_FIELDS
    node_type, list_type = ast.AST, list
    append, extend = out.append, out.extend
    i = 0
    while i < len(out):
        node = out[i]
        i += 1
        kind = type(node)
        fields = fields_of.get(kind)
        if fields is None:
            fields = _node_fields(kind)
        for name in fields:
            value = getattr(node, name, None)
            if type(value) is list_type:
                extend([item for item in value if isinstance(item, node_type)])
            elif isinstance(value, node_type):
                append(value)
    return out
