"""What a forward hook's body does besides observing: does it change the
module's output (or input), and does it accumulate state across calls?

Both questions matter under activation checkpointing, where a module's
forward runs again during backward (HKL702, HKL703).  They are answered on
the body's syntax alone, and the run-time layer asks them of the hook's
source too (hooklint.runtime.checkpointing), so both layers agree on what
counts.  Unknown (a call into code the body does not show) counts as "no":
the rules stay quiet.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.flow import executed_nodes
from hooklint.static.semantic import positional_params

# Methods that add to a container: called on state kept outside the hook, they accumulate.
_ADDING_METHODS = frozenset({"append", "extend", "insert", "add", "appendleft", "extendleft", "put", "put_nowait"})
# In-place tensor methods that do not accumulate (they overwrite, or change no value).
_OVERWRITING_INPLACE = frozenset({"copy_", "zero_", "fill_", "detach_", "requires_grad_", "resize_", "set_",
                                  "share_memory_", "retain_grad", "resize_as_", "normal_", "uniform_", "random_",
                                  "bernoulli_", "exponential_", "cauchy_", "geometric_", "log_normal_"})
# Calls whose result is None: a lambda whose body is one of them returns None.
_NONE_RESULT_METHODS = _ADDING_METHODS | frozenset({"update", "clear", "__setitem__", "remove", "discard", "write",
                                                    "info", "debug", "warning", "log", "put", "setdefault_"})
_NONE_RESULT_FUNCTIONS = frozenset({"print", "setattr", "delattr"})


@dataclass(frozen=True)
class Effect:
    node: ast.AST  # the statement or call that has the effect
    text: str  # how to name it: "`stored.append(...)`", "`self.calls += 1`"


def body_of(func: ast.AST) -> list[ast.AST]:
    return [func.body] if isinstance(func, ast.Lambda) else list(func.body)  # type: ignore[attr-defined]


def _local_names(func: ast.AST) -> set[str]:
    """Names the hook binds itself (assignments, loop targets, with-as), not
    declared ``global`` or ``nonlocal``: state that lives and dies with one call."""
    declared: set[str] = set()
    bound: set[str] = set()
    for node in _walk(func):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return bound - declared


def _walk(func: ast.AST):
    for stmt in body_of(func):
        yield from executed_nodes(stmt)


def _root(expr: ast.AST) -> ast.Name | None:
    while isinstance(expr, (ast.Attribute, ast.Subscript, ast.Call)):
        expr = expr.func if isinstance(expr, ast.Call) else expr.value
    return expr if isinstance(expr, ast.Name) else None


def _outer(expr: ast.AST, local: set[str], params: set[str]) -> bool:
    """Does ``expr`` name state that outlives one call of the hook: a global or a
    closure variable, an attribute of one, or an attribute of a parameter
    (``self.calls``, ``module.stats``)?  A bare parameter is the call's own argument."""
    root = _root(expr)
    if root is None or root.id in local:
        return False
    if root.id in params:
        return isinstance(expr, (ast.Attribute, ast.Subscript))
    return True


def accumulating_effects(func: ast.AST) -> list[Effect]:
    """Side effects that add up over calls: appends to an outer list, ``+=`` on
    outer counters, in-place updates of outer tensors (``running.mul_(0.9)``),
    writes keyed by a growing count (``acts[len(acts)] = o``).  Overwrites
    (``stats[name] = o``, ``self.last = o``) and prints are not."""
    local = _local_names(func)
    params = set(positional_params(func)) | {a.arg for a in func.args.kwonlyargs}  # type: ignore[attr-defined]
    if func.args.vararg is not None:  # type: ignore[attr-defined]
        params.add(func.args.vararg.arg)  # type: ignore[attr-defined]
    effects: list[Effect] = []
    for node in _walk(func):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.BitOr)):
            target = node.target
            if isinstance(target, ast.Name):
                if target.id not in local:  # `global n; n += 1` or a nonlocal counter
                    effects.append(Effect(node, f"`{_text(node)}`"))
            elif _outer(target, local, params) or _outer(getattr(target, "value", target), local, params):
                effects.append(Effect(node, f"`{_text(node)}`"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, receiver = node.func.attr, node.func.value
            if method in _ADDING_METHODS and _outer(receiver, local, params) \
                    or method.endswith("_") and not method.endswith("__") and method not in _OVERWRITING_INPLACE \
                    and _outer(receiver, local, params) and not _is_argument(receiver, params):
                effects.append(Effect(node, f"`{_short(node)}`"))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _outer(target.value, local, params) \
                        and _grows_with(target.slice, target.value, local):
                    effects.append(Effect(node, f"`{_text(node)}`"))
    return effects


def _is_argument(expr: ast.AST, params: set[str]) -> bool:
    return isinstance(expr, ast.Name) and expr.id in params


def _grows_with(key: ast.AST, container: ast.AST, local: set[str]) -> bool:
    """A key that is new on every call: ``len(container)``."""
    if isinstance(key, ast.Call) and isinstance(key.func, ast.Name) and key.func.id == "len" and key.args \
            and ast.dump(key.args[0]) == ast.dump(container):
        return True
    # a key the hook advances itself (`acts[self.i] = o; self.i += 1`) is reported for its `+=`;
    # a key fixed per hook or per step (a layer name, the step the trainer sets) is an overwrite
    return False


def changes_output(func: ast.AST, changed: str | None, bound: int = 0) -> ast.AST | None:
    """The node by which a forward hook (``changed``: its output parameter) or
    pre-hook (``changed``: its input parameter) changes what the module
    computes: a returned value other than None and other than the argument
    itself, or an in-place edit of the argument.  None: observe-only, or unknown."""
    if isinstance(func, ast.Lambda):
        body = func.body
        if isinstance(body, ast.Constant) and body.value is None:
            return None
        if isinstance(body, ast.Call):
            name = body.func.attr if isinstance(body.func, ast.Attribute) else getattr(body.func, "id", "")
            if name in _NONE_RESULT_METHODS or name in _NONE_RESULT_FUNCTIONS:
                return None
            if name.endswith("_") and changed and _names(body.func, changed):
                return body  # `lambda m, i, o: o.mul_(2)`: edited in place, and returned
            if isinstance(body.func, (ast.Name, ast.Attribute)) and not _uses(body, changed):
                return None
            return body if _tensor_like_call(body, changed) else None
        if isinstance(body, ast.Name) and body.id == changed:
            return None
        if isinstance(body, (ast.BinOp, ast.Tuple, ast.Subscript, ast.IfExp)):
            return body
        return None
    found = None
    for node in _walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            if isinstance(value, ast.Name) and value.id == changed:
                continue
            return node
        if changed is None:
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
                and not node.func.attr.endswith("__") and node.func.attr not in ("requires_grad_", "retain_grad",
                                                                                 "detach_") \
                and _names(node.func.value, changed):
            found = found or node
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and _names(target.value, changed) or \
                        isinstance(node, ast.AugAssign) and isinstance(target, ast.Name) and target.id == changed:
                    found = found or node
    return found


def _names(expr: ast.AST, name: str | None) -> bool:
    """``output``, ``output[0]``, ``output.data``."""
    while isinstance(expr, (ast.Subscript, ast.Attribute)):
        if isinstance(expr, ast.Attribute) and expr.attr not in ("data",):
            return False
        expr = expr.value
    return isinstance(expr, ast.Name) and expr.id == name


def _uses(node: ast.AST, name: str | None) -> bool:
    return name is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _tensor_like_call(call: ast.Call, changed: str | None) -> bool:
    """``o * 3``-like calls of the argument: ``torch.relu(o)``, ``o.clamp(0)``, ``steer(o)``."""
    return _uses(call, changed)


def _text(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _short(call: ast.Call) -> str:
    head = ast.unparse(call.func)
    if len(head) > 50:
        head = "..." + head[-47:]
    return f"{head}({'...' if call.args or call.keywords else ''})"


# Ops whose second application to their own result changes nothing (with constant bounds):
# a hook that only does this to the value it changes gives the same result run once or twice.
_IDEMPOTENT_OPS = frozenset({"clamp", "clamp_min", "clamp_max", "clip", "relu", "relu6", "abs", "sign", "round",
                             "floor", "ceil", "trunc", "hardtanh"})


def same_when_repeated(change: ast.AST, changed: str | None, module_param: str | None) -> bool:
    """Does running the hook's change a second time, on its own result, give
    what the first run gave, or does the change depend on code not seen?
    True for a returned value (or tuple of values) that is an idempotent op
    with constant bounds on the changed argument (``torch.clamp(grad_in[0],
    min=0.0)``, ``F.relu(output)``), and for a call of a submodule of the
    hooked module on it (``module.activation_post_process(output)``, an
    observer attached for the purpose: what a second pass through it does
    depends on that module, which the hook does not show)."""
    value = change.value if isinstance(change, ast.Return) else change
    items = value.elts if isinstance(value, ast.Tuple) else [value]
    if not items or changed is None:
        return False
    for item in items:
        if not isinstance(item, ast.Call):
            return False
        func = item.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if module_param is not None and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id == module_param and len(item.args) == 1 and _names(item.args[0], changed):
            continue  # the hooked module's own submodule applied to the value
        if name not in _IDEMPOTENT_OPS:
            return False
        operands = [func.value] if isinstance(func, ast.Attribute) and _names(func.value, changed) else []
        rest = item.args if operands else item.args[1:]
        if not operands and not (item.args and _names(item.args[0], changed)):
            return False
        if not all(isinstance(arg, ast.Constant) or isinstance(arg, ast.UnaryOp) and isinstance(arg.operand, ast.Constant)
                   for arg in list(rest) + [k.value for k in item.keywords if k.arg != "inplace"]):
            return False
    return True
