"""HKL401: a hook editing its argument in place (hook-semantics.md, section 4)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Applicability, Edit, Finding, Fix, Location, Origin, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import TENSOR, TUPLE, Write, inplace_writes, is_inplace_method, return_statements
from hooklint.static.context import FileContext
from hooklint.static.describe import describe_registrations, hook_label, registration_notes, registrations_by_hook
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.semantic import FunctionNode

# The arguments a hook must not modify, by kind: role -> what it holds.
_TRACKED_ROLES: dict[HookKind, tuple[tuple[str, str], ...]] = {
    HookKind.TENSOR: (("grad", TENSOR),),
    HookKind.BACKWARD_LEGACY: (("grad_input", TUPLE), ("grad_output", TUPLE)),
    HookKind.FULL_BACKWARD: (("grad_input", TUPLE), ("grad_output", TUPLE)),
    HookKind.FULL_BACKWARD_PRE: (("grad_output", TUPLE),),
    HookKind.FORWARD: (("input", TUPLE), ("args", TUPLE)),
    HookKind.FORWARD_PRE: (("input", TUPLE), ("args", TUPLE)),
}


# In-place methods with an out-of-place twin of the same name minus "_"
# (tests/behaviour/test_hook_arguments.py checks each twin exists on Tensor).
OUT_OF_PLACE_TWINS = frozenset({
    "mul_", "div_", "add_", "sub_", "multiply_", "divide_", "subtract_", "true_divide_", "clamp_", "clip_",
    "clamp_min_", "clamp_max_", "neg_", "abs_", "sign_", "sqrt_", "exp_", "pow_", "tanh_", "sigmoid_", "relu_",
    "masked_fill_", "masked_scatter_", "index_fill_", "index_add_", "scatter_", "scatter_add_", "nan_to_num_",
    "renorm_", "lerp_", "addcmul_", "addcdiv_",
})


_AUG_OPERATORS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.MatMult: "@", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>",
}


_ATOMS = (ast.Name, ast.Constant, ast.Attribute, ast.Call, ast.Subscript)


HOOK_TRIGGERS = ("register_hook", "forward_hook", "forward_pre_hook", "backward_hook", "backward_pre_hook")


def _tracked(regs: list[Registration]) -> dict[str, str]:
    """Parameter name -> TENSOR/TUPLE over every registration of one hook;
    a name the registrations disagree on is not followed."""
    tracked: dict[str, str] = {}
    conflicting: set[str] = set()
    for reg in regs:
        for role, kind in _TRACKED_ROLES.get(reg.kind, ()):
            name = reg.param(role)
            if name is None:
                continue
            if tracked.get(name, kind) != kind:
                conflicting.add(name)
            tracked[name] = kind
    for reg in regs:  # a name that is an untracked role elsewhere (the module, say)
        for role in ("module", "output", "param", "kwargs"):
            name = reg.param(role)
            if name is not None:
                conflicting.add(name)
    return {k: v for k, v in tracked.items() if k not in conflicting}


def _snippet(ctx: FileContext, node: ast.AST) -> str:
    text = ctx.segment(node).strip().splitlines()
    first = text[0] if text else ""
    return first if len(first) <= 60 else first[:57] + "..."


class HookMutatesArgument(Rule):
    """
    ## What it does
    Reports a hook that modifies its argument in place instead of returning a
    new value: a tensor hook editing `grad` (`grad *= 1.6`, `grad.mul_(k)`,
    `grad[idx] = 0`, `grad.data[...] = ...`, `out=grad`), a module backward
    hook editing an element of `grad_input` / `grad_output` (also through an
    alias, `g = grad_input[0]; g.mul_(2)`), a backward pre-hook editing
    `grad_output`, and a forward (pre-)hook editing its input tensors.

    ## Why is this bad?
    PyTorch documents that a hook "should not modify its argument"; it may
    return a replacement instead.  Autograd hands one gradient buffer to
    several edges: after `s = a + b`, the gradients of `a` and `b` are the same
    tensor, so `a.register_hook(lambda g: g.mul_(0))` freezes `b` too.  When
    the gradient is an expanded view (the gradient of `.sum()`) an in-place
    method raises `RuntimeError: unsupported operation: more than one element
    of the written-to tensor refers to a single memory location`, and an item
    assignment `grad[0] = 0` silently sets *every* element (they share one
    memory location).  A forward hook's input is the caller's tensor (the
    batch, the previous layer's output): editing it changes the caller's
    data, and autograd raises at backward if the tensor was saved for the
    gradient (or in the forward if it is a leaf that requires grad).

    ## Known problems
    Names are followed through straight-line assignments; where branches
    rebind a name differently, hooklint stops following it and stays quiet.
    A forward hook editing its *output* in place is not reported.

    ## Example
    ```python
    import torch

    def grad_hook(grad):
        grad *= 1.6

    x = torch.ones(4, requires_grad=True)
    x.register_hook(grad_hook)
    ```

    ## Use instead
    ```python
    import torch

    def grad_hook(grad):
        return grad * 1.6

    x = torch.ones(4, requires_grad=True)
    x.register_hook(grad_hook)
    ```

    ## Fix safety
    For a tensor hook, the fix rewrites `grad *= k` as `grad = grad * k` and
    `grad.mul_(m)` as `grad = grad.mul(m)` (in a lambda, `g.mul_(m)` becomes
    `g.mul(m)`); other edits get `grad = grad.clone()` first; and it appends
    `return grad` when the hook returns nothing.  It is **safe** when every
    registration of the hook is a `register_hook`, the hook has no other
    `return`, the edits are statements directly in its body and the function is
    not also called directly; otherwise it is **unsafe** (an edit under an `if`
    or in a loop, a hook used elsewhere).  Out-of-place arithmetic can promote
    the dtype where the in-place form kept it (a float16 gradient times a
    float32 tensor), which torch then rejects: review such edits.  Module and
    forward hooks get no fix: their replacement is a tuple to build by hand.

    ## References
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [`Module.register_forward_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_pre_hook)
    """

    code = "HKL401"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "hook-mutates-argument"
    summary = "A hook modifies its gradient or input argument in place instead of returning a new tensor"
    severity = Severity.ERROR
    triggers = HOOK_TRIGGERS
    fix_applicability = ("safe for a tensor hook whose edits are top-level statements and which has no other "
                         "return; unsafe otherwise; none for module and forward hooks")
    VALID: ClassVar[tuple[str, ...]] = (
        # reassigning the name makes a new tensor
        "import torch\n"
        "def scale(grad):\n"
        "    grad = grad * 2\n"
        "    grad += 1\n"
        "    return grad\n"
        "torch.ones(2, requires_grad=True).register_hook(scale)\n",
        # editing a copy
        "import torch\n"
        "x = torch.ones(2, requires_grad=True)\n"
        "x.register_hook(lambda g: g.clone().mul_(2))\n",
        # a forward pre-hook editing the module's weight, not its input (seed 003)
        "import torch\n"
        "import torch.nn as nn\n"
        "def reset(module, inp):\n"
        "    with torch.no_grad():\n"
        "        module.weight[0, 1] = 1.0\n"
        "nn.Linear(2, 2).register_forward_pre_hook(reset)\n",
        # a forward hook replacing its output (seed 001's manifold mixup)
        "import torch.nn as nn\n"
        "def mix(module, inp, out):\n"
        "    out = 0.5 * out + 0.5 * out.flip(0)\n"
        "    return out\n"
        "nn.Linear(2, 2).register_forward_hook(mix)\n",
        # a module hook returning new gradients
        "import torch.nn as nn\n"
        "def scale(module, grad_input, grad_output):\n"
        "    g = grad_input[0]\n"
        "    g = g * 2\n"
        "    return (g,)\n"
        "nn.Linear(2, 2).register_full_backward_hook(scale)\n",
        # a class's own method named register_hook is not torch's
        "class Bus:\n"
        "    def register_hook(self, fn):\n"
        "        self.fn = fn\n"
        "def on_event(data):\n"
        "    data *= 2\n"
        "Bus().register_hook(on_event)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "def grad_hook(grad):\n"
            "    grad *= 1.6  # HKL401\n"
            "x = torch.ones(4, requires_grad=True)\n"
            "x.register_hook(grad_hook)\n",
            fixed="import torch\n"
            "def grad_hook(grad):\n"
            "    grad = grad * 1.6  # HKL401\n"
            "    return grad\n"
            "x = torch.ones(4, requires_grad=True)\n"
            "x.register_hook(grad_hook)\n",
        ),
        Invalid(
            "import torch\n"
            "a = torch.ones(3, requires_grad=True)\n"
            "a.register_hook(lambda g: g.mul_(0))  # HKL401\n",
            fixed="import torch\n"
            "a = torch.ones(3, requires_grad=True)\n"
            "a.register_hook(lambda g: g.mul(0))  # HKL401\n",
        ),
        Invalid(
            "import torch\n"
            "def clip(grad):\n"
            "    grad.clamp_(-1, 1)  # HKL401\n"
            "    return grad\n"
            "torch.ones(3, requires_grad=True).register_hook(clip)\n",
            fixed="import torch\n"
            "def clip(grad):\n"
            "    grad = grad.clamp(-1, 1)  # HKL401\n"
            "    return grad\n"
            "torch.ones(3, requires_grad=True).register_hook(clip)\n",
        ),
        Invalid(
            "import torch\n"
            "def drop_first(grad):\n"
            "    grad[0] = 0  # HKL401\n"
            "torch.ones(3, requires_grad=True).register_hook(drop_first)\n",
            fixed="import torch\n"
            "def drop_first(grad):\n"
            "    grad = grad.clone()\n"
            "    grad[0] = 0  # HKL401\n"
            "    return grad\n"
            "torch.ones(3, requires_grad=True).register_hook(drop_first)\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def double(module, grad_input, grad_output):\n"
            "    g = grad_input[0]\n"
            "    g.mul_(2)  # HKL401\n"
            "nn.Linear(2, 2).register_full_backward_hook(double)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def double_input(module, inp):\n"
            "    inp[0].mul_(2)  # HKL401\n"
            "nn.Linear(2, 2).register_forward_pre_hook(double_input)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for func, regs in registrations_by_hook(ctx, tuple(_TRACKED_ROLES)).items():
            tracked = _tracked(regs)
            if not tracked:
                continue
            writes = inplace_writes(func, tracked, ctx.model.qualify)
            if not writes:
                continue
            first = writes[0]
            hook_name = hook_label(regs[0])
            kind = regs[0].kind
            what = _snippet(ctx, first.node)
            where = f"`{hook_name}` ({describe_registrations(regs)})"
            if kind is HookKind.TENSOR:
                message = (f"{where} modifies its gradient argument in place (`{what}`): autograd can hand the "
                           f"same buffer to other edges, so other tensors' gradients change too (the two inputs "
                           f"of `a + b` share one), and it raises when the gradient is an expanded view (the "
                           f"gradient of `.sum()`)")
                help = "Return a new tensor instead (`return grad * k`); the hook's return value replaces the gradient."
            elif kind.is_module_backward:
                message = (f"{where} modifies a gradient it receives in place (`{what}`): the buffer can be "
                           f"shared with other edges (both inputs of an `x + y` get one, so both gradients "
                           f"change), and an expanded gradient (that of `.sum()`) raises")
                help = "Return a new tuple instead, e.g. `return (grad_input[0] * 2,)`."
            else:
                message = (f"{where} modifies its input in place (`{what}`): that tensor is the caller's (the "
                           f"batch, the previous layer's output), which changes too, and autograd raises if it "
                           f"was saved for backward or is a leaf that requires grad")
                help = ("Return a new input instead (`return (inp[0] * 2,)`)." if kind is HookKind.FORWARD_PRE
                        else "A forward hook cannot replace the input; compute on a new tensor (`inp[0] * 2`).")
            related = registration_notes(ctx, regs)
            yield self.finding(ctx, first.node, message, help=help, fix=_return_instead_fix(ctx, func, regs,
                                                                                          tracked, writes),
                               related=related)


def _return_instead_fix(ctx: FileContext, func: ast.AST, regs: list[Registration], tracked: dict[str, str],
                        writes: list[Write]) -> Fix | None:
    if any(r.kind is not HookKind.TENSOR for r in regs):
        return None
    grad = next((name for name, kind in tracked.items() if kind == TENSOR), None)
    if grad is None:
        return None
    if isinstance(func, ast.Lambda):
        return _lambda_fix(ctx, func, grad, writes, regs)
    if not isinstance(func, FunctionNode):
        return None
    body = func.body
    if body[0].lineno == func.lineno:  # `def h(g): g.mul_(2)` on one line
        return None
    returns = return_statements(func)
    if any(not (isinstance(r.value, ast.Name) and r.value.id == grad) for r in returns):
        return None
    edits: list[Edit] = []
    rewrites = [_rewrite(ctx, w, grad) for w in writes]
    if all(r is not None for r in rewrites):
        for rewrite in rewrites:
            edits.extend(rewrite)  # type: ignore[arg-type]
        how = "Return a new tensor instead of editing `{g}` in place"
    else:
        first = body[1] if _is_docstring(body[0]) and len(body) > 1 else body[0]
        start = ctx.span(first)[0]
        edits.append(Edit(f"{grad} = {grad}.clone()\n{_indent(ctx, first)}", start, start))
        how = "Edit a clone of `{g}` and return it"
    if not returns or (not isinstance(func, ast.Lambda) and ctx.core.cfg(func).falls_off_end()):
        last = body[-1]
        row = last.end_lineno or last.lineno
        end = Location(row, len(ctx.line(row)) + 1)
        edits.append(Edit(f"\n{_indent(ctx, body[0])}return {grad}", end, end))
    direct = all(w.statement is not None and w.statement in body for w in writes)
    called_directly = bool(ctx.model.name_calls.get(func.name))  # its return value would change there
    safe = direct and not called_directly and _plain_registrations(regs)
    return Fix(how.format(g=grad), tuple(sorted(edits, key=lambda e: (e.location, e.end_location))),
               Applicability.SAFE if safe else Applicability.UNSAFE)


def _plain_registrations(regs: list[Registration]) -> bool:
    """The hook is registered as itself (or as a bound method), not through a
    factory or functools.partial whose other uses hooklint cannot see."""
    return all(r.hook is not None and r.hook.via in ("", "method") for r in regs)


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _indent(ctx: FileContext, stmt: ast.stmt) -> str:
    line = ctx.line(stmt.lineno)
    return line[: len(line) - len(line.lstrip())]


def _rewrite(ctx: FileContext, write: Write, grad: str) -> list[Edit] | None:
    """``grad *= k`` -> ``grad = grad * k``; ``grad.mul_(m)`` -> ``grad = grad.mul(m)``."""
    node = write.node
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == grad:
        op = _AUG_OPERATORS.get(type(node.op))
        if op is None:
            return None
        value = ctx.segment(node.value)
        if not isinstance(node.value, _ATOMS) or "\n" in value:
            value = f"({value})"
        start, end = ctx.span(node)
        return [Edit(f"{grad} = {grad} {op} {value}", start, end)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in OUT_OF_PLACE_TWINS \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == grad \
            and isinstance(write.statement, ast.Expr) and write.statement.value is node:
        start = ctx.span(node)[0]
        name_start, name_end = ctx.name_span(node.func)
        return [Edit(f"{grad} = ", start, start), Edit(node.func.attr[:-1], name_start, name_end)]
    return None


def _lambda_fix(ctx: FileContext, func: ast.Lambda, grad: str, writes: list[Write],
                regs: list[Registration]) -> Fix | None:
    """``lambda g: g.mul_(k).add_(1)`` -> ``lambda g: g.mul(k).add(1)``: the
    lambda already returns the value of its body."""
    chain: list[ast.Call] = []
    node: ast.AST = func.body
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        chain.append(node)
        node = node.func.value
    if not chain or not (isinstance(node, ast.Name) and node.id == grad):
        return None
    if any(c.func.attr not in OUT_OF_PLACE_TWINS and is_inplace_method(c.func.attr) for c in chain):  # type: ignore
        return None
    if any(w.node not in chain for w in writes):
        return None
    edits = []
    for call in chain:
        attr = call.func.attr  # type: ignore[attr-defined]
        if attr in OUT_OF_PLACE_TWINS:
            start, end = ctx.name_span(call.func)
            edits.append(Edit(attr[:-1], start, end))
    return Fix("Use the out-of-place form; the lambda returns the new gradient",
               tuple(sorted(edits, key=lambda e: e.location)),
               Applicability.SAFE if _plain_registrations(regs) else Applicability.UNSAFE)
