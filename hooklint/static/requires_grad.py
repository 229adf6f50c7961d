"""Tensors that may not require grad, and the checks that make sure they do.

``Tensor.register_hook`` and ``register_post_accumulate_grad_hook`` raise
"cannot register a hook on a tensor that doesn't require gradient" on a
tensor with ``requires_grad=False``; a module whose output needs no grad
never runs its backward hooks.  The parameters a caller hands a library (its
model's ``parameters()``, an optimizer's ``param_groups``) may be frozen:
fine-tuning, adapters and partial freezing are ordinary.  This module says
where a loop variable comes from such a collection and whether the code
checks ``requires_grad`` (or sets it) on the way to a given node.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.flow import contains, executed_nodes
from hooklint.static.outside import outside_root
from hooklint.static.semantic import FunctionNode, SemanticModel, short_source
from hooklint.static.tree_walk import walk_tree
from hooklint.static.values import Inference

_PARAM_ITERATORS = {"parameters": (), "named_parameters": (1,)}
# A loop variable is bound by a `for` statement or by a comprehension's `for`.
_LOOPS = (ast.For, ast.comprehension)
_MAX_DEPTH = 4


@dataclass(frozen=True)
class CallerParameter:
    """A name that holds, in turn, each parameter of a collection the caller supplies."""

    name: ast.Name | None  # the use (the hooked receiver), when it is a name
    source: str  # "each parameter of `module` (the argument `module` of `Hook._backward_apply`)"
    loop: ast.For
    owner: ast.expr | None = None  # the module whose parameters these are (None for param_groups)
    text: str = ""  # how the receiver is written (`m.weight`)

    def __post_init__(self) -> None:
        if not self.text and self.name is not None:
            object.__setattr__(self, "text", self.name.id)


def caller_parameter(model: SemanticModel, inference: Inference, expr: ast.AST,
                     filtered: bool = False) -> CallerParameter | None:
    """``expr`` is a loop variable over the caller's parameters: ``for p in
    model.parameters()`` with ``model`` from the caller, ``for _, p in
    params`` with ``params = module.named_parameters()``, or ``for p in
    group["params"]`` for each ``group`` of an optimizer's ``param_groups``.
    ``filtered``: a collection gathered under a ``requires_grad`` test counts
    too (its elements are still the caller's parameters: a question about
    their lifetime, not about whether they require grad)."""
    if not isinstance(expr, ast.Name) or not hasattr(expr, "_hl_scope"):
        return None
    bindings = model.bindings_at(expr)
    if len(bindings) != 1 or bindings[0].kind != "for" or not isinstance(bindings[0].node, _LOOPS):
        return None
    binding = bindings[0]
    loop: ast.For = binding.node  # type: ignore[assignment]
    found = _collection(model, inference, binding.value, binding.path, 0)  # type: ignore[arg-type]
    if found is None:
        found = _parameters_in(model, inference, binding.value, binding.path, 0,
                               filtered)  # type: ignore[arg-type]
    return CallerParameter(expr, found[0], loop, found[1]) if found is not None else None


# Attributes that name a layer's parameters (``layer.weight``, ``attn.in_proj_weight``).
_PARAMETER_ATTRS = ("weight", "bias")
_ORDER_KEEPING = frozenset({"list", "tuple", "sorted", "reversed", "iter"})


def caller_layer_parameter(model: SemanticModel, inference: Inference, expr: ast.AST,
                           ) -> tuple[str, ast.For, ast.expr | None] | None:
    """``expr`` (a hooked tensor that is not itself a loop variable) is a
    parameter of each of the caller's layers in turn: ``m.weight`` with ``m``
    running over ``model.modules()`` or over the layers the caller passed,
    ``getattr(layer, name)``, ``layer.get_parameter(name)``, or a name bound
    to one of those.  (words, the loop over the layers, the module).  Nothing
    here is reported for a single layer the caller names: the caller then
    chooses a layer whose parameter it trains."""
    return _parameter_of(model, inference, expr, 0, need_loop=True)


def _parameter_of(model: SemanticModel, inference: Inference, expr: ast.AST, depth: int,
                  need_loop: bool = False) -> tuple[str, ast.For, ast.expr | None] | None:
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        bindings = model.bindings_at(expr)
        if len(bindings) != 1:
            return None
        b = bindings[0]
        if b.kind == "assign" and not b.path and isinstance(b.value, ast.AST):
            return _parameter_of(model, inference, b.value, depth + 1, need_loop)
        if b.kind == "for" and isinstance(b.node, _LOOPS) and not need_loop:
            found = _collection(model, inference, b.value, b.path, depth + 1)  # type: ignore[arg-type]
            if found is None:
                found = _parameters_in(model, inference, b.value, b.path, depth + 1)  # type: ignore[arg-type]
            return (found[0], b.node, found[1]) if found is not None else None
        return None
    layer: ast.AST | None = None
    if isinstance(expr, ast.Attribute) and isinstance(expr.ctx, ast.Load) \
            and expr.attr.endswith(_PARAMETER_ATTRS) and not expr.attr.startswith("_"):
        layer = expr.value
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" \
            and len(expr.args) == 2:
        layer = expr.args[0]
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) \
            and expr.func.attr in ("get_parameter", "__getattr__") and len(expr.args) == 1:
        layer = expr.func.value
    elif isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) \
            and expr.value.attr == "_parameters":
        layer = expr.value.value
    if layer is None:
        return None
    found = _each_caller_layer(model, inference, layer, depth + 1)
    if found is None:
        return None
    text, loop, owner = found
    return f"the `{_short(expr)}` of {text}", loop, owner


def _each_caller_layer(model: SemanticModel, inference: Inference, expr: ast.AST,
                       depth: int) -> tuple[str, ast.For, ast.expr | None] | None:
    """``expr`` is a loop variable that runs over modules the caller supplies
    (its model's submodules, the list of layers it passed)."""
    if depth > _MAX_DEPTH or not isinstance(expr, ast.Name) or not hasattr(expr, "_hl_scope"):
        return None
    bindings = model.bindings_at(expr)
    if len(bindings) != 1 or bindings[0].kind != "for" or not isinstance(bindings[0].node, _LOOPS):
        return None
    loop: ast.For = bindings[0].node  # type: ignore[assignment]
    iterable, path = _unwrap(bindings[0].value, bindings[0].path)  # type: ignore[arg-type]
    if iterable is None:
        return None
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
            and iterable.func.attr in ("modules", "named_modules", "children", "named_children") \
            and path == ((1,) if iterable.func.attr.startswith("named") else ()):
        owner = iterable.func.value
        root = outside_root(model, inference, owner)
        if root is None:
            return None
        return f"each submodule of `{_short(owner)}` ({root[0]})", loop, owner
    if path == () and isinstance(iterable, (ast.Name, ast.Attribute)):
        root = outside_root(model, inference, iterable)
        if root is not None:
            return f"each layer in `{_short(iterable)}` ({root[0]})", loop, iterable
    return None


def _unwrap(iterable: ast.AST, path: tuple[int, ...]) -> tuple[ast.AST | None, tuple[int, ...]]:
    """Through ``enumerate``, ``zip``, ``list(...)``: the iterable a loop
    variable's values come from, and where in each item."""
    for _ in range(_MAX_DEPTH):
        if not (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.args):
            break
        name = iterable.func.id
        if name == "enumerate" and path[:1] == (1,):
            iterable, path = iterable.args[0], path[1:]
        elif name == "zip" and path and 0 <= path[0] < len(iterable.args) \
                and not any(isinstance(a, ast.Starred) for a in iterable.args):
            iterable, path = iterable.args[path[0]], path[1:]
        elif name in _ORDER_KEEPING and len(iterable.args) == 1 and not path:
            iterable = iterable.args[0]
        else:
            break
    return iterable, path


def _parameters_in(model: SemanticModel, inference: Inference, iterable: ast.AST, path: tuple[int, ...],
                   depth: int, filtered: bool = False) -> tuple[str, ast.expr | None] | None:
    """A loop over a collection whose elements are parameters of the
    caller's layers, gathered elsewhere: through ``zip`` or ``list``, a
    comprehension, a list the function fills, or a container kept on
    ``self`` that a method fills (``self._params.append(getattr(layer,
    name))`` for each layer the caller passed).  Elements added under a
    ``requires_grad`` test do not count: the collection is filtered."""
    if depth > _MAX_DEPTH:
        return None
    unwrapped, path = _unwrap(iterable, path)
    if unwrapped is None:
        return None
    if unwrapped is not iterable:
        found = _collection(model, inference, unwrapped, path, depth + 1)
        return found if found is not None else _parameters_in(model, inference, unwrapped, path, depth + 1, filtered)
    if path:
        return None
    if isinstance(iterable, (ast.ListComp, ast.GeneratorExp)) and len(iterable.generators) == 1:
        comp = iterable.generators[0]
        if not filtered and any(_mentions_requires_grad(test) for test in comp.ifs):
            return None
        where = _target_path(comp.target, iterable.elt)
        if where is not None:
            found = _collection(model, inference, comp.iter, where, depth + 1)
            return found if found is not None else _parameters_in(model, inference, comp.iter, where, depth + 1, filtered)
        found3 = _parameter_of(model, inference, iterable.elt, depth + 1)
        return (found3[0], found3[2]) if found3 is not None else None
    contents = _contents(model, iterable)
    if contents is None:
        return None
    described: tuple[str, ast.expr | None] | None = None
    for value, many in contents:
        if not filtered and _guarded_by_requires_grad(value):
            return None  # filtered where it is filled
        if many:
            found = _collection(model, inference, value, (), depth + 1) \
                or _parameters_in(model, inference, value, (), depth + 1, filtered)
        else:
            found3 = _parameter_of(model, inference, value, depth + 1)
            found = (found3[0], found3[2]) if found3 is not None else None
        if found is not None and described is None:
            described = (f"{found[0]}, kept in `{_short(iterable)}`", found[1])
    return described


def _target_path(target: ast.AST, elt: ast.AST) -> tuple[int, ...] | None:
    """Where the comprehension's element sits in its loop target
    (``[p for _, p in named]`` gives ``(1,)``)."""
    if not isinstance(elt, ast.Name):
        return None
    if isinstance(target, ast.Name):
        return () if target.id == elt.id else None
    if isinstance(target, ast.Tuple):
        for index, item in enumerate(target.elts):
            inner = _target_path(item, elt)
            if inner is not None:
                return (index,) + inner
    return None


def _contents(model: SemanticModel, holder: ast.AST) -> list[tuple[ast.AST, bool]] | None:
    """What is put into a container: ``self.<attr>`` across its class, or a
    local name in its function (assigned a list, then appended to).  Each
    item: (expression, True when it adds every element of it)."""
    if isinstance(holder, ast.Subscript):
        return _item_contents(model, holder.value)
    if isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name) and holder.value.id == "self":
        cls = model.enclosing_class(holder)
        if cls is None:
            return None
        out: list[tuple[ast.AST, bool]] = []
        for value, _scope, _node in cls.attribute(holder.attr):
            out += _assigned_items(value)
        scopes = [m for m in cls.methods.values()]
        attr = holder.attr

        def same(node: ast.AST) -> bool:
            return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) \
                and node.value.id == "self"
    elif isinstance(holder, ast.Name) and hasattr(holder, "_hl_scope"):
        bindings = model.bindings_at(holder)
        if len(bindings) == 1 and bindings[0].kind == "for" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.AST):
            # `for bucket in self.buckets: for p in bucket`: each item is a collection put in the container
            outer = _contents(model, bindings[0].value)
            return None if outer is None else [(value, True) for value, many in outer if not many]
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path \
                or not isinstance(bindings[0].value, ast.AST):
            return None
        out = _assigned_items(bindings[0].value)  # type: ignore[arg-type]
        scopes = [bindings[0].scope.node]
        name = holder.id

        def same(node: ast.AST) -> bool:
            return isinstance(node, ast.Name) and node.id == name
    else:
        return None
    for scope in scopes:
        for node in walk_tree(scope):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and same(node.func.value) \
                    and node.args:
                if node.func.attr in ("append", "add", "insert"):
                    out.append((node.args[-1], False))
                elif node.func.attr == "extend":
                    out.append((node.args[0], True))
            elif isinstance(node, ast.AugAssign) and same(node.target) and isinstance(node.op, ast.Add):
                out += _assigned_items(node.value)
    return out


def _item_contents(model: SemanticModel, container: ast.AST) -> list[tuple[ast.AST, bool]] | None:
    """What an item of a container of collections holds (``self.groups[i]``
    with ``self.groups[i] = group_params`` or ``self.groups[i].append(p)``
    somewhere in the class, or in the function for a local ``groups``): each
    (expression, True when the item holds every element of it)."""
    if isinstance(container, ast.Attribute) and isinstance(container.value, ast.Name) \
            and container.value.id == "self":
        cls = model.enclosing_class(container)
        if cls is None:
            return None
        scopes: list[ast.AST] = list(cls.methods.values())
        attr = container.attr

        def same(node: ast.AST) -> bool:
            return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) \
                and node.value.id == "self"
    elif isinstance(container, ast.Name) and hasattr(container, "_hl_scope"):
        bindings = model.bindings_at(container)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
            return None
        scopes = [bindings[0].scope.node]
        name = container.id

        def same(node: ast.AST) -> bool:
            return isinstance(node, ast.Name) and node.id == name
    else:
        return None
    out: list[tuple[ast.AST, bool]] = []
    for scope in scopes:
        for node in walk_tree(scope):
            if isinstance(node, ast.Assign) and node.value is not None:
                for target in node.targets:
                    if isinstance(target, ast.Subscript) and same(target.value):
                        out.append((node.value, True))  # `groups[i] = params`: the item is that collection
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                    and isinstance(node.func.value, ast.Subscript) and same(node.func.value.value):
                if node.func.attr in ("append", "add", "insert"):
                    out.append((node.args[-1], False))
                elif node.func.attr == "extend":
                    out.append((node.args[0], True))
    return out


def _assigned_items(value: ast.AST) -> list[tuple[ast.AST, bool]]:
    if isinstance(value, (ast.List, ast.Tuple)):
        return [(e, False) for e in value.elts if not isinstance(e, ast.Starred)]
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        return []  # `[None] * n`: placeholders
    if isinstance(value, ast.Constant):
        return []
    return [(value, True)]


def _guarded_by_requires_grad(node: ast.AST) -> bool:
    """On the way from its function to ``node``: a test mentioning
    ``requires_grad`` around it, or an earlier ``if ...requires_grad...:
    continue`` in a block that holds it."""
    child = node
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, FunctionNode + (ast.Lambda, ast.Module)):
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test \
                and _mentions_requires_grad(cur.test):
            return True
        if isinstance(cur, ast.comprehension) and any(_mentions_requires_grad(t) for t in cur.ifs):
            return True
        for field in ("body", "orelse"):
            block = getattr(cur, field, None)
            if isinstance(block, list) and child in block:
                for earlier in block[:block.index(child)]:
                    if isinstance(earlier, ast.If) and _mentions_requires_grad(earlier.test) and earlier.body \
                            and isinstance(earlier.body[-1], (ast.Continue, ast.Return, ast.Raise, ast.Break)):
                        return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


def _short(node: ast.AST) -> str:
    return short_source(node, width=50, odd="?")


def _collection(model: SemanticModel, inference: Inference, iterable: ast.AST, path: tuple[int, ...],
                depth: int) -> tuple[str, ast.expr | None] | None:
    """(words for the collection, the module that owns it or None)."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" \
            and iterable.args and path[:1] == (1,):
        return _collection(model, inference, iterable.args[0], path[1:], depth + 1)
    if isinstance(iterable, ast.Name):
        bindings = model.bindings_at(iterable)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.AST):
            return _collection(model, inference, bindings[0].value, path, depth + 1)
        return None
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
            and _PARAM_ITERATORS.get(iterable.func.attr) == path:
        owner = iterable.func.value
        found = outside_root(model, inference, owner)
        if found is None:
            return None
        return f"each parameter of `{ast.unparse(owner)}` ({found[0]})", owner
    # `group["params"]` with `group` drawn from `<optimizer>.param_groups`
    if isinstance(iterable, ast.Subscript) and path == () and _is_str(iterable.slice, "params"):
        group = iterable.value
        if isinstance(group, ast.Name):
            bindings = model.bindings_at(group)
            if len(bindings) == 1 and bindings[0].kind == "for" and _param_groups(bindings[0].value, bindings[0].path):
                return f"each parameter in the `param_groups` of `{_owner_text(bindings[0].value)}`", None
        if isinstance(group, ast.Subscript) and isinstance(group.value, ast.Attribute) \
                and group.value.attr == "param_groups":
            return f"each parameter in the `param_groups` of `{ast.unparse(group.value.value)}`", None
    caller_groups = _params_of_callers_group(model, inference, iterable, path, depth)
    if caller_groups is not None:
        return caller_groups, None
    return None


def _params_of_callers_group(model: SemanticModel, inference: Inference, iterable: ast.AST,
                             path: tuple[int, ...], depth: int) -> str | None:
    """``group["params"]``, ``group.pop("params")`` or ``group.get("params", ...)``
    of a group the caller handed over (see :func:`_group_of_callers`)."""
    if path:
        return None
    group = None
    if isinstance(iterable, ast.Subscript) and _is_str(iterable.slice, "params"):
        group = iterable.value
    elif isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
            and iterable.func.attr in ("pop", "get") and iterable.args and _is_str(iterable.args[0], "params"):
        group = iterable.func.value
    if not isinstance(group, ast.Name):
        return None
    return _group_of_callers(model, inference, group, depth + 1)


def _group_of_callers(model: SemanticModel, inference: Inference, group: ast.Name, depth: int) -> str | None:
    """``group`` runs over parameter groups the caller handed over, as
    ``torch.optim.Optimizer`` takes them: ``for group in param_groups`` with
    ``param_groups`` the caller's ``params`` argument, ``list(params)`` of
    it, or ``[{"params": params}]`` wrapping a plain list of its tensors."""
    bindings = model.bindings_at(group)
    if len(bindings) != 1 or bindings[0].kind != "for" or bindings[0].path or not isinstance(bindings[0].value, ast.AST):
        return None
    return _callers_groups(model, inference, bindings[0].value, depth + 1)  # type: ignore[arg-type]


def _callers_groups(model: SemanticModel, inference: Inference, expr: ast.AST, depth: int) -> str | None:
    if depth > 2 * _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "tuple") \
            and len(expr.args) == 1 and not expr.keywords:
        return _callers_groups(model, inference, expr.args[0], depth + 1)
    if isinstance(expr, (ast.List, ast.Tuple)) and expr.elts:
        # `[{"params": params}]`: every group's "params" entry is the caller's
        texts = []
        for elt in expr.elts:
            if not isinstance(elt, ast.Dict):
                return None
            entry = next((v for k, v in zip(elt.keys, elt.values) if k is not None and _is_str(k, "params")), None)
            if entry is None:
                return None
            texts.append(_callers_groups(model, inference, entry, depth + 1))
        return texts[0] if all(t is not None for t in texts) else None
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        bindings = model.bindings_at(expr)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.AST):
            return _callers_groups(model, inference, bindings[0].value, depth + 1)  # type: ignore[arg-type]
        if len(bindings) == 1 and bindings[0].kind == "param":
            found = outside_root(model, inference, expr)
            if found is not None:
                return f"each parameter in the groups of {found[0]}"
    return None


def _param_groups(iterable: object, path: tuple[int, ...]) -> bool:
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate" \
            and iterable.args and path[:1] == (1,):
        return _param_groups(iterable.args[0], path[1:])
    return isinstance(iterable, ast.Attribute) and iterable.attr == "param_groups" and path == ()


def _owner_text(iterable: object) -> str:
    if isinstance(iterable, ast.Call) and iterable.args:
        iterable = iterable.args[0]
    return ast.unparse(iterable.value) if isinstance(iterable, ast.Attribute) else "the optimizer"  # type: ignore[arg-type]


def _is_str(node: ast.AST, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def checks_requires_grad(node: ast.AST, name: str, loop: ast.AST) -> bool:
    """On the way from ``loop`` to ``node``: a test that mentions
    ``requires_grad`` (an enclosing ``if``, an earlier ``if ...: continue``),
    ``name.requires_grad_(...)`` / ``name.requires_grad = ...``, or a ``try``
    that catches the error."""
    cur = getattr(node, "_hl_parent", None)
    child = node
    while cur is not None:
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test and _mentions_requires_grad(cur.test):
            return True
        if isinstance(cur, ast.Try) and child in cur.body and any(
                h.type is None or _caught_name(h.type) & {"RuntimeError", "Exception", "BaseException"}
                for h in cur.handlers):
            return True
        if cur is loop or isinstance(cur, FunctionNode):
            break
        child, cur = cur, getattr(cur, "_hl_parent", None)
    body = getattr(loop, "body", [])
    for stmt in body:
        if contains(stmt, node):
            break
        if isinstance(stmt, ast.If) and _mentions_requires_grad(stmt.test) and stmt.body \
                and isinstance(stmt.body[-1], (ast.Continue, ast.Return, ast.Raise, ast.Break)):
            return True
        for sub in executed_nodes(stmt):
            if _sets_requires_grad(sub, name):
                return True
    return False


def _mentions_requires_grad(test: ast.AST) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "requires_grad"
               or isinstance(n, ast.Constant) and n.value == "requires_grad" for n in ast.walk(test))


def _sets_requires_grad(node: ast.AST, name: str) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_" \
            and _short(node.func.value) == name:
        return True
    return isinstance(node, ast.Attribute) and node.attr == "requires_grad" and isinstance(node.ctx, ast.Store) \
        and _short(node.value) == name


def _caught_name(expr: ast.AST) -> set[str]:
    items = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    return {getattr(i, "id", None) or getattr(i, "attr", "") for i in items}


def filtered_by_requires_grad(loop: ast.For) -> bool:
    """The loop's collection is already filtered (``filter(lambda p: p.requires_grad, ...)``,
    ``[p for p in ... if p.requires_grad]``) somewhere the loop's iterable shows."""
    if isinstance(loop, ast.comprehension) and any(_mentions_requires_grad(t) for t in loop.ifs):
        return True
    return any(_mentions_requires_grad(n) for n in ast.walk(loop.iter) if isinstance(n, (ast.Lambda, ast.comprehension)))


# ------------------------------------------------------------------ embedding layers

_EMBEDDING_CLASSES = ("Embedding", "EmbeddingBag")


def embedding_layer(model: SemanticModel, inference: Inference, expr: ast.AST, depth: int = 0) -> str | None:
    """How ``expr`` is an embedding layer of a model the file does not build
    (words for a message), or None.  An embedding's input is integer ids,
    which never require grad: its output requires grad only when its weight
    does."""
    if depth > _MAX_DEPTH:
        return None
    value = inference.infer(expr)
    if getattr(value, "call", None) is not None or getattr(value, "local_class", None) is not None:
        return None  # built in this file: its weight requires grad unless the file freezes it
    names = getattr(getattr(value, "narrowing", None), "names", ()) or ()
    torch_class = getattr(value, "torch_class", None) or ""
    if getattr(value, "call", None) is None and (
            torch_class.rsplit(".", 1)[-1] in _EMBEDDING_CLASSES or any(n in _EMBEDDING_CLASSES for n in names)):
        return f"`{ast.unparse(expr)}` (an `nn.Embedding`)"
    if isinstance(expr, ast.Call):
        func = expr.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if "embedding" in called.lower() and not called.lower().startswith(("make", "create", "build", "new")):
            return f"`{ast.unparse(expr)}` (the model's embedding layer)"
        return None
    if isinstance(expr, ast.Attribute) and "embed" in expr.attr.lower() and isinstance(expr.ctx, ast.Load):
        if outside_root(model, inference, expr) is not None:
            return f"`{ast.unparse(expr)}` (the model's embedding layer)"
        return None
    if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
        bindings = model.bindings_at(expr)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.AST):
            found = embedding_layer(model, inference, bindings[0].value, depth + 1)
            return found.replace(f"`{ast.unparse(bindings[0].value)}`", f"`{expr.id}` = `{ast.unparse(bindings[0].value)}`", 1) \
                if found else None
    return None


def makes_trainable(scope: ast.AST) -> ast.AST | None:
    """A place in ``scope`` that switches gradients on (``p.requires_grad = True``,
    ``requires_grad_()`` / ``requires_grad_(True)``), or None."""
    for node in walk_tree(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "requires_grad"
                                                for t in node.targets):
            if not (isinstance(node.value, ast.Constant) and node.value.value is False):
                return node
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_":
            arg = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "requires_grad"), None)
            if arg is None or not (isinstance(arg, ast.Constant) and arg.value is False):
                return node
    return None
