"""Shortcuts the static analyses take to skip what cannot hold an answer
(functions without the calls, scopes without loops, bodies without the
test): each skips exactly what the full walk would find nothing in."""

from __future__ import annotations

import ast

from hooklint.static import capture_state, handle_overwrite, walks
from hooklint.static.semantic import FunctionNode, SemanticModel
from tests.conftest import FIXTURES

EXTRA = '''
import torch.nn as nn

class Hooked(nn.Module):
    records = {}

    def hook(self, mod, inp, out):
        if mod not in self.records:
            self.records[mod] = None
        else:
            self.records[mod].append(out)

        def inner(key):
            if key not in self.records:
                self.records[key] = []
            else:
                self.records[key].append(1)
        return inner

def walk(module, seen=None):
    for child in module.children():
        walk(child)
        module.register_forward_hook(print)

def nested(model):
    def visit(m):
        for name, sub in m.named_children():
            visit(sub)
    for block in model.blocks:
        h = block.register_forward_hook(print)
    class Local:
        for i in range(3):
            pass
    return visit

for layer in layers:
    handle = layer.register_forward_hook(print)
'''


def _trees():
    sources = [EXTRA]
    for path in sorted(FIXTURES.rglob("*.py")):
        try:
            sources.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError):
            continue
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        yield tree, SemanticModel(tree)


def test_functions_calling_a_child_iterator_are_all_the_walkers_candidates():
    """recursive_walks looks only at the functions _functions_calling lists:
    every function whose own loop iterates `x.children()` and the like is
    among them."""
    checked = 0
    for tree, model in _trees():
        listed = walks._functions_calling(model, (*walks._CHILD_ITERATORS, *walks._MODULES_DICT))
        for func in model.functions:
            if not isinstance(func, FunctionNode):
                continue
            loops = [n for n in walks._own_nodes(func) if walks._loop_parts(n)[0] is not None
                     and isinstance(walks._loop_parts(n)[0], ast.Call)
                     and isinstance(walks._loop_parts(n)[0].func, ast.Attribute)
                     and walks._loop_parts(n)[0].func.attr in (*walks._CHILD_ITERATORS, *walks._MODULES_DICT)]
            if loops:
                checked += 1
                assert func in listed, (func.name, func.lineno)
    assert checked >= 3


def test_scopes_with_loops_are_every_scope_whose_own_walk_meets_a_loop():
    checked = 0
    for tree, model in _trees():
        looping = handle_overwrite._scopes_with_loops(tree)
        assert looping is not None
        scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for scope in scopes:
            has = any(isinstance(n, handle_overwrite._LOOPS) for n in handle_overwrite._own_nodes(scope))
            assert has == (scope in looping), getattr(scope, "name", "<module>")
            checked += has
    assert checked >= 3
    bare = ast.parse("for i in x:\n    pass\n")  # no model: no parent links, every scope is walked
    assert handle_overwrite._scopes_with_loops(bare) is None


def test_bodies_skipped_by_the_first_call_index_hold_no_first_call_test():
    checked = 0
    for tree, model in _trees():
        for func in model.functions:
            has = any(isinstance(n, ast.If) and n.orelse and capture_state._first_call_test(n.test) is not None
                      for n in capture_state._own(func))
            if has:
                checked += 1
                assert capture_state._may_hold_first_call_test(func), getattr(func, "name", "<lambda>")
            elif not capture_state._may_hold_first_call_test(func):
                assert capture_state.first_value_then_append(func) == []
    assert checked >= 2
    tree = ast.parse(EXTRA)  # without a model: no index, every body is walked
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "hook")
    assert capture_state._may_hold_first_call_test(func)
