"""Regressions found by running hooklint over the real-code corpus
(bench/corpus.py, docs/real-world.md) that are not rule false positives
(those are fixtures: fixtures/rules/regressions_*.py)."""

from __future__ import annotations

import ast

import pytest

from hooklint.config import Config

# A model file as many packages write them: optional imports in a top-level
# try and a version check in a top-level if.
MODEL_WITH_GUARDS = """
import sys
import torch
import torch.nn as nn

try:
    import numpy
except ImportError:
    numpy = None

if sys.version_info >= (3, 8):
    from typing import Literal
else:
    Literal = None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.fc2 = nn.Linear(3, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))
"""


def test_kept_top_level_if_and_try_still_compile():
    """The graph layer keeps a file's definitions, rebuilding top-level `if`
    and `try` blocks; the rebuilt nodes lacked end positions and compile()
    refused them, which skipped 531 of the corpus's 5,360 files with
    "importing its definitions failed: ValueError: AST node line range (13, 1)
    is not valid", blaming the user's code."""
    from hooklint.graph.sanitize import definitions_only

    tree = definitions_only(ast.parse(MODEL_WITH_GUARDS)).tree
    namespace: dict = {}
    exec(compile(tree, "model.py", "exec"), namespace)  # noqa: S102 - definitions of the snippet above
    assert {"Net", "numpy", "Literal", "sys"} <= set(namespace)


@pytest.mark.torch
def test_a_model_file_with_guards_is_analysed(tmp_path):
    pytest.importorskip("torch")
    from hooklint.graph.provider import provide_graph_facts

    path = tmp_path / "model.py"
    path.write_text(MODEL_WITH_GUARDS, encoding="utf-8")
    facts, notices = provide_graph_facts([str(path)], Config(root=tmp_path), use_cache=False, timeout=60)
    assert not [n for n in notices if "failed" in n.message], notices
    assert facts.get(str(path)) is not None
