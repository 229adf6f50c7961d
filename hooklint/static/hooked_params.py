"""Which parameters of a file's functions and classes end up hooked.

Library code registers hooks on modules its caller hands it: an optimizer on
each layer of ``self.model``, an explainer on ``target_layer``, a calibration
helper on ``self.layer``, a pruner on every ``nn.Conv2d`` of the model it is
given.  The module is known only at the call site, often in another file
(``KFACOptimizer(net)`` in ``main.py``).  This module summarizes one file,
without importing anything, as

* :class:`ParamHook`: "calling ``KFACOptimizer(model, ...)`` registers a
  legacy backward hook on each submodule of ``model`` whose class is
  ``Linear`` or ``Conv2d`` (kfac.py:82)";
* :class:`ParamPass`: "``save_grad_data(model, layer, ...)`` hands ``layer``
  on to ``GetLayerGrad(model, layer, ...)``", so that summaries compose
  across files (:func:`hooklint.graph.crossfile` follows them).

It is the small interface the graph layer's cross-file linking is written
against (parameter -> registration kind, path and filter); a fuller function
summary of the static core can replace :func:`summarize_hooked_params`
without changing its callers.

Paths from the parameter to the hooked module are :class:`Step` tuples:
``attr`` (``model.layer4``), ``index`` (``[-1]``, negative indices kept),
``each`` (every submodule, the module itself included: ``modules()``,
``named_modules()``, ``apply``), ``children`` (``children()``,
``named_children()``, ``_modules``) and ``part`` (some submodule the syntax
does not say).  ``exact`` is False when a step is ``part`` or a condition
on the way mentions the module in a way that is not understood: then the
modules the path reaches are those that *may* be hooked, a superset.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterable

from hooklint.static.identity import holding_tests
from hooklint.static.passthrough import is_self, stored_init_parameter
from hooklint.static.semantic import FunctionNode, SemanticModel, is_staticmethod, positional_params
from hooklint.static.tree_walk import walk_tree
from hooklint.static.values import Inference

_EACH = {"modules": (), "named_modules": (1,)}
_SAME_MODULE = frozenset({"cuda", "cpu", "eval", "train", "float", "double", "half", "bfloat16"})
_CHILDREN = {"children": (), "named_children": (1,)}
_MAX_DEPTH = 8


@dataclass(frozen=True)
class Step:
    kind: str  # "attr", "index", "key", "each", "children", "part"; "pick": the i-th of the modules so far
    value: str | int | None = None

    def text(self) -> str:
        if self.kind == "attr":
            return f".{self.value}"
        if self.kind in ("index", "key"):
            return f"[{self.value!r}]"
        if self.kind == "pick":
            return f" (the one at {self.value})"
        return {"each": " (each submodule)", "children": " (each child)", "part": " (some submodule)"}[self.kind]


@dataclass(frozen=True)
class Callee:
    """A callable of the file, as call sites name it."""

    qualname: str  # "KFACOptimizer" (a class: its constructor), "attach", "main.<locals>.recon"
    is_class: bool
    line: int


@dataclass(frozen=True)
class ParamRef:
    """A parameter of a callable, and how a call site passes it."""

    callee: Callee
    param: str
    position: int | None  # index among a call's positional arguments (self excluded); None: keyword only
    default_none: bool = False  # the parameter defaults to None (a call that leaves it out passes nothing)


@dataclass(frozen=True)
class ParamHook:
    """A module hook registered on (part of) a parameter."""

    ref: ParamRef
    steps: tuple[Step, ...]
    classes: tuple[str, ...] | None  # class names the module is narrowed to (isinstance, class-name tests)
    exact: bool  # every module the steps reach (and the filter keeps) is hooked
    kind: str  # HookKind value
    line: int  # the registering call
    col: int
    hook: str  # the hook's name, for messages
    method: str  # the API called ("register_backward_hook")


@dataclass(frozen=True)
class ParamPass:
    """A parameter handed on (a part of it) to another callable."""

    ref: ParamRef
    steps: tuple[Step, ...]
    classes: tuple[str, ...] | None
    exact: bool
    target: str  # the callee as qualified in the file ("quant.data_utils.GetLayerGrad"); a bare name after a star import
    target_node: ast.AST | None  # the local def/class, when it is in this file
    position: int | None  # where the call passes it
    keyword: str | None
    line: int
    text: str  # the call, shortened
    star_modules: tuple[str, ...] = ()  # `from quant import *`: where a bare `target` may come from


@dataclass
class HookedParams:
    hooks: list[ParamHook] = field(default_factory=list)
    passes: list[ParamPass] = field(default_factory=list)
    # local callables by their def/class node, for call sites in the same file
    callees: dict[int, Callee] = field(default_factory=dict)


@dataclass
class _Traced:
    root: ast.AST  # the parameter's Name, or the `self.attr` stored from one
    steps: list[Step]
    names: set[str]  # loop variables and aliases on the way (conditions on them filter the modules)
    exact: bool = True


class _Tracer:
    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference

    def trace(self, expr: ast.AST, depth: int = 0) -> _Traced | None:
        """``expr`` as a path from a parameter (or an attribute stored from one)."""
        if depth > _MAX_DEPTH:
            return None
        listed = _listed_submodule(expr)
        if listed is not None:  # `list(model.features._modules.items())[0][1]`, `list(model.children())[-1]`
            base, step, index = listed
            inner = self.trace(base, depth + 1)
            if inner is None:
                return None
            inner.steps += [step, Step("pick", index)]
            return inner
        if isinstance(expr, ast.Subscript):
            inner = self.trace(expr.value, depth + 1)
            if inner is None:
                return None
            key = expr.slice
            if isinstance(key, ast.UnaryOp) and isinstance(key.op, ast.USub) and isinstance(key.operand, ast.Constant) \
                    and isinstance(key.operand.value, int):
                inner.steps.append(Step("index", -key.operand.value))
            elif isinstance(key, ast.Constant) and isinstance(key.value, int) and not isinstance(key.value, bool):
                inner.steps.append(Step("index", key.value))
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                inner.steps.append(Step("key", key.value))
            else:
                inner.steps.append(Step("part"))
                inner.exact = False
            return inner
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get_submodule" \
                and expr.args:
            inner = self.trace(expr.func.value, depth + 1)
            if inner is None:
                return None
            target = expr.args[0]
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                inner.steps += [Step("index", int(p)) if p.lstrip("-").isdigit() else Step("attr", p)
                                for p in target.value.split(".") if p]
            else:
                inner.steps.append(Step("part"))
                inner.exact = False
            return inner
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" \
                and len(expr.args) >= 2:
            inner = self.trace(expr.args[0], depth + 1)
            if inner is None:
                return None
            name = expr.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                inner.steps.append(Step("attr", name.value))
            else:
                inner.steps.append(Step("part"))
                inner.exact = False
            return inner
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SAME_MODULE \
                and not expr.args:
            return self.trace(expr.func.value, depth + 1)  # `model.cuda()`, `model.eval()`: the same module
        if isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and self._is_self(expr.value):
                return _Traced(expr, [], set()) if self._stored_param(expr) is not None else None
            inner = self.trace(expr.value, depth + 1)
            if inner is None:
                return None
            inner.steps.append(Step("attr", expr.attr))
            return inner
        if not isinstance(expr, ast.Name) or not hasattr(expr, "_hl_scope"):
            return None
        bindings = self.model.bindings_at(expr)
        if len(bindings) != 1:
            return None
        b = bindings[0]
        if b.kind == "param":
            func = b.scope.node
            if not isinstance(func, FunctionNode) or self._is_self(expr):
                return None
            applied = self.inference.applied_functions().get(func)
            if applied is not None:  # `model.apply(fn)`: fn's argument is every submodule of model
                inner = self.trace(applied, depth + 1)
                if inner is None:
                    return None
                inner.steps.append(Step("each"))
                inner.names.add(expr.id)
                return inner
            return _Traced(expr, [], set())
        if b.kind == "for" and isinstance(b.value, ast.AST):
            iterable = b.value
            if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
                method = iterable.func.attr
                base = iterable.func.value
                step = None
                if _EACH.get(method) == b.path:
                    step = Step("each")
                elif _CHILDREN.get(method) == b.path:
                    step = Step("children")
                elif isinstance(base, ast.Attribute) and base.attr == "_modules" and (
                        (method == "items" and b.path == (1,)) or (method == "values" and b.path == ())):
                    step, base = Step("children"), base.value
                if step is not None:
                    inner = self.trace(base, depth + 1)
                    if inner is None:
                        return None
                    inner.steps.append(step)
                    # `for name, module in ...`: a test on `name` selects modules too
                    inner.names |= {n.id for n in ast.walk(getattr(b.node, "target", expr)) if isinstance(n, ast.Name)}
                    inner.names.add(expr.id)
                    return inner
            return None
        if b.kind == "assign" and not b.path and isinstance(b.value, ast.expr):
            inner = self.trace(b.value, depth + 1)
            if inner is not None:
                inner.names.add(expr.id)
            return inner
        return None

    def _is_self(self, name: ast.Name) -> bool:
        return is_self(self.model, name)

    def _stored_param(self, expr: ast.Attribute) -> tuple[ast.AST, str] | None:
        return stored_init_parameter(self.model, expr)

    def _through_super(self, cls, base_init: ast.AST, param: str) -> tuple[ast.AST, str] | None:
        """``class GradCAM(_BaseWrapper)``: its own ``__init__(self, model)`` calling
        ``super().__init__(model)`` hands ``model`` to the base's parameter; without
        an ``__init__`` of its own, the base's is its constructor."""
        init = cls.methods.get("__init__")
        if init is None:
            return base_init, param
        base_params = positional_params(base_init)[1:]
        for node in ast.walk(init):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "__init__"):
                continue
            owner = node.func.value
            args = list(node.args)
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                pass
            elif isinstance(owner, ast.Name) and args and isinstance(args[0], ast.Name) and args[0].id == "self":
                args = args[1:]  # `Base.__init__(self, model)`
            else:
                continue
            passed = next((k.value for k in node.keywords if k.arg == param), None)
            if passed is None and param in base_params and base_params.index(param) < len(args):
                passed = args[base_params.index(param)]
            own_params = set(positional_params(init)[1:]) | {a.arg for a in init.args.kwonlyargs}
            if isinstance(passed, ast.Name) and passed.id in own_params:
                return init, passed.id
            return None
        return None

    # ------------------------------------------------------------ roots

    def param_ref(self, traced: _Traced) -> ParamRef | None:
        root = traced.root
        if isinstance(root, ast.Attribute):
            stored = self._stored_param(root)
            if stored is None:
                return None
            func, param = stored
            own = self.model.enclosing_class(root)
            if own is not None and getattr(func, "_hl_parent", None) is not own.node:
                # stored by a base class's __init__: the class whose method registers is the one built
                mapped = self._through_super(own, func, param)
                if mapped is None:
                    return None
                func, param = mapped
        else:
            assert isinstance(root, ast.Name)
            func = self.model.bindings_at(root)[0].scope.node
            param = root.id
        callee = self.callee_of(func)
        if callee is None:
            return None
        positional = positional_params(func)
        offset = 1 if callee.is_class or _is_method(func) else 0
        position = positional.index(param) - offset if param in positional else None
        if position is not None and position < 0:
            return None
        return ParamRef(callee, param, position, _defaults_to_none(func, param))

    def callee_of(self, func: ast.AST) -> Callee | None:
        """How call sites name ``func``: a class for its ``__init__``, a module-level
        function, a function nested in one (``main.<locals>.recon``)."""
        if not isinstance(func, FunctionNode):
            return None
        owner = getattr(func, "_hl_parent", None)
        if isinstance(owner, ast.ClassDef):
            if func.name != "__init__" or not isinstance(getattr(owner, "_hl_parent", None), ast.Module):
                return None  # other methods are called on instances: not followed yet
            return Callee(owner.name, True, owner.lineno)
        names = [func.name]
        while not isinstance(owner, ast.Module):
            if isinstance(owner, FunctionNode):
                names.insert(0, f"{owner.name}.<locals>")
            elif not isinstance(owner, (ast.If, ast.Try, ast.With, ast.For, ast.While)) \
                    and type(owner).__name__ != "TryStar":
                return None  # (a def under `if __name__ == "__main__":` is a module-level function)
            owner = getattr(owner, "_hl_parent", None)
            if owner is None:
                return None
        return Callee(".".join(names), False, func.lineno)


def _int_of(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, int):
        return -node.operand.value
    return None


def _listed_submodule(expr: ast.AST) -> tuple[ast.AST, Step, int] | None:
    """``list(m._modules.items())[i][1]``, ``list(m._modules.values())[i]``,
    ``list(m.children())[i]``, ``list(m.modules())[i]``: (m, the iteration, i)."""
    pair = False
    if isinstance(expr, ast.Subscript) and _int_of(expr.slice) == 1 and isinstance(expr.value, ast.Subscript):
        inner_call = expr.value.value
        if isinstance(inner_call, ast.Call) and isinstance(inner_call.func, ast.Name) \
                and inner_call.func.id == "list" and len(inner_call.args) == 1:
            pair, expr = True, expr.value
    if not (isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Call)):
        return None
    index = _int_of(expr.slice)
    call = expr.value
    if index is None or not (isinstance(call.func, ast.Name) and call.func.id == "list" and len(call.args) == 1):
        return None
    source = call.args[0]
    if not (isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) and not source.args):
        return None
    method, base = source.func.attr, source.func.value
    if isinstance(base, ast.Attribute) and base.attr == "_modules" and (
            (method == "items" and pair) or (method == "values" and not pair)):
        return base.value, Step("children"), index
    if method == "children" and not pair or method == "named_children" and pair:
        return base, Step("children"), index
    if method == "modules" and not pair or method == "named_modules" and pair:
        return base, Step("each"), index
    return None


def _is_method(func: ast.AST) -> bool:
    return isinstance(getattr(func, "_hl_parent", None), ast.ClassDef) and not is_staticmethod(func)


def _defaults_to_none(func: ast.AST, param: str) -> bool:
    args = func.args  # type: ignore[attr-defined]
    positional = args.posonlyargs + args.args
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    value = defaults.get(param)
    return isinstance(value, ast.Constant) and value.value is None


class _Filters:
    """What the conditions around a registration say about the hooked module."""

    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference
        self._identity = inference.identity

    def of(self, node: ast.AST, names: set[str]) -> tuple[tuple[str, ...] | None, bool]:
        """(class names the module is narrowed to, every condition about it understood)."""
        if not names:
            return None, True
        classes: tuple[str, ...] | None = None
        understood = True
        for test in holding_tests(node):
            if not self._mentions(test, names):
                continue
            found = self._narrowing(node, test, names)
            if found is None:
                understood = False
                continue
            classes = found if classes is None else tuple(c for c in classes if c in found)
        return classes, understood

    def _mentions(self, test: ast.AST, names: set[str]) -> bool:
        """The test reads one of ``names``, or a name assigned once from one of them."""
        for n in ast.walk(test):
            if not isinstance(n, ast.Name):
                continue
            if n.id in names:
                return True
            bindings = self.model.bindings_at(n) if hasattr(n, "_hl_scope") else []
            if len(bindings) == 1 and bindings[0].kind == "assign" and isinstance(bindings[0].value, ast.AST) \
                    and any(isinstance(m, ast.Name) and m.id in names for m in ast.walk(bindings[0].value)):
                return True
        return False

    def _narrowing(self, node: ast.AST, test: ast.expr, names: set[str]) -> tuple[str, ...] | None:
        for name in names:
            narrowing = self._identity._from_test(test, name, None, positive=True)
            if narrowing is not None:
                return narrowing.names
        return self._class_name_test(test, names) or self._isinstance_by_name(test, names)

    @staticmethod
    def _isinstance_by_name(test: ast.expr, names: set[str]) -> tuple[str, ...] | None:
        """``isinstance(module, (QuantModule, nn.Conv2d))`` whose classes the file
        cannot resolve (a star import): by their names, which the graph facts
        compare with each module's classes."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
            parts = [_Filters._isinstance_by_name(v, names) for v in test.values]
            return tuple(c for p in parts for c in p) if parts and all(parts) else None  # type: ignore[union-attr]
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
                and len(test.args) == 2 and isinstance(test.args[0], ast.Name) and test.args[0].id in names):
            return None
        spec = test.args[1]
        items = spec.elts if isinstance(spec, (ast.Tuple, ast.List)) else [spec]
        out = []
        for item in items:
            if isinstance(item, ast.Name):
                out.append(item.id)
            elif isinstance(item, ast.Attribute):
                out.append(item.attr)
            else:
                return None
        return tuple(out)

    def _class_name_test(self, test: ast.expr, names: set[str]) -> tuple[str, ...] | None:
        """``classname in self.known_modules`` with ``classname = m.__class__.__name__``
        and ``self.known_modules = {"Linear", "Conv2d"}`` set once."""
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.Eq))):
            return None
        subject, other = test.left, test.comparators[0]
        if not any(self._identity._class_name_of(subject, name, None) or self._class_name_call(subject, name)
                   for name in names):
            return None
        value = self._literal_of(other)
        if value is None:
            return None
        items = value.elts if isinstance(value, (ast.Tuple, ast.List, ast.Set)) else [value]
        out = []
        for item in items:
            if not (isinstance(item, ast.Constant) and isinstance(item.value, str)):
                return None
            out.append(item.value)
        return tuple(out)

    def _class_name_call(self, expr: ast.AST, name: str) -> bool:
        """``_layer_type(layer)`` with ``def _layer_type(m): return m.__class__.__name__``."""
        if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and len(expr.args) == 1
                and isinstance(expr.args[0], ast.Name) and expr.args[0].id == name and hasattr(expr.func, "_hl_scope")):
            return False
        bindings = self.model.bindings_at(expr.func)
        if len(bindings) != 1 or bindings[0].kind != "def":
            return False
        func = bindings[0].node
        params = positional_params(func)
        body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(params) != 1 or len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
            return False
        value = body[0].value
        inner = value.value if isinstance(value, ast.Attribute) and value.attr in ("__name__", "__qualname__") else None
        if isinstance(inner, ast.Attribute) and inner.attr == "__class__":
            inner = inner.value
        elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "type" \
                and len(inner.args) == 1:
            inner = inner.args[0]
        else:
            return False
        return isinstance(inner, ast.Name) and inner.id == params[0]

    def _literal_of(self, expr: ast.AST, depth: int = 0) -> ast.AST | None:
        if isinstance(expr, (ast.Constant, ast.Tuple, ast.List, ast.Set)):
            return expr
        if depth > 3:
            return None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            cls = self.model.enclosing_class(expr)
            assigned = cls.attribute(expr.attr) if cls is not None else []
            if len(assigned) == 1:
                return self._literal_of(assigned[0][0], depth + 1)
            return None
        if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
            bindings = self.model.bindings_at(expr)
            if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                    and isinstance(bindings[0].value, ast.AST):
                return self._literal_of(bindings[0].value, depth + 1)
        return None


def summarize_hooked_params(model: SemanticModel, inference: Inference, registrations: Iterable) -> HookedParams:
    """The file's :class:`ParamHook` and :class:`ParamPass` records.
    ``registrations``: the file's ``HookIndex.registrations`` (one per call)."""
    tracer = _Tracer(model, inference)
    filters = _Filters(model, inference)
    out = HookedParams()
    for reg in registrations:
        if reg.is_global or reg.receiver is None or not reg.kind.is_module:
            continue
        traced = tracer.trace(reg.receiver)
        if traced is None:
            continue
        ref = tracer.param_ref(traced)
        if ref is None:
            continue
        classes, understood = filters.of(reg.call, traced.names | _receiver_names(reg.receiver))
        hook = reg.hook.name if reg.hook is not None else "the hook"
        out.hooks.append(ParamHook(ref, tuple(traced.steps), classes, traced.exact and understood, reg.kind.value,
                                   reg.call.lineno, reg.call.col_offset + 1, hook, reg.method_name))
    if not out.hooks and not _could_pass(model):
        return out
    for calls in list(model.name_calls.values()) + list(model.method_calls.values()):
        for call in calls:
            _passes_of(call, model, tracer, filters, out)
    for node in walk_tree(model.tree):
        if isinstance(node, FunctionNode):
            callee = tracer.callee_of(node)
            if callee is not None:
                owner = getattr(node, "_hl_parent", None)
                out.callees[id(owner if callee.is_class else node)] = callee
    return out


def _receiver_names(receiver: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(receiver) if isinstance(n, ast.Name)}


def _could_pass(model: SemanticModel) -> bool:
    return bool(model.name_calls or model.method_calls)


def _passes_of(call: ast.Call, model: SemanticModel, tracer: _Tracer, filters: _Filters, out: HookedParams) -> None:
    function = model.enclosing_function(call)
    if function is None:
        return
    target_node = None
    target = None
    if isinstance(call.func, ast.Name) and hasattr(call.func, "_hl_scope"):
        bindings = model.bindings_at(call.func)
        if len(bindings) == 1 and bindings[0].kind in ("def", "class"):
            target_node = bindings[0].node
    star: tuple[str, ...] = ()
    if target_node is None and hasattr(call.func, "_hl_scope"):
        target = model.qualify(call.func)
        if target is None and isinstance(call.func, ast.Name) and not model.bindings_at(call.func):
            star = star_imports(model.tree)
            target = call.func.id if star else None
        if target is None or target.startswith(("builtins.", "torch.")):
            return
    arguments: list[tuple[ast.expr, int | None, str | None]] = [
        (a, i, None) for i, a in enumerate(call.args) if not isinstance(a, ast.Starred)]
    arguments += [(k.value, None, k.arg) for k in call.keywords if k.arg is not None]
    for expr, position, keyword in arguments:
        traced = tracer.trace(expr)
        if traced is None:
            continue
        ref = tracer.param_ref(traced)
        if ref is None:
            continue
        classes, understood = filters.of(call, traced.names)
        text = ast.unparse(call)
        out.passes.append(ParamPass(ref, tuple(traced.steps), classes, traced.exact and understood,
                                    target or "", target_node, position, keyword, call.lineno,
                                    text if len(text) <= 80 else text[:77] + "...", star))


def star_imports(tree: ast.Module) -> tuple[str, ...]:
    """Modules the file imports with ``from x import *`` (``.x`` for relative ones)."""
    out = []
    for node in walk_tree(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            out.append("." * node.level + (node.module or ""))
    return tuple(out)
