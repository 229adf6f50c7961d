"""How `forward` is reached, replaced or bound, and what that leaves of a module's hooks.

Facts of torch (docs/hook-semantics in /work/shared, verified in
tests/behaviour/test_forward_binding.py):

- module hooks run only from `Module.__call__` (`_call_impl`), never from
  `forward` itself;
- a module's hook dicts (`_forward_hooks`, `_forward_pre_hooks`,
  `_backward_hooks`, ...) live on the instance: an object made afresh (a
  constructor call, `torch.fx.symbolic_trace`, a `GraphModule`) has none;
- an instance attribute `forward` shadows the class's and is what
  `__call__` runs; a function stored there keeps the objects its closure
  captured (`copy.deepcopy` copies functions by reference), and a bound
  method saved at wrap time keeps the function it was bound to when the
  instance's `__class__` changes later.

Never imports torch, never runs the checked code.
"""

from __future__ import annotations

import ast
from typing import Iterator

from hooklint.static.context import FileContext
from hooklint.static.semantic import ClassInfo, is_staticmethod, positional_params
from hooklint.static.tree_walk import walk_tree

HOOK_DICTS = frozenset({
    "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
    "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
    "_state_dict_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
    "_state_dict_pre_hooks",
})


def _class_registers_hooks_on_self(ctx: FileContext, cls: ClassInfo) -> bool:
    """Does a method of ``cls`` register a module hook on ``self`` (its
    constructor hooking the new object, as `weight_norm`-like set-up does)?"""
    for reg in ctx.hooks.registrations:
        if not reg.kind.is_module or ctx.model.enclosing_class(reg.call) is not cls:
            continue
        receiver = reg.receiver
        if isinstance(receiver, ast.Name) and receiver.id == "self":
            return True
    return False


def fresh_unhooked_instance(ctx: FileContext, receiver: ast.AST) -> bool:
    """``Cls(...)`` used in the same expression (``Cls(...).forward(x)``):
    the object exists only there, so no one can have registered a hook on
    it, unless its own constructor does (a local class whose methods hook
    ``self``) or it is not a class at all (``weight_norm(layer)`` returns a
    hooked module).  Only classes whose constructor this file can see, or
    torch's own layers, count."""
    if not isinstance(receiver, ast.Call):
        return False
    cls = ctx.model.class_for_expr(receiver.func)
    if cls is not None:
        return not _class_registers_hooks_on_self(ctx, cls)
    qual = ctx.model.qualify(receiver.func) or ""
    head, _, last = qual.rpartition(".")
    return head in ("torch.nn", "torch.nn.modules") and last[:1].isupper()


def is_method_self(ctx: FileContext, expr: ast.AST) -> bool:
    """Is ``expr`` the ``self`` (first parameter) of a method?"""
    if not isinstance(expr, ast.Name):
        return False
    bindings = ctx.model.bindings_at(expr)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return False
    func = bindings[0].scope.node
    params = positional_params(func)
    return bool(params) and params[0] == expr.id and not is_staticmethod(func) \
        and ctx.model.enclosing_class(func) is not None


def walk_function(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own body, not of functions or classes nested in it."""
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


# --- a class's forward wrapped again by per-object code (HKL325) -------------

WRAPPED_CALL_PATH = frozenset({"forward", "__call__"})
_METACLASS_BASES = frozenset({"builtins.type", "abc.ABCMeta", "type", "ABCMeta"})


def _is_metaclass(ctx: FileContext, cls: ClassInfo | None) -> bool:
    if cls is None:
        return False
    for base_expr, qual in zip(cls.node.bases, cls.bases):
        if (qual or "") in _METACLASS_BASES or (qual or "").endswith(("Meta", "Metaclass", ".type")):
            return True
        local = ctx.model.class_for_expr(base_expr)
        if local is not None and local is not cls and _is_metaclass(ctx, local):
            return True
    return False


def _first_param(func: ast.AST) -> str | None:
    params = positional_params(func)
    return params[0] if params else None


def per_object_class_expr(ctx: FileContext, expr: ast.AST, func: ast.AST) -> str | None:
    """When ``expr`` names the class of the object the function works on, so
    that an assignment to its attribute runs once per object rather than once
    per class: ``type(x)`` and ``x.__class__`` for a parameter ``x``, ``cls``
    in ``__new__``, the enclosing class's own name in one of its methods.
    The words for it, or None.  In a metaclass the class *is* the object,
    built once: never."""
    cls = ctx.model.enclosing_class(func)
    if _is_metaclass(ctx, cls):
        return None
    first = _first_param(func)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "type" \
            and len(expr.args) == 1 and not expr.keywords and isinstance(expr.args[0], ast.Name):
        return f"the class of `{expr.args[0].id}`"
    if isinstance(expr, ast.Attribute) and expr.attr == "__class__" and isinstance(expr.value, ast.Name):
        return f"the class of `{expr.value.id}`"
    if not isinstance(expr, ast.Name) or cls is None or getattr(func, "_hl_parent", None) is not cls.node:
        return None
    decorators = {d.id for d in getattr(func, "decorator_list", ()) if isinstance(d, ast.Name)}
    if getattr(func, "name", "") == "__new__" and expr.id == first:
        return f"`{first}` in `__new__` (called for every new object)"
    if expr.id == cls.name and "classmethod" not in decorators and "staticmethod" not in decorators \
            and getattr(func, "name", "") not in ("__init_subclass__", "__class_getitem__"):
        return f"the class `{cls.name}` in a method run per object (`{getattr(func, 'name', '?')}`)"
    return None


def _same_expr(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a, annotate_fields=False) == ast.dump(b, annotate_fields=False)


def _reads_attr_of(value: ast.AST, owner: ast.AST, attr: str) -> bool:
    for node in ast.walk(value):
        if isinstance(node, ast.Attribute) and node.attr == attr and _same_expr(node.value, owner):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) >= 2 and _same_expr(node.args[0], owner) \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == attr:
            return True
    return False


def _conditional(node: ast.AST, func: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not func:
        if isinstance(cur, (ast.If, ast.While, ast.Try, ast.IfExp, ast.ExceptHandler)):
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def class_rewraps(ctx: FileContext) -> Iterator[tuple[ast.AST, ast.AST, str, str, ast.AST]]:
    """``<class>.forward = wrap(<class>.forward)`` (or ``setattr``) in code
    that runs once per object: (statement, the wrapping value, attribute,
    words for the class expression, function).  An assignment under a test
    (``if not getattr(cls.forward, "_wrapped", False):``), or after an early
    ``return`` that a flag guards, is skipped: the wrap may run once."""
    for node in walk_tree(ctx.tree):
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute):
            target, value = node.targets[0], node.value
            owner, attr = target.value, target.attr
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "setattr" \
                and len(node.value.args) == 3 and isinstance(node.value.args[1], ast.Constant) \
                and isinstance(node.value.args[1].value, str):
            owner, attr, value = node.value.args[0], node.value.args[1].value, node.value.args[2]
        else:
            continue
        if attr not in WRAPPED_CALL_PATH or not isinstance(value, ast.Call):
            continue
        func = ctx.model.enclosing_function(node)
        if func is None or isinstance(func, ast.Lambda):
            continue
        words = per_object_class_expr(ctx, owner, func)
        if words is None or not _reads_attr_of(value, owner, attr):
            continue
        if _conditional(node, func) or ctx.core.once_guarded(node, func) or not ctx.core.can_run(node):
            continue
        yield node, value, attr, words, func


# --- a module's own helper returning its forward (HKL322) --------------------

_PASSTHROUGH_METHODS = frozenset({"detach", "cpu", "clone", "contiguous", "float", "numpy", "tolist", "item"})


def _unwrap_result(expr: ast.AST) -> ast.AST:
    """``cast(T, x)``, ``typing.cast(T, x)``, ``x[0]``, ``x.detach()``: the value they pass on."""
    while True:
        if isinstance(expr, ast.Call) and len(expr.args) == 2 and not expr.keywords and (
                (isinstance(expr.func, ast.Name) and expr.func.id == "cast")
                or (isinstance(expr.func, ast.Attribute) and expr.func.attr == "cast")):
            expr = expr.args[1]
        elif isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args \
                and not expr.keywords and expr.func.attr in _PASSTHROUGH_METHODS:
            expr = expr.func.value
        else:
            return expr


def _is_self_forward(call: ast.AST, self_name: str) -> bool:
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "forward" \
        and isinstance(call.func.value, ast.Name) and call.func.value.id == self_name


def helper_forward_results(ctx: FileContext, func: ast.AST) -> list[ast.Call]:
    """The ``self.forward(...)`` calls whose result the method returns as its
    own (``return self.forward(x)``, ``out = self.forward(x); return
    cast(T, out)``): the method stands for calling the module."""
    self_name = _first_param(func)
    if self_name is None:
        return []
    assigned: dict[str, ast.Call] = {}
    found: list[ast.Call] = []
    for node in walk_function(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and _is_self_forward(node.value, self_name):
            assigned[node.targets[0].id] = node.value  # type: ignore[assignment]
    for node in walk_function(func):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        value = _unwrap_result(node.value)
        if _is_self_forward(value, self_name):
            found.append(value)  # type: ignore[arg-type]
        elif isinstance(value, ast.Name) and value.id in assigned:
            found.append(assigned[value.id])
    return sorted({id(c): c for c in found}.values(), key=lambda c: (c.lineno, c.col_offset))


def hands_over_to_module_call(func: ast.AST) -> bool:
    for node in walk_function(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__call__":
            owner = node.func.value
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                return True
            if isinstance(owner, ast.Attribute) and owner.attr == "Module":
                return True  # nn.Module.__call__(self, ...)
    return False


def _derives_from(info: ClassInfo, cls: ClassInfo, depth: int = 0) -> bool:
    if info is cls:
        return True
    return depth < 16 and any(_derives_from(base, cls, depth + 1) for base in info.local_bases)


def called_as_module(ctx: FileContext, cls: ClassInfo) -> str | None:
    """A sign, in this file, that instances of ``cls`` are called as modules,
    so that hooks on them are expected to run: its (or a local base's)
    ``__call__`` hands over to ``nn.Module.__call__``; one of its methods calls
    ``self(...)``; or the file calls an instance (``policy = Cls(...)``,
    ``policy(x)``).  The words for it, or None."""
    seen: set[int] = set()
    todo = [cls]
    while todo:
        info = todo.pop()
        if id(info) in seen:
            continue
        seen.add(id(info))
        call = info.method("__call__")
        if call is not None and hands_over_to_module_call(call):
            return f"`{info.name}.__call__` hands over to `nn.Module.__call__` (line {call.lineno})"
        for base in info.node.bases:
            local = ctx.model.class_for_expr(base)
            if local is not None:
                todo.append(local)
    for stmt in cls.node.body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) or stmt.name in ("forward", "__call__"):
            continue
        self_name = _first_param(stmt)
        for node in walk_function(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == self_name \
                    and is_method_self(ctx, node.func):
                return f"`{cls.name}.{stmt.name}` calls the module as `{self_name}(...)` (line {node.lineno})"
    from hooklint.static.values import ModuleValue

    for node in walk_tree(ctx.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) \
                and not is_method_self(ctx, node.func):
            value = ctx.inference.infer(node.func)
            if isinstance(value, ModuleValue) and value.local_class is not None \
                    and _derives_from(value.local_class, cls):
                return f"the file calls a `{value.local_class.name}` as a module at line {node.lineno}"
    return None


# --- an instance `forward` that closes over its module (HKL323) -------------

def _nested_def(func: ast.AST, name: str) -> ast.AST | None:
    for node in walk_function(func):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _free_names(fn: ast.AST) -> set[str]:
    """Names a nested function reads and does not bind itself (a rough
    closure: parameters and local assignments are its own)."""
    own: set[str] = set()
    args = getattr(fn, "args", None)
    if args is not None:
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                own.add(a.arg)
    read: set[str] = set()
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name):
                (own if isinstance(node.ctx, ast.Store) else read).add(node.id)
    return read - own


def closure_forwards(ctx: FileContext) -> Iterator[tuple[ast.Assign, str, str, ast.AST]]:
    """``m.forward = new_forward`` where ``new_forward`` is a function defined
    in the same function (or a lambda) whose closure holds ``m`` itself or
    ``m``'s previous forward: (assignment, module name, what it captures,
    function).  A forward put back later in the same function (a patch for
    the length of a call) is not one."""
    for node in walk_tree(ctx.tree):
        installed = _forward_installed(node)
        if installed is None:
            continue
        module_expr, value = installed
        module_name = module_expr.id
        func = ctx.model.enclosing_function(node)
        if func is None or isinstance(func, ast.Lambda):
            continue
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Call) and len(value.args) == 1:
            value = value.args[0]  # `functools.wraps(old)(new_forward)`, `torch.no_grad()(new_forward)`
        fn: ast.AST | None = value if isinstance(value, ast.Lambda) else None
        if isinstance(value, ast.Name):
            fn = _nested_def(func, value.id)
        if fn is None:
            continue
        old_names = set()
        restored = False
        for other in walk_function(func):
            if isinstance(other, ast.Assign) and len(other.targets) == 1:
                t, v = other.targets[0], other.value
                if isinstance(t, ast.Name) and isinstance(v, ast.Attribute) and v.attr == "forward" \
                        and isinstance(v.value, ast.Name) and v.value.id == module_name:
                    old_names.add(t.id)
                if other is not node and isinstance(t, ast.Attribute) and t.attr == "forward" \
                        and isinstance(t.value, ast.Name) and t.value.id == module_name \
                        and other.lineno > node.lineno:
                    restored = True
            if isinstance(other, ast.Delete) and any(
                    isinstance(t, ast.Attribute) and t.attr == "forward" and isinstance(t.value, ast.Name)
                    and t.value.id == module_name for t in other.targets):
                restored = True
        if restored or _names_a_class(ctx, module_expr, func) or _restored_by_caller(ctx, func, node):
            continue
        if _one_shot(fn, module_name, old_names):
            continue
        free = _free_names(fn)
        if module_name in free:
            captured = f"the module `{module_name}`"
        elif free & old_names:
            captured = f"its previous bound forward `{sorted(free & old_names)[0]}`"
        else:
            continue
        if not _is_module_name(ctx, module_expr, func):
            continue
        yield node, module_name, captured, func


def _one_shot(fn: ast.AST, module_name: str, old_names: set[str]) -> bool:
    """The installed function puts the previous forward back when it runs
    and does not install itself again (Lightning's forward redirection, as
    in trl and ms-swift): it lives for one call."""
    restores = reinstalls = False
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    own = getattr(fn, "name", None)
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == "forward" and isinstance(t.value, ast.Name)
                    and t.value.id == module_name for t in node.targets):
                if isinstance(node.value, ast.Name) and node.value.id in old_names:
                    restores = True
                else:
                    reinstalls = reinstalls or (isinstance(node.value, ast.Name) and node.value.id == own) \
                        or not isinstance(node.value, ast.Name)
    return restores and not reinstalls


def _forward_installed(node: ast.AST) -> tuple[ast.Name, ast.AST] | None:
    """``m.forward = value`` or ``setattr(m, "forward", value)``: (``m``, value)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
            and node.targets[0].attr == "forward" and isinstance(node.targets[0].value, ast.Name):
        return node.targets[0].value, node.value
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
            and node.value.func.id == "setattr" and len(node.value.args) == 3 \
            and isinstance(node.value.args[0], ast.Name) and isinstance(node.value.args[1], ast.Constant) \
            and node.value.args[1].value == "forward":
        return node.value.args[0], node.value.args[2]
    return None


def _names_a_class(ctx: FileContext, name: ast.Name, func: ast.AST) -> bool:
    """``cls.forward = ...`` in ``__init_subclass__``, a classmethod, ``__new__``
    or a metaclass: a class attribute, looked up through the class and bound
    to each object (a copy included)."""
    if name.id == "cls":
        return True
    decorators = {d.id for d in getattr(func, "decorator_list", ()) if isinstance(d, ast.Name)}
    if name.id == _first_param(func) and (
            "classmethod" in decorators or getattr(func, "name", "") in ("__init_subclass__", "__new__")
            or _is_metaclass(ctx, ctx.model.enclosing_class(func))):
        return True
    return ctx.model.class_for_expr(name) is not None


def _outermost_function(ctx: FileContext, func: ast.AST) -> ast.AST:
    outer = func
    while True:
        up = ctx.model.enclosing_function(outer)
        if up is None or isinstance(up, ast.Lambda):
            return outer
        outer = up


def _restored_by_caller(ctx: FileContext, func: ast.AST, assign: ast.AST) -> bool:
    """The function that installs the forward is called, in this file, by
    one that sets ``.forward`` again after the call (a context manager
    putting the original back after its ``yield``): the wrapper lives only
    for the length of that call."""
    outer = _outermost_function(ctx, func)
    name = getattr(outer, "name", None)
    if name is None:
        return False
    for call in walk_tree(ctx.tree):
        if not (isinstance(call, ast.Call) and (
                (isinstance(call.func, ast.Name) and call.func.id == name)
                or (isinstance(call.func, ast.Attribute) and call.func.attr == name))):
            continue
        caller = ctx.model.enclosing_function(call)
        if caller is None or caller is outer:
            continue
        for node in walk_function(caller):
            if isinstance(node, ast.Assign) and node.lineno > call.lineno and any(
                    isinstance(t, ast.Attribute) and t.attr == "forward" for t in node.targets):
                return True
    return False


def _is_module_name(ctx: FileContext, name: ast.Name, func: ast.AST) -> bool:
    from hooklint.static.values import ModuleValue, module_by_use

    value = ctx.inference.infer(name)
    if isinstance(value, ModuleValue) or module_by_use(ctx.model, name):
        return True
    if name.id == "self":
        cls = ctx.model.enclosing_class(func)
        return cls is not None and bool(ctx.model.is_module_class(cls))
    args = getattr(func, "args", None)
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs) if args is not None else ():
        if arg.arg == name.id and arg.annotation is not None:
            qual = ctx.model.qualify(arg.annotation) or ""
            if qual.startswith("torch.nn.") and qual.rsplit(".", 1)[-1][:1].isupper():
                return True  # annotated as a module, even if re-bound since (`module = hook.init_hook(module)`)
    return False


# --- attributes copied onto a replacement module, hook dicts left out (HKL324) --

def _attribute_names_source(expr: ast.AST) -> ast.AST | None:
    """``dir(x)``, ``vars(x)``, ``x.__dict__`` (and their ``.keys()`` /
    ``.items()``): the ``x`` whose attribute names they list."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("keys", "items") \
            and not expr.args:
        expr = expr.func.value
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("dir", "vars") \
            and len(expr.args) == 1:
        return expr.args[0]
    if isinstance(expr, ast.Attribute) and expr.attr == "__dict__":
        return expr.value
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "getmembers" \
            and len(expr.args) == 1:
        return expr.args[0]  # inspect.getmembers(x)
    return None


def _private_filter(node: ast.AST) -> bool:
    """A test or pattern that leaves out names starting with an underscore:
    ``name.startswith("_")``, ``name[0] == "_"``, a regular expression
    ``"_"`` / ``"^_"`` / ``"__"`` used with ``re.match``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith" \
            and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in ("_", "__"):
        return True
    if isinstance(node, ast.Compare) and isinstance(node.left, ast.Subscript) \
            and isinstance(node.left.slice, ast.Constant) and node.left.slice.value == 0 \
            and any(isinstance(c, ast.Constant) and c.value == "_" for c in node.comparators):
        return True
    return False


def _names_module_evidence(ctx: FileContext, func: ast.AST, exprs: list[ast.AST]) -> bool:
    from hooklint.static.values import ModuleValue

    for expr in exprs:
        if isinstance(ctx.inference.infer(expr), ModuleValue):
            return True
    for node in walk_function(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "issubclass") \
                and len(node.args) == 2:
            # the spelling, not only the import: `torch = LazyImport("torch")` hides the import
            named = ctx.model.qualify(node.args[1]) or ast.unparse(node.args[1])
            if named.endswith(("nn.Module", "fx.GraphModule", "nn.modules.module.Module")):
                return True
    return False


def attribute_copies_dropping_hooks(ctx: FileContext) -> Iterator[tuple[ast.AST, ast.AST, ast.AST, ast.AST]]:
    """A function that copies another object's attributes onto a module by
    name (``for name in dir(model): setattr(fx_model, name, getattr(model,
    name))``), leaves out the names that start with ``_``, and never names
    a hook dict (itself or through a module-level constant): (the filter,
    source, target, function)."""
    hook_name_constants = set()
    for stmt in ctx.tree.body:
        if isinstance(stmt, ast.Assign) and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value in HOOK_DICTS
                for c in ast.walk(stmt.value)):
            hook_name_constants.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    # only functions holding a copy by name (`setattr(x, name, ...)`, `x.__dict__.update(...)`) can qualify:
    # most files have none, and walking every function of a large file is the rule's whole cost
    copies = [*ctx.model.name_calls.get("setattr", ()),
              *(c for c in ctx.model.method_calls.get("update", ())
                if isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Attribute)
                and c.func.value.attr == "__dict__")]
    holders: set[int] = set()
    for call in copies:
        node = getattr(call, "_hl_parent", None)
        while node is not None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                holders.add(id(node))
            node = getattr(node, "_hl_parent", None)
    if not holders:
        return
    for func in walk_tree(ctx.tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or id(func) not in holders:
            continue
        sources: list[ast.AST] = []
        targets: list[ast.AST] = []
        filters: list[ast.AST] = []
        mentions_hooks = False
        regex_underscore: list[ast.AST] = []
        for node in walk_function(func):
            src_expr = _attribute_names_source(node)
            if src_expr is not None:
                sources.append(src_expr)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                    and len(node.args) == 3 and not isinstance(node.args[1], ast.Constant):
                targets.append(node.args[0])
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "__dict__":
                targets.append(node.func.value.value)  # new.__dict__.update({...})
            if _private_filter(node):
                filters.append(node)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if any(h in node.value for h in HOOK_DICTS) or "hooks" in node.value:
                    mentions_hooks = True
                if node.value in ("_", "^_", "__", "^__"):
                    regex_underscore.append(node)
            if isinstance(node, ast.Attribute) and node.attr in HOOK_DICTS:
                mentions_hooks = True
            if isinstance(node, ast.Name) and node.id in hook_name_constants:
                mentions_hooks = True
        if mentions_hooks or not sources or not targets:
            continue
        uses_re = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("match", "fullmatch")
                      for n in walk_function(func))
        if uses_re:
            filters.extend(regex_underscore)
        if not filters:
            continue
        target_keys = {ast.dump(t) for t in targets}
        source = next((s for s in sources if ast.dump(s) not in target_keys), None)
        target = next((t for t in targets if source is not None and ast.dump(t) != ast.dump(source)), None)
        if source is None or target is None:
            continue
        if not _names_module_evidence(ctx, func, [source, target]):
            continue
        yield min(filters, key=lambda n: (n.lineno, n.col_offset)), source, target, func
