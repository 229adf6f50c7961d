"""Saved-tensor hooks that change a saved tensor's dtype on the way out and not back.

A pack hook may keep a saved tensor in another form (on the host, compressed)
but its unpack hook must give autograd back a tensor of the dtype the op
saved: backward formulas mix the unpacked tensor with gradients and other
saved tensors of the original dtype (`mm` and `linear` refuse mixed dtypes;
element-wise formulas silently promote and compute the gradient from the
rounded values).  The facts here: what a pack hook returns, when it is the
hook's tensor cast to another floating or integer dtype, and whether the
unpack side can convert anything back.  Conservative on the unpack side: any
dtype word, any conversion that is not plainly a device move, any call of a
function of the project counts as a restore.

Never imports torch; reads the file's syntax only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.saved_tensors import hook_function_pairs, own_nodes

# Methods that give a tensor of another dtype.  `.float()` is left out: on the float32
# tensors most models save it changes nothing.
_CAST_METHODS = frozenset({"half", "bfloat16", "double", "char", "byte", "short", "int", "long", "bool"})
_CAST_DTYPES = frozenset({
    "float16", "half", "bfloat16", "float64", "double", "int8", "uint8", "int16", "int32", "int64",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "bool"})
_CAST_TENSOR_TYPES = frozenset({"HalfTensor", "BFloat16Tensor", "DoubleTensor", "CharTensor", "ByteTensor"})
# Methods that keep the tensor (its dtype) while moving or copying it.
_KEEP_METHODS = frozenset({"detach", "contiguous", "clone", "cpu", "cuda", "pin_memory", "to", "view",
                           "reshape", "flatten", "requires_grad_", "npu", "xpu"})
_RESTORE_METHODS = frozenset({"float", "half", "bfloat16", "double", "type", "type_as", "to"})
_MOVE_KEYWORDS = frozenset({"non_blocking", "copy", "device", "memory_format"})
_DEVICE_WORDS = ("device", "dev", "cuda", "cpu", "gpu", "npu", "xpu", "mps")


@dataclass(frozen=True)
class DtypeNotRestored:
    pack: ast.AST
    unpack: ast.AST
    cast: ast.Call  # the cast in what the pack hook returns
    dtype: str  # the dtype as written (`torch.float16`, `half()`)


def _dtype_word(expr: ast.AST) -> str | None:
    """`torch.float16`, `torch.half`: a dtype this module treats as a change from float32."""
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "torch" \
            and expr.attr in _CAST_DTYPES:
        return f"torch.{expr.attr}"
    return None


def cast_of(call: ast.AST) -> str | None:
    """The dtype a call casts its receiver to, when it is spelled at the call."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return None
    name = call.func.attr
    if name in _CAST_METHODS and not call.args and not call.keywords:
        return f"{name}()"
    if name == "to":
        for arg in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
            word = _dtype_word(arg)
            if word is not None:
                return word
    if name == "type" and call.args:
        arg = call.args[0]
        word = _dtype_word(arg)
        if word is not None:
            return word
        if isinstance(arg, ast.Attribute) and arg.attr in _CAST_TENSOR_TYPES:
            return arg.attr
    return None


def _params(func: ast.AST) -> list[str]:
    args = func.args  # type: ignore[attr-defined]
    names = [a.arg for a in args.posonlyargs + args.args]
    if names and names[0] in ("self", "cls") and not isinstance(func, ast.Lambda):
        names = names[1:]
    return names


def _rooted_cast(expr: ast.AST, roots: set[str], local: dict[str, list[ast.AST]], depth: int = 0,
                 ) -> ast.Call | None:
    """A chain of tensor methods from one of ``roots`` (the hook's tensor), directly or through locals
    assigned once, holding a cast: `t.detach().to(torch.bfloat16).cpu()`, `small = t.half(); small.cpu()`."""
    cast: ast.Call | None = None
    cur = expr
    while isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
        if cast_of(cur) is not None:
            cast = cur
        elif cur.func.attr not in _KEEP_METHODS:
            return None
        cur = cur.func.value
    if not isinstance(cur, ast.Name):
        return None
    if cur.id in roots:
        return cast
    values = local.get(cur.id, ())
    if len(values) != 1 or depth >= 3:
        return None
    inner = _rooted_cast(values[0], roots, local, depth + 1)
    return (cast or inner) if inner is not None or cast is not None and _reaches_root(values[0], roots) else None


def _reaches_root(expr: ast.AST, roots: set[str]) -> bool:
    cur = expr
    while isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute) \
            and (cur.func.attr in _KEEP_METHODS or cast_of(cur) is not None):
        cur = cur.func.value
    return isinstance(cur, ast.Name) and cur.id in roots


def _returned_values(func: ast.AST) -> list[ast.AST]:
    if isinstance(func, ast.Lambda):
        return [func.body]
    return [n.value for n in own_nodes(func) if isinstance(n, ast.Return) and n.value is not None]


def _local_values(func: ast.AST) -> dict[str, list[ast.AST]]:
    out: dict[str, list[ast.AST]] = {}
    if isinstance(func, ast.Lambda):
        return out
    for node in own_nodes(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(node.value)
    return out


def returned_cast(pack: ast.AST) -> ast.Call | None:
    """The cast of the pack hook's tensor that every return of it hands back (alone or in a tuple),
    directly or through one local; None when some return hands back something else."""
    params = _params(pack)
    if not params:
        return None
    roots = {params[0]}
    local = _local_values(pack)
    found: ast.Call | None = None
    returns = _returned_values(pack)
    if not returns:
        return None
    for value in returns:
        parts = value.elts if isinstance(value, ast.Tuple) else [value]
        hit: ast.Call | None = None
        for part in parts:
            hit = _rooted_cast(part, roots, local)
            if hit is not None:
                break
        if hit is None:
            return None
        found = found or hit
    return found


def _plain_device(arg: ast.AST) -> bool:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return True
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "device":
        return True
    name = arg.id if isinstance(arg, ast.Name) else arg.attr if isinstance(arg, ast.Attribute) else None
    return name is not None and any(word in name.lower() for word in _DEVICE_WORDS)


def _moves_only(call: ast.Call) -> bool:
    """`.to(device)`, `.to("cuda", non_blocking=True)`, `.to(device=dev)`: a move that keeps the dtype."""
    if len(call.args) > 1 or any(not _plain_device(a) for a in call.args):
        return False
    return all(k.arg in _MOVE_KEYWORDS and (k.arg != "device" or _plain_device(k.value)) for k in call.keywords)


def may_restore_dtype(unpack: ast.AST) -> bool:
    """Can the unpack hook give the tensor another dtype (so, maybe, the original one)?"""
    nodes = list(ast.walk(unpack.body)) if isinstance(unpack, ast.Lambda) else list(own_nodes(unpack))
    for node in nodes:
        if isinstance(node, ast.Name) and "dtype" in node.id.lower():
            return True
        if isinstance(node, ast.Attribute) and "dtype" in node.attr.lower():
            return True
        if isinstance(node, ast.keyword) and node.arg is not None and "dtype" in node.arg:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "float" in node.value:
            return True
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            return True  # a helper, a constructor: what it gives back is not known here
        if not isinstance(func, ast.Attribute):
            return True
        if isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            return True
        if func.attr in ("copy_", "set_", "view") and node.args:
            return True  # into a buffer of some dtype, or a dtype view
        if func.attr in _RESTORE_METHODS and func.attr != "to":
            return True
        if func.attr == "to" and not _moves_only(node):
            return True
    return False


def dtype_not_restored(tree: ast.Module) -> list[DtypeNotRestored]:
    out: list[DtypeNotRestored] = []
    for pack, unpack, _call in hook_function_pairs(tree):
        cast = returned_cast(pack)
        if cast is None or may_restore_dtype(unpack):
            continue
        out.append(DtypeNotRestored(pack, unpack, cast, cast_of(cast) or "another dtype"))
    return out
