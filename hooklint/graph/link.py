"""From a hook registration in the source to the graph facts of the module it hooks.

Rules call :func:`modules_for` with the receiver of ``register_*_hook``
(``net.fc3``, ``self.f1``, ``conv``, the parameter of a function passed to
``net.apply``) and get every ``(model, module)`` pair of ``ctx.graph`` that
expression can denote: also ``net.layer4`` when ``net = Net(10)`` builds a
class imported from another file of the project (the model the analysis of
this file built from that call).  An empty list means "not known": rules then fall back
to their static behaviour.  No torch here: this runs in the static process.
"""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING

from hooklint.graph.facts import FileFacts, ModelFacts, ModuleFacts
from hooklint.static.values import ModuleValue

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

Pair = tuple[ModelFacts, ModuleFacts]


def graph_facts(ctx: "FileContext") -> FileFacts | None:
    return ctx.graph if isinstance(ctx.graph, FileFacts) else None


def _split(expr: ast.AST) -> tuple[ast.AST, list[str]] | None:
    """``net.layer1[0].conv1`` -> (``net``, ["layer1", "0", "conv1"])."""
    parts: list[str] = []
    cur = expr
    while True:
        if isinstance(cur, ast.Attribute):
            parts.insert(0, cur.attr)
            cur = cur.value
        elif isinstance(cur, ast.Subscript) and isinstance(cur.slice, ast.Constant) \
                and isinstance(cur.slice.value, (int, str)) and not isinstance(cur.slice.value, bool):
            parts.insert(0, str(cur.slice.value))
            cur = cur.value
        elif isinstance(cur, (ast.Name, ast.Call)):
            return cur, parts
        else:
            return None


def _join(prefix: str, parts: list[str]) -> str:
    return ".".join(p for p in [prefix, *parts] if p)


def _under(root: str, path: str) -> bool:
    return not root or path == root or path.startswith(root + ".")


def _roots(ctx: "FileContext", facts: FileFacts, base: ast.AST, value: ModuleValue) -> list[tuple[ModelFacts, str]]:
    """(model, module path) pairs the base expression of a receiver can denote."""
    name = value.class_name
    if name is None:
        return []
    if value.call is not None:
        line = value.call.lineno
        built = [m for m in facts.models if m.call_line == line and m.class_name == name]
        if not built:  # the same constructor call elsewhere in the file builds the same model
            text = ast.unparse(value.call)
            built = [m for m in facts.models if m.class_name == name and m.source == text]
        if not built and not value.call.args and not value.call.keywords:
            built = [m for m in facts.models if m.class_name == name and m.call_line is None]
        return [(m, "") for m in built]
    if value.local_class is not None and isinstance(base, ast.Name):
        # `self` in a method of the class, or a parameter annotated with it:
        # every instance of the class in every model known for this file
        here = os.path.realpath(ctx.path)
        return [(model, module.path) for model, module in facts.occurrences(name)
                if module.class_file is None or module.class_file == here]
    return []


def _built_here(ctx: "FileContext", facts: FileFacts, base: ast.AST) -> list[tuple[ModelFacts, str]]:
    """``net`` after ``net = Net(10)`` with ``Net`` imported from another file of
    the project (the static pass cannot see its class): the model this file's
    analysis built from that very call."""
    call = base
    if isinstance(base, ast.Name) and hasattr(base, "_hl_scope"):
        bindings = ctx.model.bindings_at(base)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
            return []
        call = bindings[0].value
    if not isinstance(call, ast.Call):
        return []
    here = os.path.realpath(ctx.path)
    return [(m, "") for m in facts.models if m.call_line == call.lineno and m.origin_file is not None
            and os.path.realpath(m.origin_file) == here]


_PARAMETER_DEPTH = 3


def _arguments_for(ctx: "FileContext", name: ast.Name) -> list[ast.expr] | None:
    """``target_layer`` inside ``GradCam.__init__(self, model, target_layer)``: the
    expression every call in this file passes for it (``GradCam(net, net.features)``),
    or None when the name is not a parameter or a call passes something else
    (``*args``, nothing, a default)."""
    if not hasattr(name, "_hl_scope"):
        return None
    bindings = ctx.model.bindings_at(name)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return None
    function = bindings[0].scope.node
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    positional = [a.arg for a in function.args.posonlyargs + function.args.args]
    if name.id not in positional and name.id not in [a.arg for a in function.args.kwonlyargs]:
        return None
    owner = getattr(function, "_hl_parent", None)
    if isinstance(owner, ast.ClassDef):
        if function.name != "__init__" or any(isinstance(d, ast.Name) and d.id == "staticmethod"
                                              for d in function.decorator_list):
            return None
        callee, offset = owner.name, 1  # `GradCam(...)` calls __init__ with `self` first
    elif isinstance(owner, ast.Module):
        callee, offset = function.name, 0
    else:
        return None
    calls = ctx.model.name_calls.get(callee, [])
    if not calls:
        return None
    out = []
    for call in calls:
        found = next((k.value for k in call.keywords if k.arg == name.id), None)
        if found is None and name.id in positional:
            index = positional.index(name.id) - offset
            if 0 <= index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
                found = call.args[index]
        if found is None:
            return None
        out.append(found)
    return out


def modules_for(ctx: "FileContext", receiver: ast.AST | None, _depth: int = 0) -> list[Pair]:
    """Every (model, module) the receiver of a hook registration can be."""
    facts = graph_facts(ctx)
    if facts is None or receiver is None:
        return []
    if facts.linked:  # a module the caller passes, in another checked file (hooklint.graph.crossfile)
        from hooklint.graph.linked import exact_pairs_for_receiver

        across = exact_pairs_for_receiver(ctx, receiver)
        if across:
            return across
    split = _split(receiver)
    if split is None:
        return []
    base, parts = split
    value = ctx.inference.infer(base)
    if not isinstance(value, ModuleValue) or (value.class_name is None and value.applied_from is None):
        built = _pairs(_built_here(ctx, facts, base), parts)
        if built or not isinstance(base, ast.Name) or _depth >= _PARAMETER_DEPTH:
            return built
        # a module passed in: what every call in this file passes, when each one is known
        arguments = _arguments_for(ctx, base)
        if not arguments:
            return []
        out: list[Pair] = []
        for argument in arguments:
            pairs = modules_for(ctx, _extended(argument, parts), _depth + 1)
            if not pairs:
                return []
            out += [p for p in pairs if p not in out]
        return out
    if value.applied_from is not None:  # `net.apply(fn)`: fn's argument is every module of net
        out: list[Pair] = []
        for model, root in modules_for(ctx, value.applied_from):
            out.extend((model, m) for m in model.modules if _under(root.path, m.path))
        return out
    return _pairs(_roots(ctx, facts, base, value), parts)


def _extended(expr: ast.expr, parts: list[str]) -> ast.expr:
    """``net.features`` + ["0", "conv"] -> ``net.features[0].conv`` (for the lookup only)."""
    out = expr
    for part in parts:
        if part.isdigit():
            out = ast.Subscript(value=out, slice=ast.Constant(int(part)), ctx=ast.Load())
        else:
            out = ast.Attribute(value=out, attr=part, ctx=ast.Load())
    return out


def _pairs(roots: list[tuple[ModelFacts, str]], parts: list[str]) -> list[Pair]:
    pairs = []
    for model, prefix in roots:
        module = model.module(_join(prefix, parts))
        if module is not None:
            pairs.append((model, module))
    return pairs


def fed_by_data(ctx: "FileContext", receiver: ast.AST | None) -> list[Pair]:
    """The hooked modules whose inputs can come straight from data that needs no
    grad and that own trainable parameters: a full backward hook on them runs
    before their parameters' ``.grad`` is accumulated (hook-semantics.md, 2).
    A model analysed on its own counts as fed by data."""
    return [(model, module) for model, module in modules_for(ctx, receiver)
            if module.calls and module.inputs_from_data and module.trainable_params]


def describe_module(model: ModelFacts, module: ModuleFacts) -> str:
    """```fc1`` (Linear, in Model)`` or ```conv`` (Conv2d)`` for a model on its own."""
    if not module.path:
        return f"{model.class_name} built with `{model.source}`" if model.call_line else model.class_name
    return f"`{module.path}` ({module.class_name}, in {model.class_name})"
