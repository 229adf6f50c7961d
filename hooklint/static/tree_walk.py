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
from typing import Iterable

WALK_ATTR = "_hl_walk"


def walk_tree(tree: ast.AST) -> Iterable[ast.AST]:
    """``ast.walk(tree)``: for a module, the same nodes in the same order from a
    list made by the first walk (the analysis never edits a tree)."""
    if type(tree) is not ast.Module:
        return ast.walk(tree)
    nodes = tree.__dict__.get(WALK_ATTR)
    if nodes is None:
        nodes = list(ast.walk(tree))
        setattr(tree, WALK_ATTR, nodes)
    return nodes
