"""HKL402: a hook returning the wrong number or kind of values (or, at run time, of another shape)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import is_inplace_method, return_statements
from hooklint.static.context import FileContext
from hooklint.static.describe import describe_registrations, hook_label, registration_notes, registrations_by_hook
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.semantic import positional_params
from hooklint.static.values import CallableValue, ModuleValue

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

    At run time (`hooklint run`, `hooklint.instrument()`, the assertion
    helpers) also a hook whose replacement gradient has another shape, dtype or
    device than the gradient it replaces (`return torch.cat([grad, grad])`,
    `return grad.double()`, a `grad_input` entry reduced over the batch).

    ## Why is this bad?
    PyTorch checks the value only when backward runs, so the mistake surfaces
    as a crash in the middle of training, far from the hook:
    `RuntimeError: Backward hook returned an invalid number of grad_input, got
    3, but expected 1`, `RuntimeError: Backward pre hook returned an invalid
    number of grad_output, ...`, `TypeError: expected tuple, but hook returned
    'Tensor'` (legacy), `TypeError: expected Variable, but hook returned
    'tuple'` (tensor hook).  A full hook returning a Tensor has it taken as a
    sequence of its rows.  A replacement of the wrong shape or dtype fails the
    same way, naming a function the user may not recognise: `RuntimeError:
    hook 'hook' has changed the size of value` (for a module hook, `hook` is
    torch's own wrapper), or `... has changed the type of value`.

    ## Known problems
    Only literal tuples and lists, and expressions that are evidently tensors,
    are checked; a module whose inputs hooklint cannot count (a global hook, a
    hook applied to every layer, an unknown class) is checked only for
    returning a bare Tensor.  A local module whose `forward` has defaults is
    checked only for returning too many gradients; torch does not count
    inputs passed by keyword, and hooklint assumes positional calls.  Shapes
    and dtypes are checked at run time only, where the gradient the hook
    received is known.

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
    summary = ("A hook returns a tuple of the wrong length, the wrong type, or (at run time) a gradient of another "
               "shape or dtype than the one it replaces")
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
