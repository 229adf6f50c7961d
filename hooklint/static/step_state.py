"""Per-step state changed by a backward-time hook (HKL343).

A backward-time hook (a module's backward hook, a tensor hook, a
post-accumulate-grad hook) runs once per backward pass: once per micro-batch
when the training loop accumulates gradients, or when a pipeline schedule
runs several micro-batches before the optimizer step.  This module answers,
for a hook that belongs to a module class (a method of the class, a function
nested in one of its methods that reaches the object through ``self``, or a
function registered by the class on ``self`` that reaches the object through
its module argument), which attributes of the object the hook *changes*
without taking the change from its own gradient arguments, and which of them
the class's ``forward`` *reads*: state that the next micro-batch's forward
sees changed (a load-balancing bias, a scale, a running estimate), or a
statistic that forward accumulates and the hook consumes and resets.

A change is an in-place tensor method on ``self.x`` (or ``self.x.data``), an
augmented assignment ``self.x += ...``, or a reset ``self.x = 0``.  A change
whose arguments read the hook's own parameters (the gradient) is the hook
doing its per-backward job (collecting gradient statistics, which accumulate
like the gradients) and is left out; so is a change the hook makes only
under a test of a flag or count (``if self.last_micro_batch:``).

Nothing here imports torch or runs code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.accumulation import gating_reads
from hooklint.static.bodies import body_nodes, param_names
from hooklint.static.semantic import ClassInfo, FunctionNode, SemanticModel

# In-place tensor methods that change a state tensor's value.
_MUTATORS = frozenset({"add_", "sub_", "mul_", "div_", "copy_", "zero_", "fill_", "lerp_", "clamp_",
                       "addcmul_", "addcdiv_", "mul_", "neg_", "sign_", "exp_", "sqrt_", "clamp_min_",
                       "clamp_max_", "masked_fill_", "index_add_", "scatter_add_", "uniform_", "normal_"})
_RESETS = frozenset({"zero_", "fill_"})


@dataclass
class StateChange:
    """An attribute of the hooked object the hook changes."""

    node: ast.AST  # the call or assignment
    attr: str
    how: str  # "`self.expert_bias.add_(delta)`"
    reset: bool  # sets the state to a constant (`zero_()`, `fill_(0)`, `= 0`)


def _src(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _state_attr(expr: ast.AST, owner_names: frozenset[str]) -> str | None:
    """``x`` for ``self.x`` / ``self.x.data`` / ``self.x[i]`` where ``self`` names the
    object; ``sub.x`` for the state of a submodule, ``self.sub.x``."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.Attribute) and expr.attr == "data":
        expr = expr.value
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in owner_names:
        return expr.attr
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Attribute) \
            and isinstance(expr.value.value, ast.Name) and expr.value.value.id in owner_names:
        return f"{expr.value.attr}.{expr.attr}"
    return None


def _reads_any(nodes: list[ast.AST], names: set[str]) -> bool:
    return any(isinstance(sub, ast.Name) and sub.id in names for node in nodes for sub in ast.walk(node))


def hook_owner(model: SemanticModel, hook: ast.AST, receiver: ast.AST | None,
               is_module_hook: bool) -> tuple[ClassInfo, frozenset[str]] | None:
    """The module class whose object the hook reaches, and the names it reaches it by."""
    owner = model.enclosing_class(hook)
    if owner is not None:
        method = next((m for m in owner.methods.values()
                       if m is hook or any(sub is hook for sub in ast.walk(m))), None)
        params = param_names(method) if method is not None else []
        if params and params[0] == "self" and owner.method("forward") is not None:
            names = {"self"}
            if method is hook and is_module_hook and len(params) > 1 and _registered_on_self(receiver):
                names.add(params[1])  # the module argument is the object itself
            return owner, frozenset(names)
    # a function of the file registered by a class on its own object: its module argument is the object
    if is_module_hook and _registered_on_self(receiver) and receiver is not None:
        cls = model.enclosing_class(receiver)
        params = param_names(hook)
        if cls is not None and params and cls.method("forward") is not None:
            return cls, frozenset({params[0]})
    return None


def _registered_on_self(receiver: ast.AST | None) -> bool:
    return isinstance(receiver, ast.Name) and receiver.id == "self"


def state_changes(model: SemanticModel, owner: ClassInfo, func: ast.AST, names: frozenset[str],
                  _depth: int = 0, _seen: frozenset[int] = frozenset()) -> list[StateChange]:
    """The changes ``func`` makes to the object's attributes (two ``self.`` calls deep),
    leaving out those computed from its own arguments and those it makes under a test."""
    own = set(param_names(func)) - names
    out: list[StateChange] = []
    for node in body_nodes(func):
        change = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _MUTATORS:
                attr = _state_attr(node.func.value, names)
                args = [*node.args, *(k.value for k in node.keywords)]
                if attr is not None and not _reads_any(args, own):
                    reset = node.func.attr == "zero_" or (
                        node.func.attr == "fill_" and all(isinstance(a, ast.Constant) for a in args))
                    change = StateChange(node, attr, f"`{_src(node)}`", reset)
            elif _depth < 2 and isinstance(node.func.value, ast.Name) and node.func.value.id in names:
                callee = owner.method(node.func.attr)
                if callee is not None and id(callee) not in _seen and not _reads_any(list(node.args), own):
                    inner = [c for c in state_changes(model, owner, callee, frozenset({"self"}), _depth + 1,
                                                      _seen | {id(func)})
                             if not gating_reads(model, func, node)]
                    out.extend(inner)
        elif isinstance(node, ast.AugAssign):
            attr = _state_attr(node.target, names)
            if attr is not None and not _reads_any([node.value], own):
                change = StateChange(node, attr, f"`{_src(node)}`", False)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, (int, float)) \
                and not isinstance(node.value.value, bool):
            attr = _state_attr(node.targets[0], names)
            if attr is not None and isinstance(node.targets[0], ast.Attribute):
                change = StateChange(node, attr, f"`{_src(node)}`", True)
        if change is not None and not gating_reads(model, func, node):
            out.append(change)
    return out


def forward_reads(owner: ClassInfo) -> dict[str, ast.AST]:
    """The attributes of ``self`` that ``forward`` (and the methods it calls on
    ``self``, two deep) reads, with the first read of each."""
    out: dict[str, ast.AST] = {}
    forward = owner.method("forward")
    todo: list[tuple[ast.AST, int]] = [(forward, 0)] if forward is not None else []
    seen: set[int] = set()
    while todo:
        func, depth = todo.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        for node in body_nodes(func):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                parent = getattr(node, "_hl_parent", None)
                if isinstance(node.ctx, ast.Load) or (isinstance(parent, ast.AugAssign) and parent.target is node):
                    if isinstance(parent, ast.Call) and parent.func is node:
                        callee = owner.method(node.attr)
                        if callee is not None and depth < 2:
                            todo.append((callee, depth + 1))
                        continue
                    if _value_read(node):
                        out.setdefault(node.attr, node)
                    if isinstance(parent, ast.Attribute) and isinstance(parent.ctx, ast.Load) \
                            and _value_read(parent):
                        grand = getattr(parent, "_hl_parent", None)
                        if not (isinstance(grand, ast.Call) and grand.func is parent):
                            out.setdefault(f"{node.attr}.{parent.attr}", parent)
    return out


def state_read(model: SemanticModel, owner: ClassInfo, attr: str) -> tuple[ClassInfo, ast.AST] | None:
    """Where a forward reads the state ``attr`` (``x`` or ``sub.x``): the owner's
    forward, or for ``sub.x`` the forward of the file's class that builds ``self.sub``."""
    read = forward_reads(owner).get(attr)
    if read is not None:
        return owner, read
    if "." not in attr:
        return None
    sub, name = attr.split(".", 1)
    by_name = {info.name: info for info in model.classes.values()}
    for value, _scope, _node in owner.attribute(sub):
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in by_name:
            child = by_name[value.func.id]
            if child is not owner and child.method("forward") is not None:
                read = forward_reads(child).get(name)
                if read is not None:
                    return child, read
    return None


def _value_read(node: ast.Attribute) -> bool:
    """Whether forward's use of ``self.x`` depends on the state's value: not a
    test against None (`if self.buf is not None:`), not the receiver of an
    in-place change that overwrites it (`self.buf.zero_()`)."""
    parent = getattr(node, "_hl_parent", None)
    if isinstance(parent, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in parent.ops):
        return False
    if isinstance(parent, ast.Attribute) and parent.attr in _MUTATORS - {"add_", "sub_", "mul_", "div_", "lerp_"}:
        call = getattr(parent, "_hl_parent", None)
        if isinstance(call, ast.Call) and call.func is parent:
            return False
    return True


def is_function(node: ast.AST) -> bool:
    return isinstance(node, FunctionNode + (ast.Lambda,))
