"""Custom `torch.autograd.Function` classes of a file and the calls that apply them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from hooklint.static.context import FileContext
from hooklint.static.semantic import ClassInfo, is_staticmethod, positional_params

# A Function subclass is recognised by its base's qualified name, which ends in
# `Function` (or `InplaceFunction`), and needs a `def backward`; a file
# without both has no Function these rules can check.  (The pattern starts
# with a literal so that the regex engine can skip to each `def`.)
FUNCTION_TRIGGERS = ("Function",)


FUNCTION_TRIGGER_PATTERN = r"def[ \t\f\r\n\\]+backward\b"


@dataclass
class AutogradFunction:
    """A custom ``torch.autograd.Function`` subclass defined in this file."""

    info: ClassInfo
    forward: ast.FunctionDef | ast.AsyncFunctionDef
    backward: ast.FunctionDef | ast.AsyncFunctionDef
    inputs: list[str]  # forward's inputs (without ctx)
    required: int  # inputs without a default
    apply_calls: list[ast.Call] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def ctx_name(self) -> str | None:
        params = positional_params(self.backward)
        return params[0] if params else None

    @property
    def grad_params(self) -> set[str]:
        return set(positional_params(self.backward)[1:])

    def input_word(self, index: int) -> str:
        return f"`{self.inputs[index]}` (input {index})" if 0 <= index < len(self.inputs) else f"input {index}"


def autograd_functions(ctx: FileContext) -> list[AutogradFunction]:
    """The Functions whose inputs hooklint can count: a static ``forward``
    without ``*args`` or keyword-only parameters, and a static ``backward``."""
    model = ctx.model
    out = []
    for info in model.classes.values():
        if not model.is_autograd_function_class(info):
            continue
        forward, backward = info.method("forward"), info.method("backward")
        if forward is None or backward is None or not is_staticmethod(forward) or not is_staticmethod(backward):
            continue
        args = forward.args
        if args.vararg is not None or args.kwonlyargs:
            continue
        params = positional_params(forward)
        back = positional_params(backward)
        if len(params) > 1 and back and params[0] != back[0] and params[1] == back[0]:
            # `forward(cls, ctx, x, ...)`: a base class's helper that its subclasses' forwards call with their
            # own class (liger-kernel's chunked losses), not what `apply` calls: the inputs cannot be counted
            continue
        # With a separate setup_context, forward takes the inputs only; otherwise ctx first.
        inputs = params if info.method("setup_context") is not None else params[1:]
        required = len(inputs) - len(args.defaults)
        fn = AutogradFunction(info, forward, backward, inputs, max(required, 0))
        fn.apply_calls = apply_calls(ctx, info)
        out.append(fn)
    return out


def apply_calls(ctx: FileContext, info: ClassInfo) -> list[ast.Call]:
    """``Fn.apply(...)`` calls, and calls of a name bound to ``Fn.apply``."""
    model = ctx.model
    calls = [c for c in model.calls_of_method("apply")
             if model.class_for_expr(c.func.value) is info]  # type: ignore[attr-defined]
    aliases = []
    for scope in model.scopes.values():
        for name, bindings in scope.bindings.items():
            for b in bindings:
                value = b.value
                if b.kind == "assign" and not b.path and isinstance(value, ast.Attribute) and value.attr == "apply" \
                        and model.class_for_expr(value.value) is info:
                    aliases.append((name, b))
    for name, binding in aliases:
        for call in model.name_calls.get(name, ()):
            if binding in model.bindings_at(call.func):  # type: ignore[arg-type]
                calls.append(call)
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return calls


# ------------------------------------------------------- torch.library.register_autograd

# A file that registers an op's backward names the API (the function or the method).
REGISTER_AUTOGRAD_TRIGGERS = ("register_autograd",)
_CUSTOM_OP = frozenset({"torch.library.custom_op", "torch._library.custom_ops.custom_op"})
_REGISTER_AUTOGRAD = frozenset({"torch.library.register_autograd", "torch._library.autograd.register_autograd"})
_DEFINE = frozenset({"torch.library.define"})


@dataclass
class RegisteredBackward:
    """The backward a file registers for a custom op with
    ``torch.library.register_autograd`` (or ``op.register_autograd``).

    It takes the place of an ``AutogradFunction`` for the gradient-count
    question, with one difference: the op's generated Function gets one
    gradient per positional input of the op exactly (defaults are filled
    in), and an extra trailing ``None`` is an error too (PyTorch checks it
    since mid-2026; earlier releases dropped it, except for ops with list
    arguments, whose structure they compared)."""

    op: str  # "ns::name"
    backward: ast.FunctionDef | ast.AsyncFunctionDef
    inputs: list[str]  # the op's positional inputs
    registration: ast.Call
    forward: ast.FunctionDef | ast.AsyncFunctionDef | None = None  # the decorated function, when there is one
    apply_calls: list[ast.Call] = field(default_factory=list)  # ops are not applied through `.apply`

    strict = True

    @property
    def name(self) -> str:
        return self.op

    @property
    def required(self) -> int:
        return len(self.inputs)

    @property
    def ctx_name(self) -> str | None:
        params = positional_params(self.backward)
        return params[0] if params else None

    @property
    def grad_params(self) -> set[str]:
        return set(positional_params(self.backward)[1:])

    def input_word(self, index: int) -> str:
        return f"`{self.inputs[index]}` (input {index})" if 0 <= index < len(self.inputs) else f"input {index}"


def registered_backwards(ctx: FileContext) -> list[RegisteredBackward]:
    """Backwards registered for the custom ops this file defines (``@torch.library.custom_op``
    or ``torch.library.define`` with a schema), whose inputs it can count."""
    model = ctx.model
    ops: dict[str, tuple[list[str], ast.AST | None]] = {}  # op name -> (positional inputs, decorated def)
    op_of_def: dict[int, str] = {}
    for func in model.functions:
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for deco in func.decorator_list:
            if isinstance(deco, ast.Call) and model.qualify(deco.func) in _CUSTOM_OP:
                name = _string_arg(deco, 0, "name")
                if name is not None and func.args.vararg is None:
                    ops[name] = ([a.arg for a in func.args.posonlyargs + func.args.args], func)
                    op_of_def[id(func)] = name
    for call in [*model.name_calls.get("define", ()), *model.method_calls.get("define", ())]:
        if model.qualify(call.func) in _DEFINE:
            name, schema = _string_arg(call, 0, "qualname"), _string_arg(call, 1, "schema")
            inputs = _schema_inputs(schema) if schema is not None else None
            if name is not None and inputs is not None:
                ops.setdefault(name, (inputs, None))
    if not ops:
        return []
    out: list[RegisteredBackward] = []
    for call in model.calls_of_method("register_autograd") + [
            c for calls in model.name_calls.values() for c in calls]:
        op_name, backward_expr = _registered_pair(ctx, call, op_of_def)
        if op_name is None or backward_expr is None or op_name not in ops:
            continue
        backward = _local_def(ctx, backward_expr)
        if backward is None or backward.args.vararg is not None:
            continue
        inputs, forward = ops[op_name]
        out.append(RegisteredBackward(op_name, backward, inputs, call,
                                      forward if isinstance(forward, (ast.FunctionDef, ast.AsyncFunctionDef)) else None))
    out.sort(key=lambda r: (r.registration.lineno, r.registration.col_offset))
    return out


def _registered_pair(ctx: FileContext, call: ast.Call, op_of_def: dict[int, str]) -> tuple[str | None, ast.expr | None]:
    """(op name, backward expression) of a registration call, or (None, None)."""
    model = ctx.model
    func = call.func
    qual = model.qualify(func)
    if qual in _REGISTER_AUTOGRAD:
        target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "op"), None)
        backward = call.args[1] if len(call.args) > 1 else next(
            (k.value for k in call.keywords if k.arg == "backward"), None)
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            return target.value, backward
        decorated = _local_def(ctx, target) if target is not None else None
        return (op_of_def.get(id(decorated)) if decorated is not None else None), backward
    if isinstance(func, ast.Attribute) and func.attr == "register_autograd":
        decorated = _local_def(ctx, func.value)
        backward = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "backward"), None)
        if decorated is not None and id(decorated) in op_of_def:
            return op_of_def[id(decorated)], backward
    return None, None


def _local_def(ctx: FileContext, expr: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    if not isinstance(expr, ast.Name):
        return None
    bindings = ctx.model.bindings_at(expr)
    if len(bindings) != 1 or bindings[0].kind != "def":
        return None
    node = bindings[0].node
    return node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _string_arg(call: ast.Call, index: int, keyword: str) -> str | None:
    value = call.args[index] if len(call.args) > index else next(
        (k.value for k in call.keywords if k.arg == keyword), None)
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None


def _schema_inputs(schema: str) -> list[str] | None:
    """Positional argument names of a schema such as ``(Tensor x, int[2] k=[1, 1], *, bool f) -> Tensor``."""
    text = schema.strip()
    if not text.startswith("("):
        return None
    depth, end = 0, -1
    for i, ch in enumerate(text):
        depth += ch in "([" and 1 or (ch in ")]" and -1 or 0)
        if depth == 0:
            end = i
            break
    if end < 0:
        return None
    parts, depth, current = [], 0, ""
    for ch in text[1:end]:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    names: list[str] = []
    for part in parts:
        part = part.strip()
        if part == "*":
            break
        words = part.split("=", 1)[0].split()
        if len(words) < 2:
            return None
        names.append(words[-1])
    return names
