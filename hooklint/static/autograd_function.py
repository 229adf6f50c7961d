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
