"""Where a hook's handle goes, and who removes it.

``register_*_hook`` returns a ``RemovableHandle``; calling its ``remove()``
is the only way to take that one hook off again.  The lifetime rules ask
where the handle of each registration ends up (dropped, a local name, an
attribute of ``self``, a list or dict held by ``self``), which class owns
that attribute, and which methods call ``remove()`` on it.  Answered on the
syntax of one file; anything less direct (a handle passed to another
function, stored through an alias) is "unknown" and the rules stay quiet.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from hooklint.static.callgraph import is_self_param
from hooklint.static.flow import block_of, contains, executed_nodes, function_of, root_name
from hooklint.static.semantic import ClassInfo, FunctionNode, SemanticModel, positional_params
from hooklint.static.tree_walk import walk_tree

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext
    from hooklint.static.hooks import Registration

# Methods that put a handle into a container, and how they are called.
_STORE_METHODS = frozenset({"append", "extend", "add", "insert", "update", "setdefault"})
# Literals and calls that make a new mutable container.
_MUTABLE_CALLS = frozenset({"list", "dict", "set", "collections.OrderedDict", "collections.defaultdict",
                            "collections.deque"})


@dataclass(frozen=True)
class Destination:
    """Where a registration's handle is kept.

    ``kind``: "dropped" (an expression statement), "attribute" (``self.h =``),
    "container" (``self.handles.append(...)``, ``self.handles[k] = ...``, or
    an attribute assigned a list of registrations), or "other".  ``owner`` and
    ``attr`` name the attribute of ``self``; ``node`` is the storing node."""

    kind: str
    node: ast.AST
    owner: ClassInfo | None = None
    attr: str | None = None
    method: ast.AST | None = None


def self_attribute(ctx: "FileContext", expr: ast.AST) -> tuple[ClassInfo, str, ast.AST] | None:
    """``self.<attr>`` in a method: (class, attribute name, method)."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)):
        return None
    bindings = ctx.model.bindings_at(expr.value)
    if len(bindings) != 1 or bindings[0].kind != "param" or not is_self_param(ctx.model, bindings[0].value):  # type: ignore[arg-type]
        return None
    method = bindings[0].scope.node
    cls = ctx.model.enclosing_class(method)
    if cls is None or method not in cls.methods.values():
        return None
    return cls, expr.attr, method


def destination(ctx: "FileContext", reg: "Registration") -> Destination:
    """Where the handle of ``reg`` goes: followed through one local name."""
    node: ast.AST = reg.call
    parent = getattr(node, "_hl_parent", None)
    # a list or comprehension of registrations, as a whole
    while isinstance(parent, (ast.List, ast.Tuple, ast.ListComp)) or isinstance(parent, ast.comprehension):
        node, parent = parent, getattr(parent, "_hl_parent", None)
    if isinstance(parent, ast.Expr) and node is reg.call:
        return Destination("dropped", parent)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) == 1:
            target = targets[0]
            found = self_attribute(ctx, target)
            if found is not None:
                kind = "attribute" if node is reg.call else "container"
                return Destination(kind, parent, found[0], found[1], found[2])
            if isinstance(target, ast.Subscript):
                found = self_attribute(ctx, target.value)
                if found is not None:
                    return Destination("container", parent, found[0], found[1], found[2])
            if isinstance(target, ast.Name) and node is reg.call:
                return _through_name(ctx, target, parent) or Destination("other", parent)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr in _STORE_METHODS:
        found = self_attribute(ctx, parent.func.value)
        if found is not None:
            return Destination("container", parent, found[0], found[1], found[2])
    return Destination("other", parent if parent is not None else node)


def _through_name(ctx: "FileContext", target: ast.Name, stmt: ast.AST) -> Destination | None:
    """``h = m.register_...(); self.handles.append(h)``: where ``h`` goes,
    when that is its only use."""
    scope = ctx.model.scope_of(target)
    func = scope.node
    uses = [n for n in executed_nodes(func) if isinstance(n, ast.Name) and n.id == target.id
            and isinstance(n.ctx, ast.Load)] if isinstance(func, FunctionNode) else []
    if len(uses) != 1:
        return None
    use = uses[0]
    parent = getattr(use, "_hl_parent", None)
    if isinstance(parent, ast.Call) and use in parent.args and isinstance(parent.func, ast.Attribute) \
            and parent.func.attr in _STORE_METHODS:
        found = self_attribute(ctx, parent.func.value)
        if found is not None:
            return Destination("container", parent, found[0], found[1], found[2])
    if isinstance(parent, ast.Assign) and parent.value is use and len(parent.targets) == 1:
        target = parent.targets[0]
        found = self_attribute(ctx, target)
        if found is not None:
            return Destination("attribute", parent, found[0], found[1], found[2])
        if isinstance(target, ast.Subscript):
            found = self_attribute(ctx, target.value)
            if found is not None:
                return Destination("container", parent, found[0], found[1], found[2])
    return None


@dataclass(frozen=True)
class Removal:
    """A ``remove()`` of the handles kept in ``self.<attr>``."""

    call: ast.Call
    method: ast.AST
    conditional: bool  # under an `if` (or `try` handler) inside the method


def removals(ctx: "FileContext", cls: ClassInfo, attr: str) -> list[Removal]:
    """Calls that remove handles kept in ``self.<attr>`` in the methods of
    ``cls``: ``self.h.remove()``, ``for h in self.hs: h.remove()``,
    ``[h.remove() for h in self.hs]``, ``self.hs[k].remove()``,
    ``self.hs.pop(...).remove()``."""
    out = []
    for method in cls.methods.values():
        for node in executed_nodes(method):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "remove" and not node.args and not node.keywords):
                continue
            if _names_handles_of(ctx, node.func.value, cls, attr, method):
                out.append(Removal(node, method, _conditional(node, method)))
    return out


def _names_handles_of(ctx: "FileContext", expr: ast.AST, cls: ClassInfo, attr: str, method: ast.AST) -> bool:
    found = self_attribute(ctx, expr)
    if found is not None:
        return found[0] is cls and found[1] == attr
    if isinstance(expr, ast.Subscript):
        return _names_handles_of(ctx, expr.value, cls, attr, method)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("pop", "get"):
        return _names_handles_of(ctx, expr.func.value, cls, attr, method)
    if isinstance(expr, ast.Name):
        for b in ctx.model.bindings_at(expr):
            if b.kind == "for" and isinstance(b.value, ast.AST):
                iterable = b.value
                # `for h in self.hs`, `for h in self.hs.values()`, `for _, h in self.hs.items()`
                if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
                        and iterable.func.attr in ("values", "items", "copy") or \
                        isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) \
                        and iterable.func.id in ("list", "reversed", "tuple"):
                    iterable = iterable.func.value if isinstance(iterable.func, ast.Attribute) else \
                        (iterable.args[0] if iterable.args else iterable)
                found = self_attribute(ctx, iterable)
                if found is not None and found[0] is cls and found[1] == attr:
                    return True
    return False


def _conditional(node: ast.AST, method: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not method:
        if isinstance(cur, (ast.If, ast.IfExp, ast.ExceptHandler, ast.While)):
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def assignments(cls: ClassInfo, attr: str) -> Iterator[tuple[ast.AST, ast.expr]]:
    """``self.<attr> = value`` in the methods of ``cls``: (method, value)."""
    for value, scope, _node in cls.attributes.get(attr, ()):
        yield scope.node, value


def class_body_value(cls: ClassInfo, attr: str) -> tuple[ast.stmt, ast.expr] | None:
    """``attr = value`` (or ``attr: T = value``) in the class body."""
    for stmt in cls.node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and stmt.targets[0].id == attr:
            return stmt, stmt.value
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr \
                and stmt.value is not None:
            return stmt, stmt.value
    return None


def is_mutable_container(ctx: "FileContext", expr: ast.expr) -> bool:
    if isinstance(expr, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    if isinstance(expr, ast.Call) and not expr.args and not expr.keywords:
        qual = ctx.model.qualify(expr.func)
        return qual is not None and (qual.removeprefix("builtins.") in _MUTABLE_CALLS or qual in _MUTABLE_CALLS)
    return False


def method_of(node: ast.AST) -> ast.AST | None:
    """The function whose code ``node`` is part of (see flow.function_of)."""
    func = function_of(node)
    return func if isinstance(func, FunctionNode) else None


def self_name(func: ast.AST) -> str | None:
    params = positional_params(func)
    return params[0] if params else None


# ------------------------------------------------------------ the caller's code, by its names

# Parameter and attribute names that hold the caller's model or a function to
# run, when handed to another call (`_run_forward(forward_fn, inputs)`); not
# data about it (`additional_forward_args`, `module_name`).
_CALLABLE_WORDS = ("forward", "func", "fn", "model", "net", "callable", "closure")
_DATA_WORDS = ("arg", "input", "name", "kw", "num", "size", "shape", "type", "kind")
_CLEANUP_CALLS = ("remove", "del", "clear", "reset", "restore", "undo", "close", "detach")
_INSPECTING_BUILTINS = frozenset({"len", "isinstance", "hasattr", "getattr", "id", "type", "print", "repr", "str",
                                  "list", "tuple", "dict", "set", "sorted", "bool", "int", "float"})


def is_recursive_call(call: ast.Call, func: ast.AST | None) -> bool:
    """Does ``call`` call ``func`` itself (``walk(child, ...)`` inside ``walk``,
    ``self.walk(child)`` inside the method ``walk``)?  A function that hooks a
    module and recurses into its children registers more hooks; the recursion
    runs no model."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    f = call.func
    if isinstance(f, ast.Name):
        return f.id == func.name
    return isinstance(f, ast.Attribute) and f.attr == func.name and isinstance(f.value, ast.Name) \
        and f.value.id in ("self", "cls")


def runs_callers_code_by_name(call: ast.Call, func: ast.AST, model: Any) -> bool:
    """:func:`_runs_callers_code` for a call in ``func``."""
    arguments = _all_params(func)
    params = {a.arg for a in arguments}
    self_name = arguments[0].arg if arguments and is_self_param(model, arguments[0]) else None
    return _runs_callers_code(call, params, self_name, model.enclosing_class(func))


def _runs_callers_code(call: ast.Call, params: set[str], self_name: str | None, cls: ClassInfo | None) -> bool:
    """``model(x)``, ``forward_fn(...)``, ``self.model(x)``, ``model.forward(x)``,
    ``self.forward_func(...)``, or a call handed a function or model to run
    (``_run_forward(forward_fn, inputs)``); not ``model.eval()``."""
    def callable_name(name: str) -> bool:
        name = name.lower()
        return any(w in name for w in _CALLABLE_WORDS) and not any(w in name for w in _DATA_WORDS)

    def given(expr: ast.AST) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in params and expr.id != self_name
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == self_name:
            # an attribute the object was given (`self.model = model`, maybe in a base
            # class of another file), not a method
            return cls is not None and cls.method(expr.attr) is None \
                and (bool(cls.attribute(expr.attr)) or callable_name(expr.attr))
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in params:
            return callable_name(expr.attr)  # `explainer.model(...)`
        return False

    func = call.func
    if isinstance(func, ast.Name) and func.id in _INSPECTING_BUILTINS:
        return False  # `len(layer._forward_hooks)` reads, it runs nothing
    called = (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")).lower().strip("_")
    if called.split("_")[0] in _CLEANUP_CALLS:
        return False  # tidying up after the run (`self.remove_attributes(self.model)`)
    if given(func):
        return True
    if isinstance(func, ast.Attribute) and func.attr == "forward" and given(func.value):
        return True
    for arg in list(call.args) + [k.value for k in call.keywords]:
        name = arg.id if isinstance(arg, ast.Name) else arg.attr if isinstance(arg, ast.Attribute) else ""
        if given(arg) and callable_name(name):
            return True
    return False


def callers_code_run_after(model: SemanticModel, call: ast.Call) -> ast.Call | None:
    """The first call after ``call``, in the function that makes it, that runs
    its caller's code: the model or forward function it was given (``out =
    model(x)``), in the same block or one nested in it, not in another branch."""
    func = model.enclosing_function(call)
    if func is None or isinstance(func, ast.Lambda):
        return None
    arguments = _all_params(func)
    params = {a.arg for a in arguments}
    self_name = arguments[0].arg if arguments and is_self_param(model, arguments[0]) else None
    cls = model.enclosing_class(func)
    later = sorted((n for n in executed_nodes(func) if isinstance(n, ast.Call) and n is not call
                    and _precedes_in_block(call, n, func)), key=lambda n: (n.lineno, n.col_offset))
    for candidate in later:
        name = candidate.func.attr if isinstance(candidate.func, ast.Attribute) else ""
        if name.startswith("register") or name == "apply" or is_recursive_call(candidate, func):
            continue
        if _runs_callers_code(candidate, params, self_name, cls):
            return candidate
    return None


def _precedes_in_block(first: ast.AST, second: ast.AST, func: ast.AST) -> bool:
    """Does the statement running ``first`` come before the one running
    ``second`` in a block that holds both (not in two branches of an ``if``)?"""
    def chain(node: ast.AST) -> list[tuple[int, int]]:
        out = []
        cur: ast.AST | None = node
        while cur is not None and cur is not func:
            if isinstance(cur, ast.stmt):
                pos = block_of(cur)
                if pos is not None:
                    out.append((id(pos[0]), pos[1]))
            cur = getattr(cur, "_hl_parent", None)
        return out

    if first is second:
        return False
    seconds = dict(chain(second))
    for block, index in chain(first):
        if block in seconds:
            return index < seconds[block] or (index == seconds[block] and _before(first, second))
    return False


def _before(a: ast.AST, b: ast.AST) -> bool:
    return (getattr(a, "lineno", 0), getattr(a, "col_offset", 0)) < (getattr(b, "lineno", 0), getattr(b, "col_offset", 0))


def _all_params(func: ast.AST) -> list[ast.arg]:
    args = func.args  # type: ignore[attr-defined]
    out = list(args.posonlyargs) + list(args.args) + list(args.kwonlyargs)
    if args.vararg:
        out.append(args.vararg)
    if args.kwarg:
        out.append(args.kwarg)
    return out


# ------------------------------------------------------------ handles overwritten by Module.apply

@dataclass(frozen=True)
class ApplyOverwrite:
    """A registration in a function that ``module.apply(fn)`` runs on every
    submodule, whose handle is kept under the visited module (``d[m] = h``,
    ``m.attr = h``) with no check that the module already has one.
    ``Module.apply`` visits a submodule once per parent that holds it, so a
    module shared by two parents is hooked twice and the second handle
    overwrites the first."""

    apply_call: ast.Call  # the `model.apply(fn)` that runs the function
    store: ast.AST  # the target the handle is stored in (`d[m]`, `m.attr`)
    module_param: str
    wrong_check: ast.Call | None = None  # `hasattr(m, "other_name")`: a check of another attribute


def apply_overwrite(ctx: "FileContext", reg: "Registration") -> ApplyOverwrite | None:
    func = function_of(reg.call)
    if not isinstance(func, FunctionNode) or not isinstance(reg.receiver, ast.Name):
        return None
    found = _applied_with(ctx, func)
    if found is None:
        return None
    apply_call, module_param = found
    bindings = ctx.model.bindings_at(reg.receiver)
    if reg.receiver.id != module_param or len(bindings) != 1 or bindings[0].kind != "param" \
            or bindings[0].scope.node is not func:
        return None
    store = _store_under_module(ctx, reg, func, module_param)
    if store is None:
        return None
    guard, wrong = _checked_before(ctx, reg.call, func, module_param, store)
    if guard:
        return None
    return ApplyOverwrite(apply_call, store, module_param, wrong)


def _applied_with(ctx: "FileContext", func: ast.AST) -> tuple[ast.Call, str] | None:
    """The ``<module>.apply(func)`` (or ``apply(partial(func, ...))``,
    ``apply(self.func)``) of the file, and the parameter that gets each module."""
    from hooklint.static.values import CallableValue, ClassValue

    for call in ctx.model.calls_of_method("apply"):
        if len(call.args) != 1 or call.keywords or isinstance(call.args[0], ast.Starred):
            continue
        receiver = call.func.value  # type: ignore[attr-defined]
        if isinstance(ctx.inference.infer(receiver), ClassValue):
            continue  # autograd.Function.apply
        target = ctx.inference.infer(call.args[0])
        if isinstance(target, CallableValue) and target.node is func and target.params:
            return call, target.params[0]
    return None


def _store_under_module(ctx: "FileContext", reg: "Registration", func: ast.AST,
                        module_param: str) -> ast.AST | None:
    """``d[m] = <registration>``, ``d[m] = (<registration>, ...)``, ``m.attr =
    <registration>``, or through one local name (``h = ...; m.attr = h``):
    the target, when ``d`` outlives the call (it is not created in ``func``)."""
    node: ast.AST = reg.call
    parent = getattr(node, "_hl_parent", None)
    while isinstance(parent, (ast.Tuple, ast.List)):
        node, parent = parent, getattr(parent, "_hl_parent", None)
    value: ast.AST | None = None
    if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1:
        target = parent.targets[0]
        if isinstance(target, ast.Name) and node is reg.call:
            uses = [n for n in executed_nodes(func) if isinstance(n, ast.Name) and n.id == target.id
                    and isinstance(n.ctx, ast.Load)]
            if len(uses) != 1:
                return None
            holder = getattr(uses[0], "_hl_parent", None)
            if not (isinstance(holder, ast.Assign) and holder.value is uses[0] and len(holder.targets) == 1):
                return None
            value = holder.targets[0]
        else:
            value = target
    if isinstance(value, ast.Subscript) and _is_name(value.slice, module_param):
        container = root_name(value.value)
        if container is None:
            return None
        if container.id == module_param:
            return None
        if isinstance(value.value, ast.Name):
            created_here = [b for b in ctx.model.bindings_at(value.value) if contains(func, b.node)]
            if created_here:
                return None  # a dict made on each call: nothing is kept across visits
        return value
    if isinstance(value, ast.Attribute) and _is_name(value.value, module_param):
        return value
    return None


def _is_name(expr: ast.AST, name: str) -> bool:
    return isinstance(expr, ast.Name) and expr.id == name


_HOOK_DICTS = frozenset({"_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"})


def _checked_before(ctx: "FileContext", node: ast.AST, func: ast.AST, module_param: str,
                    store: ast.AST) -> tuple[bool, ast.Call | None]:
    """(a condition on the way can skip a module seen before, a ``hasattr``
    that checks another attribute than the one stored)."""
    tests: list[ast.AST] = []
    child: ast.AST = node
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not func:
        if isinstance(cur, (ast.If, ast.While, ast.IfExp)) and child is not cur.test:
            tests.append(cur.test)
        if isinstance(cur, ast.stmt):
            pos = block_of(cur)
            if pos is not None:
                for earlier in pos[0][:pos[1]]:
                    if isinstance(earlier, ast.If) and any(
                            isinstance(n, (ast.Return, ast.Continue, ast.Raise)) for n in executed_nodes(earlier)):
                        tests.append(earlier.test)
        child, cur = cur, getattr(cur, "_hl_parent", None)
    stored_attr = store.attr if isinstance(store, ast.Attribute) else None
    container = src_text(store.value) if isinstance(store, ast.Subscript) else None
    wrong: ast.Call | None = None
    for test in tests:
        for sub in ast.walk(test):
            if isinstance(sub, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in sub.ops) \
                    and _is_module_itself(sub.left, module_param):
                return True, None  # `m in seen`, `id(m) in done` (not `type(m) in table`)
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in ("hasattr", "getattr") \
                    and len(sub.args) >= 2 and _is_name(sub.args[0], module_param):
                name = sub.args[1]
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                    return True, None
                if stored_attr is None or name.value == stored_attr:
                    return True, None
                wrong = sub
            if isinstance(sub, ast.Attribute) and _is_name(sub.value, module_param) \
                    and (sub.attr == stored_attr or sub.attr in _HOOK_DICTS):
                return True, None
            if container is not None and isinstance(sub, (ast.Name, ast.Attribute)) and src_text(sub) == container:
                return True, None
    return False, wrong


def _is_module_itself(expr: ast.AST, name: str) -> bool:
    if _is_name(expr, name):
        return True
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "id" \
        and len(expr.args) == 1 and _is_name(expr.args[0], name)


def src_text(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001 - odd trees must not crash the linter
        return ""


# ------------------------------------------------------------ handles overwritten on the next run

@dataclass(frozen=True)
class OverwrittenEachRun:
    """The handles a function's run registers end up in a name of an
    enclosing function (``nonlocal``) or of the module (``global``), which the
    next run assigns again: only the last run's handles can be removed."""

    assignment: ast.AST  # `handles_to_remove = hook_handles`
    name: str


def overwritten_each_run(ctx: "FileContext", reg: "Registration", func: ast.AST) -> OverwrittenEachRun | None:
    """``h = <registration>; hs.append(h)`` (or ``hs.append(<registration>)``)
    with ``hs = []`` made in ``func``, then ``outer = hs`` where ``outer`` is
    declared ``nonlocal`` or ``global`` in ``func``; or ``outer = <registration>``
    directly.  None when the handles are removed in ``func`` or go anywhere else."""
    scope = ctx.model.scopes.get(func)
    if scope is None:
        return None
    shared = scope.nonlocals | scope.globals_
    if not shared:
        return None
    parent = getattr(reg.call, "_hl_parent", None)
    holder: ast.Name | None = None
    if isinstance(parent, ast.Assign) and parent.value is reg.call and len(parent.targets) == 1 \
            and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
        if name in shared:
            return OverwrittenEachRun(parent, name)
        mine = [b for b in ctx.model.scopes[func].bindings.get(name, ()) if b.node is parent]
        uses = [u for u in _loads_in(func, name) if mine and mine[0] in ctx.model.bindings_at(u)]
        if len(uses) != 1:
            return None
        use_parent = getattr(uses[0], "_hl_parent", None)
        holder = _appended_to(use_parent, uses[0])
    elif isinstance(parent, ast.Call):
        holder = _appended_to(parent, reg.call)
    if holder is None or holder.id in shared:
        return None
    bindings = ctx.model.bindings_at(holder)
    if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path \
            or not isinstance(bindings[0].value, ast.List) or bindings[0].value.elts \
            or not contains(func, bindings[0].node):
        return None  # not one fresh list made by this function
    binding = bindings[0]
    found: OverwrittenEachRun | None = None
    for use in _loads_in(func, holder.id):
        if binding not in ctx.model.bindings_at(use):
            continue
        use_parent = getattr(use, "_hl_parent", None)
        if isinstance(use_parent, ast.Attribute) and use_parent.attr == "append":
            continue
        if isinstance(use_parent, ast.Assign) and use_parent.value is use and len(use_parent.targets) == 1 \
                and isinstance(use_parent.targets[0], ast.Name) and use_parent.targets[0].id in shared:
            found = OverwrittenEachRun(use_parent, use_parent.targets[0].id)
            continue
        return None  # iterated (removed?), returned, passed on: not followed
    return found


def _loads_in(func: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in executed_nodes(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]


def _appended_to(call: ast.AST | None, item: ast.AST) -> ast.Name | None:
    """``hs.append(item)`` as a statement: the ``hs``."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append" \
            and call.args == [item] and isinstance(call.func.value, ast.Name) \
            and isinstance(getattr(call, "_hl_parent", None), ast.Expr):
        return call.func.value
    return None


# ------------------------------------------------------------ wrapper objects nobody closes

# Methods Python runs by itself: a removal there happens without a call.
_AUTOMATIC_METHODS = frozenset({"__del__", "__exit__", "__aexit__", "__init__"})
# What a caller may do with a container of wrappers without reaching their cleanup methods.
_READ_ONLY_BUILTINS = frozenset({"list", "tuple", "len", "sorted", "reversed", "iter", "next", "enumerate"})


@dataclass(frozen=True)
class HookWrapper:
    """A local class whose constructor registers a hook on a module it is
    given, keeps the handle in ``self.<attr>`` and removes it only in
    methods its users must call (``close()``)."""

    cls: ClassInfo
    registration: "Registration"
    attr: str
    param: str  # the constructor parameter that is hooked
    cleanup: tuple[str, ...]  # the methods that remove the handle


def hook_wrappers(ctx: "FileContext") -> dict[int, HookWrapper]:
    """By id of the class node."""
    from hooklint.static.outside import outside_root

    out: dict[int, HookWrapper] = {}
    for reg in ctx.hooks.registrations:
        func = function_of(reg.call)
        if not isinstance(func, FunctionNode) or func.name != "__init__" or reg.receiver is None:
            continue
        cls = ctx.model.enclosing_class(func)
        if cls is None or func not in cls.methods.values():
            continue
        dest = destination(ctx, reg)
        if dest.kind != "attribute" or dest.owner is not cls or dest.attr is None:
            continue
        found = outside_root(ctx.model, ctx.inference, reg.receiver)
        if found is None or not isinstance(found[1], ast.Name):
            continue
        param = found[1].id
        if param not in positional_params(func)[1:]:
            continue
        cleanup: list[str] = []
        clean = True
        for method in cls.methods.values():
            for node in executed_nodes(method):
                if isinstance(node, ast.Attribute) and node.attr == dest.attr and isinstance(node.ctx, ast.Load) \
                        and self_attribute(ctx, node) is not None:
                    parent = getattr(node, "_hl_parent", None)
                    call = getattr(parent, "_hl_parent", None)
                    if isinstance(parent, ast.Attribute) and parent.attr == "remove" and isinstance(call, ast.Call) \
                            and call.func is parent:
                        cleanup.append(method.name)  # type: ignore[attr-defined]
                    elif not (isinstance(parent, ast.Compare)):
                        clean = False
        # reads in nested functions (the hook itself) and in other classes: not followed
        if not clean or not cleanup or set(cleanup) & _AUTOMATIC_METHODS:
            continue
        if _attribute_read_outside_methods(ctx, cls, dest.attr):
            continue
        out[id(cls.node)] = HookWrapper(cls, reg, dest.attr, param, tuple(dict.fromkeys(cleanup)))
    return out


def _attribute_read_outside_methods(ctx: "FileContext", cls: ClassInfo, attr: str) -> bool:
    """``<x>.<attr>`` read other than as ``self.<attr>`` in a method of ``cls``."""
    for node in walk_tree(ctx.tree):
        if isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, ast.Load):
            found = self_attribute(ctx, node)
            if found is None:
                return True  # `obj.handle`: another object's, or a wrapper's read from outside
            if found[0] is not cls and (cls in found[0].local_bases or found[0] in cls.local_bases):
                return True
    return False


@dataclass(frozen=True)
class LostWrapper:
    """``W(...)`` of a hook wrapper whose object ends where nothing can call
    its cleanup method: dropped, or kept in a local container that is only
    read for other attributes."""

    call: ast.Call
    wrapper: HookWrapper
    argument: ast.expr  # what the call hands to the hooked parameter
    kept_in: str | None  # the container's name, None when dropped


def lost_wrappers(ctx: "FileContext") -> list[LostWrapper]:
    wrappers = hook_wrappers(ctx)
    if not wrappers:
        return []
    cleanup_called = {name for w in wrappers.values() for name in w.cleanup if ctx.model.method_calls.get(name)}
    out: list[LostWrapper] = []
    for info in {id(w.cls.node): w for w in wrappers.values()}.values():
        if set(info.cleanup) & cleanup_called:
            continue  # something calls `close()`: hooklint does not tell on which object
        for call in ctx.model.name_calls.get(info.cls.name, ()):
            bindings = ctx.model.bindings_at(call.func)  # type: ignore[arg-type]
            if len(bindings) != 1 or bindings[0].node is not info.cls.node:
                continue
            argument = _argument_for(call, info)
            if argument is None:
                continue
            kept = _lost_object(ctx, call, info)
            if kept is False:
                continue
            out.append(LostWrapper(call, info, argument, kept))  # type: ignore[arg-type]
    return out


def _argument_for(call: ast.Call, info: HookWrapper) -> ast.expr | None:
    init = function_of(info.registration.call)
    params = positional_params(init)[1:]
    index = params.index(info.param)
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    if index < len(call.args):
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == info.param:
            return kw.value
    return None


def _lost_object(ctx: "FileContext", call: ast.Call, info: HookWrapper) -> str | None | bool:
    """Where the new object goes: None when dropped, the name of a local
    container only read for other attributes, or False (it may be closed)."""
    parent = getattr(call, "_hl_parent", None)
    if isinstance(parent, ast.Expr):
        return None
    func = function_of(call)
    if not isinstance(func, FunctionNode):
        return False
    holder: ast.Name | None = None
    if isinstance(parent, ast.Assign) and parent.value is call and len(parent.targets) == 1 \
            and isinstance(parent.targets[0], ast.Subscript) and isinstance(parent.targets[0].value, ast.Name):
        holder = parent.targets[0].value
    elif isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "append" \
            and isinstance(parent.func.value, ast.Name) and isinstance(getattr(parent, "_hl_parent", None), ast.Expr):
        holder = parent.func.value
    if holder is None:
        return False
    bindings = ctx.model.bindings_at(holder)
    if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
        return False
    binding = bindings[0]
    if not is_mutable_container(ctx, binding.value) and not _is_ordered_dict(ctx, binding.value):  # type: ignore[arg-type]
        return False
    owner = binding.scope.node
    if not isinstance(owner, FunctionNode):
        return False
    for node in ast.walk(owner):
        if not (isinstance(node, ast.Name) and node.id == holder.id and isinstance(node.ctx, ast.Load)):
            continue
        if binding not in ctx.model.bindings_at(node):
            continue
        if not _read_only_use(node, info):
            return False
    return holder.id


def _is_ordered_dict(ctx: "FileContext", expr: ast.AST) -> bool:
    return isinstance(expr, ast.Call) and not expr.args and not expr.keywords \
        and ctx.model.qualify(expr.func) in ("collections.OrderedDict", "collections.defaultdict")


def _read_only_use(node: ast.Name, info: HookWrapper) -> bool:
    """``d[k] = W(...)``, ``d[k].attr``, ``k in d``, ``list(d.values())[-1].attr``,
    ``d.append(W(...))``: uses that reach no cleanup method of the objects."""
    parent = getattr(node, "_hl_parent", None)
    if isinstance(parent, ast.Compare) and node in parent.comparators:
        return True
    if isinstance(parent, ast.Subscript) and parent.value is node:
        if isinstance(parent.ctx, ast.Store):
            return True
        return _element_read(parent, info)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        call = getattr(parent, "_hl_parent", None)
        if parent.attr == "append" and isinstance(call, ast.Call) and call.func is parent:
            return True
        if parent.attr in ("values", "items", "keys") and isinstance(call, ast.Call) and call.func is parent:
            outer = getattr(call, "_hl_parent", None)
            if parent.attr == "keys":
                return True
            if isinstance(outer, ast.Call) and isinstance(outer.func, ast.Name) and outer.func.id in _READ_ONLY_BUILTINS:
                if outer.func.id == "len":
                    return True
                sub = getattr(outer, "_hl_parent", None)
                return isinstance(sub, ast.Subscript) and sub.value is outer and _element_read(sub, info)
        return False
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "len":
        return True
    return False


def _element_read(element: ast.AST, info: HookWrapper) -> bool:
    """An element of the container, then an attribute of it that is not a
    cleanup method (``features[name].features``)."""
    parent = getattr(element, "_hl_parent", None)
    return isinstance(parent, ast.Attribute) and parent.value is element and parent.attr not in info.cleanup \
        and isinstance(parent.ctx, ast.Load) and not isinstance(getattr(parent, "_hl_parent", None), ast.Call)


def is_test_file(path: str) -> bool:
    parts = path.replace("\\", "/").split("/")
    return any(p in ("tests", "test", "testing") for p in parts[:-1]) or parts[-1].startswith("test_") \
        or parts[-1].endswith("_test.py") or parts[-1] == "conftest.py"


def is_script(tree: ast.Module) -> bool:
    """A file with an ``if __name__ == "__main__":`` block (a conversion script in a package)."""
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare) and isinstance(stmt.test.left, ast.Name) \
                and stmt.test.left.id == "__name__":
            return True
    return False


def refuses_held_keys(ctx: "FileContext", cls: ClassInfo, attr: str, stores: list[ast.AST]) -> bool:
    """A dict of handles shared by the instances as a registry, on purpose:
    every store is ``self.<attr>[key] = handle`` with ``key`` a parameter of
    the storing method, which first refuses a key the class already holds
    (``if key in self.<registry>: raise``, the registry a class-body
    container, this one or another), and every removal takes one key
    (``self.<attr>[key].remove()``, ``self.<attr>.pop(key).remove()``), none
    goes through them all.  One instance then never overwrites another's
    handle, and removing its keys removes only its hooks (sparseml's
    ``LayerParamMasking``, keyed by layer name)."""
    for store in stores:
        if not (isinstance(store, ast.Assign) and len(store.targets) == 1
                and isinstance(store.targets[0], ast.Subscript)):
            return False
        key = store.targets[0].slice
        method = method_of(store)
        if not isinstance(key, ast.Name) or method is None or key.id not in _parameters(method):
            return False
        if not _refused_before(ctx, cls, attr, method, key.id, store.lineno):  # type: ignore[attr-defined]
            return False
    for removal in removals(ctx, cls, attr):
        receiver = removal.call.func.value  # type: ignore[attr-defined]
        keyed = isinstance(receiver, ast.Subscript) or (
            isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute)
            and receiver.func.attr in ("pop", "get") and bool(receiver.args))
        if not keyed:
            return False
    return True


def _parameters(func: ast.AST) -> set[str]:
    args = func.args  # type: ignore[attr-defined]
    return {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}


def _refused_before(ctx: "FileContext", cls: ClassInfo, attr: str, method: ast.AST, key: str, line: int) -> bool:
    """``if <key> in self.<registry>: raise ...`` (or ``return``) in the
    method's own body, before ``line``, with a class-body registry that is
    the dict of handles itself or one the method fills under the same key."""
    for stmt in method.body:  # type: ignore[attr-defined]
        if stmt.lineno >= line:
            return False
        if not (isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare) and len(stmt.test.ops) == 1
                and isinstance(stmt.test.ops[0], ast.In) and isinstance(stmt.test.left, ast.Name)
                and stmt.test.left.id == key and stmt.body and isinstance(stmt.body[-1], (ast.Raise, ast.Return))):
            continue
        found = self_attribute(ctx, stmt.test.comparators[0])
        if found is not None and found[0] is cls and _class_level(cls, found[1]) \
                and (found[1] == attr or _fills(ctx, cls, method, found[1], key)):
            return True
    return False


def _fills(ctx: "FileContext", cls: ClassInfo, method: ast.AST, registry: str, key: str) -> bool:
    """``self.<registry>[key] = ...`` in ``method``."""
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Name) and t.slice.id == key
                and (found := self_attribute(ctx, t.value)) is not None and found[0] is cls and found[1] == registry
                for t in node.targets):
            return True
    return False


def _class_level(cls: ClassInfo, attr: str, depth: int = 0) -> bool:
    if class_body_value(cls, attr) is not None:
        return True
    return depth < 8 and any(_class_level(base, attr, depth + 1) for base in cls.local_bases)
