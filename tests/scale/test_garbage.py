"""A checked file's tree and analysis are freed once the file is done
(hooklint.static.garbage): nothing the next file does is needed for that."""

from __future__ import annotations

import ast
import gc
import weakref

import hooklint.static.checker as checker
from hooklint.rules import rule_entries
from hooklint.static.semantic import SemanticModel, _shared_nodes

SOURCE = (
    "import torch.nn as nn\n"
    "model = nn.Sequential(nn.Linear(2, 2))\n"
    "def hook(m, i, o):\n"
    "    return o * 2 + 1 if o is not None and not False else -o\n"
    "handle = model[0].register_forward_hook(hook)\n"
)


def test_the_tree_is_freed_after_its_check(monkeypatch):
    trees = []
    parse = checker.parse_for_target

    def keep_ref(*args, **kwargs):
        tree = parse(*args, **kwargs)
        trees.append(weakref.ref(tree))
        return tree

    monkeypatch.setattr(checker, "parse_for_target", keep_ref)
    codes = frozenset(r.code for r in rule_entries())
    result = checker.check_text("example.py", SOURCE, codes, summarize=True)
    assert result.parsed and trees
    gc.collect()
    assert trees[0]() is None, "something still reaches the tree of a checked file"
    assert gc.isenabled()


def test_the_shared_operator_nodes_keep_no_tree():
    """CPython gives every tree the same `ast.Add()`, `ast.Not()`...: linked
    to a parent like other nodes, they kept the last analysed tree alive."""
    tree = ast.parse(SOURCE)
    SemanticModel(tree)
    shared = _shared_nodes()
    assert any(getattr(node, "_hl_parent", None) is not None for node in shared), "the model links them"
    SemanticModel.release_shared()
    assert all(getattr(node, "_hl_parent", None) is None for node in shared)
    assert {type(n).__name__ for n in shared} >= {"Add", "Mult", "Not", "USub", "Eq", "IsNot", "Load", "Store"}
    # they are the very objects ast.parse puts in trees
    assert ast.parse("x + y").body[0].value.op in shared
