"""Forward pre-hooks that cannot work without a positional argument.

A forward pre-hook registered without ``with_kwargs=True`` receives only the
positional arguments of the call: a module called as ``block(hidden_states=x)``
gives it ``args == ()``.  This module says where a pre-hook's body needs
``args[0]`` (an index, an unpacking) with nothing handling the empty tuple,
or refuses the empty tuple outright (``if not args: raise ...``); and whether
the hooked module comes from the caller's model (its own parts, looked up by
name or by accessor), so that the library cannot know how it is called.  It
never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.core import Core
from hooklint.static.core import places as P
from hooklint.static.semantic import FunctionNode, SemanticModel, short_source

# Accessors of a model that hand back one of its parts.
_PART_ACCESSORS = frozenset({"get_input_embeddings", "get_output_embeddings", "get_submodule", "get_encoder",
                             "get_decoder", "get_base_model", "get_vision_tower", "get_image_features",
                             "__getattr__", "get_module"})
# Accessors of Hugging Face models (transformers' PreTrainedModel API): the part they return belongs to
# a model whose modules are commonly called with keyword arguments (`embeddings(pixel_values=...)`).
HF_ACCESSORS = frozenset({"get_input_embeddings", "get_output_embeddings", "get_encoder", "get_decoder",
                          "get_base_model", "get_vision_tower"})
# Parts of Hugging Face models that their parents call with keyword arguments only
# (`self.self_attn(hidden_states=...)` in Llama-style decoder layers, the vision tower of a VLM).
HF_KEYWORD_PARTS = frozenset({"self_attn", "cross_attn", "vision_tower", "vision_model", "language_model",
                              "text_model", "visual"})
_GRACEFUL_EXITS = (ast.Return, ast.Continue, ast.Pass)


@dataclass(frozen=True)
class PositionalNeed:
    node: ast.AST  # where the hook needs a positional argument (the index, the unpacking, the raise)
    text: str  # how to say it
    raises: bool  # the hook raises on an empty tuple on purpose


def positional_need(func: ast.AST, args: str) -> PositionalNeed | None:
    """Where ``func`` (a pre-hook whose positional-argument tuple is ``args``)
    cannot do without one, or None.  Reads under a test of the tuple's
    length or truth, after an early ``return`` on an empty tuple, or in a
    ``try`` that catches ``IndexError`` are fine."""
    body = func.body if isinstance(func.body, list) else [func.body]  # type: ignore[attr-defined]
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(node, ast.If) and _empty_test(node.test, args) is not None and node.body \
                    and isinstance(node.body[-1], ast.Raise):
                raised = node.body[-1]
                return PositionalNeed(raised, f"raises when `{args}` is empty (`{_short(node.test)}`)", True)
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_name(node.value, args) \
                    and _index(node.slice) is not None and not _guarded(node, args, func):
                return PositionalNeed(node, f"reads `{_short(node)}`", False)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], (ast.Tuple, ast.List)) and _is_name(node.value, args) \
                    and not _guarded(node, args, func):
                return PositionalNeed(node, f"unpacks `{args}` (`{_short(node)}`)", False)
    return None


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _index(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _empty_test(test: ast.AST, args: str) -> bool | None:
    """True: ``test`` holds when ``args`` is empty (``not args``, ``len(args) == 0``,
    ``len(args) < 1``); False: when it is not (``args``, ``len(args) > 0``,
    ``len(args)``); None: it says nothing about emptiness."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _empty_test(test.operand, args)
        return None if inner is None else not inner
    if _is_name(test, args) or _is_len(test, args):
        return False
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if _is_len(left, args) and isinstance(right, ast.Constant) and isinstance(right.value, int):
            n = right.value
            if isinstance(op, ast.Eq) and n == 0 or isinstance(op, ast.Lt) and n == 1 \
                    or isinstance(op, ast.LtE) and n == 0:
                return True
            if isinstance(op, (ast.Gt, ast.NotEq)) and n == 0 or isinstance(op, ast.GtE) and n == 1:
                return False
        if _is_name(left, args) and isinstance(op, (ast.Eq, ast.NotEq)) \
                and isinstance(right, ast.Tuple) and not right.elts:
            return isinstance(op, ast.Eq)
    if isinstance(test, ast.BoolOp):
        found = [_empty_test(v, args) for v in test.values]
        if isinstance(test.op, ast.And) and False in found:
            return False
        if isinstance(test.op, ast.Or) and True in found:
            return True
    return None


def _is_len(node: ast.AST, args: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
        and len(node.args) == 1 and _is_name(node.args[0], args)


def _guarded(node: ast.AST, args: str, func: ast.AST) -> bool:
    child: ast.AST = node
    cur = getattr(node, "_hl_parent", None)
    while cur is not None:
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test:
            positive = child in cur.body if isinstance(cur, (ast.If, ast.While)) else child is cur.body
            empty = _empty_test(cur.test, args)
            if empty is not None and empty != positive:
                return True  # runs only when the tuple is not empty
        if isinstance(cur, ast.BoolOp) and isinstance(cur.op, ast.And):
            index = next((i for i, v in enumerate(cur.values) if v is child), 0)
            if any(_empty_test(v, args) is False for v in cur.values[:index]):
                return True  # `args and args[0] ...`
        if isinstance(cur, ast.Try) and child in cur.body and any(
                h.type is None or {getattr(t, "id", getattr(t, "attr", "")) for t in
                                   (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])}
                & {"IndexError", "Exception", "BaseException", "LookupError", "ValueError"}
                for h in cur.handlers):
            return True
        for field in ("body", "orelse"):
            block = getattr(cur, field, None)
            if isinstance(block, list) and child in block:
                for earlier in block[:block.index(child)]:
                    if isinstance(earlier, ast.If) and _empty_test(earlier.test, args) is True and earlier.body \
                            and isinstance(earlier.body[-1], _GRACEFUL_EXITS + (ast.Raise,)):
                        return True  # an empty tuple leaves (a raise there is reported for itself)
        if cur is func:
            break
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


def _short(node: ast.AST) -> str:
    return short_source(node, width=50, odd="?")


# ------------------------------------------------------------------ the hooked module


def callers_module(model: SemanticModel, core: Core, expr: ast.AST, func: ast.AST | None,
                   depth: int = 0) -> str | None:
    """How ``expr`` is (a part of) the caller's model, in words, or None:
    the caller's object itself, a part reached by attribute or by an
    accessor (``model.get_input_embeddings()``, ``get_submodule(name)``),
    a part looked up by name (``getattr``, ``eval(f"model.{path}")``), or a
    name any of whose assignments in the function is one of those."""
    if depth > 4 or expr is None:
        return None
    place = core.places.of(expr, func)
    if place not in (P.UNKNOWN, P.NEW) and P.is_callers(place) and place != P.SELF \
            and core.belongs_to_caller(place, func):
        return f"`{_short(expr)}`, a part of the caller's model" if place.startswith(P.ELEMENT) or "." in place \
            else f"`{_short(expr)}`, the caller's model"
    if isinstance(expr, ast.Call):
        f = expr.func
        if isinstance(f, ast.Attribute) and f.attr in _PART_ACCESSORS:
            inner = callers_module(model, core, f.value, func, depth + 1)
            return f"`{_short(expr)}`, a part of the caller's model" if inner else None
        if isinstance(f, ast.Name) and f.id == "eval" and len(expr.args) == 1 and func is not None:
            root = _dotted_root(model, expr.args[0], depth)
            if root is not None and P.is_callers(f"p:{root}") and root in _params(func):
                return f"`{_short(expr)}`, a part of `{root}` looked up by name"
        return None
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope") and func is not None:
        scope = getattr(expr, "_hl_scope", None)
        while scope is not None and scope.kind == "comprehension":
            scope = scope.parent
        if scope is None or scope.node is not func:
            return None
        for binding in scope.bindings.get(expr.id, []):
            if binding.kind == "assign" and not binding.path and isinstance(binding.value, ast.AST):
                found = callers_module(model, core, binding.value, func, depth + 1)
                if found is not None:
                    return found.replace(f"`{_short(binding.value)}`",
                                         f"`{expr.id}` = `{_short(binding.value)}`", 1)
    return None


def _params(func: ast.AST) -> set[str]:
    args = getattr(func, "args", None)
    if args is None:
        return set()
    return {a.arg for a in list(args.posonlyargs) + list(args.args) + list(args.kwonlyargs)}


def _dotted_root(model: SemanticModel, expr: ast.AST, depth: int) -> str | None:
    """The first name of a dotted path built as text: ``"model." + path``,
    ``f"model.{path}"``, or a name assigned one of those."""
    if depth > 6:
        return None
    text = None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        text = expr.value
    elif isinstance(expr, ast.JoinedStr) and expr.values and isinstance(expr.values[0], ast.Constant):
        text = str(expr.values[0].value)
    elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _dotted_root(model, expr.left, depth + 1)
    elif isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        bindings = model.bindings_at(expr)
        if len(bindings) == 1 and bindings[0].kind == "assign" and isinstance(bindings[0].value, ast.AST):
            return _dotted_root(model, bindings[0].value, depth + 1)
        return None
    if text is None or "." not in text:
        return None
    root = text.split(".", 1)[0]
    return root if root.isidentifier() else None



def keyword_call_evidence(model: SemanticModel, core: Core, expr: ast.AST, func: ast.AST | None) -> str | None:
    """Why the module at ``expr`` is likely called with keyword arguments
    only, in words, or None: the file calls that same object with keyword
    arguments only (``model(**batch)``, ``model(input_ids=x)``); it is reached
    through a Hugging Face accessor (``get_input_embeddings()``); or its
    path names a part Hugging Face models call with keywords (``.self_attn``,
    ``.vision_tower``)."""
    place = core.places.of(expr, func)
    if place not in (P.UNKNOWN, P.NEW) and func is not None:
        for call in _calls_in(func):
            if call.args or not call.keywords or call is expr:
                continue
            if core.places.of(call.func, func) == place:
                return f"this file calls it with keyword arguments only (`{_short(call)}`, line {call.lineno})"
    found = _hf_path(model, expr, 0)
    return found


def _calls_in(func: ast.AST) -> list[ast.Call]:
    out = []
    for node in ast.walk(func):
        if isinstance(node, ast.Call):
            out.append(node)
    return out


def _hf_path(model: SemanticModel, expr: ast.AST, depth: int) -> str | None:
    if depth > 4:
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr in HF_ACCESSORS:
            return f"it is the part `{expr.func.attr}()` returns, in a Hugging Face model"
        return _hf_path(model, expr.func.value, depth + 1)
    if isinstance(expr, ast.Attribute):
        if expr.attr in HF_KEYWORD_PARTS:
            return f"`.{expr.attr}` is a part Hugging Face models call with keyword arguments"
        return _hf_path(model, expr.value, depth + 1)
    if isinstance(expr, ast.Subscript):
        return _hf_path(model, expr.value, depth + 1)
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        scope = expr._hl_scope  # type: ignore[attr-defined]
        while scope is not None and scope.kind == "comprehension":
            scope = scope.parent
        if scope is None:
            return None
        for binding in scope.bindings.get(expr.id, []):
            if binding.kind == "assign" and not binding.path and isinstance(binding.value, ast.AST) \
                    and binding.value is not expr:
                found = _hf_path(model, binding.value, depth + 1)
                if found is not None:
                    return found
    return None


def part_through_helper(model: SemanticModel, core: Core, expr: ast.AST, func: ast.AST | None) -> str | None:
    """How ``expr`` is an element of what a helper returns when given the
    caller's model (``modules = self.awq_model.get_model_layers(self.model)``,
    then ``modules[0]``), in words, or None.  The helper's body is not seen
    (a method of an object of another file, one per model family): what it
    returns is taken as parts of the model it was given, which is what a
    capture put in one of its slots stands in for."""
    base = expr
    while isinstance(base, (ast.Subscript, ast.Attribute)):
        base = base.value
    if expr is base or not isinstance(base, ast.Name) or func is None:
        return None
    scope = getattr(base, "_hl_scope", None)
    while scope is not None and scope.kind == "comprehension":
        scope = scope.parent
    if scope is None or scope.node is not func:
        return None
    for binding in scope.bindings.get(base.id, []):
        call = binding.value if binding.kind == "assign" and not binding.path else None
        if not isinstance(call, ast.Call):
            continue
        for arg in list(call.args) + [k.value for k in call.keywords]:
            if callers_module(model, core, arg, func) is not None:
                return (f"`{_short(expr)}`, a part of the caller's model `{_short(arg)}` as "
                        f"`{base.id} = {_short(call)}` returns it")
    return None
