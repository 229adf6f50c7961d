"""Forward hooks that judge a call by its positional arguments alone.

A forward hook or forward pre-hook registered without ``with_kwargs=True``
gets only the positional arguments of the call: ``layer(hidden_states=x)``
hands it ``()``.  A hook that *classifies* the call by that tuple (its
length, whether it is empty, the type of its elements: ``inputs[0] if
len(inputs) == 1 else inputs``, ``isinstance(args[0], TensorDict)``)
misreads every keyword call, silently.  This module says where a hook body
(or a helper of the file it hands the tuple to) does that, and why the
hooked module may be called with keyword arguments: its class's ``forward``
(or a subclass's, in the file) takes ``**kwargs``.  It never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import FunctionNode, SemanticModel, positional_params
from hooklint.static.tree_walk import walk_tree


@dataclass(frozen=True)
class PositionalJudgement:
    node: ast.AST  # in the hook: the test, or the call of the helper that tests
    text: str  # how to say it


def judges_by_positional(model: SemanticModel, hook: ast.AST, name: str,
                         depth: int = 0) -> PositionalJudgement | None:
    """Where ``hook`` tests the tuple ``name`` (length, emptiness, the type of
    it or of its elements), directly or in a function of the file it passes
    ``name`` to (two levels), or None."""
    if depth > 2:
        return None
    for node in executed_nodes(hook):
        if _in_loud_guard(node):
            continue  # `if len(args) != 1: raise ...` refuses a call it cannot read: loud, not silent
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            first = node.args[0]
            if node.func.id == "len" and _is_name(first, name):
                return PositionalJudgement(node, f"tests `{_text(node)}`")
            if node.func.id == "isinstance" and _element_of(first, name):
                # `isinstance(args, tuple)` only normalizes (it always is one); the type of an element classifies
                return PositionalJudgement(node, f"tests `{_text(node)}`")
        if isinstance(node, (ast.If, ast.While, ast.IfExp)) and _truth_test(node.test, name) \
                and not (isinstance(node, ast.If) and node.body and isinstance(node.body[-1], ast.Raise)):
            return PositionalJudgement(node.test, f"tests whether `{name}` is empty (`{_text(node.test)}`)")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and _is_name(node.operand, name):
            return PositionalJudgement(node, f"tests whether `{name}` is empty (`{_text(node)}`)")
        if isinstance(node, ast.Call):
            for index, arg in enumerate(node.args):
                if not _is_name(arg, name):
                    continue
                callee, offset = _callee(model, node, hook)
                if callee is None:
                    continue
                params = positional_params(callee)[offset:]
                if index < len(params) and judges_by_positional(model, callee, params[index], depth + 1):
                    return PositionalJudgement(node, f"hands `{name}` to `{callee.name}`, which tests it "
                                                     f"(`{_text(node)}`)")
    return None


def _in_loud_guard(node: ast.AST) -> bool:
    cur, child = getattr(node, "_hl_parent", None), node
    while cur is not None and not isinstance(cur, ast.stmt):
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return isinstance(cur, ast.If) and child is cur.test and bool(cur.body) and isinstance(cur.body[-1], ast.Raise)


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _element_of(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Subscript) and _is_name(node.value, name)


def _truth_test(test: ast.AST, name: str) -> bool:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _is_name(test.operand, name)
    if isinstance(test, ast.BoolOp):
        return any(_truth_test(v, name) for v in test.values)
    return _is_name(test, name)


def _callee(model: SemanticModel, call: ast.Call, hook: ast.AST) -> tuple[ast.AST | None, int]:
    """A function of the file the call runs, and how many leading parameters
    the call does not pass (``self`` of a method called through ``self.``)."""
    func = call.func
    if isinstance(func, ast.Name):
        bindings = model.bindings_at(func)
        if len(bindings) == 1 and bindings[0].kind == "def" and isinstance(bindings[0].node, FunctionNode):
            return bindings[0].node, 0
        return None, 0
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        cls = _enclosing_class(hook)
        if cls is not None:
            for node in cls.body:
                if isinstance(node, FunctionNode) and node.name == func.attr:
                    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
                    return node, 0 if static else 1
    return None, 0


def _enclosing_class(node: ast.AST) -> ast.ClassDef | None:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, ast.ClassDef):
        cur = getattr(cur, "_hl_parent", None)
    return cur


def _text(node: ast.AST) -> str:
    from hooklint.static.semantic import short_source
    return short_source(node, width=50, odd="?")


# ------------------------------------------------------------------ the hooked module

_LOOKUPS = frozenset({"getattr", "get_submodule", "get_module", "get_layer", "get_parameter", "attrgetter"})


def looked_up_by_name(model: SemanticModel, expr: ast.AST, func: ast.AST | None, depth: int = 0) -> str | None:
    """``expr`` is a module looked up by a name or index the code is given
    (``model.get_submodule(name)``, ``get_module(model, layer)``,
    ``getattr(model, attr)``, ``dict(model.named_modules())[name]``,
    ``model.layers[i]``), or a name assigned one in the function: the
    library cannot know which layer, so not how it is called.  In words."""
    if depth > 3 or expr is None:
        return None
    if isinstance(expr, ast.Call):
        called = expr.func.id if isinstance(expr.func, ast.Name) else \
            expr.func.attr if isinstance(expr.func, ast.Attribute) else ""
        keys = expr.args[1:] if isinstance(expr.func, ast.Name) else expr.args
        if called in _LOOKUPS and any(_given_key(k) for k in keys):
            return f"`{_text(expr)}`, a layer looked up by the name it is given"
        return None
    if isinstance(expr, ast.Subscript) and _given_key(expr.slice):
        return f"`{_text(expr)}`, a layer looked up by the key it is given"
    if isinstance(expr, ast.Name) and func is not None:
        scope = getattr(expr, "_hl_scope", None)
        while scope is not None and scope.kind == "comprehension":
            scope = scope.parent
        if scope is None or scope.node is not func:
            return None
        for binding in scope.bindings.get(expr.id, []):
            if binding.kind == "assign" and not binding.path and isinstance(binding.value, ast.AST) \
                    and binding.value is not expr:
                found = looked_up_by_name(model, binding.value, func, depth + 1)
                if found is not None:
                    return found
    return None


def _given_key(key: ast.AST) -> bool:
    """A key the code does not fix: a name, an attribute, an f-string (not a literal)."""
    return isinstance(key, (ast.Name, ast.Attribute, ast.JoinedStr, ast.BinOp))


def own_class_takes_kwargs(tree: ast.Module, registration: ast.AST) -> str | None:
    """For a registration on ``self``: a ``forward`` of the class holding it, or
    of one of its subclasses in the file, that takes ``**kwargs``, in words."""
    cls = _enclosing_class(registration)
    if cls is None:
        return None
    classes = [node for node in walk_tree(tree) if isinstance(node, ast.ClassDef)]
    family = {cls.name}
    grew = True
    while grew:
        grew = False
        for other in classes:
            if other.name not in family and any(_base_name(b) in family for b in other.bases):
                family.add(other.name)
                grew = True
    for other in classes:
        if other.name not in family:
            continue
        for node in other.body:
            if isinstance(node, FunctionNode) and node.name == "forward" and node.args.kwarg is not None:
                return f"`{other.name}.forward` takes `**{node.args.kwarg.arg}`"
    return None


def _base_name(base: ast.AST) -> str | None:
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None
