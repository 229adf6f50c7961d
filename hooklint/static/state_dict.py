"""State-dict and load-state-dict hooks, and what their bodies do to the module.

torch 2.13 calls a load-state-dict pre-hook once per module that registered
it, before that module's own ``_load_from_state_dict`` copies the checkpoint
into its existing tensors (``param.copy_(input_param)`` under ``no_grad``):
loading keeps every Parameter and buffer *object*, so an optimizer built
before the load, hooks registered on the parameters and tied weights keep
pointing at the tensors the module uses.  A hook (or an override of
``_load_from_state_dict``) that re-registers a parameter or buffer with the
checkpoint's own tensor breaks that: the module now holds a new object that
aliases the state dict.

Signatures (torch 2.13):

- ``_register_load_state_dict_pre_hook(hook, with_module=False)``:
  ``hook(state_dict, prefix, local_metadata, strict, missing_keys,
  unexpected_keys, error_msgs)``, with the module first when ``with_module``;
- ``register_load_state_dict_pre_hook(hook)``: ``hook(module, state_dict,
  prefix, ...)``;
- ``register_load_state_dict_post_hook(hook)``: ``hook(module,
  incompatible_keys)`` (no state dict);
- ``_load_from_state_dict(self, state_dict, prefix, ...)``: the method the
  pre-hooks run before.

Lazy tensors (``UninitializedParameter`` / ``UninitializedBuffer``) cannot be
copied into: ``_load_from_state_dict`` skips the shape check for them and the
copy fails ("While copying the parameter named ..."), so a module holding one
must materialize it before the copy, which torch's ``LazyModuleMixin`` does in
a load-state-dict pre-hook it registers.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from hooklint.static.semantic import ClassInfo, SemanticModel, positional_params
from hooklint.static.values import CallableValue, Inference, ModuleValue

# method -> (hook kind, whether the module is the hook's first argument by default)
LOAD_PRE = "load-state-dict-pre"
LOAD_POST = "load-state-dict-post"
SAVE = "state-dict"
SAVE_PRE = "state-dict-pre"
STATE_DICT_HOOK_METHODS: dict[str, tuple[str, bool]] = {
    "_register_load_state_dict_pre_hook": (LOAD_PRE, False),
    "register_load_state_dict_pre_hook": (LOAD_PRE, True),
    "register_load_state_dict_post_hook": (LOAD_POST, True),
    "_register_state_dict_hook": (SAVE, True),
    "register_state_dict_post_hook": (SAVE, True),
    "register_state_dict_pre_hook": (SAVE_PRE, True),
}
TRIGGERS = tuple(STATE_DICT_HOOK_METHODS) + ("_load_from_state_dict",)

_LAZY_CLASSES = frozenset({
    "torch.nn.parameter.UninitializedParameter", "torch.nn.UninitializedParameter",
    "torch.nn.parameter.UninitializedBuffer", "torch.nn.UninitializedBuffer",
})
_LAZY_MIXINS = frozenset({"torch.nn.modules.lazy.LazyModuleMixin", "torch.nn.LazyModuleMixin"})
# calls that keep the tensor they are given (or a copy of it) as the module's new tensor
_WRAPPERS = frozenset({"Parameter", "UninitializedParameter", "Buffer"})
_KEEPING_METHODS = frozenset({"to", "detach", "clone", "contiguous", "float", "half", "double", "bfloat16",
                              "cuda", "cpu", "requires_grad_", "type", "view_as", "reshape", "view"})
_TAKING_METHODS = frozenset({"get", "pop", "__getitem__"})


@dataclass(frozen=True)
class LoadHook:
    """A function that runs while ``load_state_dict`` loads a module, with
    the names its parameters give to the module and the state dict."""

    func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    state_dict: str | None
    module_names: frozenset[str]  # names standing for the loaded module inside the body
    registration: ast.Call | None  # None for a `_load_from_state_dict` override
    how: str  # "load_state_dict pre-hook", "`_load_from_state_dict` override"


def registration_method(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in STATE_DICT_HOOK_METHODS:
        return func.attr
    return None


def _with_module(call: ast.Call, default: bool) -> bool:
    for kw in call.keywords:
        if kw.arg == "with_module" and isinstance(kw.value, ast.Constant):
            return bool(kw.value.value)
    return default


def load_hooks(model: SemanticModel, inference: Inference) -> list[LoadHook]:
    """Every load-state-dict pre-hook the file registers whose body is seen, and
    every ``_load_from_state_dict`` override of an ``nn.Module`` class."""
    out: list[LoadHook] = []
    for call in model.calls_of_method(*(m for m, (k, _) in STATE_DICT_HOOK_METHODS.items() if k == LOAD_PRE)):
        method = registration_method(call)
        if method is None or not call.args:
            continue
        hook = inference.callable_of(call.args[0])
        if not isinstance(hook, CallableValue):
            continue
        module_first = _with_module(call, STATE_DICT_HOOK_METHODS[method][1])
        params = hook.params
        names: set[str] = set()
        if hook.bound and hook.via == "method":
            own = positional_params(hook.node)
            if own:
                names.add(own[0])  # `self` of a bound method is the module it was registered on
        if module_first:
            if params:
                names.add(params[0])
            params = params[1:]
        receiver = call.func.value  # type: ignore[attr-defined]
        if isinstance(receiver, ast.Name):
            names.add(receiver.id)  # a closure over the module it is registered on
        state = params[0] if params else None
        out.append(LoadHook(hook.node, state, frozenset(names), call, "load_state_dict pre-hook"))
    for info in model.classes.values():
        func = info.methods.get("_load_from_state_dict")
        if func is None or model.is_module_class(info) is False:
            continue
        params = positional_params(func)
        if len(params) >= 2:
            out.append(LoadHook(func, params[1], frozenset({params[0]}), None,
                                "`_load_from_state_dict` override"))
    return out


@dataclass(frozen=True)
class Replacement:
    node: ast.AST  # the statement or call that rebinds the module's tensor
    target: str  # what it rebinds, as written (`self.weight`, `register_parameter(name, ...)`)


def _root(expr: ast.expr) -> str | None:
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def _func_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


class _Checkpoint:
    """Which expressions of a load hook's body are the checkpoint's own tensors
    (``state_dict[key]``, ``state_dict.get(key)``, a name bound to one, a
    Parameter wrapping one), as opposed to values merely computed from them
    (``torch.empty(state_dict[key].shape)``)."""

    def __init__(self, func: ast.AST, state_dict: str):
        self.state_dict = state_dict
        self.names: set[str] = set()
        # two passes: a name bound from another such name further down the body
        for _ in range(2):
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    if self.is_tensor(node.value):
                        self.names.add(node.targets[0].id)
                elif isinstance(node, (ast.For, ast.comprehension)):
                    # for key, value in state_dict.items()
                    it = node.iter
                    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in (
                            "items", "values") and self._is_dict(it.func.value):
                        target = node.target
                        if it.func.attr == "values" and isinstance(target, ast.Name):
                            self.names.add(target.id)
                        elif isinstance(target, ast.Tuple) and len(target.elts) == 2 \
                                and isinstance(target.elts[1], ast.Name):
                            self.names.add(target.elts[1].id)

    def _is_dict(self, expr: ast.expr) -> bool:
        return isinstance(expr, ast.Name) and expr.id == self.state_dict

    def is_tensor(self, expr: ast.expr | None) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in self.names
        if isinstance(expr, ast.Subscript):
            return self._is_dict(expr.value)
        if isinstance(expr, ast.Attribute) and expr.attr == "data":
            return self.is_tensor(expr.value)
        if isinstance(expr, ast.IfExp):
            return self.is_tensor(expr.body) or self.is_tensor(expr.orelse)
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute):
                if func.attr in _TAKING_METHODS and self._is_dict(func.value):
                    return True
                if func.attr in _KEEPING_METHODS:
                    return self.is_tensor(func.value)
            if _func_name(expr) in _WRAPPERS and expr.args:
                return self.is_tensor(expr.args[0])
        return False


def _constant(expr: ast.expr | None) -> str | None:
    return expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None


def _existing_tensor_names(model: SemanticModel, func: ast.AST, skip: set[int]) -> set[str] | None:
    """Names the module's class gives its tensors elsewhere (attributes it assigns,
    ``register_parameter`` / ``register_buffer`` with a constant name), plus
    ``weight`` and ``bias``; None when the hook is not in a class."""
    info = model.enclosing_class(func)
    if info is None:
        return None
    names = {"weight", "bias"}
    stack = [info]
    seen: set[int] = set()
    while stack:
        cls = stack.pop()
        if id(cls) in seen:
            continue
        seen.add(id(cls))
        # an attribute set only to None (a placeholder for a tensor staged later) holds no tensor to replace
        names.update(attr for attr, entries in cls.attributes.items()
                     if any(not _is_none(expr) and id(node) not in skip for expr, _s, node in entries))
        stack.extend(cls.local_bases)
        for method in cls.methods.values():
            for node in ast.walk(method):
                if isinstance(node, ast.Call) and id(node) not in skip and _func_name(node) in (
                        "register_parameter", "register_buffer") and node.args \
                        and not (len(node.args) >= 2 and _is_none(node.args[1])):
                    # `register_buffer("scale", None)` reserves the name for a tensor the load supplies
                    name = _constant(node.args[0])
                    if name is not None:
                        names.add(name)
    return names


def _is_none(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is None


def checkpoint_replacements(model: SemanticModel, hook: LoadHook) -> Iterator[Replacement]:
    """Where the hook rebinds one of the module's parameters or buffers to the
    checkpoint's own tensor instead of letting the load copy into it.  A
    constant name the class never gives a tensor elsewhere is a new tensor
    (a staging buffer), not a replacement."""
    for rep, name in _replacements(hook):
        if name is not None:
            existing = _existing_tensor_names(model, hook.func, {id(rep.node)})
            if name not in (existing if existing is not None else {"weight", "bias"}):
                continue
        yield rep


def _replacements(hook: LoadHook) -> Iterator[tuple[Replacement, str | None]]:
    if hook.state_dict is None or not hook.module_names:
        return
    ckpt = _Checkpoint(hook.func, hook.state_dict)
    body = hook.func.body if isinstance(hook.func.body, list) else [hook.func.body]
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                name = _func_name(node)
                if name in ("register_parameter", "register_buffer") and isinstance(node.func, ast.Attribute) \
                        and _root(node.func.value) in hook.module_names and len(node.args) >= 2 \
                        and ckpt.is_tensor(node.args[1]):
                    yield Replacement(node, f"{name}(...)"), _constant(node.args[0])
                elif name == "setattr" and len(node.args) == 3 and _root(node.args[0]) in hook.module_names \
                        and ckpt.is_tensor(node.args[2]):
                    yield Replacement(node, "setattr(...)"), _constant(node.args[1])
            elif isinstance(node, ast.Assign) and ckpt.is_tensor(node.value):
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id in hook.module_names:
                        yield Replacement(node, ast.unparse(target)), target.attr
                    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) \
                            and target.value.attr in ("_parameters", "_buffers") \
                            and _root(target.value) in hook.module_names:
                        yield Replacement(node, ast.unparse(target.value) + "[...]"), _constant(target.slice)


# --- lazy tensors -----------------------------------------------------------------------------

def lazy_tensor_creations(model: SemanticModel, info: ClassInfo) -> list[ast.Call]:
    """``UninitializedParameter()`` / ``UninitializedBuffer()`` calls in the
    class's methods whose result becomes one of its tensors."""
    out: list[ast.Call] = []
    for func in info.methods.values():
        for node in ast.walk(func):
            if isinstance(node, ast.Call) and model.qualify(node.func) in _LAZY_CLASSES:
                parent = getattr(node, "_hl_parent", None)
                if isinstance(parent, ast.Assign) and any(
                        isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                        for t in parent.targets):
                    out.append(node)
                elif isinstance(parent, ast.Call) and _func_name(parent) in ("register_parameter", "register_buffer") \
                        and isinstance(parent.func, ast.Attribute) and _root(parent.func.value) == "self":
                    out.append(node)
    return out


def handles_lazy_loading(model: SemanticModel, info: ClassInfo, _seen: frozenset[int] = frozenset()) -> bool | None:
    """True when loading a state dict into the class can materialize its lazy
    tensors first (torch's ``LazyModuleMixin``, a load-state-dict pre-hook
    registered by the class, an override of ``_load_from_state_dict`` or
    ``load_state_dict``); None when a base class cannot be seen (it may)."""
    if id(info) in _seen:
        return False
    seen = _seen | {id(info)}
    for name in ("_load_from_state_dict", "load_state_dict", "_lazy_load_hook"):
        if name in info.methods:
            return True
    for func in info.methods.values():
        for node in ast.walk(func):
            if isinstance(node, ast.Call) and registration_method(node) in (
                    "_register_load_state_dict_pre_hook", "register_load_state_dict_pre_hook",
                    "register_load_state_dict_post_hook"):
                return True
    unknown = False
    for base_expr, qual in zip(info.node.bases, info.bases):
        local = model.class_for_expr(base_expr)
        if local is not None:
            sub = handles_lazy_loading(model, local, seen)
            if sub:
                return True
            if sub is None:
                unknown = True
        elif qual in _LAZY_MIXINS:
            return True
        elif qual is None or not qual.startswith(("torch.", "builtins.", "typing.", "abc.")):
            unknown = True
    return None if unknown else False


def lazy_modules(model: SemanticModel) -> Iterator[tuple[ClassInfo, list[ast.Call]]]:
    for info in model.classes.values():
        if model.is_module_class(info) is not True:
            continue
        calls = lazy_tensor_creations(model, info)
        if calls:
            yield info, calls


def module_value(inference: Inference, expr: ast.expr) -> bool:
    return isinstance(inference.infer(expr), ModuleValue)
