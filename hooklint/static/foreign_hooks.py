"""Hooks of other parties held by a module: tested for their kind, then removed whatever the test said.

A module can carry another library's forward-wrapping hook: accelerate's
``add_hook_to_module`` keeps it in ``module._hf_hook`` (and the original
forward in ``module._old_forward``), and ``remove_hook_from_module(module)``
takes off whatever hook is there, whoever attached it.  Code that tests the
hook's kind (``isinstance(module._hf_hook, CpuOffload)``) knows that some
hooks are the ones it can handle and others are not; a removal that runs
whatever the test said drops the other kinds for good (diffusers'
``load_lora_weights``: only the two offload kinds it recognised were put
back).

Never imports torch, never runs the checked code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from hooklint.static.tree_walk import walk_tree

if TYPE_CHECKING:
    from hooklint.static.context import FileContext

# the attribute a module's third-party hook lives in, and the calls that take it off
HOOK_ATTRIBUTES = frozenset({"_hf_hook"})
REMOVERS = frozenset({"remove_hook_from_module", "remove_hook_from_submodules"})
# the calls that put a hook (back) on a module
ADDERS = frozenset({"add_hook_to_module", "attach_align_device_hook", "attach_align_device_hook_on_blocks",
                    "cpu_offload_with_hook", "dispatch_model"})


@dataclass(frozen=True)
class UncheckedRemoval:
    call: ast.Call  # the removal
    module: str  # the module expression, as written
    checks: tuple[ast.Call, ...]  # the kind tests of the hook the removal does not depend on


def removals_ignoring_kind(ctx: "FileContext") -> Iterator[UncheckedRemoval]:
    """Removals of a module's third-party hook, in a function that tests the
    hook's kind (``isinstance(<m>._hf_hook, X)``, through ``getattr`` or a
    local holding the hook too), when the removal depends on no such test
    (it is not inside an ``if`` whose test holds one, or a name assigned from
    one) and the function puts back no hook on that module."""
    for call in ctx.model.calls_of_method(*REMOVERS) + _name_calls(ctx):
        if not call.args:
            continue
        qual = ctx.model.qualify(call.func) or ""
        if not (qual.startswith("accelerate.") and qual.rsplit(".", 1)[-1] in REMOVERS):
            continue
        func = ctx.model.enclosing_function(call)
        if func is None:
            continue
        target = ast.unparse(call.args[0])
        checks = list(_kind_checks(func, target))
        if not checks:
            continue
        flags = _flags_from(func, checks)
        if _guarded(call, func, checks, flags):
            continue
        if _puts_back(ctx, func, target):
            continue
        yield UncheckedRemoval(call, target, tuple(checks))


def _name_calls(ctx: "FileContext") -> list[ast.Call]:
    """``f(...)`` calls whose name is bound by an import (``remove_hook_from_module``
    under its own name or an alias)."""
    out: list[ast.Call] = []
    for name, calls in ctx.model.name_calls.items():
        bindings = ctx.model.module_scope.bindings.get(name, ())
        if any(b.kind == "import" for b in bindings) or name in REMOVERS:
            out.extend(calls)
    return out


def _hook_of(expr: ast.AST, target: str, aliases: set[str]) -> bool:
    """``<target>._hf_hook``, ``getattr(<target>, "_hf_hook")``, their parts
    (``<target>._hf_hook.hooks[0]``), or a local holding one."""
    while isinstance(expr, (ast.Subscript, ast.Attribute)) and not (
            isinstance(expr, ast.Attribute) and expr.attr in HOOK_ATTRIBUTES):
        expr = expr.value
    if isinstance(expr, ast.Attribute):
        return ast.unparse(expr.value) == target
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" \
            and len(expr.args) >= 2 and isinstance(expr.args[1], ast.Constant) \
            and expr.args[1].value in HOOK_ATTRIBUTES:
        return ast.unparse(expr.args[0]) == target
    return isinstance(expr, ast.Name) and expr.id in aliases


def _kind_checks(func: ast.AST, target: str) -> Iterator[ast.Call]:
    aliases = {node.targets[0].id for node in ast.walk(func)
               if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
               and _hook_of(node.value, target, set())}
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                and len(node.args) == 2 and _hook_of(node.args[0], target, aliases):
            yield node


def _flags_from(func: ast.AST, checks: list[ast.Call]) -> set[str]:
    """Names assigned from an expression holding a kind test (``is_offload =
    isinstance(m._hf_hook, CpuOffload)``), and names assigned from those."""
    ids = {id(check) for check in checks}
    flags: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(func):
            if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name) and t.id not in flags]
            if not names:
                continue
            if any(id(sub) in ids or isinstance(sub, ast.Name) and sub.id in flags for sub in ast.walk(node.value)):
                flags.update(names)
                changed = True
    return flags


def _guarded(call: ast.Call, func: ast.AST, checks: list[ast.Call], flags: set[str]) -> bool:
    ids = {id(check) for check in checks}
    cur = getattr(call, "_hl_parent", None)
    child: ast.AST = call
    while cur is not None and cur is not func:
        if isinstance(cur, (ast.If, ast.While, ast.IfExp)) and child is not cur.test:
            for sub in ast.walk(cur.test):
                if id(sub) in ids or isinstance(sub, ast.Name) and sub.id in flags:
                    return True
        if isinstance(cur, ast.BoolOp):
            for sub in ast.walk(cur):
                if id(sub) in ids or isinstance(sub, ast.Name) and sub.id in flags:
                    return True
        child = cur
        cur = getattr(cur, "_hl_parent", None)
    # `if not is_offload: return` (or `continue`) ahead of the removal
    for node in ast.walk(func):
        if not isinstance(node, ast.If) or node.lineno >= call.lineno:
            continue
        if not any(isinstance(stmt, (ast.Return, ast.Continue, ast.Break, ast.Raise)) for stmt in node.body):
            continue
        if any(id(sub) in ids or isinstance(sub, ast.Name) and sub.id in flags for sub in ast.walk(node.test)):
            return True
    return False


def _puts_back(ctx: "FileContext", func: ast.AST, target: str) -> bool:
    """Does the function put a hook on the module again (``add_hook_to_module(<target>, ...)``)?"""
    for node in ast.walk(func):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in ADDERS and ast.unparse(node.args[0]) == target:
            return True
    return False


# --- a module's own state read off its instance __dict__ (HKL334) ------------------------------

# what a forward wrapper installs on the instance: any `module.forward = wrapper` (nnsight, torch
# function patchers), and accelerate's add_hook_to_module (the hook and the original forward)
WRAPPER_ATTRIBUTES = ("forward", "_hf_hook", "_old_forward")


@dataclass(frozen=True)
class InstanceStateRead:
    read: ast.AST  # `self.__dict__` or `vars(self)`
    excluded: tuple[str, ...]  # the names the code leaves out
    where: ast.AST  # where the exclusion is spelled (the set, or its class attribute)
    missing: tuple[str, ...]  # the wrapper attributes the exclusion misses


def instance_state_reads(ctx: "FileContext") -> Iterator[InstanceStateRead]:
    """``self.__dict__`` (or ``vars(self)``) in a method of an ``nn.Module``
    class, narrowed by a fixed set of names the code spells (``keys() -
    SKIP``, ``if k not in SKIP``) that leaves out none of the instance
    attributes a forward wrapper adds (``forward``, accelerate's ``_hf_hook``
    and ``_old_forward``): the code takes every other instance attribute for
    its own state."""
    for info in ctx.model.classes.values():
        if ctx.model.is_module_class(info) is not True:
            continue
        for node in ast.walk(info.node):
            if not _reads_own_dict(node):
                continue
            method = ctx.model.enclosing_function(node)
            if method is None or ctx.model.enclosing_class(method) is not info:
                continue
            exclusion = _exclusion_of(ctx, info, node)
            if exclusion is None:
                continue
            names, where = exclusion
            if "forward" in names:
                continue  # the instance forward is left out: the wrapper's attributes are thought of
            missing = tuple(name for name in WRAPPER_ATTRIBUTES if name not in names)
            yield InstanceStateRead(node, tuple(sorted(names)), where, missing)


def _reads_own_dict(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "__dict__" and isinstance(node.value, ast.Name) \
            and node.value.id == "self" and isinstance(node.ctx, ast.Load):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" \
        and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"


def _exclusion_of(ctx: "FileContext", info, read: ast.AST) -> tuple[set[str], ast.AST] | None:
    """The fixed names ``read``'s keys are narrowed by, in the expression
    around it: ``<read>.keys() - S`` (S a set literal, or a class attribute
    or module constant holding one), or a comprehension over ``<read>``
    (``.items()``/``.keys()``) filtered by ``k not in S``."""
    cur = getattr(read, "_hl_parent", None)
    if isinstance(cur, ast.Attribute) and cur.attr in ("keys", "items"):
        cur = getattr(getattr(cur, "_hl_parent", None), "_hl_parent", None)  # past the call
    for _ in range(6):
        if cur is None or isinstance(cur, ast.stmt):
            return None
        if isinstance(cur, ast.BinOp) and isinstance(cur.op, ast.Sub):
            found = _names_of_set(ctx, info, cur.right)
            if found is not None:
                return found, cur.right
        if isinstance(cur, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            for generator in cur.generators:
                if not any(sub is read for sub in ast.walk(generator.iter)):
                    continue
                for cond in generator.ifs:
                    if isinstance(cond, ast.Compare) and len(cond.ops) == 1 and isinstance(cond.ops[0], ast.NotIn):
                        found = _names_of_set(ctx, info, cond.comparators[0])
                        if found is not None:
                            return found, cond.comparators[0]
            return None
        cur = getattr(cur, "_hl_parent", None)
    return None


def _names_of_set(ctx: "FileContext", info, expr: ast.AST) -> set[str] | None:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.BitOr, ast.Sub)):
        left = _names_of_set(ctx, info, expr.left)
        right = _names_of_set(ctx, info, expr.right)
        if left is None or right is None:
            return None
        return left | right if isinstance(expr.op, ast.BitOr) else left
    if isinstance(expr, (ast.Set, ast.List, ast.Tuple)):
        names = {e.value for e in expr.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        return names if len(names) == len(expr.elts) else None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("set", "frozenset") \
            and len(expr.args) == 1:
        return _names_of_set(ctx, info, expr.args[0])
    attr = None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in ("self", info.name):
        attr = expr.attr
    if attr is not None:
        for stmt in info.node.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == attr for t in targets) and stmt.value is not None:
                    return _names_of_set(ctx, info, stmt.value)
        return None
    if isinstance(expr, ast.Name):
        for stmt in ctx.tree.body if hasattr(ctx, "tree") else ():
            if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == expr.id for t in stmt.targets):
                return _names_of_set(ctx, info, stmt.value)
    return None


# --- handles kept on the shared object and removed by whoever finds them (HKL335) ---------------


@dataclass(frozen=True)
class FoundHandleRemoval:
    call: ast.Call  # `<holder>.<attr>.remove()`
    attr: str
    holder: str  # the object the handle was read off, as written
    stored: ast.AST  # where the file keeps a handle under that attribute of a shared object


def removals_of_found_handles(ctx: "FileContext") -> Iterator[FoundHandleRemoval]:
    """``<holder>.<attr>.remove()`` in a method, when the file keeps a hook
    handle under ``<attr>`` on an object other than ``self`` (the hooked
    module, a function installed as its forward: ``wrapper.__handle__ =
    module.register_forward_hook(...)``), so whoever finds the handle there
    removes it, and nothing before the removal compares the holder with
    ``self`` (the object that stored it could be another instance)."""
    # `<holder>.<attr>.remove()` first: the registrations and the stores only for files that have one
    candidates = [call for call in ctx.model.calls_of_method("remove")
                  if not call.args and not call.keywords and isinstance(call.func, ast.Attribute)
                  and isinstance(call.func.value, ast.Attribute)]
    if not candidates:
        return
    stores = _handle_stores(ctx)
    if not stores:
        return
    for call in candidates:
        if call.args or call.keywords or not isinstance(call.func, ast.Attribute):
            continue
        handle = call.func.value
        if not isinstance(handle, ast.Attribute) or handle.attr not in stores:
            continue
        root = handle.value
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if isinstance(root, ast.Name) and root.id == "self":
            continue  # kept on the object itself: its own
        method = ctx.model.enclosing_function(call)
        if not _is_direct_method(method):
            continue  # a helper nested in a method (a teardown applied over the modules): not the object's own act
        if _compares_with_self(method, call):
            continue
        if _restores_holders_hook(method, handle):
            continue  # the slot gets back its owner's own hook (`state.h = m.register_...(state._pre_forward)`)
        yield FoundHandleRemoval(call, handle.attr, ast.unparse(handle.value), stores[handle.attr])


def _handle_stores(ctx: "FileContext") -> dict[str, ast.AST]:
    """Attribute names under which the file keeps a registration's handle on
    an object other than ``self``."""
    calls = {id(reg.call) for reg in ctx.hooks.registrations if reg.kind.is_module}
    if not calls:
        return {}
    assigns = [node for node in walk_tree(ctx.tree) if isinstance(node, ast.Assign) and len(node.targets) == 1]
    handle_names = {(id(ctx.model.enclosing_function(node)), node.targets[0].id): True for node in assigns
                    if isinstance(node.targets[0], ast.Name) and id(node.value) in calls}
    out: dict[str, ast.AST] = {}
    for node in assigns:
        target, value = node.targets[0], node.value
        if not isinstance(target, ast.Attribute):
            continue
        root = target.value
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if isinstance(root, ast.Name) and root.id == "self":
            continue
        is_handle = id(value) in calls or isinstance(value, ast.Name) and \
            handle_names.get((id(ctx.model.enclosing_function(node)), value.id), False)
        if is_handle:
            out.setdefault(target.attr, node)
    return out


def _compares_with_self(method: ast.AST, call: ast.Call) -> bool:
    for node in ast.walk(method):
        if isinstance(node, ast.Compare) and node.lineno <= call.lineno and any(
                isinstance(sub, ast.Name) and sub.id == "self" for sub in ast.walk(node)):
            return True
    return False


def _is_direct_method(func: ast.AST | None) -> bool:
    """A method defined in a class body whose first parameter is ``self``."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    args = func.args.posonlyargs + func.args.args
    return isinstance(getattr(func, "_hl_parent", None), ast.ClassDef) and bool(args) and args[0].arg == "self"


def _restores_holder_hook_value(value: ast.AST, holder: str) -> bool:
    if not (isinstance(value, ast.Call) and value.args):
        return False
    hook = value.args[0]
    return isinstance(hook, ast.Attribute) and ast.unparse(hook.value) == holder


def _restores_holders_hook(method: ast.AST, handle: ast.Attribute) -> bool:
    """``<holder>.<attr> = m.register_*(<holder>.<method>)`` in the same method:
    the handle's slot is given back the hook of the object that holds it
    (a tracker swapping FSDP's own hooks for instrumented ones and back)."""
    holder = ast.unparse(handle.value)
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
                and node.targets[0].attr == handle.attr and ast.unparse(node.targets[0].value) == holder \
                and _restores_holder_hook_value(node.value, holder):
            return True
    return False
