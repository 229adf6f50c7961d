"""Every hook registration in a file, with what it hooks and which code will run.

A registration is a call such as ``net.fc1.register_full_backward_hook(fn)``,
``x.register_hook(fn)`` or the global
``torch.nn.modules.module.register_module_forward_hook(fn)``.  For each one we
record its kind, its receiver (as an abstract value), and the hook callable
resolved through names, factories, lambdas, bound methods and
``functools.partial``, so that rules can look inside the hook body knowing
which parameter is ``grad_input`` and which is ``grad_output``.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass
from functools import cached_property

from hooklint.static.semantic import SemanticModel
from hooklint.static.values import (
    CallableValue,
    ClassValue,
    Inference,
    ModuleValue,
    ObjectValue,
    TensorValue,
    Value,
    src,
)


class HookKind(str, enum.Enum):
    FORWARD = "forward"
    FORWARD_PRE = "forward-pre"
    BACKWARD_LEGACY = "backward-legacy"
    FULL_BACKWARD = "full-backward"
    FULL_BACKWARD_PRE = "full-backward-pre"
    TENSOR = "tensor"
    POST_ACCUMULATE = "post-accumulate-grad"

    @property
    def is_module_backward(self) -> bool:
        return self in (HookKind.BACKWARD_LEGACY, HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE)

    @property
    def is_module(self) -> bool:
        return self not in (HookKind.TENSOR, HookKind.POST_ACCUMULATE)

    @property
    def is_tensor(self) -> bool:
        return not self.is_module


METHOD_KINDS: dict[str, HookKind] = {
    "register_forward_hook": HookKind.FORWARD,
    "register_forward_pre_hook": HookKind.FORWARD_PRE,
    "register_backward_hook": HookKind.BACKWARD_LEGACY,
    "register_full_backward_hook": HookKind.FULL_BACKWARD,
    "register_full_backward_pre_hook": HookKind.FULL_BACKWARD_PRE,
    "register_hook": HookKind.TENSOR,
    "register_post_accumulate_grad_hook": HookKind.POST_ACCUMULATE,
}

_GLOBAL_PREFIXES = ("torch.nn.modules.module.", "torch.nn.modules.")
GLOBAL_KINDS: dict[str, HookKind] = {
    "register_module_forward_hook": HookKind.FORWARD,
    "register_module_forward_pre_hook": HookKind.FORWARD_PRE,
    "register_module_backward_hook": HookKind.BACKWARD_LEGACY,
    "register_module_full_backward_hook": HookKind.FULL_BACKWARD,
    "register_module_full_backward_pre_hook": HookKind.FULL_BACKWARD_PRE,
}

# The parameters each kind of hook is called with, by role.
_ROLES: dict[HookKind, tuple[str, ...]] = {
    HookKind.FORWARD: ("module", "input", "output"),
    HookKind.FORWARD_PRE: ("module", "input"),
    HookKind.BACKWARD_LEGACY: ("module", "grad_input", "grad_output"),
    HookKind.FULL_BACKWARD: ("module", "grad_input", "grad_output"),
    HookKind.FULL_BACKWARD_PRE: ("module", "grad_output"),
    HookKind.TENSOR: ("grad",),
    HookKind.POST_ACCUMULATE: ("param",),
}
_ROLES_WITH_KWARGS: dict[HookKind, tuple[str, ...]] = {
    HookKind.FORWARD: ("module", "args", "kwargs", "output"),
    HookKind.FORWARD_PRE: ("module", "args", "kwargs"),
}

# Attributes holding autograd Nodes, whose register_hook is not Tensor.register_hook.
_NODE_ATTRIBUTES = ("grad_fn", "grad_accumulator")

# Trigger words: a file without any of these cannot contain a registration.
REGISTRATION_TRIGGERS = tuple(METHOD_KINDS) + tuple(GLOBAL_KINDS)


@dataclass(eq=False)
class Registration:
    call: ast.Call
    kind: HookKind
    receiver: ast.expr | None  # None for the global registration functions
    receiver_value: Value
    hook_expr: ast.expr | None
    hook: CallableValue | None
    is_global: bool = False
    with_kwargs: bool = False

    @property
    def method_name(self) -> str:
        func = self.call.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")

    @property
    def name_node(self) -> ast.AST:
        """The node naming the API (for precise finding locations)."""
        return self.call.func

    def param(self, role: str) -> str | None:
        """The hook's parameter name that receives ``role`` (``grad_input``...)."""
        if self.hook is None or self.hook.has_varargs:
            return None
        roles = (_ROLES_WITH_KWARGS if self.with_kwargs else {}).get(self.kind) or _ROLES[self.kind]
        if role not in roles:
            return None
        index = roles.index(role)
        params = self.hook.params
        return params[index] if index < len(params) else None

    @property
    def receiver_module(self) -> ModuleValue | None:
        return self.receiver_value if isinstance(self.receiver_value, ModuleValue) else None

    @property
    def receiver_text(self) -> str:
        if self.receiver is None:
            return "every module (global hook)"
        return src(self.receiver)

    def describe_target(self) -> str:
        mod = self.receiver_module
        text = self.receiver_text
        if mod is not None and mod.applied_from is not None:
            return f"every submodule of `{src(mod.applied_from)}` (via `.apply`)"
        if mod is not None and mod.class_name:
            return f"`{text}` ({mod.class_name})"
        return f"`{text}`"


class HookIndex:
    """All registrations in a file; built lazily, shared by rules."""

    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference

    @cached_property
    def registrations(self) -> list[Registration]:
        out: list[Registration] = []
        for call in self.model.calls_of_method(*METHOD_KINDS):
            reg = self._method_registration(call)
            if reg is not None:
                out.append(reg)
        candidates = [c for name in GLOBAL_KINDS for c in self.model.method_calls.get(name, [])]
        # bare names, possibly imported under an alias
        candidates += [c for calls in self.model.name_calls.values() for c in calls]
        for call in candidates:
            qual = self.model.qualify(call.func)
            if qual is None:
                continue
            name = qual.rsplit(".", 1)[-1]
            kind = GLOBAL_KINDS.get(name)
            if kind is None or not any(qual == p + name for p in _GLOBAL_PREFIXES):
                continue
            hook_expr = _hook_arg(call)
            out.append(Registration(call, kind, None, None, hook_expr,
                                    self.inference.callable_of(hook_expr) if hook_expr else None,
                                    is_global=True))
        out.sort(key=lambda r: (r.call.lineno, r.call.col_offset))
        return out

    def _method_registration(self, call: ast.Call) -> Registration | None:
        func = call.func
        assert isinstance(func, ast.Attribute)
        kind = METHOD_KINDS[func.attr]
        receiver = func.value
        # `super().register_backward_hook(...)` inside an override still reaches torch.
        value = self.inference.infer(receiver)
        if not self._reaches_torch_api(receiver, value, func.attr):
            return None
        if kind is HookKind.TENSOR:
            # `y.grad_fn.register_hook` is an autograd Node hook, another signature
            if self._is_autograd_node(receiver):
                return None
            if isinstance(value, ModuleValue):  # nn.Module has no register_hook
                return None
        if kind.is_module and isinstance(value, TensorValue):
            return None
        hook_expr = _hook_arg(call)
        hook = self.inference.callable_of(hook_expr) if hook_expr is not None else None
        with_kwargs = any(
            k.arg == "with_kwargs" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in call.keywords
        )
        return Registration(call, kind, receiver, value, hook_expr, hook, with_kwargs=with_kwargs)

    def _is_autograd_node(self, receiver: ast.expr, depth: int = 0) -> bool:
        """``y.grad_fn``, ``fn.next_functions[0][0]``, or a name holding one
        (``grad_fn = y.grad_fn``; a parameter called ``grad_fn``, as in torch's
        own BackwardHook)."""
        if isinstance(receiver, ast.Attribute):
            return receiver.attr in _NODE_ATTRIBUTES
        if isinstance(receiver, ast.Subscript):
            base = receiver.value
            while isinstance(base, ast.Subscript):
                base = base.value
            return isinstance(base, ast.Attribute) and base.attr == "next_functions"
        if isinstance(receiver, ast.Name) and depth < 3:
            if receiver.id in _NODE_ATTRIBUTES:
                return True
            bindings = self.model.bindings_at(receiver)
            return bool(bindings) and all(
                b.kind == "assign" and not b.path and isinstance(b.value, ast.expr) and b.value is not receiver
                and self._is_autograd_node(b.value, depth + 1) for b in bindings)
        return False

    def _reaches_torch_api(self, receiver: ast.expr, value: Value, method: str) -> bool:
        """False when the method is a local class's own method of the same name."""
        if isinstance(value, ObjectValue):
            # a plain local class, or one whose bases cannot be seen: torch only if
            # it does not define the method itself and might be a module
            return (value.local_class.owner_of(method) is None
                    and self.model.is_module_class(value.local_class) is not False)
        if isinstance(value, ClassValue):
            return False
        if isinstance(value, ModuleValue) and value.local_class is not None:
            owner = value.local_class.owner_of(method)
            if owner is not None:
                return False
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
            return True
        if isinstance(receiver, ast.Name) and receiver.id == "self":
            cls = self.model.enclosing_class(receiver)
            if cls is not None and cls.owner_of(method) is not None:
                return False
        return True

    def by_kind(self, *kinds: HookKind) -> list[Registration]:
        return [r for r in self.registrations if r.kind in kinds]

    def for_hook_function(self, node: ast.AST) -> list[Registration]:
        return [r for r in self.registrations if r.hook is not None and r.hook.node is node]


def _hook_arg(call: ast.Call) -> ast.expr | None:
    if call.args:
        first = call.args[0]
        return None if isinstance(first, ast.Starred) else first
    for kw in call.keywords:
        if kw.arg == "hook":
            return kw.value
    return None
