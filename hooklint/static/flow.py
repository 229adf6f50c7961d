"""Statement order inside one function body (or the module body).

The lifetime rules ask questions such as "does this ``remove()`` run before
that ``backward()``", "is this registration repeated by a loop" or "which
names does a loop rebind".  They are answered on the syntax alone, in source
order, over the statements of a block and the blocks nesting them.  Where
control flow makes the order unclear (a statement in a branch, a call in
another function) the helpers answer "no" or None, and the rules stay quiet.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from hooklint.static.semantic import FunctionNode, SemanticModel, block_position, child_nodes
from hooklint.static.values import CallableValue, ClassValue, Inference, ModuleValue, ObjectValue, TensorValue

LoopNode = (ast.For, ast.AsyncFor, ast.While)
_NESTED_CODE = FunctionNode + (ast.Lambda, ast.ClassDef)


def statement_of(node: ast.AST) -> ast.stmt | None:
    """The innermost statement containing ``node`` (itself if it is one)."""
    cur: ast.AST | None = node
    while cur is not None and not isinstance(cur, ast.stmt):
        cur = getattr(cur, "_hl_parent", None)
    return cur


def block_of(stmt: ast.stmt) -> tuple[list[ast.stmt], int] | None:
    """The statement list that holds ``stmt`` and its index there."""
    parent = getattr(stmt, "_hl_parent", None)
    if parent is None:
        return None
    return block_position(stmt, parent)


def contains(ancestor: ast.AST, node: ast.AST) -> bool:
    """Is ``node`` ``ancestor`` or inside it?"""
    cur: ast.AST | None = node
    while cur is not None:
        if cur is ancestor:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def access_path(expr: ast.AST) -> tuple[str, ...] | None:
    """``net.layers[0].fc`` -> ("net", ".layers", "[0]", ".fc"); None for
    anything but names, attributes and constant subscripts."""
    parts: list[str] = []
    while True:
        if isinstance(expr, ast.Attribute):
            parts.append("." + expr.attr)
            expr = expr.value
        elif isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant):
            parts.append(f"[{expr.slice.value!r}]")
            expr = expr.value
        elif isinstance(expr, ast.Name):
            parts.append(expr.id)
            return tuple(reversed(parts))
        else:
            return None


def root_name(expr: ast.AST) -> ast.Name | None:
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr if isinstance(expr, ast.Name) else None


def later_statements(stmt: ast.stmt) -> list[ast.stmt]:
    pos = block_of(stmt)
    return [] if pos is None else pos[0][pos[1] + 1:]


def executed_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Nodes that run when ``node`` runs, in source order: nested function,
    lambda and class bodies are skipped (defaults and decorators are kept).
    For a function or lambda itself, the nodes its body runs when called."""
    if isinstance(node, FunctionNode + (ast.Lambda,)):
        stack = [node.body] if isinstance(node, ast.Lambda) else list(reversed(node.body))
    else:
        stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        if isinstance(cur, FunctionNode):
            children = list(cur.decorator_list) + list(cur.args.defaults) + \
                [d for d in cur.args.kw_defaults if d is not None]
        elif isinstance(cur, ast.Lambda):
            children = list(cur.args.defaults) + [d for d in cur.args.kw_defaults if d is not None]
        elif isinstance(cur, ast.ClassDef):
            children = list(cur.decorator_list) + list(cur.bases)
        else:
            # (not ast.iter_child_nodes: a generator over every field, and the shared Load/Store
            # context nodes, which nothing asks for; this walk was a tenth of a run's CPU)
            children = child_nodes(cur)
        stack.extend(reversed(children))


def calls_in(node: ast.AST) -> list[ast.Call]:
    return [n for n in executed_nodes(node) if isinstance(n, ast.Call)]


def is_simple_statement(stmt: ast.stmt) -> bool:
    """A statement with no nested block."""
    return not any(isinstance(getattr(stmt, f, None), list) and getattr(stmt, f)
                   and isinstance(getattr(stmt, f)[0], ast.stmt) for f in ("body", "orelse", "finalbody"))


def function_of(node: ast.AST) -> ast.AST | None:
    """The function (or lambda) whose code ``node`` is part of; None at module level."""
    cur = getattr(node, "_hl_parent", None)
    child = node
    while cur is not None:
        if isinstance(cur, FunctionNode + (ast.Lambda,)):
            if isinstance(cur, FunctionNode) and child in cur.decorator_list:
                pass  # decorators run where the def stands
            elif child is getattr(cur, "returns", None) or child in _defaults(cur):
                pass
            else:
                return cur
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return None


def _defaults(func: ast.AST) -> list[ast.AST]:
    args: ast.arguments = func.args  # type: ignore[attr-defined]
    return list(args.defaults) + [d for d in args.kw_defaults if d is not None]


def enclosing_loops(node: ast.AST) -> list[ast.For | ast.AsyncFor | ast.While]:
    """Loops whose body (re)runs ``node``, innermost first, within its function.
    A ``for`` loop's iterable and ``else`` run once and do not count."""
    out = []
    child = node
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, _NESTED_CODE):
        if isinstance(cur, LoopNode) and child in cur.body:
            out.append(cur)
        if isinstance(cur, ast.While) and child is cur.test:
            out.append(cur)
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return out


def enclosing_comprehension(node: ast.AST) -> ast.AST | None:
    """The innermost comprehension that evaluates ``node`` once per element
    (its element, conditions and inner iterables), within its function."""
    child = node
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, _NESTED_CODE):
        if isinstance(cur, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)) \
                and child is not cur.generators[0].iter:
            return cur
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return None


def names_stored_in(node: ast.AST) -> set[str]:
    """Names bound anywhere in ``node`` (a loop: its target and body), not in
    nested functions."""
    out: set[str] = set()
    for sub in executed_nodes(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            out.add(sub.id)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in sub.names)
        elif isinstance(sub, FunctionNode + (ast.ClassDef,)):
            out.add(sub.name)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            out.add(sub.name)
    return out


def attributes_stored_in(node: ast.AST) -> set[str]:
    """Attribute names assigned in ``node`` (``self._handle = ...`` gives ``_handle``)."""
    out: set[str] = set()
    for sub in executed_nodes(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
            out.add(sub.attr)
    return out


def constant_range_length(iterable: ast.AST) -> int | None:
    """How many times ``for _ in range(...)`` with constant bounds iterates."""
    if not (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "range"):
        return None
    if iterable.keywords or not 1 <= len(iterable.args) <= 3:
        return None
    values = []
    for arg in iterable.args:
        if isinstance(arg, ast.Constant) and type(arg.value) is int:
            values.append(arg.value)
        else:
            return None
    try:
        return len(range(*values))
    except ValueError:
        return None


# ---------------------------------------------------------------- backward

BACKWARD_FUNCTIONS = frozenset({"torch.autograd.backward", "torch.autograd.grad", "torch.autograd.grad_mode.grad"})
# Methods that run a backward pass on their first argument (Lightning,
# Accelerate, Fabric) rather than on their receiver.
_BACKWARD_OF_ARGUMENT = frozenset({"manual_backward"})
# Words in the name of a call hooklint cannot see into that suggest it may
# run a backward pass (a training step, a fit loop, an optimizer closure).
_TRAINING_WORDS = ("fit", "train", "backward", "step", "closure", "optimi", "learn", "update", "epoch", "run",
                   "loop", "grad")
_NOT_TRAINING = frozenset({"zero_grad", "requires_grad_", "enable_grad", "no_grad", "set_grad_enabled"})


@dataclass(frozen=True)
class BackwardCall:
    call: ast.Call
    tensor: ast.expr | None  # the tensor whose graph is differentiated, when it can be named
    text: str  # how to name it in a message: "z.backward()", "torch.autograd.grad(...)"


class BackwardFinder:
    """Recognises calls that run a backward pass, directly or through a local function."""

    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference
        self._function_runs_backward: dict[ast.AST, bool] = {}

    def backward_call(self, call: ast.Call) -> BackwardCall | None:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "backward":
            receiver = self.inference.infer(func.value)
            if isinstance(receiver, (ClassValue, ModuleValue)):
                return None  # an autograd.Function's or a module's own `backward` method
            if isinstance(receiver, ObjectValue) and receiver.local_class.method("backward") is not None:
                # an accelerator-like helper defined here: `helper.backward(loss)`
                return BackwardCall(call, call.args[0] if call.args else None, _short(call))
            if receiver is None and call.args and _looks_like_helper(func.value):
                return BackwardCall(call, call.args[0], _short(call))
            return BackwardCall(call, func.value, _short(call))
        if isinstance(func, ast.Attribute) and func.attr in _BACKWARD_OF_ARGUMENT:
            return BackwardCall(call, call.args[0] if call.args else None, _short(call))
        qual = self.model.qualify(func)
        if qual in BACKWARD_FUNCTIONS:
            tensor = call.args[0] if call.args else next(
                (k.value for k in call.keywords if k.arg in ("tensors", "outputs")), None)
            return BackwardCall(call, tensor, _short(call))
        return None

    def first_backward(self, node: ast.AST) -> BackwardCall | None:
        for call in calls_in(node):
            found = self.backward_call(call)
            if found is not None:
                return found
        return None

    def may_run_backward(self, node: ast.AST) -> bool:
        """Could running ``node`` run a backward pass: a backward call, a call
        of a local function that runs one, or a call hooklint cannot see into
        that looks like training (it takes a callable, or its name says so)."""
        for call in calls_in(node):
            if self.backward_call(call) is not None or self._call_may_run_backward(call):
                return True
        return False

    def _call_may_run_backward(self, call: ast.Call, depth: int = 0) -> bool:
        target = self.inference.infer(call.func)
        node = getattr(target, "node", None)
        if isinstance(node, FunctionNode + (ast.Lambda,)):
            return self.function_runs_backward(node, depth)
        if isinstance(target, (ModuleValue, ClassValue)):
            return False  # a forward pass or a constructor
        qual = self.model.qualify(call.func)
        if qual is not None and qual not in BACKWARD_FUNCTIONS and qual.startswith(("builtins.", "torch.")):
            return False
        if isinstance(call.func, ast.Attribute) and isinstance(self.inference.infer(call.func.value), TensorValue):
            return False
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if name not in _NOT_TRAINING and any(word in name.lower() for word in _TRAINING_WORDS):
            return True
        # a closure handed to code hooklint cannot see (`optimizer.step(closure)`)
        return any(isinstance(self.inference.infer(arg), CallableValue)
                   for arg in list(call.args) + [k.value for k in call.keywords])

    def function_runs_backward(self, func: ast.AST, depth: int = 0) -> bool:
        if func in self._function_runs_backward:
            return self._function_runs_backward[func]
        self._function_runs_backward[func] = False  # recursion guard
        result = False
        if depth < 4:
            body = [func.body] if isinstance(func, ast.Lambda) else list(func.body)  # type: ignore[attr-defined]
            for stmt in body:
                for call in calls_in(stmt):
                    if self.backward_call(call) is not None or self._call_may_run_backward(call, depth + 1):
                        result = True
                        break
                if result:
                    break
        self._function_runs_backward[func] = result
        return result


def _looks_like_helper(expr: ast.AST) -> bool:
    """``accelerator.backward(loss)`` / ``fabric.backward(loss)``: a backward of the argument."""
    name = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")
    return any(word in name.lower() for word in ("accelerator", "fabric", "engine", "trainer"))


def _short(call: ast.Call) -> str:
    func = call.func
    try:
        head = ast.unparse(func)
    except Exception:  # noqa: BLE001 - odd trees must not crash a rule
        head = "backward"
    if len(head) > 50:
        head = "..." + head[-47:]
    return f"{head}({'...' if call.args or call.keywords else ''})"
