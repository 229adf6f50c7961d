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


def _full_walk_child_loops(model: SemanticModel) -> dict[ast.AST, list[ast.AST]]:
    """What recursive_walks walked before the index: every loop of each
    function's own nodes over a call `_walked_param` can accept, in walk order."""
    out: dict[ast.AST, list[ast.AST]] = {}
    for func in model.functions:
        if not isinstance(func, FunctionNode):
            continue
        loops = [n for n in walks._own_nodes(func) if walks._loop_parts(n)[0] is not None
                 and isinstance(walks._loop_parts(n)[0], ast.Call)
                 and isinstance(walks._loop_parts(n)[0].func, ast.Attribute)
                 and walks._loop_parts(n)[0].func.attr in (*walks._CHILD_ITERATORS, *walks._MODULES_DICT)]
        if loops:
            out[func] = loops
    return out


def test_child_loops_are_the_loops_a_walk_of_each_function_meets_in_its_order():
    """recursive_walks looks only at the loops _child_loops lists (found from
    the calls the model indexes): for every function, the same loops over
    `x.children()` and the like as the walk of its own nodes, in the same
    order (the first walk found ends the function's search)."""
    checked = ordered = 0
    for tree, model in _trees():
        indexed = walks._child_loops(model)
        walked = _full_walk_child_loops(model)
        assert set(indexed) == set(walked)
        for func, loops in walked.items():
            assert indexed[func] == loops, (func.name, func.lineno)
            checked += 1
            ordered += len(loops) > 1
    assert checked >= 3 and ordered >= 1


def _full_walk_loop_assignments(tree: ast.Module) -> list[tuple[ast.AST, ast.AST, list[ast.AST]]]:
    """What overwritten_handles walked before: each scope's own loops, each loop's own `x = call(...)`."""
    out = []
    scopes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for scope in scopes:
        for loop in handle_overwrite._own_nodes(scope):
            if not isinstance(loop, handle_overwrite._LOOPS):
                continue
            assigns = [n for n in handle_overwrite._own_nodes(loop) if isinstance(n, ast.Assign)
                       and len(n.targets) == 1 and isinstance(n.value, ast.Call)]
            if assigns:
                out.append((scope, loop, assigns))
    return out


class _Context:
    """The two things _loop_assignments reads of a FileContext."""

    def __init__(self, tree: ast.Module, model: SemanticModel):
        self.tree, self.model = tree, model


def test_loop_assignments_are_those_a_walk_of_each_scope_meets_in_its_order():
    checked = 0
    for tree, model in _trees():
        indexed = handle_overwrite._loop_assignments(_Context(tree, model))  # type: ignore[arg-type]
        walked = _full_walk_loop_assignments(tree)
        assert indexed == walked
        checked += len(walked)
    assert checked >= 5


def test_files_without_an_apply_walker_call_have_no_apply_walker():
    """aliased_submodules walks the methods of module classes only in files
    where _may_walk_with_apply finds a call of either shape anywhere."""
    from hooklint.static.values import Inference

    found = 0
    for tree, model in _trees():
        inference = Inference(model)
        if walks._may_walk_with_apply(model, inference):
            found += 1
            continue
        for info in model.classes.values():
            assert walks._apply_walkers(model, inference, info) == []
    assert found >= 1


def test_bodies_reading_only_names_the_model_binds_have_no_unbound_use():
    from hooklint.static import undefined_names

    checked = unbound = 0
    for tree, model in _trees():
        for func in model.functions:
            uses = undefined_names.unbound_uses(tree, func)
            if not undefined_names.may_read_unbound(model, func):
                assert uses == [], getattr(func, "name", "<lambda>")
                checked += 1
            unbound += bool(uses)
    assert checked >= 50 and unbound >= 1


def _bindings_at_in_full(model: SemanticModel, name_node: ast.Name):
    """SemanticModel.bindings_at without its shortcut for a name bound once."""
    from hooklint.static.semantic import _inside_own_assignment

    scope = model.scope_of(name_node)
    found = model.lookup(name_node.id, scope)
    if not found:
        return []
    if found[0].scope is scope and scope.kind != "class":
        before = [b for b in found if b.lineno and b.lineno <= name_node.lineno and b.kind != "param"
                  and not _inside_own_assignment(name_node, b)]
        params = [b for b in found if b.kind == "param"]
        if before:
            return [before[-1]]
        if params:
            return params
    return found


def test_bindings_of_a_name_bound_once_are_that_binding_wherever_it_is_read():
    checked = 0
    for tree, model in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and hasattr(node, "_hl_scope"):
                assert model.bindings_at(node) == _bindings_at_in_full(model, node)
                checked += 1
    assert checked >= 1000


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
