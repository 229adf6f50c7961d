"""What a module's ``forward`` does, as far as its source shows.

The exact answer comes from the graph layer (torch.fx, ``hooklint.graph``).
Statically we can still say which expression produces the returned tensor,
which is the op a legacy backward hook binds to, and follow it into
submodules defined in the same file (seed 004: ``MyNet`` returns
``self.f2(...)``, and ``MyMean.forward`` returns ``input / 4``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import ClassInfo, SemanticModel
from hooklint.static.values import Inference, ModuleValue, _returns_of

_BINOP_NAMES = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.MatMult: "matmul",
    ast.Pow: "pow", ast.FloorDiv: "floor_divide", ast.Mod: "remainder",
}

# Built-in layers whose legacy backward hook sees exactly the gradients of the
# layer's own input first, from a single autograd node: grad_input[0] is the
# gradient of the module input (convolutions add weight and bias after it).
# tests/test_static_tables.py checks every entry against real torch.
LEGACY_SAFE_BUILTINS = frozenset(
    {
        "ReLU", "ReLU6", "Sigmoid", "Tanh", "GELU", "SiLU", "ELU", "LeakyReLU", "Softplus", "Mish",
        "Hardswish", "Hardsigmoid", "LogSigmoid", "Softmax", "LogSoftmax",
        "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
        "MaxPool2d", "MaxPool3d", "AvgPool2d", "AvgPool3d",
        # normalisation, adaptive pooling and a few more single-node layers that
        # library code narrows modules to (pruning, LRP, attribution)
        "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
        "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool2d",
        "Hardtanh", "SELU", "CELU", "Threshold", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d",
        "ZeroPad2d",
    }
)

# What a legacy hook on some built-in layers binds to and receives instead
# (verified in tests/test_static_tables.py); the graph layer reports the
# exact node for any layer.  name -> (op, what grad_input holds)
LEGACY_BUILTIN_BINDING = {
    "Linear": ("`addmm` (AddmmBackward0) for a 2-D input",
               "(grad of bias, grad of input, grad of weight.T) (without a bias, `mm` gives (grad of input, "
               "grad of weight.T); for a 1-D input, a `view` of that result)"),
    "MaxPool1d": ("`squeeze` (SqueezeBackward1)", "the gradient of an internal 2-D pooling result"),
    "Dropout": ("`mul` (MulBackward0) in training", "(grad of input, None)"),
    "Sequential": ("the last op of its last layer", "that op's input gradients"),
    "Identity": ("whatever op produced its input (Identity runs none)", "that op's input gradients"),
    "Flatten": ("whatever op produced its input (a no-op Flatten runs none)", "that op's input gradients"),
}


@dataclass(frozen=True)
class OpSite:
    description: str  # "`input / 4` (div)"
    class_name: str | None  # where the op is, e.g. "MyMean"
    node: ast.AST | None  # the expression, for its line
    grad_input: str | None = None  # what a legacy hook's grad_input holds, when known

    @property
    def line(self) -> int | None:
        return getattr(self.node, "lineno", None)

    def where(self) -> str:
        parts = []
        if self.class_name:
            parts.append(f"{self.class_name}.forward")
        if self.line:
            parts.append(f"line {self.line}")
        return ", ".join(parts)


def _constructed_without_bias(call: ast.Call | None) -> bool:
    """``nn.Linear(4, 2, bias=False)`` or ``nn.Linear(4, 2, False)``."""
    if call is None:
        return False
    for kw in call.keywords:
        if kw.arg == "bias":
            return isinstance(kw.value, ast.Constant) and kw.value.value is False
    return len(call.args) >= 3 and isinstance(call.args[2], ast.Constant) and call.args[2].value is False


def inplace_modules(call: ast.Call | None) -> bool:
    return call is not None and any(
        k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords
    )


def is_legacy_safe_builtin(value: ModuleValue) -> bool:
    name = value.class_name if value.torch_class else None
    return bool(name in LEGACY_SAFE_BUILTINS and not inplace_modules(value.call))


SAFE = "safe"  # grad_input starts with the gradient of the module's input
WRONG = "wrong"  # grad_input belongs to another op than the module: shown by the source
UNKNOWN = "unknown"  # the module's forward cannot be seen


@dataclass(frozen=True)
class LegacyVerdict:
    """What a legacy backward hook's ``grad_input`` is on a module, statically."""

    verdict: str
    op: OpSite | None = None
    class_name: str | None = None  # the class the verdict is about (one of a narrowing's)


class ForwardAnalysis:
    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference

    def forward_of(self, info: ClassInfo) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        return info.method("forward")

    def last_op(self, value: ModuleValue, depth: int = 0) -> OpSite | None:
        """The op producing the module's output, following local submodules."""
        if depth > 8:
            return None
        if value.local_class is None:
            if value.torch_class:
                name = value.class_name
                if name == "Linear" and _constructed_without_bias(value.call):
                    return OpSite("`mm` (MmBackward0) for a 2-D input", name, None,
                                  "(grad of input, grad of weight.T) (for a 1-D input, a `view` of that result)")
                if name in LEGACY_BUILTIN_BINDING:
                    op, grad_input = LEGACY_BUILTIN_BINDING[name]
                    return OpSite(op, name, None, grad_input)
            return None
        forward = self.forward_of(value.local_class)
        if forward is None:
            return None
        returns = [r for r in _returns_of(forward) if r.value is not None]
        if len(returns) != 1:
            return None
        owner = value.local_class.owner_of("forward")
        return self._op_of(returns[0].value, owner.name if owner else value.local_class.name, depth, 0)

    def _op_of(self, expr: ast.AST, class_name: str, depth: int, hops: int) -> OpSite | None:
        if hops > 20:
            return None
        if isinstance(expr, ast.Name):
            bindings = self.model.bindings_at(expr)
            if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path:
                return self._op_of(bindings[0].value, class_name, depth, hops + 1)  # type: ignore[arg-type]
            return None
        if isinstance(expr, ast.BinOp):
            op = _BINOP_NAMES.get(type(expr.op))
            if op is None:
                return None
            return OpSite(f"`{ast.unparse(expr)}` ({op})", class_name, expr)
        if isinstance(expr, ast.Call):
            callee = self.inference.infer(expr.func)
            if isinstance(callee, ModuleValue):
                inner = self.last_op(callee, depth + 1)
                if inner is not None:
                    return inner
                return OpSite(f"the last op of `{ast.unparse(expr.func)}`", class_name, expr)
            qual = self.model.qualify(expr.func)
            if qual and qual.startswith("torch."):
                return OpSite(f"`{ast.unparse(expr)}` ({qual.rsplit('.', 1)[-1]})", class_name, expr)
            if isinstance(expr.func, ast.Attribute):
                return OpSite(f"`{ast.unparse(expr)}` ({expr.func.attr})", class_name, expr)
        return None

    def legacy_verdict(self, value: ModuleValue | None) -> LegacyVerdict:
        """SAFE, WRONG (with the op when known) or UNKNOWN for a legacy hook's
        ``grad_input`` on ``value``.  Only what the source proves: a built-in
        layer of the tables (tests/behaviour/test_static_tables.py), a local
        class whose forward is visible, or an isinstance/type narrowing."""
        if value is None:
            return LegacyVerdict(UNKNOWN)
        if value.torch_class and value.local_class is None:
            name = value.class_name
            if is_legacy_safe_builtin(value):
                return LegacyVerdict(SAFE, class_name=name)
            if name in LEGACY_SAFE_BUILTINS:  # in-place: the input itself is rewritten
                return LegacyVerdict(UNKNOWN, class_name=name)
            op = self.last_op(value)
            if op is not None:
                return LegacyVerdict(WRONG, op, name)
            return LegacyVerdict(UNKNOWN, class_name=name)
        if value.local_class is not None:
            return self._local_verdict(value)
        narrowing = value.narrowing
        if narrowing is not None:
            if not narrowing.local and all(n in LEGACY_SAFE_BUILTINS for n in narrowing.names):
                return LegacyVerdict(SAFE, class_name=" or ".join(narrowing.names))
            if narrowing.by_name:
                return LegacyVerdict(UNKNOWN)
            for qual in narrowing.classes:
                name = qual.rsplit(".", 1)[-1]
                if name in LEGACY_BUILTIN_BINDING:
                    op = self.last_op(ModuleValue(torch_class=qual))
                    return LegacyVerdict(WRONG, op, name)
            for info in narrowing.local:
                verdict = self._local_verdict(ModuleValue(local_class=info))
                if verdict.verdict == WRONG:
                    return verdict
        return LegacyVerdict(UNKNOWN)

    def _local_verdict(self, value: ModuleValue) -> LegacyVerdict:
        info = value.local_class
        assert info is not None
        forward = self.forward_of(info)
        if forward is None:
            # `class MyConv(nn.Conv2d)` without its own forward runs Conv2d's
            for qual in info.bases:
                if qual and qual.rsplit(".", 1)[-1] in LEGACY_SAFE_BUILTINS:
                    return LegacyVerdict(SAFE, class_name=info.name)
            return LegacyVerdict(UNKNOWN, class_name=info.name)
        if self._single_safe_call(forward):
            return LegacyVerdict(SAFE, class_name=info.name)
        op = self.last_op(value)
        if op is None and self.op_count_hint(info) == 1:
            return LegacyVerdict(UNKNOWN, class_name=info.name)
        return LegacyVerdict(WRONG, op, info.name)

    def _single_safe_call(self, forward: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """``return self.conv(x)``: one single-op built-in layer applied to the input."""
        params = [a.arg for a in forward.args.args][1:]
        if len(forward.body) != 1 or not isinstance(forward.body[0], ast.Return) or not params:
            return False
        value = forward.body[0].value
        if not (isinstance(value, ast.Call) and len(value.args) == 1 and isinstance(value.args[0], ast.Name)
                and value.args[0].id == params[0]):
            return False
        callee = self.inference.infer(value.func)
        return isinstance(callee, ModuleValue) and callee.torch_class is not None and is_legacy_safe_builtin(callee)

    def op_count_hint(self, info: ClassInfo) -> int | None:
        """How many op-like expressions ``forward`` contains (calls and arithmetic);
        a lower bound on its autograd nodes, or None without a forward."""
        forward = self.forward_of(info)
        if forward is None:
            return None
        count = 0
        for node in ast.walk(forward):
            if isinstance(node, (ast.BinOp, ast.Call)) and not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "super", "len", "print", "isinstance", "range", "tuple", "list")):
                count += 1
        return count
