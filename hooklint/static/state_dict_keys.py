"""Which keys a state-dict hook reads or writes, and whether it uses its prefix.

torch 2.13 hands ``state_dict()``'s post-hooks and ``load_state_dict()``'s
pre-hooks the state dict of the whole call (the model ``state_dict()`` or
``load_state_dict()`` was called on), together with ``prefix``, the dotted
path of the hooked module inside it (``""`` only for that root).  A key of
the hooked module is ``prefix + name``.  A hook that spells keys as fixed
strings (``state_dict["decoder.tok_embeddings.weight"]``,
``key.startswith("decoder.")``) without its ``prefix`` names the right
entries only while its module is the root: once it is a submodule, or is
wrapped (DDP's ``module.``, a PEFT or FSDP wrapper), the keys carry a
parent's prefix and the hook misses them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import SemanticModel
from hooklint.static.state_dict import LOAD_PRE, SAVE, STATE_DICT_HOOK_METHODS, _with_module, registration_method
from hooklint.static.values import CallableValue, Inference

KEY_HOOK_TRIGGERS = tuple(m for m, (kind, _) in STATE_DICT_HOOK_METHODS.items() if kind in (LOAD_PRE, SAVE))


@dataclass(frozen=True)
class FixedKeyUse:
    registration: ast.Call
    hook: ast.AST
    hook_name: str
    kind: str  # "state_dict post-hook" / "load_state_dict pre-hook"
    node: ast.AST  # the first use of a fixed key
    text: str


def fixed_key_uses(model: SemanticModel, inference: Inference) -> list[FixedKeyUse]:
    out: list[FixedKeyUse] = []
    seen: set[int] = set()
    for call in model.calls_of_method(*KEY_HOOK_TRIGGERS):
        method = registration_method(call)
        if method is None or not call.args:
            continue
        hook = inference.callable_of(call.args[0])
        if not isinstance(hook, CallableValue) or id(hook.node) in seen:
            continue
        kind, module_first = STATE_DICT_HOOK_METHODS[method]
        params = list(hook.params)
        if _with_module(call, module_first):
            params = params[1:]
        if not params:
            continue
        state = params[0]
        prefix = params[1] if len(params) > 1 else None
        func = hook.node
        args = getattr(func, "args", None)
        catch_all = [a.arg for a in (args.vararg, args.kwarg) if a is not None] if args is not None else []
        loaded = {n.id for n in executed_nodes(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        if (prefix is not None and prefix in loaded) or any(name in loaded for name in catch_all):
            continue  # it uses the prefix (or may, through *args)
        if prefix is None and not catch_all:
            continue  # a hook that does not take the prefix would fail when called: another problem
        use = _first_fixed_key(func, state)
        if use is None:
            continue
        seen.add(id(hook.node))
        words = "state_dict post-hook" if kind == SAVE else "load_state_dict pre-hook"
        out.append(FixedKeyUse(call, func, getattr(func, "name", "<lambda>"), words, use, ast.unparse(use)))
    return out


def _literal_start(key: ast.AST) -> bool:
    """A key spelled from its first character: ``"a.b"``, ``f"a.{n}"``, ``"a." + n``."""
    if isinstance(key, ast.Constant):
        return isinstance(key.value, str) and key.value != ""
    if isinstance(key, ast.JoinedStr):
        return bool(key.values) and isinstance(key.values[0], ast.Constant)
    if isinstance(key, ast.BinOp) and isinstance(key.op, ast.Add):
        return _literal_start(key.left)
    return False


def _first_fixed_key(func: ast.AST, state: str) -> ast.AST | None:
    key_names = _key_variables(func, state)
    for node in executed_nodes(func):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == state \
                and _literal_start(node.slice):
            return node
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id == state and node.func.attr in ("pop", "get", "setdefault") \
                    and _literal_start(node.args[0]):
                return node
            if isinstance(owner, ast.Name) and owner.id in key_names and node.func.attr == "startswith" \
                    and _literal_start(node.args[0]):
                return node
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == state \
                and _literal_start(node.left):
            return node
    return None


def _key_variables(func: ast.AST, state: str) -> set[str]:
    """Loop variables running over the state dict's keys (``for k in
    state_dict``, ``.keys()``, ``list(...)``, a name bound to one of these)."""
    holders = {state}
    for node in executed_nodes(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and _mentions(node.value, holders):
            holders.add(node.targets[0].id)
    out: set[str] = set()
    for node in executed_nodes(func):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                and _mentions(node.iter, holders):
            out.add(node.target.id)
    return out


def _mentions(expr: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(expr))
