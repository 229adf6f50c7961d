"""Per-element state a hook reads, keyed from another collection than the one hooked.

A class registers one hook per element of a collection (each parameter of the
optimizer's groups, each layer of the model) and the hook looks its element
up in a dict on ``self``::

    self._delay = {p: steps for _, p in named_parameters}     # keys: the caller's names
    for group in self.param_groups:                            # hooks: every parameter
        for p in group["params"]:
            p.register_post_accumulate_grad_hook(self._make_hook(p))

    def _make_hook(self, p):
        def hook(*_):
            self._delay[p] -= 1                                    # KeyError for an unnamed one

When the dict's keys come from another collection than the loop that places
the hooks (an optional argument, a subset), an element hooked but not keyed
makes the hook raise ``KeyError`` in the backward (or forward) pass.  This
module answers, per registration made in a loop: which element the hook is
bound to, which dicts of ``self`` it indexes with it (``d[p]``, not ``d.get(p)``
nor under ``if p in d``), and where those dicts' keys come from, in the
class's own terms (an ``__init__`` parameter, ``self.param_groups``...).
It never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.context import FileContext
from hooklint.static.identity import holding_tests
from hooklint.static.semantic import FunctionNode

__all__ = ["UncoveredKeyRead", "uncovered_key_reads"]

# calls that keep the elements of their argument (the keys stay the argument's)
_KEEPING = frozenset({"sorted", "list", "tuple", "set", "frozenset", "reversed", "enumerate", "zip", "iter"})


@dataclass(frozen=True)
class UncoveredKeyRead:
    registration: ast.Call
    loop: ast.For  # the loop whose element the hook is bound to
    hooked_from: str  # the hooked collection, as written
    read: ast.Subscript  # `self._delay[p]` in the hook
    dict_attr: str
    keyed_from: str  # where the dict's keys come from, in words
    keyed_at: ast.AST  # the statement that builds the dict


def uncovered_key_reads(ctx: FileContext) -> list[UncoveredKeyRead]:
    found: list[UncoveredKeyRead] = []
    seen: set[int] = set()
    for reg in _per_element_candidates(ctx):
        if reg.hook is None or reg.hook_expr is None or id(reg.call) in seen:
            continue
        cls = ctx.model.enclosing_class(reg.call)
        if cls is None:
            continue
        bound = _bound_element(ctx, reg)
        if bound is None:
            continue
        loop, element, key_name, hook_node = bound
        hooked_root = _collection_root(loop.iter, loop)
        if hooked_root is None:
            continue
        filled_by_hook = _dicts_stored_in(hook_node)
        for read, attr in _unguarded_reads(hook_node, key_name):
            keyed = _key_sources(cls.node, attr, ignore=filled_by_hook | {attr})
            if keyed is None:
                continue
            roots, statement = keyed
            if not roots or any(_same_or_derived(r, hooked_root, cls.node) for r in roots):
                continue
            if _registration_filtered_by(reg.call, element, attr, roots):
                continue
            seen.add(id(reg.call))
            found.append(UncoveredKeyRead(reg.call, loop, _text(hooked_root), read, attr,
                                          " and ".join(f"`{_text(r)}`" for r in roots), statement))
            break
    return found


# -- the element the hook is bound to ----------------------------------------


@dataclass(frozen=True)
class _Hooking:
    """A registering call, module / tensor hook or autograd Node hook alike."""

    call: ast.Call
    hook_expr: ast.expr | None
    hook: object  # CallableValue


def _per_element_candidates(ctx: FileContext) -> list[_Hooking]:
    """Registrations made in a loop: torch's module and tensor hooks, and hooks
    on autograd Nodes (``p.expand_as(p).grad_fn.next_functions[0][0]``, the
    AccumulateGrad node of a parameter), which the hook index leaves out
    (their signature differs) but which are placed per element the same way."""
    found = [_Hooking(r.call, r.hook_expr, r.hook) for r in ctx.hooks.registrations if _in_loop(r.call)]
    known = {id(h.call) for h in found}
    for node in ctx.model.calls_of_method("register_hook", "register_prehook"):  # indexed once per file
        if isinstance(node.func, ast.Attribute) and id(node) not in known \
                and len(node.args) == 1 and not node.keywords and _in_loop(node) \
                and ctx.hooks.is_autograd_node(node.func.value):
            hook = ctx.inference.callable_of(node.args[0])
            if hook is not None:
                found.append(_Hooking(node, node.args[0], hook))
    return found


def _in_loop(node: ast.AST) -> bool:
    parent = getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(parent, FunctionNode + (ast.ClassDef, ast.Module)):
        if isinstance(parent, ast.For):
            return True
        parent = getattr(parent, "_hl_parent", None)
    return False


def _bound_element(ctx: FileContext, reg):
    """(loop, the loop's element name, the name the hook's body calls it, the
    hook's function) for a hook made per element: a factory called with the
    element (``self._make_hook(p)``), ``partial(fn, p)``, or a nested
    function / lambda of the loop that closes over it."""
    hook_node = reg.hook.node
    expr = reg.hook_expr
    if isinstance(expr, ast.Call):
        args = list(expr.args)
        callee = expr.func
        if isinstance(callee, ast.Name) and callee.id == "partial" or \
                isinstance(callee, ast.Attribute) and callee.attr == "partial":
            if not args:
                return None
            target = args[0]
            args = args[1:]
            params = _params_of(ctx, target)
            factory = None
        else:
            factory = ctx.model.enclosing_function(hook_node)
            if not isinstance(factory, FunctionNode):
                return None
            params = _positional(factory)
        for index, arg in enumerate(args):
            if not isinstance(arg, ast.Name) or index >= len(params):
                continue
            loop = _loop_over(arg.id, reg.call)
            if loop is not None:
                return loop, arg.id, params[index], hook_node
        return None
    if isinstance(expr, (ast.Name, ast.Lambda)):
        # a nested function or lambda defined in the loop's function, closing over the element
        for name in _free_names(hook_node):
            loop = _loop_over(name, reg.call)
            if loop is not None and ctx.model.enclosing_function(hook_node) is ctx.model.enclosing_function(reg.call):
                return loop, name, name, hook_node
    return None


def _params_of(ctx: FileContext, target: ast.expr) -> list[str]:
    value = ctx.inference.infer(target)
    node = getattr(value, "node", None)
    if not isinstance(node, FunctionNode):
        return []
    params = _positional(node)
    return params


def _positional(func: ast.AST) -> list[str]:
    args = func.args  # type: ignore[attr-defined]
    names = [a.arg for a in args.posonlyargs + args.args]
    return names[1:] if names and names[0] in ("self", "cls") else names


def _free_names(func: ast.AST) -> list[str]:
    bound = {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}  # type: ignore[attr-defined]
    defaults = [d for d in func.args.defaults if isinstance(d, ast.Name)]  # type: ignore[attr-defined]
    names = [d.id for d in defaults]  # `lambda g, p=p: ...` binds the element as a default
    body = func.body if isinstance(func.body, list) else [func.body]  # type: ignore[attr-defined]
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in bound:
                names.append(n.id)
    return names


def _loop_over(name: str, node: ast.AST) -> ast.For | None:
    """The ``for`` loop around ``node`` (in its function) whose target binds ``name``."""
    child, parent = node, getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(parent, FunctionNode + (ast.ClassDef, ast.Module)):
        if isinstance(parent, ast.For) and any(child is s for s in parent.body) \
                and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(parent.target)):
            return parent
        child, parent = parent, getattr(parent, "_hl_parent", None)
    return None


# -- what the hook reads ----------------------------------------------------------


def _unguarded_reads(hook: ast.AST, key: str):
    """``self.d[key]`` read (or updated in place) in the hook's body, with no
    ``key in self.d`` test holding and no ``except KeyError`` around it."""
    for node in ast.walk(hook):
        if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id == key
                and isinstance(node.value, ast.Attribute) and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "self"):
            continue
        if isinstance(node.ctx, ast.Store) and not isinstance(getattr(node, "_hl_parent", None), ast.AugAssign):
            continue
        if isinstance(node.ctx, ast.Del):
            continue
        attr = node.value.attr
        if _guarded(node, key, attr):
            continue
        yield node, attr


def _guarded(node: ast.AST, key: str, attr: str) -> bool:
    for test in holding_tests(node):
        for compare in ast.walk(test):
            if isinstance(compare, ast.Compare) and isinstance(compare.left, ast.Name) and compare.left.id == key \
                    and any(isinstance(c, ast.Attribute) and c.attr == attr for c in compare.comparators):
                return True
    parent = getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(parent, FunctionNode + (ast.Lambda,)):
        if isinstance(parent, ast.Try) and any(
                h.type is None or "KeyError" in ast.dump(h.type) or "Exception" in ast.dump(h.type)
                for h in parent.handlers):
            return True
        parent = getattr(parent, "_hl_parent", None)
    return False


# -- where the dict's keys come from -------------------------------------------------


def _dicts_stored_in(hook: ast.AST) -> set[str]:
    """``self.<d>`` the hook stores into by key: their keys are elements hooks ran for."""
    return {n.value.attr for n in ast.walk(hook) if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)
            and _is_plain_self_attr(n.value)}


def _key_sources(cls: ast.ClassDef, attr: str, ignore: set[str]) -> tuple[list[ast.expr], ast.AST] | None:
    """The collections the keys of ``self.<attr>`` are drawn from, when every
    way the class fills it is seen: ``{k: v for ... in X}``, ``dict.fromkeys(X)``,
    ``dict(zip(X, ...))``, or ``{}`` filled by ``self.<attr>[k] = v`` in loops
    over X.  None when anything else fills it (``defaultdict``, ``update``,
    ``setdefault``, stores outside such loops, an unknown value)."""
    roots: list[ast.expr] = []
    statement = None
    # a store in a loop over the dict itself, or over a dict the hooks fill, re-sets keys a hook
    # already saw: it adds none before the hook's first read
    ignored = {f"self.{name}" for name in ignore}
    for method in (s for s in cls.body if isinstance(s, FunctionNode)):
        for node in ast.walk(method):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("update", "setdefault", "__setitem__", "get") \
                    and _is_self_attr(node.func.value, attr) and node.func.attr != "get":
                return None
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if _is_self_attr(target, attr):
                        value = node.value
                        if isinstance(value, ast.Dict) and not value.keys:
                            statement = statement or node
                            continue
                        root = _comprehension_keys(value)
                        if root is None:
                            return None
                        roots.append(root)
                        statement = node
                    elif isinstance(target, ast.Subscript) and _is_self_attr(target.value, attr):
                        loop_root = _store_loop_root(target)
                        if loop_root is None:
                            return None
                        if _text(loop_root) not in ignored:
                            roots.append(loop_root)
            elif isinstance(node, ast.AnnAssign) and node.value is not None and _is_self_attr(node.target, attr):
                if isinstance(node.value, ast.Dict) and not node.value.keys:
                    statement = statement or node
                    continue
                root = _comprehension_keys(node.value)
                if root is None:
                    return None
                roots.append(root)
                statement = node
    if statement is None:
        return None
    return roots, statement


def _is_self_attr(expr: ast.AST, attr: str) -> bool:
    return isinstance(expr, ast.Attribute) and expr.attr == attr and isinstance(expr.value, ast.Name) \
        and expr.value.id == "self"


def _comprehension_keys(value: ast.expr) -> ast.expr | None:
    if isinstance(value, ast.DictComp) and len(value.generators) == 1 and not value.generators[0].ifs:
        gen = value.generators[0]
        if isinstance(value.key, ast.Name) and any(isinstance(n, ast.Name) and n.id == value.key.id
                                                   for n in ast.walk(gen.target)):
            return _peel(gen.iter)
        return None
    if isinstance(value, ast.Call) and value.args:
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr == "fromkeys":
            return _peel(value.args[0])
        if isinstance(func, ast.Name) and func.id == "dict" and isinstance(value.args[0], ast.Call) \
                and isinstance(value.args[0].func, ast.Name) and value.args[0].func.id == "zip" \
                and value.args[0].args:
            return _peel(value.args[0].args[0])
    return None


def _store_loop_root(target: ast.Subscript) -> ast.expr | None:
    if not isinstance(target.slice, ast.Name):
        return None
    loop = _loop_over(target.slice.id, target)
    if loop is None:
        return None
    root = _peel(loop.iter)
    if isinstance(root, ast.Call) and isinstance(root.func, ast.Attribute) and root.func.attr in (
            "items", "keys", "values") and not root.args:
        root = root.func.value
    return root


def _peel(expr: ast.expr) -> ast.expr:
    """``sorted(named_parameters)`` -> ``named_parameters``."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in _KEEPING \
            and expr.args:
        expr = expr.args[0]
    return expr


def _collection_root(iterable: ast.expr, loop: ast.For) -> ast.expr | None:
    """What a loop's elements come from, through enclosing loops:
    ``group["params"]`` of ``for group in self.param_groups`` -> ``self.param_groups``."""
    expr = _peel(iterable)
    for _ in range(4):
        base = expr
        while isinstance(base, (ast.Subscript, ast.Attribute)) and not _is_plain_self_attr(base):
            base = base.value
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute):
            base = base.func.value  # `model.parameters()` -> `model`
            continue_from = base
            expr = continue_from
            continue
        if isinstance(base, ast.Name):
            outer = _loop_over(base.id, loop)
            if outer is not None:
                expr, loop = _peel(outer.iter), outer
                continue
        return base
    return expr


def _is_plain_self_attr(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"


def _same_or_derived(root: ast.expr, hooked: ast.expr, cls: ast.ClassDef) -> bool:
    """The keys' collection is the hooked one, or may be built from it (a local
    rebound from an expression that reads the hooked collection)."""
    hooked_text = _text(hooked)
    if not hooked_text or _text(root) == hooked_text:
        return True
    if isinstance(root, ast.Name):
        func = _enclosing_function(root)
        if func is None:
            return False
        values = [n.value for n in ast.walk(func) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == root.id for t in n.targets)]
        return any(hooked_text in {_text(x) for x in ast.walk(v)} for v in values)
    return not isinstance(root, (ast.Name, ast.Attribute))  # something else: cannot say it differs


def _enclosing_function(node: ast.AST) -> ast.AST | None:
    parent = getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(parent, FunctionNode):
        parent = getattr(parent, "_hl_parent", None)
    return parent


def _registration_filtered_by(call: ast.Call, element: str, attr: str, roots: list[ast.expr]) -> bool:
    """``if p in self._delay:`` (or in the keys' collection) around the registration."""
    names = {f"self.{attr}"} | {_text(r) for r in roots}
    for test in holding_tests(call):
        for compare in ast.walk(test):
            if isinstance(compare, ast.Compare) and isinstance(compare.left, ast.Name) \
                    and compare.left.id == element and any(_text(c) in names for c in compare.comparators):
                return True
    return False


def _text(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _text(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""
