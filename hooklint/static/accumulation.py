"""Optimizer updates made from inside hooks, and training loops that
accumulate gradients over micro-batches (HKL205).

An *update in a hook* is a call of ``step()`` or ``zero_grad()`` on an
optimizer (``opt.step()``, ``optimizer_dict[p].step()`` for per-parameter
optimizers, the "optimizer in backward" pattern) or, in a post-accumulate-grad
hook, an in-place update of the parameter from its own gradient
(``p.add_(p.grad, alpha=-lr)``).  The receiver is an optimizer when its value
is built by a ``torch.optim`` class (or a dict or list of them) where the file
shows it, or, failing that, when its name says so (``optimizer``, ``opt``,
``optimizer_dict``): the latter is a heuristic on names, and the messages say
which of the two it was.

A loop *accumulates* when it calls ``backward()`` (``loss.backward()``,
``accelerator.backward(loss)``, ``scaler.scale(loss).backward()``) and shows
that its optimizer step does not follow every backward: an ``if`` with a
modulo test that steps, zeroes or skips (``if (i + 1) % accum_steps == 0:``,
``if step % n != 0: continue``), a ``no_sync()`` or ``accelerator.accumulate()``
context, or a count named for accumulation (``gradient_accumulation_steps``,
``accum_iter``...) in the loop, such as the loss divided by it.  A trainer
configured with ``accumulate_grad_batches=`` / ``gradient_accumulation_steps=``
greater than 1 accumulates too.

Nothing here imports torch or runs code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterator

from hooklint.static.bodies import body_nodes, param_names
from hooklint.static.semantic import FunctionNode, SemanticModel
from hooklint.static.tree_walk import walk_tree
from hooklint.static.values import src

# Methods of an optimizer that change the parameters or their gradients.
OPTIMIZER_METHODS = frozenset({"step", "zero_grad"})
_UPDATE_METHODS = frozenset({"add_", "sub_", "addcdiv_", "addcmul_", "lerp_"})

# `optimizer`, `optimiser`, `opt`, `optim`, `opts`, `optimizer_dict`, `self.opt`, `adam_opt`
_OPTIMIZER_NAME = re.compile(r"(?:^|_)(?:opt|opts|optim|optims)(?:_|$)|optimi[sz]er", re.IGNORECASE)
_NOT_OPTIMIZER = re.compile(r"sched|lr_|warmup", re.IGNORECASE)

# Counts of micro-batches per step: `gradient_accumulation_steps`, `grad_accum`, `accum_iter`,
# `accumulation_steps`, `accumulate_grad_batches` (not `accumulated_loss`).
_ACCUMULATION_NAME = re.compile(
    r"grad(?:ient)?_?accum|accum(?:ulation|ulate)?_?(?:steps?|iters?|iterations|count|batches|freq|every|"
    r"grad_batches)(?:$|_)|^n_?accum",
    re.IGNORECASE)
# Trainer options that set an accumulation count.
_ACCUMULATION_OPTIONS = frozenset({"accumulate_grad_batches", "gradient_accumulation_steps"})
_BACKWARD_METHODS = frozenset({"backward", "manual_backward"})
# Reads in a guard that say nothing about which micro-batch this is.
_NEUTRAL_CALLS = frozenset({"isinstance", "hasattr", "getattr", "len", "id", "type", "callable"})


@dataclass
class HookUpdate:
    """An update of the parameters made from a hook's body."""

    node: ast.Call  # `opt.step()`, `p.add_(p.grad, alpha=-lr)`
    what: str  # "calls `optimizer_dict[p].step()`"
    evidence: str  # how the receiver is known to be an optimizer ("" for a parameter update)
    heuristic: bool  # known by its name only
    # what running once per micro-batch does to it
    consequence: str = ("each micro-batch's gradient is applied on its own, once per micro-batch, instead of their "
                        "sum once per step")


@dataclass
class Accumulation:
    """A place where the file shows gradients accumulated over micro-batches."""

    node: ast.AST  # where it shows (the `if`, the `with`, the division, the trainer call)
    text: str  # how it shows, for the message
    loop: ast.AST | None  # the training loop, when it is one


def _name_of(expr: ast.AST) -> str | None:
    """The last identifier of ``a.b.c`` / ``d[k]`` / ``e``."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Name):
        return expr.id
    return None


def _optimizer_class(model: SemanticModel, call: ast.AST) -> str | None:
    """``torch.optim.SGD`` for a call that builds an optimizer (not a scheduler)."""
    if not isinstance(call, ast.Call):
        return None
    name = model.qualify(call.func)
    if name is None or not name.startswith("torch.optim.") or ".lr_scheduler" in name or ".swa_utils" in name:
        return None
    return name


def _built_optimizers(model: SemanticModel, value: ast.AST) -> str | None:
    """The optimizer class a value builds: the call itself, or the elements of a
    dict, list or comprehension of such calls (per-parameter optimizers)."""
    found = _optimizer_class(model, value)
    if found is not None:
        return found
    if isinstance(value, ast.DictComp):
        found = _optimizer_class(model, value.value)
        return f"a dict of `{found}` optimizers" if found else None
    if isinstance(value, (ast.ListComp, ast.GeneratorExp)):
        found = _optimizer_class(model, value.elt)
        return f"a list of `{found}` optimizers" if found else None
    if isinstance(value, ast.Dict) and value.values:
        found = _optimizer_class(model, value.values[0])
        return f"a dict of `{found}` optimizers" if found else None
    if isinstance(value, (ast.List, ast.Tuple)) and value.elts:
        found = _optimizer_class(model, value.elts[0])
        return f"a list of `{found}` optimizers" if found else None
    return None


def optimizer_evidence(model: SemanticModel, receiver: ast.AST) -> tuple[str, bool] | None:
    """How ``receiver`` (of ``.step()``) is known to be an optimizer: (what the
    message says, known by its name only), or None when it is not one."""
    name = _name_of(receiver)
    if name is None or _NOT_OPTIMIZER.search(name):
        return None
    base = receiver
    while isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Name) and hasattr(base, "_hl_scope"):
        for binding in model.bindings_at(base):
            if binding.kind != "assign" or binding.path:
                continue
            built = _built_optimizers(model, binding.value)  # type: ignore[arg-type]
            if built is not None:
                what = built if built.startswith("a ") else f"a `{built}`"
                return f"`{src(base)}` is {what} (line {binding.lineno})", False
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "self":
        owner = model.enclosing_class(base)
        for value, _scope, _node in (owner.attribute(base.attr) if owner is not None else []):
            built = _built_optimizers(model, value)
            if built is not None:
                what = built if built.startswith("a ") else f"a `{built}`"
                return f"`{src(base)}` is {what} (line {value.lineno})", False
    if _OPTIMIZER_NAME.search(name):
        return f"`{src(base)}` is named like an optimizer", True
    return None


# `scheduler`, `lr_scheduler`, `sched`, `warmup_scheduler`
_SCHEDULER_NAME = re.compile(r"sched", re.IGNORECASE)
# `ema`, `ema_model`, `model_ema`, `swa_model`, `averaged_model`
_AVERAGE_NAME = re.compile(r"(?:^|_)(?:ema|swa)(?:_|$)|averaged", re.IGNORECASE)
_SCHEDULE_CONSEQUENCE = ("the schedule advances once per micro-batch, N times per optimizer step, so the learning "
                         "rate runs ahead of the steps actually taken")
_AVERAGE_CONSEQUENCE = ("the average counts N updates per optimizer step (N-1 of them of weights that did not "
                        "change), not the one per step it is configured for")


def _built_by(model: SemanticModel, receiver: ast.AST, prefixes: tuple[str, ...]) -> tuple[str, int] | None:
    """(class, line) when ``receiver`` (a name or ``self.x``) is built by a call of a class under ``prefixes``."""
    values: list[ast.AST] = []
    if isinstance(receiver, ast.Name) and hasattr(receiver, "_hl_scope"):
        values = [b.value for b in model.bindings_at(receiver)
                  if b.kind == "assign" and not b.path and isinstance(b.value, ast.AST)]
    elif isinstance(receiver, ast.Attribute) and isinstance(receiver.value, ast.Name) and receiver.value.id == "self":
        owner = model.enclosing_class(receiver)
        values = [value for value, _scope, _node in (owner.attribute(receiver.attr) if owner is not None else [])]
    for value in values:
        if isinstance(value, ast.Call):
            name = model.qualify(value.func)
            if name is not None and name.startswith(prefixes):
                return name, value.lineno
    return None


def per_step_evidence(model: SemanticModel, call: ast.Call) -> tuple[str, str, bool] | None:
    """A call in a hook that advances once-per-step state other than the optimizer:
    a learning-rate scheduler's ``step()``, an averaged model's
    ``update_parameters()`` / an EMA's ``update()``.  (evidence, consequence,
    known by its name only), or None."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    receiver = func.value
    name = _name_of(receiver)
    if name is None:
        return None
    if func.attr == "step" and not call.args:
        built = _built_by(model, receiver, ("torch.optim.lr_scheduler.",))
        if built is not None:
            return f"`{src(receiver)}` is a `{built[0]}` (line {built[1]})", _SCHEDULE_CONSEQUENCE, False
        if _SCHEDULER_NAME.search(name):
            return f"`{src(receiver)}` is named like a learning-rate scheduler", _SCHEDULE_CONSEQUENCE, True
    if func.attr == "update_parameters" or (func.attr == "update" and _AVERAGE_NAME.search(name)):
        built = _built_by(model, receiver, ("torch.optim.swa_utils.",))
        if built is not None:
            return f"`{src(receiver)}` is a `{built[0]}` (line {built[1]})", _AVERAGE_CONSEQUENCE, False
        if _AVERAGE_NAME.search(name):
            return f"`{src(receiver)}` is named like a weight average", _AVERAGE_CONSEQUENCE, True
    return None


def _updates_from_grad(call: ast.Call, param: str) -> bool:
    """``p.add_(p.grad, alpha=-lr)``, ``p.data.sub_(lr * p.grad)``: the parameter
    changed in place from its own gradient."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _UPDATE_METHODS:
        return False
    target = func.value
    if isinstance(target, ast.Attribute) and target.attr == "data":
        target = target.value
    if not (isinstance(target, ast.Name) and target.id == param):
        return False
    return any(isinstance(node, ast.Attribute) and node.attr == "grad" and isinstance(node.value, ast.Name)
               and node.value.id == param for arg in [*call.args, *(k.value for k in call.keywords)]
               for node in ast.walk(arg))


def hook_updates(model: SemanticModel, func: ast.AST, param: str | None = None, _depth: int = 0,
                 _seen: frozenset[int] = frozenset()) -> list[HookUpdate]:
    """The optimizer steps and parameter updates a hook makes, in its own body or
    in the file's functions it calls (two calls deep).  ``param``: the name of a
    post-accumulate-grad hook's argument, whose update from its `.grad` counts."""
    out: list[HookUpdate] = []
    for node in body_nodes(func):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        if isinstance(callee, ast.Attribute) and callee.attr in OPTIMIZER_METHODS:
            found = optimizer_evidence(model, callee.value)
            if found is not None:
                out.append(HookUpdate(node, f"calls `{src(node)}`", found[0], found[1]))
                continue
        per_step = per_step_evidence(model, node)
        if per_step is not None:
            out.append(HookUpdate(node, f"calls `{src(node)}`", per_step[0], per_step[2], per_step[1]))
            continue
        if param is not None and _updates_from_grad(node, param):
            out.append(HookUpdate(node, f"updates the parameter with `{src(node)}`", "", False))
            continue
        if _depth < 2:
            for target in _local_functions(model, callee):
                if id(target) not in _seen:
                    out += hook_updates(model, target, None, _depth + 1, _seen | {id(func)})
    return out


def _local_functions(model: SemanticModel, callee: ast.AST) -> list[ast.AST]:
    """The file's own function (or method of the enclosing class) a call runs."""
    if isinstance(callee, ast.Name) and hasattr(callee, "_hl_scope"):
        return [b.node for b in model.bindings_at(callee) if b.kind == "def"]
    if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id == "self":
        owner = model.enclosing_class(callee)
        method = owner.method(callee.attr) if owner is not None else None
        return [method] if method is not None else []
    return []


def gating_reads(model: SemanticModel, func: ast.AST, node: ast.AST) -> list[str]:
    """What decides whether the hook reaches ``node`` beyond its own arguments and
    the optimizer: names read by the tests of the ``if`` statements around it and
    of the early ``return`` guards before it (``if not sync_now: return``).  A
    hook that steps only on the last micro-batch reads such a flag or count."""
    own = set(param_names(func))
    tests: list[ast.AST] = []
    current = getattr(node, "_hl_parent", None)
    while current is not None and current is not func:
        if isinstance(current, ast.If):
            tests.append(current.test)
        elif isinstance(current, ast.IfExp):
            tests.append(current.test)
        current = getattr(current, "_hl_parent", None)
    body = [func.body] if isinstance(func, ast.Lambda) else list(func.body)  # type: ignore[attr-defined]
    for stmt in body:
        if stmt.lineno >= getattr(node, "lineno", 0):
            break
        if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], (ast.Return, ast.Raise)):
            tests.append(stmt.test)
    receiver_names = set()
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        base = node.func.value
        while isinstance(base, (ast.Subscript, ast.Attribute)):
            base = base.value
        if isinstance(base, ast.Name):
            receiver_names.add(base.id)
    reads = []
    for test in tests:
        for sub in ast.walk(test):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in _NEUTRAL_CALLS:
                continue
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                if sub.id in own or sub.id in receiver_names or sub.id in _NEUTRAL_CALLS or sub.id == "self":
                    continue
                reads.append(sub.id)
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                reads.append(f"self.{sub.attr}")
    return reads


# -- accumulation ------------------------------------------------------------------


def _own_nodes(loop: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a loop's body and else, not descending into functions or classes."""
    stack = list(reversed([*loop.body, *loop.orelse]))  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _is_accumulation_name(expr: ast.AST) -> bool:
    name = _name_of(expr)
    return name is not None and bool(_ACCUMULATION_NAME.search(name))


def _has_modulo(test: ast.AST) -> ast.BinOp | None:
    for sub in ast.walk(test):
        # not `"%d" % i`: string formatting
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mod) \
                and not isinstance(sub.left, (ast.Constant, ast.JoinedStr)):
            if isinstance(sub.right, ast.Constant) and sub.right.value in (0, 1):
                continue
            return sub
    return None


def _updates(model: SemanticModel, stmts: list[ast.stmt]) -> bool:
    """The statements step an optimizer or reset gradients: ``opt.step()`` (an
    optimizer, not a scheduler), ``zero_grad()`` of anything, ``p.grad = None``."""
    for stmt in stmts:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                if sub.func.attr == "zero_grad":
                    return True
                if sub.func.attr == "step" and optimizer_evidence(model, sub.func.value) is not None:
                    return True
            if isinstance(sub, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "grad"
                                                   for t in sub.targets):
                return True  # `p.grad = None`: the gradients are reset there
    return False


def _skips_updates(model: SemanticModel, node: ast.If) -> bool:
    """``if i % n != 0: continue`` followed, in the same block, by a step or a reset."""
    if not node.body or not isinstance(node.body[-1], ast.Continue):
        return False
    parent = getattr(node, "_hl_parent", None)
    for field in ("body", "orelse"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and node in block:
            return _updates(model, block[block.index(node) + 1:])
    return False


def _loop_evidence(model: SemanticModel, loop: ast.AST) -> Accumulation | None:
    calls_backward = False
    found: list[tuple[int, Accumulation]] = []  # (strength, evidence): structure before names
    for node in _own_nodes(loop):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr in _BACKWARD_METHODS:
                calls_backward = True
            elif attr == "no_sync":
                found.append((0, Accumulation(node, f"`{src(node)}` skips the gradient all-reduce on the "
                                                    "micro-batches before the last", loop)))
            elif attr == "accumulate" and isinstance(getattr(node, "_hl_parent", None), ast.withitem):
                found.append((0, Accumulation(node, f"`with {src(node)}:` accumulates gradients", loop)))
        elif isinstance(node, ast.If):
            modulo = _has_modulo(node.test)
            if modulo is not None and (_updates(model, node.body) or _updates(model, node.orelse)
                                       or _skips_updates(model, node)
                                       or any(_is_accumulation_name(sub) for sub in ast.walk(node.test))):
                found.append((0, Accumulation(node, f"`if {src(node.test)}:` steps only once every "
                                                    f"`{src(modulo.right)}` backward passes", loop)))
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.Div):
            divisor = node.right if isinstance(node, ast.BinOp) else node.value
            if _is_accumulation_name(divisor):
                found.append((1, Accumulation(node, f"`{src(node)}` scales the loss for `{src(divisor)}` "
                                                    "micro-batches", loop)))
        elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) \
                and _is_accumulation_name(node):
            found.append((2, Accumulation(node, f"the loop counts micro-batches with `{src(node)}`", loop)))
    if not calls_backward or not found:
        return None
    return min(found, key=lambda item: (item[0], item[1].node.lineno))[1]


def _trainer_option(model: SemanticModel, call: ast.Call) -> Accumulation | None:
    for keyword in call.keywords:
        if keyword.arg in _ACCUMULATION_OPTIONS and isinstance(keyword.value, ast.Constant) \
                and isinstance(keyword.value.value, int) and not isinstance(keyword.value.value, bool) \
                and keyword.value.value > 1:
            return Accumulation(call, f"`{keyword.arg}={keyword.value.value}` in `{src(call.func)}(...)` "
                                      f"accumulates gradients", None)
    return None


def refuses_accumulation(tree: ast.Module) -> bool:
    """The file raises (or asserts) on an accumulation count: it refuses the
    combination it would break (``if optim_in_bwd and grad_accum > 1: raise``)."""
    for node in walk_tree(tree):
        if isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body) \
                and any(_is_accumulation_name(sub) for sub in ast.walk(node.test)):
            return True
        if isinstance(node, ast.Assert) and any(_is_accumulation_name(sub) for sub in ast.walk(node.test)):
            return True
    return False


def nearest(accumulated: list[Accumulation], model: SemanticModel, hook: ast.AST,
            registration: ast.AST) -> Accumulation:
    """The accumulation that most likely drives ``hook``: in the hook's class, then
    in the function that registers it, then the file's first."""
    owner = model.enclosing_class(hook)
    if owner is not None:
        for found in accumulated:
            if model.enclosing_class(found.node) is owner:
                return found
    function = model.enclosing_function(registration)
    if function is not None:
        for found in accumulated:
            if _inside(found.node, function):
                return found
    return accumulated[0]


def accumulations(model: SemanticModel, tree: ast.Module) -> list[Accumulation]:
    """Where the file shows gradients accumulated over micro-batches, in source order."""
    out = []
    for node in walk_tree(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            found = _loop_evidence(model, node)
            if found is not None:
                out.append(found)
        elif isinstance(node, ast.Call) and node.keywords:
            found = _trainer_option(model, node)
            if found is not None:
                out.append(found)
    # a loop inside a loop that shows the same evidence: the innermost is the training loop
    kept = [a for a in out if not any(b is not a and b.node is a.node and _inside(b.loop, a.loop) for b in out)]
    return sorted(kept, key=lambda a: (a.node.lineno, a.node.col_offset))


def _inside(inner: ast.AST | None, outer: ast.AST | None) -> bool:
    if inner is None or outer is None or inner is outer:
        return False
    current = getattr(inner, "_hl_parent", None)
    while current is not None:
        if current is outer:
            return True
        current = getattr(current, "_hl_parent", None)
    return False
