"""hooklint.static.tree_walk: a module's nodes listed once, in ast.walk's order."""

from __future__ import annotations

import ast
import gc
import weakref

from hooklint.static.semantic import SemanticModel
from hooklint.static.tree_walk import WALK_ATTR, walk_tree
from tests.conftest import FIXTURES


def test_the_list_is_ast_walk_in_order_and_made_once():
    for path in sorted(FIXTURES.rglob("*.py"))[:40]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        first = walk_tree(tree)
        assert [id(n) for n in first] == [id(n) for n in ast.walk(tree)], path
        assert walk_tree(tree) is first


def test_a_part_of_the_tree_is_walked_not_listed():
    tree = ast.parse("def f(x):\n    return x + 1\n")
    func = tree.body[0]
    assert [id(n) for n in walk_tree(func)] == [id(n) for n in ast.walk(func)]
    assert WALK_ATTR not in func.__dict__


def test_the_list_goes_with_the_tree():
    tree = ast.parse("import torch\nm = torch.nn.Linear(2, 2)\nm.register_forward_hook(print)\n")
    model = SemanticModel(tree)
    walk_tree(tree)
    model.release()
    SemanticModel.release_shared()
    assert WALK_ATTR not in tree.__dict__
    walk_tree(tree)
    ref = weakref.ref(tree)
    del tree, model
    gc.collect()
    assert ref() is None
