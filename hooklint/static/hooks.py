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
import dataclasses
import enum
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

from hooklint.static.semantic import FunctionNode, SemanticModel
from hooklint.static.travel import EMPTY, Env, Resolver
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
# How a registration API's name is spelled when it is built from parts:
# f"register_{kind}_hook", "register_{}_hook".format(...), "register_%s_hook" % kind,
# "register_" + kind + "_hook".  Each contains "_hook", the prefilter's anchor.
DYNAMIC_NAME_TRIGGERS = ("}_hook", "%s_hook", '"_hook"', "'_hook'")


@dataclass(eq=False)
class Registration:
    """One registration, as the code at ``call`` makes it.

    A registration reached through a helper's parameters, a loop over a dict
    of handlers or ``getattr(m, "register_...")`` is seen once per way it can
    run (:attr:`HookIndex.instances`): ``env`` is then the environment its
    hook and receiver were resolved in, ``via`` the calls that led there
    (innermost first) and ``receiver_origin`` the expression at the call site
    that the receiver stands for (``net.layer4`` for a helper's ``module``).
    """

    call: ast.Call
    kind: HookKind
    receiver: ast.expr | None  # None for the global registration functions
    receiver_value: Value
    hook_expr: ast.expr | None
    hook: CallableValue | None
    is_global: bool = False
    with_kwargs: bool = False
    method: str = ""  # the API's name when the call does not spell it (`getattr(m, name)(fn)`)
    name_at: ast.AST | None = None  # where the API is named, when not `call.func`
    env: Env | None = None
    via: tuple[ast.Call, ...] = ()
    receiver_origin: ast.AST | None = None
    hook_origin: ast.AST | None = None
    # made through a function of the project (hooklint.static.core.summary.Reg): `call` is the call of it
    summary: object = None

    @property
    def method_name(self) -> str:
        if self.method:
            return self.method
        func = self.call.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")

    @property
    def name_node(self) -> ast.AST:
        """The node naming the API (for precise finding locations)."""
        return self.name_at if self.name_at is not None else self.call.func

    @property
    def traveled(self) -> bool:
        """Was the hook or the receiver found at a call site, not at the registration?"""
        return bool(self.via)

    @property
    def site_call(self) -> ast.Call | None:
        """The outermost call site that chose the hook or the module."""
        return self.via[-1] if self.via else None

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
        if self.summary is not None:
            text = getattr(self.summary, "target_text", "")
            if text:
                return text
            if self.receiver is None:
                return _place_text(getattr(self.summary, "target", "?"))
        if self.receiver is None:
            return "every module (global hook)"
        if self.receiver_origin is not None:
            return src(self.receiver_origin)
        return src(self.receiver)

    def describe_target(self) -> str:
        mod = self.receiver_module
        text = self.receiver_text
        if self.summary is not None and (self.receiver is None or getattr(self.summary, "target_text", "")):
            return (text if text.startswith(("each ", "a part of ")) else f"`{text}`") + self.via_text()
        if mod is not None and mod.applied_from is not None:
            target = f"every submodule of `{src(mod.applied_from)}` (via `.apply`)"
        elif mod is not None and mod.class_name:
            target = f"`{text}` ({mod.class_name})"
        elif mod is not None and mod.narrowing is not None:
            target = f"`{text}` ({' or '.join(mod.narrowing.names)})"
        elif mod is not None and self.receiver_origin is None and mod.description.startswith("each "):
            target = f"`{text}` ({mod.description})"
        else:
            target = f"`{text}`"
        return target + self.via_text()

    @property
    def wrapper_chain(self) -> tuple[tuple[str, str, int], ...]:
        """The wrappers a call-site registration goes through: (name, path, line), outermost first."""
        return getattr(self.summary, "chain", ()) or ()

    def via_text(self) -> str:
        """`` (through `add_hook(...)` at line 12)`` for a registration reached through calls."""
        if self.summary is not None:
            links = [f"`{name}`" + (f" ({path}:{line})" if path else f" (line {line})")
                     for name, path, line in self.wrapper_chain]
            return (" (through " + ", then ".join(links) + ")") if links else ""
        if not self.via:
            return ""
        calls = [f"`{_call_head(c)}` at line {c.lineno}" for c in reversed(self.via)]
        return " (through " + ", then ".join(calls) + ")"


class HookIndex:
    """All registrations in a file; built lazily, shared by rules.

    :attr:`registrations` has one entry per registering call, resolved where
    it is written (what the lifetime rules reason about: one call, one
    handle).  :attr:`instances` has one entry per way that call can run: per
    call site of the helper it is in, per item of the dict of handlers it
    loops over, per name a ``getattr`` can be given (what the rules that look
    at the hook body or the module use).  Registrations in compatibility
    fallbacks that never run on torch >= 1.8 are in neither (see
    :mod:`hooklint.static.fallbacks`); :attr:`dead` keeps them with the reason.
    """

    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference
        self.resolver = Resolver(model, inference)
        self.dead: list[tuple[Registration, str]] = []
        # registrations this file makes through wrappers defined in other files (set by the file's context:
        # the summaries of the core, hooklint.static.core); wrappers of this file are followed by travel.py
        self.through_other_files: Callable[[], list[Registration]] | None = None

    @cached_property
    def _all(self) -> list[tuple[Registration, list[Registration]]]:
        """Every registering call: its registration as written, and its instances."""
        groups: list[tuple[Registration, list[Registration]]] = []
        if self.model.foreign_framework() is not None:
            return groups  # MXNet Gluon's, Paddle's... `register_forward_hook`: not torch's
        for call in self.model.calls_of_method(*METHOD_KINDS):
            reg = self._method_registration(call)
            if reg is not None:
                groups.append((reg, self._expand(reg)))
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
            reg = Registration(call, kind, None, None, hook_expr,
                               self.inference.callable_of(hook_expr) if hook_expr else None, is_global=True)
            groups.append((reg, self._expand(reg)))
        # a name-chosen API has no registration as written: its first way stands for it
        groups += [(group[0], group) for group in self._dynamic_registrations()]
        live: list[tuple[Registration, list[Registration]]] = []
        for base, group in groups:
            if not group:
                continue
            reason = self.resolver.dead(base.call)
            if reason is None:
                reason = self._only_called_dead(base.call)
            if reason is not None:
                self.dead.append((base, reason))
                continue
            live.append((base, group))
        live.sort(key=lambda g: (g[0].call.lineno, g[0].call.col_offset))
        return live

    @cached_property
    def registrations(self) -> list[Registration]:
        """One per registering call, as written (what the lifetime rules reason about)."""
        return [base for base, _group in self._all]

    @cached_property
    def instances(self) -> list[Registration]:
        found = [reg for _base, group in self._all for reg in group]
        if self.through_other_files is not None:
            found += self.through_other_files()
        return found

    def instances_by_kind(self, *kinds: HookKind) -> list[Registration]:
        return [r for r in self.instances if r.kind in kinds]

    def instances_of(self, call: ast.Call) -> list[Registration]:
        for base, group in self._all:
            if base.call is call:
                return group
        return []

    # -- following hooks through calls, loops and getattr ----------------------
    def _expand(self, reg: Registration) -> list[Registration]:
        """The registration, or one instance per environment it runs in when
        its hook or its module comes from a call site or a loop item."""
        if reg.hook is not None and (reg.is_global or _known(reg.receiver_value)):
            return [reg]
        exprs = [reg.hook_expr, reg.receiver]
        envs = self.resolver.envs_at(reg.call, exprs)
        if not envs:
            return [reg]  # only called from dead fallbacks: _only_called_dead says so
        if envs == [EMPTY]:
            # no call site or loop: still, `hooks["backward"]` or a decided conditional may be resolved
            instance = self._instance(reg, EMPTY, reg.kind, reg.receiver)
            return [instance] if instance.hook is not None and reg.hook is None else [reg]
        out: list[Registration] = []
        seen: set[tuple] = set()
        for env in envs:
            instance = self._instance(reg, env, reg.kind, reg.receiver)
            key = _key(instance)
            if key in seen:
                continue
            seen.add(key)
            out.append(instance)
        if not any(_adds_to(reg, r) for r in out):
            return [reg]  # the call sites say nothing more than the registration
        return out

    def _instance(self, reg: Registration, env: Env, kind: HookKind, receiver: ast.expr | None) -> Registration:
        resolver = self.resolver
        hook = resolver.callable(reg.hook_expr, env) if reg.hook_expr is not None else None
        value = resolver.value(receiver, env) if receiver is not None else None
        if kind.is_module and isinstance(value, TensorValue):
            value = None
        hook_origin = resolver.origin(reg.hook_expr, env) if reg.hook_expr is not None else None
        if hook is not None and hook_origin is not None and hook.via == "":
            # handed over as an argument: the helper may use it otherwise too (fixes stay unsafe)
            hook = dataclasses.replace(hook, via="argument")
        return Registration(
            reg.call, kind, receiver, value, reg.hook_expr, hook, is_global=reg.is_global,
            with_kwargs=reg.with_kwargs, method=reg.method, name_at=reg.name_at, env=env,
            via=tuple(site.call for site in env.sites),
            receiver_origin=resolver.origin(receiver, env),
            hook_origin=hook_origin,
        )

    def _only_called_dead(self, call: ast.Call) -> str | None:
        """A registration in a private helper whose every call in this file is a dead fallback."""
        func = self.model.enclosing_function(call)
        if not isinstance(func, FunctionNode) or not func.name.startswith("_") or func.name.startswith("__"):
            return None
        sites = self.resolver.sites_of(func)
        if not sites:
            return None
        reasons = [self.resolver.dead(site.call) for site in sites]
        if all(reasons):
            return f"`{func.name}` is only called from fallbacks that never run ({reasons[0]})"
        return None

    def _dynamic_registrations(self) -> list[list[Registration]]:
        """``getattr(m, "register_backward_hook")(fn)``, ``register = m.register_backward_hook;
        register(fn)``, ``getattr(m, f"register_{kind}_hook")(fn)`` in a loop over names."""
        found: list[tuple[ast.Call, ast.expr]] = []
        for getattr_call in self.model.name_calls.get("getattr", ()):
            parent = getattr(getattr_call, "_hl_parent", None)
            if isinstance(parent, ast.Call) and parent.func is getattr_call:
                found.append((parent, getattr_call))
        for name, binding_value in self._register_aliases():
            for call in self.model.name_calls.get(name, ()):
                bindings = self.model.bindings_at(call.func)  # type: ignore[arg-type]
                if len(bindings) == 1 and bindings[0].value is binding_value:
                    found.append((call, binding_value))
        groups = []
        for call, callee in found:
            group = self._dynamic_group(call, callee)
            if group:
                groups.append(group)
        return groups

    def _register_aliases(self) -> list[tuple[str, ast.expr]]:
        """Names assigned a registration API without calling it."""
        out = []
        for scope in self.model.scopes.values():
            for name, bindings in scope.bindings.items():
                if name not in self.model.name_calls:
                    continue
                for b in bindings:
                    if b.kind == "assign" and not b.path and isinstance(b.value, ast.expr) \
                            and _may_name_register_api(b.value):
                        out.append((name, b.value))
        return out

    def _dynamic_group(self, call: ast.Call, callee: ast.expr) -> list[Registration]:
        hook_expr = _hook_arg(call)
        envs = self.resolver.envs_at(call, [callee, hook_expr])
        out: list[Registration] = []
        seen: set[tuple] = set()
        for env in envs or [EMPTY]:
            for receiver, method, named_at in self._callee_alternatives(callee, env):
                if not fits_torch_signature(call, method):
                    continue
                kind = METHOD_KINDS[method]
                base = Registration(call, kind, receiver, None, hook_expr, None, method=method,
                                    name_at=named_at, with_kwargs=_with_kwargs(call))
                instance = self._instance(base, env, kind, receiver)
                if not self._reaches_torch_api(receiver, instance.receiver_value, method):
                    continue
                if kind is HookKind.TENSOR and isinstance(instance.receiver_value, ModuleValue):
                    continue
                key = _key(instance)
                if key in seen:
                    continue
                seen.add(key)
                out.append(instance)
        return out

    def _callee_alternatives(self, callee: ast.expr, env: Env, depth: int = 0) -> list[tuple[ast.expr, str, ast.AST]]:
        """(receiver, API name, where it is named) for each registration API ``callee`` can be."""
        if depth > 4:
            return []
        if isinstance(callee, ast.Attribute) and callee.attr in METHOD_KINDS:
            return [(callee.value, callee.attr, callee)]
        if isinstance(callee, ast.Call) and isinstance(callee.func, ast.Name) and callee.func.id == "getattr" \
                and len(callee.args) >= 2:
            names = self.resolver.strings(callee.args[1], env)
            if not names:
                return []
            at = callee.args[1]
            return [(callee.args[0], n, at) for n in names if n in METHOD_KINDS]
        if isinstance(callee, ast.IfExp):
            from hooklint.static.fallbacks import decide

            decided = decide(self.model, callee.test)
            if decided is None and env is not EMPTY:
                # `f = m.register_forward_hook if is_forward else m.register_backward_hook`, reached through
                # `hook_outputs(m)` whose default `grad=False` gives `is_forward=not grad`: the call chain
                # picks one branch
                decided = self.resolver.truth(callee.test, env)
            if decided is not None:
                return self._callee_alternatives(callee.body if decided else callee.orelse, env, depth + 1)
            return self._callee_alternatives(callee.body, env, depth + 1) + \
                self._callee_alternatives(callee.orelse, env, depth + 1)
        if isinstance(callee, ast.BoolOp) and isinstance(callee.op, ast.Or):
            # `getattr(m, "register_full_backward_hook", None) or m.register_backward_hook`: the
            # first that is there; a registration API found by name is always there on torch >= 1.8
            out: list[tuple[ast.expr, str, ast.AST]] = []
            for value in callee.values:
                found = self._callee_alternatives(value, env, depth + 1)
                out += found
                if found and (isinstance(value, ast.Attribute) or isinstance(value, ast.Call)):
                    break
            return out
        if isinstance(callee, (ast.Name, ast.Subscript)):
            resolved, where = self.resolver.resolve_expr(callee, env)
            if resolved is not callee and isinstance(resolved, ast.expr):
                return self._callee_alternatives(resolved, where, depth + 1)
        return []

    def _method_registration(self, call: ast.Call) -> Registration | None:
        func = call.func
        assert isinstance(func, ast.Attribute)
        kind = METHOD_KINDS[func.attr]
        if not fits_torch_signature(call, func.attr):
            return None  # a method of the same name with another signature (torchrec's pipeline(site, work))
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
        return Registration(call, kind, receiver, value, hook_expr, hook, with_kwargs=_with_kwargs(call))

    def is_autograd_node(self, receiver: ast.expr) -> bool:
        """Is ``receiver`` an autograd Node (its ``register_hook`` is a Node hook)?"""
        return self._is_autograd_node(receiver)

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
        """Registrations (one per call) of these kinds; see :meth:`instances_by_kind`.
        Filtered once per set of kinds: rules ask per registration."""
        cache = self.__dict__.setdefault("_by_kind", {})
        if kinds not in cache:
            cache[kinds] = [r for r in self.registrations if r.kind in kinds]
        return list(cache[kinds])

    def for_hook_function(self, node: ast.AST) -> list[Registration]:
        return [r for r in self.registrations if r.hook is not None and r.hook.node is node]


def _place_text(place: str) -> str:
    """``s.model`` -> ``self.model``, ``e:p:model`` -> ``each part of model``: a
    summary's place (hooklint.static.core.places) in words."""
    part = place.startswith("e:")
    while place.startswith("e:"):
        place = place[2:]
    if place == "s" or place.startswith("s."):
        text = "self" + place[1:]
    elif place.startswith(("p:", "g:")):
        text = place[2:]
    elif place == "global":
        return "every module (global hook)"
    else:
        return "an object the function makes" if place == "n" else "an object hooklint cannot name"
    return f"each part of `{text}`" if part else text


def _with_kwargs(call: ast.Call) -> bool:
    return any(k.arg == "with_kwargs" and isinstance(k.value, ast.Constant) and k.value.value is True
               for k in call.keywords)


def _known(value: Value) -> bool:
    """A receiver whose class (or tensor-ness) is known: call sites cannot add to it."""
    if isinstance(value, ModuleValue):
        return value.torch_class is not None or value.local_class is not None
    return isinstance(value, TensorValue)


def _adds_to(base: Registration, instance: Registration) -> bool:
    """Does the instance know the hook or the module where the registration alone does not?"""
    if base.hook is None and instance.hook is not None:
        return True
    if _known(base.receiver_value):
        return False
    value = instance.receiver_value
    if _known(value):
        return True
    return isinstance(value, ModuleValue) and not isinstance(base.receiver_value, ModuleValue)


def _key(reg: Registration) -> tuple:
    hook = reg.hook
    value = reg.receiver_value
    module = (value.torch_class, id(value.local_class), value.narrowing.names if value.narrowing else None,
              id(value.applied_from)) if isinstance(value, ModuleValue) else type(value).__name__
    return (reg.kind, id(hook.node) if hook else None, hook.bound if hook else None, module,
            id(reg.receiver_origin), reg.via)


def _may_name_register_api(value: ast.expr) -> bool:
    """``m.register_backward_hook``, ``getattr(m, ...)``, or a conditional choosing between them."""
    if isinstance(value, ast.Attribute):
        return value.attr in METHOD_KINDS
    if isinstance(value, ast.Call):
        return isinstance(value.func, ast.Name) and value.func.id == "getattr" and len(value.args) >= 2
    if isinstance(value, ast.IfExp):
        return _may_name_register_api(value.body) or _may_name_register_api(value.orelse)
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        return any(_may_name_register_api(v) for v in value.values)
    return False


def _call_head(call: ast.Call) -> str:
    """``add_hook(...)``, ``GradCAM(...)``."""
    return src(call.func) + "(...)"


# What torch's registration methods accept (torch 2.13; older releases accept a subset): the most
# positional arguments, and the keyword names.
_TORCH_SIGNATURES: dict[str, tuple[int, frozenset[str]]] = {
    "register_forward_hook": (1, frozenset({"hook", "prepend", "with_kwargs", "always_call"})),
    "register_forward_pre_hook": (1, frozenset({"hook", "prepend", "with_kwargs"})),
    "register_backward_hook": (1, frozenset({"hook"})),
    "register_full_backward_hook": (2, frozenset({"hook", "prepend"})),
    "register_full_backward_pre_hook": (2, frozenset({"hook", "prepend"})),
    "register_hook": (1, frozenset({"hook"})),
    "register_post_accumulate_grad_hook": (1, frozenset({"hook"})),
}


def fits_torch_signature(call: ast.Call, method: str) -> bool:
    """False when the call's arguments cannot be given to torch's method of
    that name: ``pipeline.register_backward_hook(site, work)`` is another API."""
    limit, keywords = _TORCH_SIGNATURES.get(method, (None, None))
    if limit is None or keywords is None:
        return True
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return True  # *args / **kwargs: the count is not known
    return len(call.args) <= limit and all(k.arg in keywords for k in call.keywords)


def _hook_arg(call: ast.Call) -> ast.expr | None:
    if call.args:
        first = call.args[0]
        return None if isinstance(first, ast.Starred) else first
    for kw in call.keywords:
        if kw.arg == "hook":
            return kw.value
    return None
