"""The argument list torch calls each kind of hook with, and hooks that cannot
accept it.

Every registration API of torch calls its hook with a fixed list of
positional arguments (torch 2.13, read from ``torch/nn/modules/module.py``,
``torch/optim/optimizer.py``, ``torch/autograd/graph.py`` and checked by
``tests/behaviour/test_hook_signatures.py``).  A callable that cannot bind
that list (too few parameters, a required parameter too many, a required
keyword-only parameter) raises ``TypeError`` at the first event, which is
often far from the registration: the first ``load_state_dict``, the first
``optimizer.step()``, the first backward.

Only what the file shows is judged: the callable's own ``def`` or
``lambda`` (a bound method without ``self``, ``functools.partial``'s bound
arguments, a class's ``__call__``), undecorated or decorated with a
decorator known to keep the signature.  Several meanings of one method name
(``register_state_dict_pre_hook`` of a module takes three arguments, of an
optimizer one) are all accepted unless the receiver is known.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable

from hooklint.static.hooks import HookKind
from hooklint.static.values import CallableValue, ModuleValue, TensorValue

# What a hook is called with, by API, as torch 2.13 calls it: every argument positional.
_MODULE_ARGS = {
    "register_state_dict_pre_hook": ("module", "prefix", "keep_vars"),
    "register_state_dict_post_hook": ("module", "state_dict", "prefix", "local_metadata"),
    "_register_state_dict_hook": ("module", "state_dict", "prefix", "local_metadata"),
    "register_load_state_dict_pre_hook": ("module", "state_dict", "prefix", "local_metadata", "strict",
                                          "missing_keys", "unexpected_keys", "error_msgs"),
    "register_load_state_dict_post_hook": ("module", "incompatible_keys"),
}
_OPTIMIZER_ARGS = {
    "register_state_dict_pre_hook": ("optimizer",),
    "register_state_dict_post_hook": ("optimizer", "state_dict"),
    "register_load_state_dict_pre_hook": ("optimizer", "state_dict"),
    "register_load_state_dict_post_hook": ("optimizer",),
    "register_step_pre_hook": ("optimizer", "args", "kwargs"),
    "register_step_post_hook": ("optimizer", "args", "kwargs"),
}
_LOAD_PRE_WITHOUT_MODULE = ("state_dict", "prefix", "local_metadata", "strict", "missing_keys",
                            "unexpected_keys", "error_msgs")
_NODE_ARGS = {
    "register_hook": ("grad_inputs", "grad_outputs"),
    "register_prehook": ("grad_outputs",),
}
# Functions of torch taking a hook, by qualified name: (index of the hook argument, what it is called with).
_GLOBAL_ARGS: dict[str, tuple[int, tuple[str, ...]]] = {
    "torch.optim.optimizer.register_optimizer_step_pre_hook": (0, ("optimizer", "args", "kwargs")),
    "torch.optim.optimizer.register_optimizer_step_post_hook": (0, ("optimizer", "args", "kwargs")),
    "torch.nn.modules.module.register_module_buffer_registration_hook": (0, ("module", "name", "buffer")),
    "torch.nn.modules.module.register_module_parameter_registration_hook": (0, ("module", "name", "param")),
    "torch.nn.modules.module.register_module_module_registration_hook": (0, ("module", "name", "submodule")),
    "torch.autograd.graph.register_multi_grad_hook": (1, ("grads",)),
    "torch.autograd.graph.saved_tensors_hooks": (0, ("tensor",)),
}
_GLOBAL_SECOND = {"torch.autograd.graph.saved_tensors_hooks": (1, ("packed",))}
_GLOBAL_ALIASES = {
    "torch.optim.optimizer.": ("torch.optim.",),
    "torch.nn.modules.module.": ("torch.nn.modules.",),
    "torch.autograd.graph.": ("torch.autograd.",),
}
# Module and tensor hooks, by kind (the registrations of hooks.py).
_KIND_ARGS: dict[HookKind, tuple[str, ...]] = {
    HookKind.FORWARD: ("module", "args", "output"),
    HookKind.FORWARD_PRE: ("module", "args"),
    HookKind.BACKWARD_LEGACY: ("module", "grad_input", "grad_output"),
    HookKind.FULL_BACKWARD: ("module", "grad_input", "grad_output"),
    HookKind.FULL_BACKWARD_PRE: ("module", "grad_output"),
    HookKind.TENSOR: ("grad",),
    HookKind.POST_ACCUMULATE: ("param",),
}
_KIND_ARGS_WITH_KWARGS: dict[HookKind, tuple[str, ...]] = {
    HookKind.FORWARD: ("module", "args", "kwargs", "output"),
    HookKind.FORWARD_PRE: ("module", "args", "kwargs"),
}
_NODE_ATTRIBUTES = ("grad_fn", "grad_accumulator")
# Decorators that keep the signature the caller must fill.
_TRANSPARENT_DECORATORS = frozenset({
    "staticmethod", "classmethod", "torch.no_grad", "torch.enable_grad", "torch.inference_mode",
    "torch.compiler.disable", "torch._dynamo.disable", "torch.jit.unused", "torch.jit.ignore",
})

SIGNATURE_METHODS = tuple(sorted(set(_MODULE_ARGS) | set(_OPTIMIZER_ARGS) | {"register_prehook",
                                                                           "_register_load_state_dict_pre_hook"}))


@dataclass(frozen=True)
class Mismatch:
    call: ast.Call  # the registration
    hook: CallableValue
    api: str  # the registration API, as the message names it
    passed: tuple[str, ...]  # what torch calls the hook with (one of the accepted lists)
    problem: str  # why the hook cannot take it, in words


def _decorators_keep_signature(model, node: ast.AST) -> bool:
    for dec in getattr(node, "decorator_list", ()):
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = model.qualify(target) or ""
        name = name.removeprefix("builtins.")
        if name not in _TRANSPARENT_DECORATORS:
            return False
    return True


def binding_problem(model, hook: CallableValue, count: int) -> str | None:
    """Why ``hook`` raises ``TypeError`` when called with ``count`` positional
    arguments, or None when it can take them (or when that is not known)."""
    node = hook.node
    if not _decorators_keep_signature(model, node):
        return None
    a = node.args
    positional = [p.arg for p in list(a.posonlyargs) + list(a.args)]
    if hook.bound_keywords & set(positional) or (hook.bound_keywords and a.kwarg is None and not
                                                  hook.bound_keywords <= {k.arg for k in a.kwonlyargs}):
        return None  # a keyword partial binds that a positional argument may also fill: not judged
    if hook.bound > len(positional):
        return None  # partial's arguments spill into *args
    first_default = len(positional) - len(a.defaults)
    required = [p for i, p in enumerate(positional) if hook.bound <= i < first_default]
    accepts = positional[hook.bound:]
    missing_kw = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None and k.arg not in hook.bound_keywords]
    if len(required) > count:
        extra = ", ".join(f"`{p}`" for p in required[count:])
        return (f"requires {len(required)} positional argument{'s' * (len(required) != 1)}, so {extra} "
                f"{'is' if len(required) - count == 1 else 'are'} never filled")
    if a.vararg is None and len(accepts) < count:
        took = (f"takes {len(accepts)} positional argument{'s' * (len(accepts) != 1)}"
                + (f" ({', '.join(f'`{p}`' for p in accepts)})" if accepts else ""))
        return took
    if missing_kw:
        return f"requires the keyword-only argument `{missing_kw[0]}`, which torch never passes"
    return None


def _qualified(model, expr: ast.AST) -> str | None:
    name = model.qualify(expr)
    if name is None:
        return None
    for full, shorts in _GLOBAL_ALIASES.items():
        for short in shorts:
            if name.startswith(short) and not name.startswith(full):
                candidate = full + name[len(short):]
                if candidate in _GLOBAL_ARGS:
                    return candidate
    return name


def _receiver_kind(model, inference, receiver: ast.AST) -> str | None:
    """"module", "optimizer" or None (not known)."""
    value = inference.infer(receiver)
    local = getattr(value, "local_class", None)
    if local is not None and model.is_module_class(local) is not True and not _optimizer_class(model, local):
        return "other"  # a class of the file that is neither: its own method of that name
    if isinstance(value, ModuleValue):
        return "module"
    if isinstance(receiver, ast.Name):
        func = model.enclosing_function(receiver)
        params = [p.arg for p in list(func.args.posonlyargs) + list(func.args.args)] if func is not None \
            and hasattr(func, "args") else []
        info = model.enclosing_class(receiver)
        if info is not None and params[:1] == [receiver.id] and not isinstance(func, ast.Lambda):
            if model.is_module_class(info) is True:
                return "module"
            if _optimizer_class(model, info):
                return "optimizer"
    name = model.qualify(receiver) if isinstance(receiver, ast.Call) else None
    if isinstance(receiver, ast.Call):
        callee = model.qualify(receiver.func) or ""
        if callee.startswith("torch.optim.") and callee.split(".")[-1][:1].isupper():
            return "optimizer"
        if callee.startswith("torch.nn.") and callee.split(".")[-1][:1].isupper():
            return "module"
    del name
    return None


def _optimizer_class(model, info) -> bool:
    return any((model.qualify(b) or "").startswith("torch.optim.") for b in info.node.bases)


def _hook_expr(call: ast.Call, index: int, keyword: str = "hook") -> ast.expr | None:
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


def _judge(model, inference, call, expr, api, choices: Iterable[tuple[str, ...]]) -> Mismatch | None:
    if expr is None:
        return None
    hook = inference.callable_of(expr)
    if not isinstance(hook, CallableValue):
        return None
    problems = []
    choices = list(choices)
    for passed in choices:
        problem = binding_problem(model, hook, len(passed))
        if problem is None:
            return None  # one meaning of the API fits
        problems.append((passed, problem))
    passed, problem = problems[0]
    return Mismatch(call, hook, api, passed, problem)


def signature_mismatches(ctx) -> list[Mismatch]:
    """Every registration of the file whose hook cannot take what torch passes."""
    cached = getattr(ctx.tree, "_hl_signature_mismatches", None)
    if cached is not None:
        return cached
    model, inference = ctx.model, ctx.inference
    out: list[Mismatch] = []
    seen: set[int] = set()
    for reg in ctx.hooks.registrations:
        if id(reg.call) in seen or reg.hook is None or _expected_to_raise(reg.call):
            continue
        if reg.kind.is_module and _not_a_torch_module(model, reg.receiver_value):
            continue  # another framework's module class with a method of the same name
        with_kwargs = next((k.value for k in reg.call.keywords if k.arg == "with_kwargs"), None)
        choices = [_KIND_ARGS[reg.kind]]
        if reg.kind in _KIND_ARGS_WITH_KWARGS and with_kwargs is not None:
            if isinstance(with_kwargs, ast.Constant) and with_kwargs.value is True:
                choices = [_KIND_ARGS_WITH_KWARGS[reg.kind]]
            elif not (isinstance(with_kwargs, ast.Constant) and not with_kwargs.value):
                choices.append(_KIND_ARGS_WITH_KWARGS[reg.kind])  # decided at run time
        if reg.kind is HookKind.TENSOR and not isinstance(reg.receiver_value, TensorValue):
            choices.append(_NODE_ARGS["register_hook"])  # `node.register_hook` of an autograd Node it cannot see
        method = reg.method_name or "the registration"
        found = _judge(model, inference, reg.call, reg.hook_expr, f"`{method}`", choices)
        if found is not None:
            seen.add(id(reg.call))
            out.append(found)
    for call in model.calls_of_method(*SIGNATURE_METHODS, "register_hook", "register_step_pre_hook",
                                      "register_step_post_hook"):
        if id(call) in seen or not isinstance(call.func, ast.Attribute) or _expected_to_raise(call):
            continue
        method, receiver = call.func.attr, call.func.value
        if len(call.args) > 1 + (method == "_register_load_state_dict_pre_hook"):
            continue  # not torch's method: torch's take the hook (and with_module) only
        if isinstance(receiver, ast.Attribute) and receiver.attr in _NODE_ATTRIBUTES:
            if method not in _NODE_ARGS:
                continue
            choices = [_NODE_ARGS[method]]
            api = f"autograd Node `{method}`"
        elif method == "_register_load_state_dict_pre_hook":
            flag = next((k.value for k in call.keywords if k.arg == "with_module"),
                        call.args[1] if len(call.args) > 1 else ast.Constant(False))
            if not isinstance(flag, ast.Constant):
                continue
            choices = [_MODULE_ARGS["register_load_state_dict_pre_hook"] if flag.value else _LOAD_PRE_WITHOUT_MODULE]
            api = "`_register_load_state_dict_pre_hook`" + (" (with_module=True)" if flag.value else "")
        elif method in _MODULE_ARGS or method in _OPTIMIZER_ARGS:
            kind = _receiver_kind(model, inference, receiver)
            if kind == "module" and method in _MODULE_ARGS:
                choices = [_MODULE_ARGS[method]]
            elif kind == "optimizer" and method in _OPTIMIZER_ARGS:
                choices = [_OPTIMIZER_ARGS[method]]
            elif kind is None:
                choices = [table[method] for table in (_MODULE_ARGS, _OPTIMIZER_ARGS) if method in table]
            else:
                continue
            api = f"`{method}`"
        else:
            continue
        if not _torch_file(model):
            continue
        found = _judge(model, inference, call, _hook_expr(call, 0), api, choices)
        if found is not None:
            seen.add(id(call))
            out.append(found)
    for call in _global_calls(ctx):
        name = _qualified(model, call.func)
        for table in (_GLOBAL_ARGS, _GLOBAL_SECOND):
            if name not in table:
                continue
            index, passed = table[name]
            keyword = {0: "pack_hook", 1: "unpack_hook"}[index] if name.endswith("saved_tensors_hooks") else "hook"
            if name.endswith("register_multi_grad_hook"):
                keyword = "fn"
            found = _judge(model, inference, call, _hook_expr(call, index, keyword), f"`{name}`", [passed])
            if found is not None:
                out.append(found)
    ctx.tree._hl_signature_mismatches = out
    return out


def _not_a_torch_module(model, value) -> bool:
    local = getattr(value, "local_class", None)
    return local is not None and model.is_module_class(local) is not True


def _expected_to_raise(call: ast.Call) -> bool:
    """Inside ``with pytest.raises(...)`` / ``self.assertRaises(...)``: a test that the registration fails."""
    node = getattr(call, "_hl_parent", None)
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                                     ast.ClassDef, ast.Module)):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                ctx_call = item.context_expr
                func = ctx_call.func if isinstance(ctx_call, ast.Call) else ctx_call
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if "raises" in name.lower():
                    return True
        node = getattr(node, "_hl_parent", None)
    return False


def _torch_file(model) -> bool:
    """The file imports torch: a method of another framework spelled like torch's is not judged."""
    return "torch" in model.imported_packages


def _global_calls(ctx) -> Iterable[ast.Call]:
    words = ("register_optimizer_step_", "registration_hook", "register_multi_grad_hook", "saved_tensors_hooks")
    if not any(w in ctx.text for w in words):
        return
    from hooklint.static.tree_walk import walk_tree
    for node in walk_tree(ctx.tree):
        if isinstance(node, ast.Call):
            func = node.func
            last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if any(w in last for w in words):
                yield node
        elif isinstance(node, ast.ClassDef):
            continue


_EVENTS = {
    "register_forward_hook": "the module's first forward call",
    "register_forward_pre_hook": "the module's first forward call",
    "register_module_forward_hook": "the first forward call of any module",
    "register_module_forward_pre_hook": "the first forward call of any module",
    "register_backward_hook": "the first backward through the module",
    "register_full_backward_hook": "the first backward through the module",
    "register_full_backward_pre_hook": "the first backward through the module",
    "register_module_backward_hook": "the first backward through any module",
    "register_module_full_backward_hook": "the first backward through any module",
    "register_module_full_backward_pre_hook": "the first backward through any module",
    "register_hook": "the first backward that reaches it",
    "register_prehook": "the first backward that reaches it",
    "register_post_accumulate_grad_hook": "the first gradient accumulated into the parameter",
    "register_state_dict_pre_hook": "the first `state_dict()`",
    "register_state_dict_post_hook": "the first `state_dict()`",
    "_register_state_dict_hook": "the first `state_dict()`",
    "register_load_state_dict_pre_hook": "the first `load_state_dict()`",
    "_register_load_state_dict_pre_hook": "the first `load_state_dict()`",
    "register_load_state_dict_post_hook": "the first `load_state_dict()`",
    "register_step_pre_hook": "the first `optimizer.step()`",
    "register_step_post_hook": "the first `optimizer.step()`",
    "register_optimizer_step_pre_hook": "the first `step()` of any optimizer",
    "register_optimizer_step_post_hook": "the first `step()` of any optimizer",
    "register_module_buffer_registration_hook": "the first buffer registered on any module",
    "register_module_parameter_registration_hook": "the first parameter registered on any module",
    "register_module_module_registration_hook": "the first submodule registered on any module",
    "register_multi_grad_hook": "the first backward that reaches the tensors",
    "saved_tensors_hooks": "the first tensor autograd saves inside the context",
}


def event_of(api: str) -> str:
    """When torch first calls a hook registered through ``api`` (as the message names it)."""
    word = api.strip("`").split(" ")[-1].strip("`()").split(".")[-1]
    for key in sorted(_EVENTS, key=len, reverse=True):
        if key in api:
            return _EVENTS[key]
    return _EVENTS.get(word, "the first event")
