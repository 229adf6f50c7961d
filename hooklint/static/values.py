"""Abstract values: what an expression is, as far as one file can tell.

``infer(expr)`` answers with a :class:`ModuleValue` (an ``nn.Module`` instance),
a :class:`TensorValue`, a :class:`CallableValue` (something that can be a hook),
a :class:`HandleValue` (what ``register_*_hook`` returns), an
:class:`ObjectValue` (an instance of a local class that is not a module), or
``None`` for "unknown".  Unknown is common and fine: rules act only on what is
known, which is how hooklint stays precise.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.identity import IdentityFacts, Narrowing
from hooklint.static.semantic import (
    FOREIGN_FRAMEWORKS,
    Binding,
    ClassInfo,
    FunctionNode,
    SemanticModel,
    is_classmethod,
    is_staticmethod,
    is_torch_module_class,
    positional_params,
    short_source,
)

if TYPE_CHECKING:  # pragma: no cover
    pass


@dataclass(frozen=True, eq=False)
class ModuleValue:
    """An ``nn.Module`` instance.

    ``torch_class`` is the qualified torch class (``torch.nn.Linear``) for
    built-in layers; ``local_class`` the class defined in this file; both None
    for "some module" (a loop over ``net.modules()``, a parameter annotated
    ``nn.Module``).  ``call`` is the constructor call when known.  ``applied_from``
    is the module expression whose ``.apply(fn)`` feeds this value (seed 000).
    ``narrowing`` is the ``isinstance``/``type`` test that proved the class
    (``torch_class`` is then set only when the test names one torch class).
    """

    torch_class: str | None = None
    local_class: ClassInfo | None = None
    call: ast.Call | None = None
    applied_from: ast.expr | None = None
    description: str = ""
    narrowing: Narrowing | None = None

    @property
    def class_name(self) -> str | None:
        if self.local_class is not None:
            return self.local_class.name
        if self.torch_class:
            return self.torch_class.rsplit(".", 1)[-1]
        return None


@dataclass(frozen=True, eq=False)
class TensorValue:
    parameter: bool = False  # an nn.Parameter (weight, bias, model.parameters() items)
    leaf: bool | None = None
    requires_grad: bool | None = None
    owner: ModuleValue | None = None  # the module whose parameter this is


@dataclass(frozen=True, eq=False)
class CallableValue:
    """A function or lambda that will be called with ``bound`` leading
    positional arguments already supplied (``self`` for a bound method, the
    arguments of ``functools.partial``)."""

    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    bound: int = 0
    bound_keywords: frozenset[str] = frozenset()
    owner: ClassInfo | None = None
    via: str = ""  # "factory", "partial", "method", "__call__", "argument" (passed to a helper)

    @property
    def params(self) -> list[str]:
        """The parameters the caller supplies, in order."""
        params = positional_params(self.node)
        params = params[self.bound :]
        return [p for p in params if p not in self.bound_keywords]

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "<lambda>")

    @property
    def has_varargs(self) -> bool:
        return self.node.args.vararg is not None


@dataclass(frozen=True, eq=False)
class HandleValue:
    registration_call: ast.Call


@dataclass(frozen=True, eq=False)
class ObjectValue:
    local_class: ClassInfo


@dataclass(frozen=True, eq=False)
class ClassValue:
    """A class object itself (``nn.Linear``, ``MyNet``), as in ``isinstance`` checks."""

    torch_class: str | None = None
    local_class: ClassInfo | None = None


Value = ModuleValue | TensorValue | CallableValue | HandleValue | ObjectValue | ClassValue | None

# Calls that make a tensor (leaf); requires_grad=... decides whether it needs grad.
_TENSOR_FACTORIES = frozenset(
    f"torch.{n}"
    for n in (
        "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty", "full", "rand", "randn", "randint",
        "arange", "linspace", "logspace", "eye", "zeros_like", "ones_like", "empty_like", "full_like",
        "rand_like", "randn_like", "randint_like", "randperm", "Tensor", "FloatTensor", "LongTensor",
        "normal", "stack", "cat",
    )
)
_TENSOR_METHODS_RETURNING_TENSOR = frozenset(
    {
        "to", "cuda", "cpu", "float", "double", "half", "view", "reshape", "sum", "mean", "pow", "mul", "add",
        "sub", "div", "exp", "log", "t", "mm", "matmul", "clone", "detach", "requires_grad_", "squeeze",
        "unsqueeze", "flatten", "abs", "sqrt", "square", "relu", "sigmoid", "tanh", "max", "min", "norm",
        "expand", "expand_as", "permute", "transpose", "contiguous", "softmax", "log_softmax",
    }
)
_MODULE_ITERATORS = frozenset({"modules", "children"})
_NAMED_MODULE_ITERATORS = frozenset({"named_modules", "named_children"})
# Iterators no other common class has: `x.named_modules()` yields modules whatever `x` is.
_UNMISTAKABLE_MODULE_ITERATORS = frozenset({"named_modules", "modules"})
_PARAM_ITERATORS = frozenset({"parameters"})
_NAMED_PARAM_ITERATORS = frozenset({"named_parameters"})
# Attributes of built-in layers that are parameters.
_BUILTIN_PARAM_ATTRS = frozenset(
    {"weight", "bias", "in_proj_weight", "in_proj_bias", "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
)


class Inference:
    def __init__(self, model: SemanticModel):
        self.model = model
        self._cache: dict[int, Value] = {}
        self._active: set[int] = set()
        self._applied: dict[ast.AST, ast.expr] | None = None
        self.identity = IdentityFacts(model, self)

    # ----------------------------------------------------------------- entry
    def infer(self, expr: ast.AST | None) -> Value:
        if expr is None:
            return None
        key = id(expr)
        if key in self._cache:
            return self._cache[key]
        if key in self._active:  # recursion through self-referential bindings
            return None
        self._active.add(key)
        try:
            value = self._infer(expr)
        except RecursionError:
            value = None
        finally:
            self._active.discard(key)
        self._cache[key] = value
        return value

    def _infer(self, expr: ast.AST) -> Value:
        m = self.model
        if isinstance(expr, ast.Call):
            return self._infer_call(expr)
        if isinstance(expr, ast.Lambda):
            return CallableValue(expr)
        if isinstance(expr, FunctionNode):
            return CallableValue(expr)
        if isinstance(expr, ast.Name):
            return self._infer_name(expr)
        if isinstance(expr, ast.Attribute):
            return self._infer_attribute(expr)
        if isinstance(expr, ast.Subscript):
            base = self.infer(expr.value)
            if isinstance(base, ModuleValue) and self.container_kind(base) is not None:
                return ModuleValue(description=f"{base.description}[...]")
            # `module._modules[name]`: the dict of a module's children
            if isinstance(expr.value, ast.Attribute) and expr.value.attr == "_modules" \
                    and isinstance(self.infer(expr.value.value), ModuleValue):
                return ModuleValue(description=short_source(expr))
            return None
        if isinstance(expr, ast.BinOp):
            left, right = self.infer(expr.left), self.infer(expr.right)
            if isinstance(left, TensorValue) or isinstance(right, TensorValue):
                return TensorValue(leaf=False)
            return None
        if isinstance(expr, ast.NamedExpr):
            return self.infer(expr.value)
        if isinstance(expr, ast.IfExp):
            return self._either_module(expr)
        del m
        return None

    def _either_module(self, expr: ast.IfExp) -> Value:
        """``module.to(device) if device is not None else module``: a module
        whichever branch runs, when both branches are the same kind of module.
        Only modules: a tensor's flags (leaf, requires_grad) may differ by branch."""
        body, orelse = self.infer(expr.body), self.infer(expr.orelse)
        if isinstance(body, ModuleValue) and _same_kind(body, orelse):
            return _merge([body, orelse])
        return None

    # ----------------------------------------------------------------- names
    def _infer_name(self, expr: ast.Name) -> Value:
        bindings = self.model.bindings_at(expr)
        if not bindings:
            return None
        values = [self.value_of_binding(b) for b in bindings]
        first = values[0]
        value = None
        if all(_same_kind(first, v) for v in values[1:]):
            value = first if len(values) == 1 else _merge(values)
        if value is None or (isinstance(value, ModuleValue) and value.torch_class is None
                             and value.local_class is None):
            narrowing = self.identity.narrowing_of(expr, expr.id, bindings)
            if narrowing is not None:
                return narrowed_module(value, narrowing, expr.id)
        return value

    def value_of_binding(self, b: Binding) -> Value:
        if b.kind == "def":
            return CallableValue(b.node)  # type: ignore[arg-type]
        if b.kind == "class":
            return ClassValue(local_class=self.model.classes.get(b.node))  # type: ignore[arg-type]
        if b.kind == "import":
            qual = b.value
            if isinstance(qual, str) and is_torch_module_class(qual):
                return ClassValue(torch_class=qual)
            return None
        if b.kind == "assign":
            if b.path:
                return self._unpacked(b.value, b.path)  # type: ignore[arg-type]
            return self.infer(b.value)  # type: ignore[arg-type]
        if b.kind == "for":
            return self._iterated(b.value, b.path)  # type: ignore[arg-type]
        if b.kind == "param":
            return self._infer_param(b)
        return None

    def _unpacked(self, value: ast.AST, path: tuple[int, ...]) -> Value:
        for index in path:
            if isinstance(value, (ast.Tuple, ast.List)) and 0 <= index < len(value.elts):
                value = value.elts[index]
            else:
                return None
        return self.infer(value)

    def _iterated(self, iterable: ast.AST, path: tuple[int, ...], depth: int = 0) -> Value:
        """The value of a ``for`` target drawn from ``iterable``."""
        if isinstance(iterable, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) and path == ():
            # [m for m in model.modules() if isinstance(m, nn.ReLU)]
            return self.infer(iterable.elt)
        if isinstance(iterable, ast.Name) and depth < 3:
            bindings = self.model.bindings_at(iterable)
            if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                    and isinstance(bindings[0].value, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
                return self._iterated(bindings[0].value, path, depth + 1)  # type: ignore[arg-type]
        if isinstance(iterable, (ast.Name, ast.Attribute)) and path == ():
            # `for m in self` in an nn.Sequential subclass, `for layer in self.layers` (an nn.ModuleList)
            container = self.infer(iterable)
            if isinstance(container, ModuleValue) and self.container_kind(container) == "sequence":
                return ModuleValue(description=f"each module of {short_source(iterable)}")
            return None
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
            method = iterable.func.attr
            base = iterable.func.value
            # `model._modules.items()` / `.values()`: a module's direct children
            if isinstance(base, ast.Attribute) and base.attr == "_modules" and not iterable.args and (
                    (method == "items" and path == (1,)) or (method == "values" and path == ())):
                return ModuleValue(description=f"each child of {short_source(base.value)}")
            receiver = self.infer(base)
            if isinstance(receiver, ModuleValue) and self.container_kind(receiver) == "dict" and not iterable.args \
                    and ((method == "values" and path == ()) or (method == "items" and path == (1,))):
                return ModuleValue(description=f"each module of {short_source(base)}")
            if receiver is None and method in _UNMISTAKABLE_MODULE_ITERATORS and not iterable.args:
                # only torch modules have `named_modules()`: whatever the receiver, these are modules
                if (method.startswith("named_") and path == (1,)) or (not method.startswith("named_") and path == ()):
                    return ModuleValue(description=f"each module of {short_source(base)}")
            if isinstance(receiver, ModuleValue):
                if method in _MODULE_ITERATORS and path == ():
                    return ModuleValue(description=f"each module of {short_source(iterable.func.value)}")
                if method in _NAMED_MODULE_ITERATORS and path == (1,):
                    return ModuleValue(description=f"each module of {short_source(iterable.func.value)}")
                if method in _PARAM_ITERATORS and path == ():
                    return TensorValue(parameter=True, leaf=True, requires_grad=True, owner=receiver)
                if method in _NAMED_PARAM_ITERATORS and path == (1,):
                    return TensorValue(parameter=True, leaf=True, requires_grad=True, owner=receiver)
        if isinstance(iterable, (ast.List, ast.Tuple)) and path == () and iterable.elts:
            values = [self.infer(e) for e in iterable.elts]
            if all(isinstance(v, ModuleValue) for v in values):
                return ModuleValue(description="each of " + short_source(iterable))
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) and iterable.func.id == "enumerate":
            if path and path[0] == 1 and iterable.args:
                return self._iterated(iterable.args[0], path[1:])
        return None

    def uses_module_api_on_self(self, cls: ClassInfo) -> bool:
        """A class whose bases this file cannot see (``class WeightDropout(Module)``
        with ``Module`` from a star import) is an ``nn.Module`` when its methods
        call, on ``self``, a method only torch modules have
        (``self.register_parameter(...)``, ``self.add_module(...)``) and the file
        does not import another framework's layers."""
        if self.model.imported_packages & FOREIGN_FRAMEWORKS:
            return False
        for name in _SELF_MODULE_ONLY_METHODS:
            for call in self.model.method_calls.get(name, ()):
                receiver = call.func.value  # type: ignore[attr-defined]
                if isinstance(receiver, ast.Name) and self.model.enclosing_class(call) is cls:
                    bindings = self.model.bindings_at(receiver)
                    if len(bindings) == 1 and bindings[0].kind == "param" \
                            and self.model.enclosing_class(bindings[0].scope.node) is cls \
                            and positional_params(bindings[0].scope.node)[:1] == [receiver.id]:
                        return True
        return False

    def container_kind(self, value: ModuleValue) -> str | None:
        """"sequence" for an ``nn.Sequential`` or ``nn.ModuleList`` (iterating
        it gives its modules), "dict" for an ``nn.ModuleDict`` (iterating it
        gives names; its ``values()`` are modules), a subclass of this file
        included; None for any other module."""
        kinds = {"Sequential": "sequence", "ModuleList": "sequence", "ModuleDict": "dict"}
        if value.torch_class is not None:
            return kinds.get(value.torch_class.rsplit(".", 1)[-1])
        stack, seen = ([value.local_class] if value.local_class is not None else []), set()
        while stack:
            info = stack.pop()
            if id(info) in seen or len(seen) > 16:
                continue
            seen.add(id(info))
            for qual in info.bases:
                if is_torch_module_class(qual) and qual.rsplit(".", 1)[-1] in kinds:
                    return kinds[qual.rsplit(".", 1)[-1]]
            stack.extend(info.local_bases)
        return None

    def _infer_param(self, b: Binding) -> Value:
        arg: ast.arg = b.value  # type: ignore[assignment]
        func = b.scope.node
        if arg.annotation is not None:
            qual = self.model.qualify(arg.annotation)
            if is_torch_module_class(qual):
                return ModuleValue(torch_class=qual if qual != "torch.nn.Module" else None,
                                   description=f"parameter {arg.arg}")
            local = self.model.class_for_expr(arg.annotation)
            if local is not None and self.model.is_module_class(local):
                return ModuleValue(local_class=local, description=f"parameter {arg.arg}")
            if local is not None:  # an instance of a local class, as `_infer_call` gives for `Cls()`
                return ObjectValue(local)
            if qual in ("torch.Tensor", "torch.nn.Parameter"):
                return TensorValue(parameter=qual == "torch.nn.Parameter")
        params = positional_params(func) if isinstance(func, FunctionNode + (ast.Lambda,)) else []
        # `self` of a method of a module class
        if params and params[0] == arg.arg and b.scope.parent is not None and b.scope.parent.kind == "class" \
                and isinstance(func, FunctionNode) and not is_staticmethod(func) and not is_classmethod(func):
            info = self.model.classes.get(b.scope.parent.node)  # type: ignore[arg-type]
            if info is not None:
                is_module = self.model.is_module_class(info)
                if is_module or (is_module is None and self.uses_module_api_on_self(info)):
                    return ModuleValue(local_class=info, description="self")
                return ObjectValue(info)
            return None
        # the argument of a function passed to `module.apply(fn)`
        if params and params[0] == arg.arg:
            applied = self.applied_functions().get(func)
            if applied is not None:
                return ModuleValue(applied_from=applied, description=f"each module of {short_source(applied)}")
        return None

    def applied_functions(self) -> dict[ast.AST, ast.expr]:
        """Functions passed to ``<module>.apply(fn)``, mapped to the module expression."""
        if self._applied is None:
            self._applied = {}
            for call in self.model.calls_of_method("apply"):
                if len(call.args) != 1 or call.keywords:
                    continue
                receiver = call.func.value  # type: ignore[attr-defined]
                # `apply` is also a method of autograd.Function; that one is not a module
                if isinstance(self.infer(receiver), ClassValue):
                    continue
                target = self.infer(call.args[0])
                if isinstance(target, CallableValue) and target.bound == 0:
                    recv_value = self.infer(receiver)
                    if isinstance(recv_value, ModuleValue) or recv_value is None:
                        self._applied[target.node] = receiver
        return self._applied

    # ------------------------------------------------------------ attributes
    def _infer_attribute(self, expr: ast.Attribute) -> Value:
        qual = self.model.qualify(expr)
        if qual is not None and is_torch_module_class(qual):
            return ClassValue(torch_class=qual)
        return self.attribute_of(self.infer(expr.value), expr)

    def attribute_of(self, base: Value, expr: ast.Attribute) -> Value:
        """The value of ``expr`` (``<base>.attr``) when its base is ``base``."""
        if isinstance(base, ModuleValue):
            if base.local_class is not None:
                method = base.local_class.method(expr.attr)
                if method is not None:
                    if is_staticmethod(method):
                        return CallableValue(method, owner=base.local_class, via="method")
                    return CallableValue(method, bound=1, owner=base.local_class, via="method")
                assigned = base.local_class.attribute(expr.attr)
                if assigned:
                    values = [self.infer(v) for v, _scope, _node in assigned]
                    if values and all(_same_kind(values[0], v) for v in values[1:]):
                        value = values[0]
                        if isinstance(value, ModuleValue):
                            return ModuleValue(value.torch_class, value.local_class, value.call, None,
                                               short_source(expr))
                        if isinstance(value, TensorValue) and value.parameter:
                            return TensorValue(parameter=True, leaf=True, requires_grad=value.requires_grad,
                                               owner=base)
                        if value is None and self._wrapped_module_argument(base.local_class, expr.attr, assigned):
                            return ModuleValue(description=short_source(expr))
                        return value
                    return None
            if expr.attr in _BUILTIN_PARAM_ATTRS and (base.local_class is None):
                return TensorValue(parameter=True, leaf=True, owner=base)
            return None
        if isinstance(base, ObjectValue):
            method = base.local_class.method(expr.attr)
            if method is not None:
                return CallableValue(method, bound=0 if is_staticmethod(method) else 1,
                                     owner=base.local_class, via="method")
            assigned = base.local_class.attribute(expr.attr)
            if len(assigned) == 1:
                value = self.infer(assigned[0][0])
                if value is None and self._wrapped_module_argument(base.local_class, expr.attr, assigned,
                                                                   module_class=False):
                    return ModuleValue(description=short_source(expr))
                return value
            return None
        if isinstance(base, TensorValue) and expr.attr in ("data", "T", "mT"):
            return TensorValue(leaf=base.leaf, requires_grad=False if expr.attr == "data" else base.requires_grad)
        return None

    def _wrapped_module_argument(self, cls: ClassInfo, attr: str,
                                 assigned: list[tuple[ast.expr, object, ast.AST]], module_class: bool = True) -> bool:
        """``self.<attr> = module`` (or ``module.to(device)``) in ``__init__`` from an
        unannotated argument, then called as ``self.<attr>(x)`` or
        ``self.<attr>.forward(x)``: a wrapper around a module (DataParallel-,
        hook-, pruning- and framework-adapter style).  In a class that is not
        known to be a module, the attribute must also be used as only modules
        are (``self.<attr>.parameters()``, ``.named_modules()``...)."""
        init = cls.method("__init__")
        if init is None or len(assigned) != 1:
            return False
        value = assigned[0][0]
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and value.func.attr in _MODULE_RETURNING_SELF:
            value = value.func.value  # `module.to(device)` returns the module
        if not isinstance(value, ast.Name) or value.id not in positional_params(init)[1:] \
                or self.model.enclosing_function(value) is not init:
            return False
        bindings = self.model.bindings_at(value)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return False
        if bindings[0].value.annotation is not None:  # type: ignore[union-attr]
            return False  # annotated: the annotation says what it is
        mine = [call for name in (attr, "forward") for call in self.model.method_calls.get(name, ())
                if self.model.enclosing_class(call) is cls]
        if not any(_calls_self_attribute(call, attr) for call in mine):
            return False
        if module_class:
            return True
        return any(_calls_self_attribute_method(call, attr) for name in _MODULE_ONLY_METHODS
                   for call in self.model.method_calls.get(name, ()) if self.model.enclosing_class(call) is cls)

    # ----------------------------------------------------------------- calls
    def _infer_call(self, call: ast.Call) -> Value:
        func = call.func
        qual = self.model.qualify(func)
        # functools.partial(fn, *args, **kw)
        if qual in ("functools.partial",) and call.args:
            inner = self.infer(call.args[0])
            if isinstance(inner, CallableValue):
                return CallableValue(
                    inner.node,
                    bound=inner.bound + len(call.args) - 1,
                    bound_keywords=inner.bound_keywords | {k.arg for k in call.keywords if k.arg},
                    owner=inner.owner,
                    via="partial",
                )
            return None
        if qual == "builtins.getattr" and len(call.args) == 2 and not call.keywords:
            return self._getattr_value(call)
        if qual in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            return TensorValue(parameter=True, leaf=True, requires_grad=_kw_bool(call, "requires_grad", True))
        if qual in _TENSOR_FACTORIES:
            return TensorValue(leaf=True, requires_grad=_kw_bool(call, "requires_grad", False))
        if qual is not None and is_torch_module_class(qual):
            return ModuleValue(torch_class=qual, call=call, description=short_source(call))
        local = self.model.class_for_expr(func)
        if local is not None:
            is_mod = self.model.is_module_class(local)
            if is_mod:
                return ModuleValue(local_class=local, call=call, description=short_source(call))
            # a plain local class (callable if it defines __call__), or one whose
            # bases come from elsewhere and may or may not be a module
            return ObjectValue(local)
        if isinstance(func, ast.Attribute):
            receiver = self.infer(func.value)
            if isinstance(receiver, TensorValue) and func.attr in _TENSOR_METHODS_RETURNING_TENSOR:
                if func.attr == "requires_grad_":
                    return TensorValue(leaf=receiver.leaf, requires_grad=_arg_bool(call, 0, True))
                if func.attr == "detach":
                    return TensorValue(leaf=True, requires_grad=False)
                if func.attr in ("to", "cuda", "cpu", "float", "double", "half") and receiver.leaf:
                    # a device/dtype move of a leaf is a new non-leaf when it copies
                    return TensorValue(leaf=None, requires_grad=receiver.requires_grad)
                return TensorValue(leaf=False, requires_grad=receiver.requires_grad)
            if isinstance(receiver, ModuleValue) and func.attr in ("to", "cuda", "cpu", "train", "eval",
                                                                  "float", "double", "half", "requires_grad_"):
                return receiver  # these return self
            if isinstance(receiver, ModuleValue) and func.attr in ("get_submodule",):
                return ModuleValue(description=short_source(call))
            if isinstance(receiver, ModuleValue) and func.attr in ("register_parameter",):
                return None
        if qual is not None and qual.startswith("torch.") and qual.split(".")[1] in (
            "pow", "sum", "mean", "mul", "add", "relu", "sigmoid", "tanh", "exp", "log", "matmul", "mm",
            "square", "abs", "softmax", "max", "min", "sin", "cos", "div", "sub", "clamp"
        ):
            return TensorValue(leaf=False)
        # A call to a local factory that returns a nested function (seed 003's freeze_single)
        target = self.infer(func)
        if isinstance(target, CallableValue) and isinstance(target.node, FunctionNode):
            returned = self._returned_callable(target.node)
            if returned is not None:
                # keywords a returned `partial(fn, key=...)` binds still count: the caller passes the rest
                return CallableValue(returned.node, bound_keywords=returned.bound_keywords, via="factory")
        if isinstance(target, ObjectValue):
            return None
        return None

    def _getattr_value(self, call: ast.Call) -> Value:
        """``getattr(obj, "fc")`` is ``obj.fc``; ``getattr(self, f"layer{i}")`` a
        module when every attribute of the class that name can spell
        (``layer1`` ... ``layer4``) is one."""
        base = self.infer(call.args[0])
        name = call.args[1]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            return self.attribute_of(base, ast.Attribute(value=call.args[0], attr=name.value, ctx=ast.Load()))
        prefix = None
        if isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant):
            prefix = name.values[0].value
        elif isinstance(name, ast.BinOp) and isinstance(name.op, ast.Mod) and isinstance(name.left, ast.Constant) \
                and isinstance(name.left.value, str):
            prefix = name.left.value.split("%", 1)[0]
        if not isinstance(prefix, str) or not prefix or not isinstance(base, ModuleValue) \
                or base.local_class is None:
            return None
        names: set[str] = set()
        stack, seen = [base.local_class], 0
        while stack and seen < 16:
            info = stack.pop()
            seen += 1
            names.update(n for n in info.attributes if n.startswith(prefix))
            stack.extend(info.local_bases)
        values = [self.attribute_of(base, ast.Attribute(value=call.args[0], attr=n, ctx=ast.Load()))
                  for n in sorted(names)]
        if values and all(isinstance(v, ModuleValue) for v in values):
            return ModuleValue(description=short_source(call))
        return None

    def _returned_callable(self, func: ast.FunctionDef | ast.AsyncFunctionDef):
        """The function a factory returns, when every return returns the same one."""
        found = None
        for ret in _returns_of(func):
            if ret.value is None:
                return None
            value = self.infer(ret.value)
            if not isinstance(value, CallableValue) or value.bound:
                return None
            if found is not None and (found.node is not value.node or found.bound_keywords != value.bound_keywords):
                return None
            found = value
        return found

    def built_by_local_factory(self, expr: ast.AST) -> bool:
        """``model`` in ``model = build_model().eval()``, where every return of
        the file's own ``build_model`` is a module of a known class
        (``return nn.Sequential(...)``, ``return Net()``): the module is built
        in this file, though ``infer`` does not follow the factory."""
        if not isinstance(expr, ast.Name):
            return False
        bindings = self.model.bindings_at(expr)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
            return False
        value = bindings[0].value
        while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and value.func.attr in _MODULE_RETURNING_SELF:
            value = value.func.value
        if not isinstance(value, ast.Call):
            return False
        factory = self.infer(value.func)
        if not isinstance(factory, CallableValue) or not isinstance(factory.node, FunctionNode) or factory.bound:
            return False
        returns = list(_returns_of(factory.node))
        if not returns:
            return False
        for ret in returns:
            module = self.infer(ret.value) if ret.value is not None else None
            if not isinstance(module, ModuleValue) or (module.local_class is None and module.torch_class is None):
                return False
        return True

    def callable_of(self, expr: ast.AST) -> CallableValue | None:
        """Resolve a hook argument to the code that will run, if it can be seen."""
        value = self.infer(expr)
        if isinstance(value, CallableValue):
            return value
        if isinstance(value, ObjectValue):
            call = value.local_class.method("__call__")
            if call is not None:
                return CallableValue(call, bound=1, owner=value.local_class, via="__call__")
        return None


# Methods torch modules have and the layers of other frameworks do not (Paddle's
# Layer has register_buffer and parameters(), MXNet's Block register_child).
_SELF_MODULE_ONLY_METHODS = ("register_parameter", "add_module", "register_module", "named_modules",
                             "get_submodule", "get_parameter")
# Methods only torch modules have (together: a stored argument used with them is one).
_MODULE_ONLY_METHODS = ("parameters", "named_parameters", "named_modules", "named_children", "state_dict",
                        "load_state_dict", "register_forward_hook", "register_forward_pre_hook",
                        "register_full_backward_hook", "named_buffers")
_MODULE_RETURNING_SELF = ("to", "cuda", "cpu", "train", "eval", "float", "double", "half", "requires_grad_")


def _calls_self_attribute_method(call: ast.Call, attr: str) -> bool:
    """``self.<attr>.<method>(...)``."""
    func = call.func
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) \
        and func.value.attr == attr and isinstance(func.value.value, ast.Name) and func.value.value.id == "self"


def _calls_self_attribute(call: ast.Call, attr: str) -> bool:
    """``self.<attr>(...)`` or ``self.<attr>.forward(...)``."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "forward":
        func = func.value
        if not isinstance(func, ast.Attribute):
            return False
    elif not isinstance(func, ast.Attribute):
        return False
    return func.attr == attr and isinstance(func.value, ast.Name) and func.value.id == "self"


def narrowed_module(value: ModuleValue | None, narrowing: Narrowing, name: str) -> ModuleValue:
    """``value`` (some module, or unknown) once a test proved its class."""
    torch_class = narrowing.classes[0] if len(narrowing.classes) == 1 and not narrowing.local \
        and not narrowing.by_name else None
    local = narrowing.local[0] if len(narrowing.local) == 1 and not narrowing.classes else None
    description = value.description if value is not None and value.description else name
    return ModuleValue(torch_class=torch_class, local_class=local,
                       applied_from=value.applied_from if value is not None else None,
                       description=description, narrowing=narrowing)


def _returns_of(func: ast.AST):
    """Return statements of a function, not of functions nested in it."""
    stack = list(func.body)  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            yield node
        if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _kw_bool(call: ast.Call, name: str, default: bool | None) -> bool | None:
    for kw in call.keywords:
        if kw.arg == name:
            if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
                return kw.value.value
            return None
    return default


def _arg_bool(call: ast.Call, index: int, default: bool | None) -> bool | None:
    if len(call.args) > index:
        node = call.args[index]
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return node.value
        return None
    return _kw_bool(call, "requires_grad", default)


def _same_kind(a: Value, b: Value) -> bool:
    if a is None or b is None:
        return False
    if type(a) is not type(b):
        return False
    if isinstance(a, CallableValue):
        return a.node is b.node and a.bound == b.bound  # type: ignore[union-attr]
    if isinstance(a, ModuleValue):
        return a.local_class is b.local_class and a.torch_class == b.torch_class  # type: ignore[union-attr]
    return True


def _merge(values: list[Value]) -> Value:
    first = values[0]
    if isinstance(first, ModuleValue):
        return ModuleValue(first.torch_class, first.local_class, None, None, first.description, first.narrowing)
    return first


src = short_source  # the name rules import


def module_by_use(model: SemanticModel, name: ast.AST) -> bool:
    """A parameter the same function also uses as only torch modules are used
    (``model.named_modules()``, ``model.register_forward_hook(...)``):
    ``def profile(model, x): for m in model.modules(): ...``."""
    if not isinstance(name, ast.Name) or not hasattr(name, "_hl_scope"):
        return False
    bindings = model.bindings_at(name)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return False
    if model.imported_packages & FOREIGN_FRAMEWORKS:
        return False
    for method in _USED_ONLY_ON_MODULES:
        for call in model.method_calls.get(method, ()):
            receiver = call.func.value  # type: ignore[attr-defined]
            if isinstance(receiver, ast.Name) and receiver.id == name.id and receiver is not name:
                found = model.bindings_at(receiver)
                if len(found) == 1 and found[0] is bindings[0]:
                    return True
    return False


# What a function does with its parameter only when that is a torch module (an
# optimizer also has state_dict(); a Gluon block register_forward_hook, ruled out above)
_USED_ONLY_ON_MODULES = ("parameters", "named_parameters", "named_modules", "named_children", "named_buffers",
                         "modules", "children", "register_forward_hook", "register_forward_pre_hook",
                         "register_full_backward_hook", "register_full_backward_pre_hook")
