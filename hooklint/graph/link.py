"""From a hook registration in the source to the graph facts of the module it hooks.

Rules call :func:`modules_for` with the receiver of ``register_*_hook``
(``net.fc3``, ``self.f1``, ``conv``, the parameter of a function passed to
``net.apply``) and get every ``(model, module)`` pair of ``ctx.graph`` that
expression can denote: also ``net.layer4`` when ``net = Net(10)`` builds a
class imported from another file of the project (the model the analysis of
this file built from that call).  The receiver may pick its module as Python
code does (``model.layer4[-1].bn2``, ``getattr(model, "fc")``,
``model.get_submodule("a.b")``, ``dict(model.named_modules())["a.b"]``, a loop
variable over a container or a literal slice of it): each is resolved in the
analysed model as torch resolves it on the instance (docs/graph.md).  An empty
list means "not known": rules then fall back to their static behaviour.  No
torch here: this runs in the static process.
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


# A step from a module to others: ("attr", "layer4") and ("key", "a") name a child,
# ("index", -1) a child by position, ("path", "layer4.0.bn2") a descendant by its
# dotted name, ("each", slice) the children a loop over a container (or a slice of
# it) visits, ("all", None) the module and every module under it (`.modules()`),
# ("children", None) its children (`.children()`).
Step = tuple[str, object]

_MAX_STEPS_DEPTH = 4
_ALL_ITERATORS = frozenset({"modules", "named_modules"})
_CHILD_ITERATORS = frozenset({"children", "named_children"})


def _constant_index(node: ast.AST) -> int | str | slice | None:
    """``1``, ``-1``, ``"a"``, ``1:``, ``:-1``; None for anything computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, int) and not isinstance(node.operand.value, bool):
        return -node.operand.value
    if isinstance(node, ast.Slice):
        parts = []
        for part in (node.lower, node.upper, node.step):
            if part is None:
                parts.append(None)
                continue
            value = _constant_index(part)
            if not isinstance(value, int):
                return None
            parts.append(value)
        return slice(*parts)
    return None


def _named_modules_dict(ctx: "FileContext", expr: ast.AST) -> tuple[ast.AST, str] | None:
    """``dict(model.named_modules())`` (or a name bound once to it, or to
    ``{n: m for n, m in model.named_modules()}``): (``model``, "modules"), so that
    ``[...]`` on it is a dotted path under ``model``; the same for ``named_children``."""
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        bindings = ctx.model.bindings_at(expr)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
            return None
        expr = bindings[0].value  # type: ignore[assignment]
    iterated = None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict" \
            and len(expr.args) == 1 and not expr.keywords:
        iterated = expr.args[0]
    elif isinstance(expr, ast.DictComp) and len(expr.generators) == 1 and not expr.generators[0].ifs:
        gen = expr.generators[0]
        if isinstance(gen.target, ast.Tuple) and len(gen.target.elts) == 2 \
                and all(isinstance(e, ast.Name) for e in gen.target.elts) \
                and isinstance(expr.key, ast.Name) and expr.key.id == gen.target.elts[0].id \
                and isinstance(expr.value, ast.Name) and expr.value.id == gen.target.elts[1].id:
            iterated = gen.iter
    if isinstance(iterated, ast.Call) and isinstance(iterated.func, ast.Attribute) and not iterated.keywords \
            and iterated.func.attr in ("named_modules", "named_children") and not iterated.args:
        return iterated.func.value, "modules" if iterated.func.attr == "named_modules" else "children"
    return None


def _loop_source(ctx: "FileContext", name: ast.Name) -> tuple[ast.AST, Step] | None:
    """``block`` in ``for block in model.layer4[1:]:`` -> (``model.layer4[1:]``,
    ("each", None)); ``m`` in ``for name, m in model.named_modules():`` ->
    (``model``, ("all", None)).  Only a loop variable bound by that loop alone."""
    if not hasattr(name, "_hl_scope"):
        return None
    bindings = ctx.model.bindings_at(name)
    if len(bindings) != 1 or bindings[0].kind != "for":
        return None
    iterable, path = bindings[0].value, bindings[0].path
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and not iterable.args \
            and not iterable.keywords:
        method = iterable.func.attr
        named = method.startswith("named_")
        if (path == (1,)) == named and method in _ALL_ITERATORS | _CHILD_ITERATORS:
            return iterable.func.value, ("all" if method in _ALL_ITERATORS else "children", None)
        return None
    if path or not isinstance(iterable, (ast.Attribute, ast.Subscript, ast.Name)):
        return None
    return iterable, ("each", None)


def _steps(ctx: "FileContext", expr: ast.AST, depth: int = 0) -> tuple[ast.AST, list[Step]] | None:
    """``net.layer1[0].conv1`` -> (``net``, [attr layer1, index 0, attr conv1]);
    ``getattr(net, "fc")``, ``net.get_submodule("a.b")``, ``dict(net.named_modules())["a.b"]``
    and loop variables over containers are followed too.  The base is a name
    or a call (``Net()``)."""
    steps: list[Step] = []
    cur = expr
    while True:
        if isinstance(cur, ast.Attribute):
            steps.insert(0, ("attr", cur.attr))
            cur = cur.value
        elif isinstance(cur, ast.Subscript):
            index = _constant_index(cur.slice)
            if index is None:
                return None
            named = _named_modules_dict(ctx, cur.value) if isinstance(index, str) else None
            if named is not None:
                steps.insert(0, ("path" if named[1] == "modules" else "key", index))
                cur = named[0]
                continue
            if isinstance(index, slice):
                return None  # a slice of a container is a new container, not a module of the model
            steps.insert(0, ("key", index) if isinstance(index, str) else ("index", index))
            cur = cur.value
        elif isinstance(cur, ast.Call):
            func = cur.func
            if isinstance(func, ast.Name) and func.id == "getattr" and len(cur.args) == 2 and not cur.keywords \
                    and isinstance(cur.args[1], ast.Constant) and isinstance(cur.args[1].value, str):
                steps.insert(0, ("attr", cur.args[1].value))
                cur = cur.args[0]
            elif isinstance(func, ast.Attribute) and func.attr == "get_submodule" and len(cur.args) == 1 \
                    and not cur.keywords and isinstance(cur.args[0], ast.Constant) \
                    and isinstance(cur.args[0].value, str):
                steps.insert(0, ("path", cur.args[0].value))
                cur = func.value
            else:
                return cur, steps
        elif isinstance(cur, ast.Name):
            looped = _loop_source(ctx, cur) if depth < _MAX_STEPS_DEPTH else None
            if looped is None:
                return cur, steps
            iterable, step = looped
            if step[0] == "each" and isinstance(iterable, ast.Subscript):
                index = _constant_index(iterable.slice)
                if isinstance(index, slice):  # `for block in model.layer4[1:]`: those children
                    step, iterable = ("each", index), iterable.value
            inner = _steps(ctx, iterable, depth + 1)
            if inner is None:
                return None
            base, before = inner
            return base, [*before, step, *steps]
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


def modules_for(ctx: "FileContext", receiver: ast.AST | None, _depth: int = 0,
                _after: tuple[Step, ...] = ()) -> list[Pair]:
    """Every (model, module) the receiver of a hook registration can be."""
    facts = graph_facts(ctx)
    if facts is None or receiver is None:
        return []
    if facts.linked:  # a module the caller passes, in another checked file (hooklint.graph.crossfile)
        from hooklint.graph.linked import exact_pairs_for_receiver

        across = exact_pairs_for_receiver(ctx, receiver)
        if across:
            return across
    split = _steps(ctx, receiver)
    if split is None:
        return []
    base, steps = split
    steps = [*steps, *_after]
    value = ctx.inference.infer(base)
    if not isinstance(value, ModuleValue) or (value.class_name is None and value.applied_from is None):
        built = _pairs(_built_here(ctx, facts, base), steps)
        if built or not isinstance(base, ast.Name) or _depth >= _PARAMETER_DEPTH:
            return built
        # a module passed in: what every call in this file passes, when each one is known
        arguments = _arguments_for(ctx, base)
        if not arguments:
            return []
        out: list[Pair] = []
        for argument in arguments:
            pairs = modules_for(ctx, argument, _depth + 1, tuple(steps))
            if not pairs:
                return []
            out += [p for p in pairs if p not in out]
        return out
    if value.applied_from is not None:  # `net.apply(fn)`: fn's argument is every module of net
        out = []
        for model, root in modules_for(ctx, value.applied_from):
            roots = [(model, m.path) for m in model.modules if _under(root.path, m.path)]
            out += [p for p in _pairs(roots, steps) if p not in out]
        return out
    return _pairs(_roots(ctx, facts, base, value), steps)


def _children(model: ModelFacts, path: str) -> list[str]:
    """The paths of a module's children, in the order `named_modules()` lists them."""
    prefix = f"{path}." if path else ""
    return [m.path for m in model.modules if m.path.startswith(prefix) and m.path != path
            and "." not in m.path[len(prefix):]]


def _child_at(model: ModelFacts, path: str, index: int) -> str | None:
    """``container[index]`` as torch picks it: by position among the children
    (`nn.Sequential`, `nn.ModuleList`, negative indices counting from the end).
    The facts list a module shared by two places once, under its first name: a
    container whose children are not named 0..n-1 in order is followed only by
    position when none of them is numeric (an `OrderedDict`-built Sequential)."""
    if index >= 0 and model.module(_join(path, [str(index)])) is not None:
        return _join(path, [str(index)])  # named 0..n-1, as nn.ModuleList and a plain nn.Sequential are
    container = model.module(path)
    if container is None or container.class_name == "ModuleDict":
        return None
    children = _children(model, path)
    names = [child.rsplit(".", 1)[-1] for child in children]
    if any(name.isdigit() for name in names) and names != [str(i) for i in range(len(names))]:
        return None
    if not -len(children) <= index < len(children):
        return None
    return children[index]


def _resolve(model: ModelFacts, root: str, steps: list[Step]) -> list[str]:
    """The module paths the steps lead to from ``root`` in ``model``."""
    paths = [root]
    for kind, value in steps:
        following: list[str] = []
        for path in paths:
            if kind in ("attr", "key"):
                following.append(_join(path, [str(value)]))
            elif kind == "path":
                following.append(_join(path, [str(value)]) if value else path)
            elif kind == "index":
                child = _child_at(model, path, value)  # type: ignore[arg-type]
                if child is not None:
                    following.append(child)
            elif kind == "each":
                children = _children(model, path)
                following += children[value] if isinstance(value, slice) else children
            elif kind == "children":
                following += _children(model, path)
            elif kind == "all":
                following += [m.path for m in model.modules if _under(path, m.path)]
        paths = list(dict.fromkeys(following))
    return [p for p in paths if model.module(p) is not None]


def _pairs(roots: list[tuple[ModelFacts, str]], steps: list[Step]) -> list[Pair]:
    pairs = []
    for model, prefix in roots:
        for path in _resolve(model, prefix, steps):
            module = model.module(path)
            if module is not None and (model, module) not in pairs:
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
