"""Outputs of a custom ``autograd.Function`` kept as plain ``ctx`` attributes.

When ``Function.apply`` returns, every differentiable output gets the
Function's backward node (the ctx object) as its ``grad_fn``.  An output that
``forward`` (or ``setup_context``) also put on ``ctx`` as an attribute then
closes a cycle: ctx -> output -> grad_fn -> ctx.  Reference counting never
frees it; the output and everything ctx holds stay alive until Python's cycle
collector runs (tests/behaviour/test_function_ctx_outputs.py shows it with a
weak reference and ``gc.disable()``).  ``ctx.save_for_backward(out)`` stores it
without the cycle, and outputs passed to ``ctx.mark_non_differentiable`` get no
``grad_fn`` at all.

The returned objects are followed by name only: a name returned (alone or as
an element of the returned tuple or list), a name the returned name was
assigned from, and the names a returned name is unpacked into
(``event_t, y = ans; ...; return ans``).  Parameters of ``forward`` are left
out (torch hands back a new view for an input returned as it is), and so are
names bound to something that is not a tensor (a constant, ``len(...)``,
``.item()``, ``.shape``...).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.context import FileContext
from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import FunctionNode, is_staticmethod, positional_params

# Calls and attributes whose value is never a tensor: a name bound from them is no output tensor.
_SCALAR_CALLS = frozenset({"len", "int", "float", "bool", "str", "tuple", "list", "dict", "range", "isinstance"})
_SCALAR_METHODS = frozenset({"item", "tolist", "size", "dim", "numel", "nelement", "stride", "data_ptr"})
_SCALAR_ATTRS = frozenset({"shape", "dtype", "device", "ndim", "requires_grad", "is_cuda", "layout"})


@dataclass(frozen=True)
class StoredOutput:
    store: ast.Assign  # `ctx.event_t = event_t`
    attr: str  # "event_t"
    name: str  # the returned name stored
    method: str  # "forward" / "setup_context"
    function: str  # the Function class's name


def _names(expr: ast.AST | None) -> list[str]:
    if isinstance(expr, ast.Name):
        return [expr.id]
    if isinstance(expr, (ast.Tuple, ast.List)):
        return [n for elt in expr.elts for n in _names(elt.value if isinstance(elt, ast.Starred) else elt)]
    return []


def _non_tensor(value: ast.AST) -> bool:
    if isinstance(value, (ast.Constant, ast.JoinedStr, ast.Compare, ast.BoolOp, ast.Dict, ast.Set)):
        return True
    if isinstance(value, ast.Attribute) and value.attr in _SCALAR_ATTRS:
        return True
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Name) and func.id in _SCALAR_CALLS:
            return True
        if isinstance(func, ast.Attribute) and func.attr in _SCALAR_METHODS:
            return True
        # a NumPy array (`x.numpy()`, `to_numpy(x)`, `np.asarray(x)`) has no grad_fn to close a cycle
        words = ast.unparse(func).lower()
        if "numpy" in words or words.split(".")[0] in ("np", "numpy"):
            return True
    return False


def _forward_slot_names(forward: ast.AST) -> list[str] | None:
    """What ``forward`` returns, slot by slot (a name, or "" for an expression), when every return is the same tuple."""
    shapes = {tuple(e.id if isinstance(e, ast.Name) else "" for e in n.value.elts) for n in executed_nodes(forward)
              if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)}
    plain = [n for n in executed_nodes(forward) if isinstance(n, ast.Return) and not isinstance(n.value, ast.Tuple)]
    if len(shapes) != 1 or plain:
        return None
    (names,) = shapes
    return list(names)


WHOLE = -1  # the name is the whole return value (one tensor, or a tuple unpacked elsewhere)


def _top_level(target: ast.AST) -> list[tuple[str, int]]:
    """(name, position) of the direct names of a tuple target or display, up to a starred element:
    a tensor inside a nested tuple is passed through by `apply` untouched (no grad_fn, no cycle)."""
    out = []
    for i, elt in enumerate(getattr(target, "elts", ())):
        if isinstance(elt, ast.Starred):
            break
        if isinstance(elt, ast.Name) and elt.id != "_":
            out.append((elt.id, i))
    return out


def _output_slots(fn: ast.AST, seeds: dict[str, int], exclude: set[str]) -> tuple[dict[str, int], set[str]]:
    """Names bound to an output of the Function and the output position each is (WHOLE for the whole
    return value), and names bound to non-tensors."""
    assigns = [n for n in executed_nodes(fn) if isinstance(n, ast.Assign)]
    slots = dict(seeds)
    for node in executed_nodes(fn):
        if isinstance(node, ast.Return):
            if isinstance(node.value, ast.Name):
                slots.setdefault(node.value.id, WHOLE)
            elif isinstance(node.value, (ast.Tuple, ast.List)):
                for name, i in _top_level(node.value):
                    slots.setdefault(name, i)
    changed = True
    while changed:
        changed = False
        for node in assigns:
            found: dict[str, int] = {}
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in slots:
                    if isinstance(node.value, ast.Name):  # `out = y` with `out` returned
                        found[node.value.id] = slots[target.id]
                    elif isinstance(node.value, (ast.Tuple, ast.List)) and slots[target.id] == WHOLE:
                        found.update(dict(_top_level(node.value)))  # `ans = (t, y)` with `ans` returned
                if isinstance(node.value, ast.Name) and slots.get(node.value.id) == WHOLE \
                        and isinstance(target, (ast.Tuple, ast.List)):
                    found.update(dict(_top_level(target)))  # `t, y = ans` with `ans` returned
            for name, slot in found.items():
                if name not in slots and name not in exclude:
                    slots[name] = slot
                    changed = True
    scalar = {n for node in assigns if _non_tensor(node.value) for t in node.targets for n in _names(t)}
    return slots, scalar


def _gradient_read(backward: ast.AST | None, slot: int) -> bool:
    """Does ``backward`` read the gradient of output ``slot``?  An output whose gradient parameter is
    `_` or never read is treated by its author as carrying no gradient (an index map, a handle, an
    integer tensor: none of them gets a grad_fn); gradients taken as ``*grads`` may be any."""
    if not isinstance(backward, FunctionNode):
        return True
    params = positional_params(backward)[1:]
    slot = max(slot, 0)
    if slot < len(params):
        name = params[slot]
    elif backward.args.vararg is not None:
        name = backward.args.vararg.arg
    else:
        return False
    return name != "_" and any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                               for n in ast.walk(backward))


def _non_differentiable(fn: ast.AST, ctx_name: str) -> set[str]:
    marked: set[str] = set()
    for node in executed_nodes(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "mark_non_differentiable" and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == ctx_name:
            for arg in node.args:
                marked.update(_names(arg.value if isinstance(arg, ast.Starred) else arg))
    return marked


def _stores(fn: ast.AST, ctx_name: str, outputs: dict[str, int], skip: set[str]) -> list[tuple[ast.Assign, str, str]]:
    found = []
    for node in executed_nodes(fn):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Name):
            continue
        name = node.value.id
        if name not in outputs or name in skip:
            continue
        for target in node.targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id == ctx_name:
                found.append((node, target.attr, name))
    return found


def stored_outputs(ctx: FileContext) -> list[StoredOutput]:
    """``ctx.<attr> = <output>`` in the Functions of the file, for outputs whose gradient backward reads."""
    model = ctx.model
    result: list[StoredOutput] = []
    for info in model.classes.values():
        if not model.is_autograd_function_class(info):
            continue
        forward = info.methods.get("forward")
        setup = info.methods.get("setup_context")
        backward = info.methods.get("backward")
        if isinstance(forward, FunctionNode) and is_staticmethod(forward) and setup is None:
            params = positional_params(forward)
            if params:
                ctx_name, inputs = params[0], set(params[1:])
                if forward.args.vararg is not None:
                    inputs.add(forward.args.vararg.arg)
                outputs, scalar = _output_slots(forward, {}, inputs | {ctx_name})
                skip = inputs | scalar | _non_differentiable(forward, ctx_name)
                for node, attr, name in _stores(forward, ctx_name, outputs, skip):
                    if _gradient_read(backward, outputs[name]):
                        result.append(StoredOutput(node, attr, name, "forward", info.name))
        if isinstance(setup, FunctionNode) and is_staticmethod(setup):
            params = positional_params(setup)
            if len(params) == 3:
                ctx_name, inputs_param, output = params
                outputs, scalar = _output_slots(setup, {output: WHOLE}, {inputs_param, ctx_name})
                skip = scalar | _non_differentiable(setup, ctx_name)
                slots = _forward_slot_names(forward) if isinstance(forward, FunctionNode) else None
                if slots is not None:
                    _, forward_scalar = _output_slots(forward, {}, set())
                    skip |= {name for name, slot in outputs.items()
                             if 0 <= slot < len(slots) and slots[slot] in forward_scalar}
                for node, attr, name in _stores(setup, ctx_name, outputs, skip):
                    if _gradient_read(backward, outputs[name]):
                        result.append(StoredOutput(node, attr, name, "setup_context", info.name))
    return result
