"""Hooks left on an object the model no longer uses: the slot they were registered through is refilled later.

Facts of torch 2.13 (tests/behaviour/test_replaced_targets.py):

- a tensor hook or post-accumulate-grad hook lives on the Parameter *object*.  Putting another
  Parameter in the module's slot (`module.weight = nn.Parameter(...)`, `setattr`,
  `register_parameter`, `module._parameters[name] = ...`, accelerate's `set_module_tensor_to_device`
  when the device or value changes, `load_state_dict(..., assign=True)`) leaves the hook on a tensor
  forward never reads: it never fires again.  `module.to(...)`, `module.to_empty(...)`,
  `load_state_dict` without `assign` and `param.data = ...` keep the object (and the hook);
- a module hook lives on the module object: a new module put in the parent's slot
  (`parent.fc = nn.Linear(...)`, `setattr(parent, name, new)`, `parent.layers[i] = new`,
  `add_module` / `register_module`) is called instead, and the hook never fires.  A wrapper built
  around the old module (`parent.fc = Wrapper(parent.fc)`) still calls it: not a loss.

Registration *after* the replacement is correct; only a replacement that can run after the
registration, on the same object (no rebinding of the owner's name in between, no removal of the
handle), is reported.  Never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import walk_tree

# words a file must hold for a replacement to be possible (the rules' triggers)
PARAM_REPLACERS = ("Parameter", "register_parameter", "_parameters[", "set_module_tensor_to_device", "assign=True",
                   "Params(")
MODULE_REPLACERS = ("add_module", "register_module", "_modules[", "setattr")


@dataclass(frozen=True)
class Replacement:
    registration: ast.Call  # the registering call
    hooked: str  # the slot as the registration reaches it (`A.weight`)
    stmt: ast.AST  # the statement that refills the slot
    how: str  # in words


def _text(node: ast.AST) -> str:
    return ast.unparse(node)


def _own_statements(func: ast.AST) -> Iterator[ast.AST]:
    """Statements of ``func``'s body, nested defs excluded."""
    stack = list(reversed(getattr(func, "body", [])))
    while stack:
        node = stack.pop()
        if isinstance(node, FunctionNode + (ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.stmt, ast.excepthandler)):
            yield node
        for child in reversed(list(ast.iter_child_nodes(node))):
            if isinstance(child, (ast.stmt, ast.excepthandler)) or isinstance(child, ast.match_case):
                stack.append(child)


def _bound_names(stmt: ast.AST) -> set[str]:
    """Names the statement (or a compound statement's header) binds."""
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        targets = [i.optional_vars for i in stmt.items if i.optional_vars is not None]
    out: set[str] = set()
    for t in targets:
        out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return out


class _Aliases:
    """Names bound once in a function to an attribute chain (`A = mod.lora_A.default`)."""

    def __init__(self, func: ast.AST):
        counts: dict[str, int] = {}
        values: dict[str, ast.AST] = {}
        for stmt in _own_statements(func):
            for name in _bound_names(stmt):
                counts[name] = counts.get(name, 0) + 1
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                values[stmt.targets[0].id] = stmt.value
        self.values = {k: v for k, v in values.items() if counts.get(k) == 1}

    def expand(self, expr: ast.AST, depth: int = 0) -> str:
        """The chain's text with its root alias written out."""
        if depth > 4:
            return _text(expr)
        if isinstance(expr, ast.Name) and expr.id in self.values:
            value = self.values[expr.id]
            if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)) or _getattr_slot(value) is not None:
                return self.expand(value, depth + 1)
        if isinstance(expr, ast.Attribute):
            return f"{self.expand(expr.value, depth + 1)}.{expr.attr}"
        if isinstance(expr, ast.Subscript):
            return f"{self.expand(expr.value, depth + 1)}[{_text(expr.slice)}]"
        slot = _getattr_slot(expr)
        if slot is not None:
            return f"{self.expand(slot[0], depth + 1)}.{slot[1]}"
        return _text(expr)


def _slot_name(node: ast.AST) -> str | None:
    """The attribute a `getattr` / `setattr` names: the string, or `<name>` for a variable (the same
    variable, not rebound in between, names the same attribute)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return f"<{node.id}>"
    return None


def _getattr_slot(expr: ast.AST) -> tuple[ast.AST, str] | None:
    """``getattr(owner, "name")``: (owner, name)."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" \
            and len(expr.args) == 2 and _slot_name(expr.args[1]) is not None:
        return expr.args[0], _slot_name(expr.args[1])
    return None


def _root(expr: ast.AST) -> str | None:
    while True:
        slot = _getattr_slot(expr)
        if slot is not None:
            expr = slot[0]
        elif isinstance(expr, (ast.Attribute, ast.Subscript)):
            expr = expr.value
        else:
            break
    return expr.id if isinstance(expr, ast.Name) else None


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _makes_parameter(model, value: ast.AST) -> bool:
    """A new Parameter object: `nn.Parameter(...)`, a Parameter subclass (`Int8Params(...)`),
    `type(old)(...)`, `param_cls(...)`."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "type":
        return True
    qual = model.qualify(func) or ""
    last = qual.rsplit(".", 1)[-1] if qual else (func.attr if isinstance(func, ast.Attribute)
                                                 else getattr(func, "id", ""))
    return last.endswith(("Parameter", "Params")) or last in ("param_cls", "parameter_cls")


def _mentions(value: ast.AST, texts: set[str], aliases: _Aliases) -> bool:
    """Is the module itself handed to the new value (`Wrapper(model.fc)`), not only read from
    (`nn.Linear(model.fc.in_features, ...)`)?"""
    for node in ast.walk(value):
        parent = getattr(node, "_hl_parent", None)
        if isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is node:
            grand = getattr(parent, "_hl_parent", None)
            if not (isinstance(grand, ast.Call) and grand.func is parent):
                continue  # `model.fc.in_features`; a method of it (`model.fc.to(...)`) may return the module
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):
            if _text(node) in texts or aliases.expand(node) in texts:
                return True
    return False


def _param_slot_refills(model, stmt: ast.AST) -> Iterator[tuple[ast.AST, str | None, str]]:
    """(owner, parameter name or None for every parameter under the owner, words) for each way
    ``stmt`` puts another Parameter object in a module's slot."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Attribute) and _makes_parameter(model, stmt.value):
            yield target.value, target.attr, f"`{_text(target)} = {_text(stmt.value.func)}(...)`"
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) \
                and target.value.attr == "_parameters" and _const_str(target.slice) is not None:
            yield target.value.value, _const_str(target.slice), f"`{_text(target)} = ...`"
    for node in ast.walk(stmt) if isinstance(stmt, (ast.Expr, ast.Assign, ast.Return)) else ():
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "setattr" and len(node.args) == 3 and _slot_name(node.args[1]) is not None \
                and _makes_parameter(model, node.args[2]):
            yield node.args[0], _slot_name(node.args[1]), f"`setattr({_text(node.args[0])}, ...)`"
        elif name == "register_parameter" and isinstance(func, ast.Attribute) and node.args \
                and _const_str(node.args[0]) is not None:
            yield func.value, _const_str(node.args[0]), f"`{_text(func)}(...)`"
        elif name == "set_module_tensor_to_device" and len(node.args) >= 2 and _const_str(node.args[1]) is not None:
            yield node.args[0], _const_str(node.args[1]), \
                "`set_module_tensor_to_device(...)` (accelerate's, which installs a new Parameter object " \
                "when the device or the value changes)"
        elif name == "load_state_dict" and isinstance(func, ast.Attribute):
            assign = _keyword(node, "assign")
            if isinstance(assign, ast.Constant) and assign.value is True:
                yield func.value, None, f"`{_text(func)}(..., assign=True)`"


def _module_slot_refills(model, stmt: ast.AST, aliases: _Aliases) -> Iterator[tuple[str, ast.AST, str]]:
    """(slot chain, new value, words) for each way ``stmt`` puts an object in a module's slot."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) \
                and target.value.attr == "_modules" and _const_str(target.slice) is not None:
            yield f"{aliases.expand(target.value.value)}.{_const_str(target.slice)}", stmt.value, f"`{_text(target)} = ...`"
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            yield aliases.expand(target), stmt.value, f"`{_text(target)} = ...`"
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        node = stmt.value
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "setattr" and len(node.args) == 3 and _slot_name(node.args[1]) is not None:
            yield f"{aliases.expand(node.args[0])}.{_slot_name(node.args[1])}", node.args[2], \
                f"`setattr({_text(node.args[0])}, {_text(node.args[1])}, ...)`"
        elif name in ("add_module", "register_module") and isinstance(func, ast.Attribute) and len(node.args) == 2 \
                and _const_str(node.args[0]) is not None:
            yield f"{aliases.expand(func.value)}.{_const_str(node.args[0])}", node.args[1], f"`{_text(func)}(...)`"


def _makes_module(model, inference, value: ast.AST) -> bool:
    """A new object built on the spot: a constructor call (`nn.Linear(...)`, `Wrapper(...)`) or a
    value the inference knows to be a new module."""
    if not isinstance(value, ast.Call):
        return False
    try:
        inferred = inference.infer(value)
    except RecursionError:  # pragma: no cover
        inferred = None
    if type(inferred).__name__ == "ModuleValue":
        return True
    func = value.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return bool(name) and name[0].isupper() and not name.isupper()


def _handle_names(call: ast.Call) -> set[str]:
    stmt = call
    while stmt is not None and not isinstance(stmt, ast.stmt):
        stmt = getattr(stmt, "_hl_parent", None)
    if isinstance(stmt, ast.Assign) and stmt.value is call:
        return {_text(t) for t in stmt.targets}
    return set()


def _removes(stmt: ast.AST, handles: set[str]) -> bool:
    if not handles:
        return False
    for node in ast.walk(stmt):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "remove" \
                and _text(node.func.value) in handles:
            return True
    return False


def _later(cfg, start: ast.AST, avoid_stmts: list[ast.AST]) -> set[int]:
    """Nodes that can run after ``start`` without passing one of ``avoid_stmts``."""
    avoid = {n for s in avoid_stmts for n in cfg.nodes_of(s)}
    stack = [n for s in cfg.nodes_of(start) for n in cfg.nodes[s].succ]
    seen: set[int] = set()
    while stack:
        cur = stack.pop()
        if cur in seen or cur in avoid:
            continue
        seen.add(cur)
        stack.extend(cfg.nodes[cur].succ)
    return seen


def replaced_after_registration(ctx, *, tensor: bool) -> list[Replacement]:
    """Registrations (tensor / post-accumulate hooks when ``tensor``, module hooks otherwise) whose
    target's slot is refilled with another object by a statement that can run after them in the
    same function, the owner's name not rebound and the handle not removed in between."""
    out: list[Replacement] = []
    core = ctx.core
    for reg in ctx.hooks.registrations:
        if reg.is_global or reg.receiver is None or reg.summary is not None or reg.kind.is_tensor != tensor:
            continue
        func = ctx.model.enclosing_function(reg.call)
        if func is None or isinstance(func, ast.Lambda):
            continue
        aliases = _Aliases(func)
        hooked = aliases.expand(reg.receiver)
        bare = "." not in hooked and "[" not in hooked
        if bare and tensor:
            continue  # a bare name: where the tensor sits in a module is not known
        root = _root(reg.receiver)
        if root is None:
            continue
        # every name the receiver is spelled with (`layers[i]`: a new `i` is another slot)
        roots = {n.id for n in ast.walk(reg.receiver) if isinstance(n, ast.Name)}
        cur = aliases.values.get(root)
        for _ in range(4):  # `A = mod.lora_A.default`: rebinding `mod` changes A's object too
            if cur is None:
                break
            r = _root(cur)
            if r is None:
                break
            roots |= {n.id for n in ast.walk(cur) if isinstance(n, ast.Name)}
            cur = aliases.values.get(r)
        start = core.statement(reg.call)
        cfg = core.cfg(func)
        statements = list(_own_statements(func))
        handles = _handle_names(reg.call)
        rebinding = [s for s in statements if s is not start and (_bound_names(s) & roots or _removes(s, handles))]
        later = _later(cfg, start, rebinding)
        if not later:
            continue
        for stmt in statements:
            if stmt is start or not any(n in later for n in cfg.nodes_of(stmt)):
                continue
            found = _traced(ctx, stmt, aliases, hooked) if bare else _refill(ctx, stmt, aliases, hooked, reg, tensor)
            if found is not None:
                out.append(Replacement(reg.call, _text(reg.receiver), stmt, found))
                break
    return out


def _refill(ctx, stmt: ast.AST, aliases: _Aliases, hooked: str, reg, tensor: bool) -> str | None:
    if tensor:
        for owner_expr, name, how in _param_slot_refills(ctx.model, stmt):
            owner = aliases.expand(owner_expr)
            if name is not None and hooked == f"{owner}.{name}":
                return how
            if name is None and hooked.startswith(owner + "."):
                return how
        return None
    for slot, value, how in _module_slot_refills(ctx.model, stmt, aliases):
        if slot != hooked or not _makes_module(ctx.model, ctx.inference, value):
            continue
        if _mentions(value, {hooked, _text(reg.receiver)}, aliases):
            continue  # a wrapper around the hooked module still calls it
        return how
    return None


_TRACERS = frozenset({"torch.fx.symbolic_trace", "torch.fx._symbolic_trace.symbolic_trace", "torch.fx.GraphModule",
                      "torch.fx.graph_module.GraphModule"})


def _traced(ctx, stmt: ast.AST, aliases: _Aliases, hooked: str) -> str | None:
    """``gm = torch.fx.symbolic_trace(model)`` (or ``GraphModule(model, graph)``) whose result is kept:
    the GraphModule shares ``model``'s submodules (their hooks come along) but is a new root, without
    ``model``'s own hooks."""
    if not isinstance(stmt, (ast.Assign, ast.Return, ast.AnnAssign)) or stmt.value is None:
        return None
    for node in ast.walk(stmt.value):
        if isinstance(node, ast.Call) and node.args and (ctx.model.qualify(node.func) or "") in _TRACERS \
                and aliases.expand(node.args[0]) == hooked:
            return f"`{_text(node.func)}({_text(node.args[0])})`, a new root module without `{hooked}`'s own hooks,"
    return None


@dataclass(frozen=True)
class HelperReplacement:
    site: ast.Call  # the call of the project's function that registers the hook
    helper: str  # that function's name
    target: str  # the target in the caller's words
    stmt: ast.AST
    how: str


def params_replaced_after_helper(ctx) -> list[HelperReplacement]:
    """Tensor / post-accumulate hooks a function of the project registers for its caller (on the
    caller's model, its parameters, or an object it builds: `Net()` whose constructor hooks its own
    weights), followed in the caller by a replacement of those parameters (`load_state_dict(...,
    assign=True)`, a slot refilled).  Matched by place (core.places), in the caller's terms."""
    out: list[HelperReplacement] = []
    core = ctx.core
    seen: set[int] = set()
    for stmt_node in _replacing_calls(ctx):
        func = ctx.model.enclosing_function(stmt_node)
        if func is None or isinstance(func, ast.Lambda) or id(func) in seen:
            continue
        seen.add(id(func))
        regs = [r for r in core.facts(func).regs
                if r.chain and r.site is not None and r.kind in ("tensor", "post-accumulate-grad")
                and ctx.model.enclosing_function(r.site) is func]
        if not regs:
            continue
        cfg = core.cfg(func)
        statements = list(_own_statements(func))
        for reg in regs:
            start = core.statement(reg.site)
            bound_by_site = _bound_names(start) if isinstance(start, ast.Assign) and start.value is reg.site else set()
            later = _later(cfg, start, [s for s in statements if s is not start and _bound_names(s) & bound_by_site])
            found = None
            for stmt in statements:
                if stmt is start or not any(n in later for n in cfg.nodes_of(stmt)):
                    continue
                for owner_expr, name, how in _param_slot_refills(ctx.model, stmt):
                    if _target_under(core, reg.target, owner_expr, name, func, bound_by_site):
                        found = (stmt, how)
                        break
                if found:
                    break
            if found is not None:
                helper = reg.chain[0][0] if reg.chain else "?"
                out.append(HelperReplacement(reg.site, helper, reg.target_text or _text(reg.site), *found))
    return out


def _replacing_calls(ctx) -> Iterator[ast.AST]:
    for node in walk_tree(ctx.tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("load_state_dict", "set_module_tensor_to_device", "register_parameter", "setattr"):
                yield node
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
                and _makes_parameter(ctx.model, node.value):
            yield node


def _target_under(core, target: str, owner_expr: ast.AST, name: str | None, func: ast.AST,
                  bound_by_site: set[str]) -> bool:
    """Is the registration's target (a place) the slot ``owner.name`` (or, ``name`` None, any
    parameter under ``owner``)?"""
    if isinstance(owner_expr, ast.Name) and owner_expr.id in bound_by_site:
        place = "n"  # the object the helper's call built and this statement named
    else:
        place = core.places.of(owner_expr, func)
        if not place or place == "?":
            return False
    if name is not None:
        return target == f"{place}.{name}"
    return target in (place, "e:" + place) or target.startswith((place + ".", "e:" + place + "."))
