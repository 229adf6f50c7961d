"""Module hooks that treat their positional-argument tuple as something it never is.

torch calls a forward pre-hook with ``(module, args)``, a forward hook with
``(module, args, output)`` (``kwargs`` before ``output`` with
``with_kwargs=True``), a full backward hook with ``(module, grad_input,
grad_output)`` and a full backward pre-hook with ``(module, grad_output)``:
``args``, ``grad_input`` and ``grad_output`` are always tuples (``()`` when a
module is called with keywords only), never None and never a tensor.  So a
``args is None`` test never holds, and ``args.clone()`` raises AttributeError
(checked on torch 2.13).  ``output`` is whatever forward returned and is not
judged here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind, Registration

# attributes a tensor has and a tuple has not
TENSOR_ONLY = frozenset({
    "clone", "detach", "to", "cpu", "cuda", "float", "half", "double", "bfloat16", "shape", "dtype", "device",
    "size", "dim", "ndim", "numel", "requires_grad", "grad", "view", "reshape", "mean", "sum", "norm", "abs",
    "item", "numpy", "data", "contiguous", "flatten", "squeeze", "unsqueeze", "permute", "transpose", "softmax",
    "argmax", "detach_", "requires_grad_", "type_as", "masked_fill", "mul", "add", "T",
})

# which positional parameters (after the module) are tuples, by kind
_TUPLE_SLOTS = {
    HookKind.FORWARD_PRE: (1,),
    HookKind.FORWARD: (1,),
    HookKind.FULL_BACKWARD: (1, 2),
    HookKind.BACKWARD_LEGACY: (1, 2),
    HookKind.FULL_BACKWARD_PRE: (1,),
}


@dataclass
class TupleMisuse:
    registration: Registration
    param: str
    node: ast.AST  # the None test or the attribute access
    how: str  # "none-test" | "attribute"
    attr: str = ""
    alias: str = ""  # the local the tuple reaches the access through, if any


def _hook_params(reg: Registration) -> list[str] | None:
    node = reg.hook.node  # type: ignore[union-attr]
    args = node.args
    params = [a.arg for a in args.posonlyargs + args.args][reg.hook.bound:]  # type: ignore[union-attr]
    return params


def _only_param(ctx: FileContext, name: ast.Name, param: str) -> bool:
    if name.id != param:
        return False
    bindings = ctx.model.bindings_at(name)
    return bool(bindings) and all(b.kind == "param" for b in bindings)


def _aliases(ctx: FileContext, body: ast.AST, param: str) -> dict[str, ast.AST]:
    """Locals bound once to the tuple or to `tuple if c else other` (the tuple on one branch)."""
    counts: dict[str, int] = {}
    values: dict[str, ast.AST] = {}
    for n in ast.walk(body):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            counts[n.id] = counts.get(n.id, 0) + 1
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            values[n.targets[0].id] = n.value
    out: dict[str, ast.AST] = {}
    for name, value in values.items():
        if counts.get(name) != 1 or name == param:
            continue
        sides = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        if any(isinstance(s, ast.Name) and _only_param(ctx, s, param) for s in sides):
            out[name] = value
    return out


def _type_tested(node: ast.AST, param: str) -> bool:
    """The hook asks what the value is before using it: `isinstance(args, tuple)`, or any call given it in a
    condition (`is_listy(input)`): the access may sit on a branch that never runs."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("isinstance", "type", "hasattr") \
                and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == param:
            return True
        if isinstance(n, (ast.If, ast.IfExp, ast.While, ast.Assert)):
            for c in ast.walk(n.test):
                if isinstance(c, ast.Call) and any(isinstance(a, ast.Name) and a.id == param for a in c.args):
                    return True
    return False


def tuple_misuses(ctx: FileContext) -> list[TupleMisuse]:
    out: list[TupleMisuse] = []
    seen: set[int] = set()
    for reg in ctx.core.hooks.registrations:
        slots = _TUPLE_SLOTS.get(reg.kind)
        if slots is None or reg.hook is None or id(reg.hook.node) in seen:
            continue
        node = reg.hook.node
        if node.args.vararg is not None and len(_hook_params(reg) or []) < 2:
            continue
        params = _hook_params(reg) or []
        seen.add(id(node))
        body = node.body if isinstance(node, ast.Lambda) else node
        for slot in slots:
            if slot >= len(params):
                continue
            if reg.kind is HookKind.FORWARD and reg.with_kwargs and slot == 2:
                continue
            param = params[slot]
            if _type_tested(node, param):
                continue  # `isinstance(args, tuple)`: the access may be on a branch that never runs
            aliases = _aliases(ctx, node, param)
            for n in ast.walk(body if isinstance(body, ast.AST) else node):
                if isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Is, ast.IsNot, ast.Eq,
                                                                                            ast.NotEq)) \
                        and isinstance(n.comparators[0], ast.Constant) and n.comparators[0].value is None \
                        and isinstance(n.left, ast.Name) and _only_param(ctx, n.left, param):
                    out.append(TupleMisuse(reg, param, n, "none-test"))
                elif isinstance(n, ast.Attribute) and n.attr in TENSOR_ONLY and isinstance(n.value, ast.Name):
                    if _only_param(ctx, n.value, param):
                        out.append(TupleMisuse(reg, param, n, "attribute", n.attr))
                    elif n.value.id in aliases and not _type_tested(node, n.value.id) \
                            and all(b.kind == "assign" for b in ctx.model.bindings_at(n.value)):
                        out.append(TupleMisuse(reg, param, n, "attribute", n.attr, alias=n.value.id))
    return out
