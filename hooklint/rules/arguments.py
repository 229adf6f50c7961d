"""HKL4xx: what a hook does with its arguments and its return value
(hook-semantics.md, sections 4 and 6).

A hook must not modify its arguments in place (HKL401), must return what its
kind of hook accepts (HKL402), and a tensor hook registered on a module's own
input reaches every consumer of that tensor (HKL404).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import ClassVar, Iterable

from hooklint.findings import Applicability, Edit, Finding, Fix, Location, Origin, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.rules.grad_edit import describe_registrations, hook_label, registration_notes, registrations_by_hook
from hooklint.static.bodies import (
    TENSOR,
    TUPLE,
    Write,
    can_fall_through,
    inplace_writes,
    is_inplace_method,
    return_statements,
    returns_nothing,
)
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.semantic import FunctionNode, positional_params
from hooklint.static.values import CallableValue, ModuleValue

# ---------------------------------------------------------------- HKL401

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
    if not returns or can_fall_through(func):
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


# ---------------------------------------------------------------- HKL402

# Built-in layers whose forward takes one tensor and returns one tensor:
# grad_input and grad_output of a full (pre-)hook have one entry each.
_SINGLE_IN_OUT = frozenset({
    "Linear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "LazyConv1d", "LazyConv2d", "LazyConv3d", "ReLU", "ReLU6", "Sigmoid", "Tanh", "GELU", "SiLU", "ELU", "SELU",
    "CELU", "LeakyReLU", "PReLU", "Softplus", "Softsign", "Mish", "Hardswish", "Hardsigmoid", "Hardtanh",
    "LogSigmoid", "Tanhshrink", "Threshold", "GLU", "Softmax", "LogSoftmax", "Softmin", "BatchNorm1d",
    "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "LocalResponseNorm", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "MaxPool1d",
    "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "Flatten", "Unflatten",
    "Identity", "Sequential", "Upsample", "PixelShuffle", "PixelUnshuffle",
})
# A legacy hook's grad_input on built-in layers holds the inputs of the
# layer's last autograd node, whose number depends on the input's shape:
# layer -> (every possible length, the usual one, when it is the usual one).
# tests/behaviour/test_hook_arguments.py runs every entry.
_ONE_INPUT_OP = ((1,), 1, "")
_LEGACY_LENGTHS: dict[str, tuple[tuple[int, ...], int, str]] = {
    **{name: _ONE_INPUT_OP for name in (
        "ReLU", "ReLU6", "Sigmoid", "Tanh", "GELU", "SiLU", "ELU", "LeakyReLU", "Softplus", "Mish", "Hardswish",
        "Hardsigmoid", "LogSigmoid", "Softmax", "LogSoftmax", "MaxPool2d", "MaxPool3d", "AvgPool2d", "AvgPool3d")},
    # batched input: `convolution` (input, weight, bias), with or without a bias; unbatched: a squeeze
    **{name: ((1, 3), 3, " for a batched input") for name in (
        "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d")},
}
# nn.Linear, by bias: a 2-D input ends in addmm (bias, input, weight.T) or mm
# (input, weight.T); other input shapes end in a view (1)
_LINEAR_LENGTHS = {True: ((1, 3), 3, " for a 2-D input"), False: ((1, 2), 2, " for a 2-D input")}
_TENSOR_METHODS = frozenset({
    "mul", "div", "add", "sub", "neg", "abs", "clamp", "clip", "masked_fill", "where", "clone", "detach", "view",
    "view_as", "reshape", "sign", "sqrt", "exp", "pow", "float", "double", "half", "to", "contiguous",
    "expand_as", "squeeze", "unsqueeze", "flatten", "t", "index_fill", "scatter", "nan_to_num", "renorm",
    "sum", "mean", "new_zeros", "new_ones", "new_full",
})
_TORCH_TENSOR_FUNCTIONS = frozenset({
    "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "where", "clamp", "clip",
    "mul", "div", "add", "sub", "neg", "abs", "sign", "stack", "cat", "tensor", "zeros", "ones", "nan_to_num",
})


@dataclass(frozen=True)
class _Shape:
    """What a returned expression is: ``kind`` "tuple", "list", "tensor" or a
    Python type name ("float", "dict"...); ``length`` for literal sequences."""

    kind: str
    length: int | None = None


def _shape(ctx: FileContext, expr: ast.expr, func: ast.AST, tuples: set[str], tensors: set[str],
           depth: int = 0) -> _Shape | None:
    if depth > 6:
        return None
    if isinstance(expr, ast.Constant):
        return None if expr.value is None else _Shape(type(expr.value).__name__)
    if isinstance(expr, (ast.Tuple, ast.List)):
        length = None if any(isinstance(e, ast.Starred) for e in expr.elts) else len(expr.elts)
        return _Shape("tuple" if isinstance(expr, ast.Tuple) else "list", length)
    if isinstance(expr, (ast.Dict, ast.DictComp)):
        return _Shape("dict")
    if isinstance(expr, (ast.Set, ast.SetComp)):
        return _Shape("set")
    if isinstance(expr, ast.ListComp):
        return _Shape("list")
    if isinstance(expr, ast.Name):
        if expr.id in tuples:
            return _Shape("tuple")
        if expr.id in tensors:
            return _Shape("tensor")
        bindings = ctx.model.bindings_at(expr)
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and bindings[0].scope.node is func and isinstance(bindings[0].value, ast.expr) \
                and bindings[0].value is not expr:
            return _shape(ctx, bindings[0].value, func, tuples, tensors, depth + 1)
        return None
    if isinstance(expr, ast.BinOp):
        left = _shape(ctx, expr.left, func, tuples, tensors, depth + 1)
        right = _shape(ctx, expr.right, func, tuples, tensors, depth + 1)
        kinds = {s.kind for s in (left, right) if s is not None}
        if kinds & {"tuple", "list"}:
            if left is not None and right is not None and left.kind == right.kind and isinstance(expr.op, ast.Add) \
                    and left.length is not None and right.length is not None:
                return _Shape(left.kind, left.length + right.length)
            return None
        return _Shape("tensor") if "tensor" in kinds else None
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = _shape(ctx, expr.operand, func, tuples, tensors, depth + 1)
        return inner if inner is not None and inner.kind == "tensor" else None
    if isinstance(expr, ast.Subscript):
        base = _shape(ctx, expr.value, func, tuples, tensors, depth + 1)
        if base is None:
            return None
        if base.kind in ("tuple", "list"):
            return None if isinstance(expr.slice, ast.Slice) else (_Shape("tensor") if isinstance(
                expr.value, ast.Name) and expr.value.id in tuples else None)
        return _Shape("tensor") if base.kind == "tensor" else None
    if isinstance(expr, ast.Call):
        func_expr = expr.func
        if isinstance(func_expr, ast.Name) and func_expr.id in ("tuple", "list") and len(expr.args) == 1:
            inner = _shape(ctx, expr.args[0], func, tuples, tensors, depth + 1)
            length = inner.length if inner is not None and inner.kind in ("tuple", "list") else None
            return _Shape(func_expr.id, length)
        if isinstance(func_expr, ast.Attribute):
            receiver = _shape(ctx, func_expr.value, func, tuples, tensors, depth + 1)
            if receiver is not None and receiver.kind == "tensor" and (
                    func_expr.attr in _TENSOR_METHODS or is_inplace_method(func_expr.attr)):
                return _Shape("tensor")
        qual = ctx.model.qualify(func_expr)
        if qual and qual.startswith("torch.") and qual.rsplit(".", 1)[-1] in _TORCH_TENSOR_FUNCTIONS:
            return _Shape("tensor")
    return None


def _class_name(module: ModuleValue | None) -> str | None:
    return module.class_name if module is not None and module.torch_class and module.local_class is None else None


def _has_bias(module: ModuleValue) -> bool | None:
    call = module.call
    if call is None:
        return None
    for kw in call.keywords:
        if kw.arg == "bias":
            return kw.value.value if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool) else None
        if kw.arg is None:
            return None
    if len(call.args) >= 3:  # Linear(in, out, bias)
        third = call.args[2]
        return third.value if isinstance(third, ast.Constant) and isinstance(third.value, bool) else None
    return True


def _forward_inputs(module: ModuleValue) -> tuple[int, int, str] | None:
    """(fewest, most) entries a full hook's grad_input can have on this module, and why."""
    name = _class_name(module)
    if name is not None:
        return (1, 1, f"nn.{name} takes one input") if name in _SINGLE_IN_OUT else None
    info = module.local_class
    if info is None:
        return None
    forward = info.method("forward")
    if forward is None or forward.args.vararg is not None:
        return None
    params = positional_params(forward)[1:]
    owner = info.owner_of("forward")
    where = f"`{owner.name if owner else info.name}.forward`"
    if forward.args.defaults:
        # arguments left to their defaults (or passed by keyword) are not counted
        return 0, len(params), f"{where} takes at most {len(params)} positional input(s)"
    return len(params), len(params), f"{where} takes {len(params)} input(s)"


def _legacy_lengths(module: ModuleValue) -> tuple[tuple[int, ...], int, str] | None:
    name = _class_name(module)
    if name == "Linear":
        bias = _has_bias(module)
        if bias is None:
            return (1, 2, 3), 3, " for a 2-D input with a bias"
        return _LINEAR_LENGTHS[bias]
    return _LEGACY_LENGTHS.get(name) if name is not None else None


def _lengths_text(lengths: tuple[int, ...]) -> str:
    return ", ".join(str(n) for n in lengths[:-1]) + f" or {lengths[-1]}" if len(lengths) > 1 else str(lengths[0])


class HookReturnArity(Rule):
    """
    ## What it does
    Reports a hook whose return value has the wrong form for its kind:
    - a tensor hook (`register_hook`) returning a tuple, a list or a number
      (it must return a Tensor or None);
    - a full backward hook returning a tuple whose length is not the number of
      the module's forward inputs (one for built-in layers; the positional
      parameters of a local module's `forward`), or a bare Tensor;
    - a legacy backward hook returning a list or a Tensor (it must be a tuple),
      or a tuple whose length cannot match its bound op on a known built-in
      layer (nn.Linear with a bias: 3 for a 2-D input);
    - a full backward pre-hook returning a tuple whose length is not the number
      of the module's outputs, or a bare Tensor.

    ## Why is this bad?
    PyTorch checks the value only when backward runs, so the mistake surfaces
    as a crash in the middle of training, far from the hook:
    `RuntimeError: Backward hook returned an invalid number of grad_input, got
    3, but expected 1`, `RuntimeError: Backward pre hook returned an invalid
    number of grad_output, ...`, `TypeError: expected tuple, but hook returned
    'Tensor'` (legacy), `TypeError: expected Variable, but hook returned
    'tuple'` (tensor hook).  A full hook returning a Tensor has it taken as a
    sequence of its rows.

    ## Known problems
    Only literal tuples and lists, and expressions that are evidently tensors,
    are checked; a module whose inputs hooklint cannot count (a global hook, a
    hook applied to every layer, an unknown class) is checked only for
    returning a bare Tensor.  A local module whose `forward` has defaults is
    checked only for returning too many gradients; torch does not count
    inputs passed by keyword, and hooklint assumes positional calls.

    ## Example
    ```python
    import torch.nn as nn

    def double(module, grad_input, grad_output):
        gin0, gin1, gin2 = grad_input
        return gin0, gin1 * 2, gin2

    nn.Linear(4, 2).register_full_backward_hook(double)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def double(module, grad_input, grad_output):
        return (grad_input[0] * 2,)

    nn.Linear(4, 2).register_full_backward_hook(double)
    ```

    ## Fix safety
    There is no automatic fix: which gradient belongs in which slot is the
    author's decision.

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [`Module.register_full_backward_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_pre_hook)
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    """

    code = "HKL402"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "hook-return-arity"
    summary = "A hook returns a tuple of the wrong length, or the wrong type, for its kind of hook"
    severity = Severity.ERROR
    triggers = ("register_hook", "backward_hook", "backward_pre_hook")
    VALID: ClassVar[tuple[str, ...]] = (
        # returning the arguments unchanged, or None
        "import torch.nn as nn\n"
        "def passthrough(module, grad_input, grad_output):\n"
        "    print(grad_output[0].norm())\n"
        "    return grad_input\n"
        "nn.Linear(4, 2).register_backward_hook(passthrough)\n"
        "nn.Linear(4, 2).register_full_backward_hook(lambda m, gi, go: None)\n",
        # one gradient per input of a two-input local module
        "import torch.nn as nn\n"
        "class Add(nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return x + y\n"
        "def halve(module, grad_input, grad_output):\n"
        "    return (grad_input[0] / 2, grad_input[1] / 2)\n"
        "Add().register_full_backward_hook(halve)\n",
        # a legacy hook returning all three of Linear's addmm gradients (seed 001)
        "import torch.nn as nn\n"
        "def scale(module, gin, gout):\n"
        "    gin0, gin1, gin2 = gin\n"
        "    return tuple([gin0, gin1 * 2, gin2 * 3])\n"
        "nn.Linear(4, 3).register_backward_hook(scale)\n",
        # tensor hooks returning tensors
        "import torch\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "x.register_hook(lambda g: g * 2)\n"
        "x.register_hook(lambda g: torch.zeros_like(g))\n",
        # a forward hook may return a tuple (it replaces the output)
        "import torch.nn as nn\n"
        "nn.Linear(2, 2).register_forward_hook(lambda m, i, o: (o, o))\n",
        # autograd Node hooks take and return tuples (torch's own BackwardHook does this)
        "import torch\n"
        "def attach(grad_fn):\n"
        "    def hook(grad_inputs, grad_outputs):\n"
        "        return tuple(grad_inputs)\n"
        "    grad_fn.register_hook(hook)\n"
        "y = torch.ones(2, requires_grad=True) * 2\n"
        "node = y.grad_fn\n"
        "node.register_hook(lambda gi, go: (gi[0] * 2,))\n"
        "y.grad_fn.next_functions[0][0].register_hook(lambda gi, go: (gi[0],))\n",
        # an unknown module: the number of inputs cannot be counted
        "def attach(module):\n"
        "    module.register_full_backward_hook(lambda m, gi, go: (gi[0], None))\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def double(module, grad_input, grad_output):\n"
            "    gin0, gin1, gin2 = grad_input\n"
            "    return gin0, gin1 * 2, gin2  # HKL402\n"
            "nn.Linear(4, 2).register_full_backward_hook(double)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "layer = nn.Linear(4, 2)\n"
            "layer.register_full_backward_hook(lambda m, gi, go: gi[0] * 2)  # HKL402\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def scale(module, grad_input, grad_output):\n"
            "    return [g * 2 for g in grad_input]  # HKL402\n"
            "nn.Linear(4, 2).register_backward_hook(scale)  # HKL101, HKL102\n"
        ),
        Invalid(
            "import torch\n"
            "x = torch.ones(3, requires_grad=True)\n"
            "def hook(grad):\n"
            "    return (grad * 2,)  # HKL402\n"
            "x.register_hook(hook)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def pre(module, grad_output):\n"
            "    return (grad_output[0], grad_output[0])  # HKL402\n"
            "nn.ReLU().register_full_backward_pre_hook(pre)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        kinds = (HookKind.TENSOR, HookKind.FULL_BACKWARD, HookKind.BACKWARD_LEGACY, HookKind.FULL_BACKWARD_PRE)
        for func, regs in registrations_by_hook(ctx, kinds).items():
            problems: dict[ast.AST, list[tuple[Registration, str]]] = {}
            for reg in regs:
                for node, problem in self._problems(ctx, func, reg):
                    problems.setdefault(node, []).append((reg, problem))
            for node, found in problems.items():
                regs_here = [reg for reg, _ in found]
                hook_name = hook_label(regs_here[0])
                text = "; ".join(dict.fromkeys(problem for _, problem in found))
                yield self.finding(
                    ctx, node, f"`{hook_name}` ({describe_registrations(regs_here)}) {text}",
                    help=self._help(regs_here[0].kind), related=registration_notes(ctx, regs_here))

    @staticmethod
    def _help(kind: HookKind) -> str:
        if kind is HookKind.TENSOR:
            return "Return the new gradient tensor itself (or None to keep it)."
        if kind is HookKind.BACKWARD_LEGACY:
            return "Return a tuple with one entry per grad_input (or None); better, use " \
                   "`register_full_backward_hook`, whose grad_input matches the module's inputs."
        if kind is HookKind.FULL_BACKWARD_PRE:
            return "Return a tuple with one gradient per module output, e.g. `return (grad_output[0] * 2,)`, or None."
        return "Return a tuple with one gradient per forward input, e.g. `return (grad_input[0] * 2,)`, or None."

    def _problems(self, ctx: FileContext, func: ast.AST, reg: Registration) -> Iterable[tuple[ast.AST, str]]:
        hook = reg.hook
        assert hook is not None
        tuples = {n for n in (reg.param("grad_input"), reg.param("grad_output")) if n}
        tensors = {n for n in (reg.param("grad"),) if n}
        if isinstance(func, ast.Lambda):
            returned = [(func.body, func.body)]
        else:
            returned = [(r, r.value) for r in return_statements(func) if r.value is not None]
        for node, value in returned:
            shape = _shape(ctx, value, func, tuples, tensors)
            if shape is None:
                continue
            problem = self._judge(reg, shape, hook)
            if problem is not None:
                yield node, problem

    @staticmethod
    def _judge(reg: Registration, shape: _Shape, hook: CallableValue) -> str | None:
        module = reg.receiver_module
        if reg.kind is HookKind.TENSOR:
            if shape.kind == "tensor":
                return None
            return (f"returns a {shape.kind}, but a tensor hook must return a Tensor or None: torch raises "
                    f"`TypeError: expected Variable, but hook returned '{shape.kind}'` during backward")
        if reg.kind is HookKind.BACKWARD_LEGACY:
            if shape.kind in ("tensor", "list"):
                type_name = "Tensor" if shape.kind == "tensor" else "list"
                return (f"returns a {type_name}, but a legacy backward hook must return a tuple (or None): "
                        f"torch raises `TypeError: expected tuple, but hook returned '{type_name}'` during backward")
            if shape.kind != "tuple" or shape.length is None or module is None:
                return None
            known = _legacy_lengths(module)
            if known is None or shape.length in known[0]:
                return None
            lengths, usual, when = known
            return (f"returns {shape.length} gradient(s), but on {reg.describe_target()} the hook is bound to "
                    f"the layer's last autograd op, whose grad_input has {_lengths_text(lengths)} entries: torch "
                    f"raises `RuntimeError: hook '{hook.name}' has returned an incorrect number of values (got "
                    f"{shape.length}, but expected {usual})`{when} during backward")
        is_pre = reg.kind is HookKind.FULL_BACKWARD_PRE
        what = "grad_output" if is_pre else "grad_input"
        label = "Backward pre hook" if is_pre else "Backward hook"
        counted = None
        if module is not None:
            if is_pre:
                outputs = _forward_outputs(module)
                counted = None if outputs is None else (outputs[0], outputs[0], outputs[1])
            else:
                counted = _forward_inputs(module)
        if shape.kind == "tensor":
            expected = f", but expected {counted[1]}" if counted is not None and counted[0] == counted[1] else ""
            return (f"returns a Tensor where a tuple of gradients is expected: torch takes the tensor as a "
                    f"sequence of its rows and raises `RuntimeError: {label} returned an invalid number of "
                    f"{what}, got <rows>{expected}` during backward (`... has changed the size of value` when "
                    f"the row count happens to match)")
        if shape.kind not in ("tuple", "list") or shape.length is None or counted is None:
            return None
        low, high, why = counted
        if low <= shape.length <= high:
            return None
        expected = high if low == high else "<the number of positional inputs passed>"
        return (f"returns {shape.length} gradient(s), but {why}: torch raises `RuntimeError: {label} returned an "
                f"invalid number of {what}, got {shape.length}, but expected {expected}` during backward")


def _forward_outputs(module: ModuleValue) -> tuple[int, str] | None:
    name = _class_name(module)
    # a Sequential returns whatever its last layer returns (a tuple for an LSTM)
    if name is None or name not in _SINGLE_IN_OUT or name == "Sequential":
        return None
    if module.call is not None and any(k.arg == "return_indices" for k in module.call.keywords):
        return None
    return 1, f"nn.{name} returns one tensor"


# ---------------------------------------------------------------- HKL404

class HookOnSharedInput(Rule):
    """
    ## What it does
    Reports a module's `forward` that registers a gradient-changing tensor
    hook on one of its own inputs and returns that input unchanged, e.g. a
    gradient-reversal layer written as `x.register_hook(lambda g: -g);
    return x`.

    ## Why is this bad?
    The hook is registered on the caller's tensor, not on this module's
    output: it rewrites the *total* gradient of that tensor, which includes
    every other consumer of it.  In a domain-adversarial network whose
    features feed both the classifier and the reversal layer, the
    classifier's gradient is flipped too: the feature extractor is trained to
    make the classifier worse.

    ## Known problems
    A forward that hooks its input and then computes on it
    (`x.register_hook(flip); return self.layers(x)`) also rewrites the whole
    gradient of the caller's tensor, but is harmless when the caller passes a
    tensor nothing else uses; it is not reported.

    ## Example
    ```python
    import torch.nn as nn

    class GradReverse(nn.Module):
        def forward(self, x):
            x.register_hook(lambda g: -g)
            return x
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class GradReverse(nn.Module):
        def forward(self, x):
            y = x.view_as(x)  # a new autograd node: only this path's gradient
            y.register_hook(lambda g: -g)
            return y
    ```

    ## Fix safety
    There is no automatic fix; hook a new tensor (`y = x.view_as(x)` or
    `x.clone()`) and return it, or write a custom `torch.autograd.Function`.

    ## References
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - [Extending torch.autograd](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    """

    code = "HKL404"
    name = "hook-on-shared-input"
    summary = "A module's forward hooks its own input tensor and returns it, changing every consumer's gradient"
    severity = Severity.ERROR
    triggers = ("register_hook",)
    VALID: ClassVar[tuple[str, ...]] = (
        # hooking a new tensor
        "import torch.nn as nn\n"
        "class GradReverse(nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x.view_as(x)\n"
        "        y.register_hook(lambda g: -g)\n"
        "        return y\n",
        # a hook that only records the gradient changes nothing
        "import torch.nn as nn\n"
        "class Probe(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.grads = []\n"
        "    def forward(self, x):\n"
        "        x.register_hook(self.grads.append)\n"
        "        return x\n",
        # the input is rebound before it is hooked
        "import torch.nn as nn\n"
        "class Flip(nn.Module):\n"
        "    def forward(self, x):\n"
        "        x = x.clone()\n"
        "        x.register_hook(lambda g: -g)\n"
        "        return x\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class GradReverse(nn.Module):\n"
            "    def __init__(self, alpha=1.0):\n"
            "        super().__init__()\n"
            "        self.alpha = alpha\n"
            "    def forward(self, x):\n"
            "        x.register_hook(lambda g: -self.alpha * g)  # HKL404\n"
            "        return x\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for reg in ctx.hooks.by_kind(HookKind.TENSOR):
            receiver = reg.receiver
            if not isinstance(receiver, ast.Name) or reg.hook is None or returns_nothing(reg.hook.node):
                continue
            forward = self._forward_owning(ctx, receiver)
            if forward is None or not self._returns_input(ctx, forward, receiver.id):
                continue
            cls = ctx.model.enclosing_class(forward)
            yield self.finding(
                ctx, reg.name_node, name_only=True,
                message=f"`{cls.name if cls else ''}.forward` registers a tensor hook on its input `{receiver.id}` "
                f"and returns `{receiver.id}` itself: the hook changes the whole gradient of the caller's tensor, "
                f"including the gradient from every other consumer of it, not only this module's path",
                help=f"Hook a new tensor: `y = {receiver.id}.view_as({receiver.id})`, register the hook on `y` "
                "and return `y` (or write a custom torch.autograd.Function).",
            )

    @staticmethod
    def _forward_owning(ctx: FileContext, receiver: ast.Name) -> ast.FunctionDef | None:
        bindings = ctx.model.bindings_at(receiver)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        func = bindings[0].scope.node
        if not isinstance(func, ast.FunctionDef) or func.name != "forward":
            return None
        if ctx.model.enclosing_class(func) is None:
            return None
        params = positional_params(func)
        if receiver.id not in params[1:]:  # not `self`
            return None
        return func

    @staticmethod
    def _returns_input(ctx: FileContext, forward: ast.FunctionDef, name: str) -> bool:
        for ret in return_statements(forward):
            values = ret.value.elts if isinstance(ret.value, ast.Tuple) else [ret.value]
            for value in values:
                if isinstance(value, ast.Name) and value.id == name:
                    bindings = ctx.model.bindings_at(value)
                    if len(bindings) == 1 and bindings[0].kind == "param":
                        return True
        return False
