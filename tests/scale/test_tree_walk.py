"""hooklint.static.tree_walk: a module's nodes listed once, in ast.walk's order."""

from __future__ import annotations

import ast
import gc
import weakref

from hooklint.static.semantic import SemanticModel
from hooklint.static.tree_walk import WALK_ATTR, child_nodes, walk_tree
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


def test_child_nodes_are_iter_child_nodes_in_order():
    """tree_walk.child_nodes and the module list skip fields that never hold a
    node: every node of the fixtures (every kind of statement and expression
    they use, the shared Load/Store contexts included) gives ast's answer."""
    kinds = set()
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue  # the syntax-error fixtures
        for node in ast.walk(tree):
            kinds.add(type(node))
            assert [id(n) for n in child_nodes(node)] == [id(n) for n in ast.iter_child_nodes(node)], (path, node)
    assert {ast.Load, ast.Store, ast.alias, ast.arg, ast.keyword, ast.comprehension, ast.Constant} <= kinds


def test_a_generated_module_with_every_field_shape_is_walked_as_ast_walk():
    source = ("from a import (b as c)\nimport d.e as f\nglobal g\n@dec(x=1)\nasync def h(p: int = 2, *a, k=3, **kw) -> str:\n"
              "    nonlocal q\n    async for i in j: pass\n    async with m as n: pass\n    return f'{x!r:>{w}}'\n"
              "class K(B, metaclass=M):\n    y: int = 1\n    z = [i for i in r if i async for j in s]\n"
              "match v:\n    case [1, *rest] | {'k': _} if rest: pass\n    case C(a=1) as cc: pass\n"
              "try:\n    pass\nexcept* E as e:\n    pass\nlambda: (yield)\ndel a[1:2:3], b.c\n")
    tree = ast.parse(source)
    assert [id(n) for n in walk_tree(tree)] == [id(n) for n in ast.walk(tree)]
    for node in ast.walk(tree):
        assert [id(n) for n in child_nodes(node)] == [id(n) for n in ast.iter_child_nodes(node)], node


def test_walk_is_ast_walk_in_order_for_any_part():
    """tree_walk.walk (what walk_tree gives for a part of the tree) yields
    ast.walk's nodes in ast.walk's order, for every function, class and
    statement of the fixtures, and lazily (a walk stopped early stops)."""
    from hooklint.static.tree_walk import walk

    parts = 0
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.stmt, ast.Lambda)):
                assert [id(n) for n in walk(node)] == [id(n) for n in ast.walk(node)], (path, node.lineno)
                parts += 1
    assert parts > 1000
    tree = ast.parse("def f(x):\n    return x + 1\n")
    walker = walk(tree.body[0])
    assert next(walker) is tree.body[0]


def test_the_model_indexes_attribute_names_and_imports_as_a_walk_finds_them():
    from hooklint.static.semantic import SemanticModel

    for path in sorted(FIXTURES.rglob("*.py"))[:80]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, ValueError, UnicodeDecodeError):
            continue
        model = SemanticModel(tree)
        assert model.attribute_names == {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}, path
        walked = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                walked.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                walked.add(node.module.split(".")[0])
        packages = model.imported_packages
        assert packages == walked, path
        model.release()
        model._imported_packages = None
        assert model.imported_packages == walked, path  # after release: read from the tree again
    SemanticModel.release_shared()
