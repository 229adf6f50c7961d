"""Hooks that travel: values followed through calls, loops and dicts.

Library code registers hooks one or more calls away from where the hook and
the module are chosen::

    def add_hook(module, fn):
        return module.register_backward_hook(fn)

    add_hook(net.layer4, save_grad)

The registration sees two parameters; the call site knows what they are.
:class:`Resolver` answers "what is this expression" under an :class:`Env`:
the call site that entered the function (its arguments give the
parameters), the items fixed for loops over literal collections
(``for kind, fn in {"forward": f, "backward": b}.items()``), and, further
out, the caller's own environment.  :meth:`Resolver.envs_at` lists the
environments a point of the code can run under, a few calls deep.

Everything stays inside one file: a helper called from another file is seen
with unknown arguments (the cross-file version would need the project index
to hand each function its call sites' argument expressions).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from hooklint.static.fallbacks import dead_on_current_torch, decide
from hooklint.static.semantic import (
    Binding,
    ClassInfo,
    FunctionNode,
    SemanticModel,
    is_staticmethod,
    positional_params,
    short_source,
)
from hooklint.static.values import (
    CallableValue,
    ClassValue,
    Inference,
    ModuleValue,
    ObjectValue,
    Value,
    narrowed_module,
)

if TYPE_CHECKING:  # pragma: no cover
    pass

MAX_DEPTH = 3  # calls followed outwards from a registration
MAX_SITES = 24  # call sites of one function
MAX_ENVS = 32  # environments of one point
MAX_STRINGS = 16


@dataclass(frozen=True, eq=False)
class Site:
    """A call of a function of this file: its arguments give the parameters."""

    call: ast.Call
    function: ast.FunctionDef | ast.AsyncFunctionDef
    bound: int = 0  # leading parameters the call does not pass (`self` of a bound method)
    self_expr: ast.expr | None = None  # what `self` is: `obj` in `obj.method(...)`
    constructor: bool = False  # `Cls(...)` running `Cls.__init__`

    def argument(self, param: str) -> tuple[str, ast.expr | None]:
        """("arg", expr) for a passed argument, ("self", expr) for the bound
        receiver, ("default", expr) for a default, ("missing", None) otherwise."""
        args = self.function.args
        positional = [a.arg for a in list(args.posonlyargs) + list(args.args)]
        if param in positional:
            index = positional.index(param)
            if index < self.bound:
                return ("self", self.self_expr) if index == 0 else ("missing", None)
            call_index = index - self.bound
            plain = [a for a in self.call.args]
            if any(isinstance(a, ast.Starred) for a in plain[: call_index + 1]):
                return "missing", None
            if call_index < len(plain):
                return "arg", plain[call_index]
        for kw in self.call.keywords:
            if kw.arg == param:
                return "arg", kw.value
        if any(kw.arg is None for kw in self.call.keywords):
            return "missing", None
        if param in positional:
            defaults = args.defaults
            offset = len(positional) - len(defaults)
            index = positional.index(param)
            if index >= offset:
                return "default", defaults[index - offset]
        for a, default in zip(args.kwonlyargs, args.kw_defaults):
            if a.arg == param and default is not None:
                return "default", default
        return "missing", None


@dataclass(frozen=True, eq=False)
class Env:
    """Where a function's code runs: which call entered it, which loop items
    are fixed, and the caller's own environment."""

    site: Site | None = None
    items: tuple[tuple[ast.AST, ast.expr, "Env | None"], ...] = ()  # (loop node, element, element's env)
    outer: "Env | None" = None

    def item_of(self, loop: ast.AST) -> tuple[ast.expr, "Env | None"] | None:
        for node, element, env in self.items:
            if node is loop:
                return element, env
        return None

    def with_items(self, items: tuple[tuple[ast.AST, ast.expr, "Env | None"], ...]) -> "Env":
        return Env(self.site, self.items + items, self.outer)

    @property
    def sites(self) -> list[Site]:
        """The call sites from the innermost outwards."""
        out = []
        env: Env | None = self
        while env is not None:
            if env.site is not None:
                out.append(env.site)
            env = env.outer
        return out


EMPTY = Env()


class Resolver:
    def __init__(self, model: SemanticModel, inference: Inference):
        self.model = model
        self.inference = inference
        self._sites: dict[ast.AST, list[Site]] = {}
        self._dead: dict[ast.AST, str | None] = {}
        self._envs: dict[tuple, list[Env]] = {}

    # ------------------------------------------------------------ call sites
    def sites_of(self, func: ast.AST) -> list[Site]:
        """Calls of ``func`` in this file (plain calls, method calls, constructor calls)."""
        if func in self._sites:
            return self._sites[func]
        self._sites[func] = []  # recursion guard
        out: list[Site] = []
        if isinstance(func, FunctionNode):
            cls = self._method_class(func)
            if cls is None:
                for call in self.model.name_calls.get(func.name, ()):
                    target = self.inference.infer(call.func)
                    if isinstance(target, CallableValue) and target.node is func and target.bound == 0:
                        out.append(Site(call, func))
            else:
                for call in self.model.method_calls.get(func.name, ()):
                    target = self.inference.infer(call.func)
                    if isinstance(target, CallableValue) and target.node is func:
                        self_expr = call.func.value if target.bound else None  # type: ignore[attr-defined]
                        out.append(Site(call, func, bound=target.bound, self_expr=self_expr))
                if func.name == "__init__":
                    for call in self.model.name_calls.get(cls.name, ()):
                        if self.model.class_for_expr(call.func) is not None and \
                                self._constructed(call) is cls:
                            out.append(Site(call, func, bound=1, constructor=True))
        self._sites[func] = out[:MAX_SITES]
        return self._sites[func]

    def _method_class(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> ClassInfo | None:
        parent = getattr(func, "_hl_parent", None)
        if isinstance(parent, ast.ClassDef):
            return self.model.classes.get(parent)
        return None

    def _constructed(self, call: ast.Call) -> ClassInfo | None:
        info = self.model.class_for_expr(call.func)
        if info is None:
            return None
        owner = info.owner_of("__init__")
        return owner

    # ------------------------------------------------------------ environments
    def envs_at(self, node: ast.AST, exprs: Iterable[ast.AST], depth: int = 0) -> list[Env]:
        """The environments ``node`` (in some function) can run under, as far as
        ``exprs`` (the expressions that matter there) depend on them."""
        exprs = [e for e in exprs if e is not None]
        key = (id(node), tuple(id(e) for e in exprs), depth)
        if key in self._envs:
            return self._envs[key]
        self._envs[key] = [EMPTY]  # a recursive helper reaching itself again stops here
        self._envs[key] = found = self._envs_at(node, exprs, depth)
        return found

    def _envs_at(self, node: ast.AST, exprs: list[ast.AST], depth: int) -> list[Env]:
        func = self.model.enclosing_function(node)
        names = self._names_in(exprs, func)
        base_envs = [EMPTY]
        entered = self._entered_function(func, names) if depth < MAX_DEPTH else None
        if entered is not None:
            base_envs = []
            for site in self.sites_of(entered):
                if len(base_envs) >= MAX_ENVS:
                    break
                if self.dead(site.call):
                    continue
                used = [site.call] + ([site.self_expr] if site.self_expr is not None else [])
                for outer in self.envs_at(site.call, used, depth + 1):
                    base_envs.append(Env(site, (), outer))
                    if len(base_envs) >= MAX_ENVS:
                        break
            if not base_envs:
                return []  # every call of the function is in a fallback that never runs
        envs: list[Env] = []
        for base in base_envs:
            # the loops over literal collections around the node, fixed to each of their items jointly
            choices = []
            for loop, items in self._literal_loops(node, names, func, base):
                choices.append([(loop, element, where) for element, where in items])
            combos = list(itertools.islice(itertools.product(*choices), MAX_ENVS)) if choices else [()]
            for combo in combos:
                env = base.with_items(tuple(combo)) if combo else base
                if env is not EMPTY and not self.consistent(node, env):
                    continue  # `if kind == "forward":` around the node, with kind "backward" here
                envs.append(env)
                if len(envs) >= MAX_ENVS:
                    return envs
        return envs

    def consistent(self, node: ast.AST, env: Env) -> bool:
        """False when a test that must hold where ``node`` runs is false under ``env``."""
        from hooklint.static.identity import holding_tests

        return all(self.truth(test, env) is not False for test in holding_tests(node))

    def truth(self, test: ast.AST, env: Env, depth: int = 0) -> bool | None:
        """The value of a test under ``env``, when its names are fixed there:
        ``kind == "forward"``, ``kind in ("forward", "backward")``, ``full``, ``not full``."""
        if depth > 6:
            return None
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.truth(test.operand, env, depth + 1)
            return None if inner is None else not inner
        if isinstance(test, ast.BoolOp):
            values = [self.truth(v, env, depth + 1) for v in test.values]
            if isinstance(test.op, ast.And):
                return False if any(v is False for v in values) else (True if all(values) else None)
            return True if any(v is True for v in values) else (False if all(v is False for v in values) else None)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            op, right = test.ops[0], test.comparators[0]
            if isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                left_values = self.strings(test.left, env)
                if left_values is None or len(left_values) != 1:
                    return None
                if isinstance(op, (ast.Eq, ast.NotEq)):
                    other = self.strings(right, env)
                    if other is None or len(other) != 1:
                        return None
                    same = left_values[0] == other[0]
                    return same if isinstance(op, ast.Eq) else not same
                if isinstance(right, (ast.Tuple, ast.List, ast.Set)) and all(
                        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in right.elts):
                    inside = left_values[0] in [e.value for e in right.elts]  # type: ignore[attr-defined]
                    return inside if isinstance(op, ast.In) else not inside
            return None
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, ast.Name) and env is not EMPTY:
            resolved, where = self.resolve_expr(test, env)
            if resolved is not test and isinstance(resolved, (ast.Constant, ast.Name, ast.UnaryOp, ast.Compare)):
                return self.truth(resolved, where, depth + 1)
        return None

    def _entered_function(self, func: ast.AST | None, names: set[str]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost function (``func`` or one enclosing it: closures read
        their parents' parameters) whose parameters ``names`` uses and whose
        calls this file shows."""
        while func is not None:
            if isinstance(func, FunctionNode):
                params = set(positional_params(func)) | {a.arg for a in func.args.kwonlyargs}
                if names & params and self.sites_of(func):
                    return func
            func = self.model.enclosing_function(func)
        return None

    def dead(self, node: ast.AST) -> str | None:
        if node not in self._dead:
            self._dead[node] = dead_on_current_torch(self.model, node)
        return self._dead[node]

    def _names_in(self, exprs: list[ast.AST], func: ast.AST | None, limit: int = 4) -> set[str]:
        """Names the expressions read, following local assignments a few steps."""
        names: set[str] = set()
        todo = list(exprs)
        seen: set[int] = set()
        steps = 0
        while todo and steps < 64:
            steps += 1
            expr = todo.pop()
            if id(expr) in seen:
                continue
            seen.add(id(expr))
            for node in ast.walk(expr):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    names.add(node.id)
                    if limit and hasattr(node, "_hl_scope"):
                        for b in self.model.bindings_at(node):
                            if b.kind in ("assign", "for") and isinstance(b.value, ast.AST) \
                                    and self.model.enclosing_function(b.node) is func:
                                todo.append(b.value)
                                if b.kind == "for":
                                    for target in _targets_of(b.node):
                                        names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id == "self":
                    names.add("self")
        return names

    def _literal_loops(self, node: ast.AST, names: set[str], func: ast.AST | None,
                       env: Env) -> list[tuple[ast.AST, list[tuple[ast.expr, Env]]]]:
        """Enclosing ``for`` loops (in the same function) binding one of ``names``
        over a collection written out in the code (or a dict's items), with their items."""
        out = []
        child = node
        parent = getattr(node, "_hl_parent", None)
        while parent is not None and parent is not func and len(out) < 2:
            if isinstance(parent, (ast.For, ast.AsyncFor)) and child is not parent.iter:
                bound = {n.id for n in ast.walk(parent.target) if isinstance(n, ast.Name)}
                items = self._items(parent.iter, env) if bound & names else None
                if items is not None:
                    out.append((parent, items))
            child, parent = parent, getattr(parent, "_hl_parent", None)
        return out

    def _items(self, iterable: ast.AST, env: Env) -> list[tuple[ast.expr, Env]] | None:
        """The elements a loop over ``iterable`` yields, when written out in the code."""
        resolved, where = self.resolve_expr(iterable, env)
        if isinstance(resolved, (ast.Tuple, ast.List, ast.Set)) and resolved.elts \
                and not any(isinstance(e, ast.Starred) for e in resolved.elts):
            return [(e, where) for e in resolved.elts][:MAX_ENVS]
        if isinstance(resolved, ast.Call) and isinstance(resolved.func, ast.Attribute) and not resolved.args \
                and resolved.func.attr in ("items", "values", "keys"):
            mapping, mapping_env = self.resolve_expr(resolved.func.value, where)
            if isinstance(mapping, ast.Dict) and mapping.keys and all(k is not None for k in mapping.keys):
                method = resolved.func.attr
                out: list[tuple[ast.expr, Env]] = []
                for key, value in zip(mapping.keys, mapping.values):
                    if method == "items":
                        pair = ast.Tuple(elts=[key, value], ctx=ast.Load())
                        out.append((pair, mapping_env))
                    else:
                        out.append((value if method == "values" else key, mapping_env))  # type: ignore[arg-type]
                return out[:MAX_ENVS]
        return None

    # ------------------------------------------------------------ expressions
    def resolve_expr(self, expr: ast.AST, env: Env, depth: int = 0) -> tuple[ast.AST, Env]:
        """Follow names to the expression that gave them their value (an
        argument at the call site, the assigned value, the loop's element)."""
        if depth > 12:
            return expr, env
        if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
            bindings = self.model.bindings_at(expr)
            if len(bindings) != 1:
                return expr, env
            b = bindings[0]
            if b.kind == "param":
                site = env.site
                if site is not None and b.scope.node is site.function:
                    how, arg = site.argument(expr.id)
                    if how in ("arg", "self") and arg is not None:
                        return self.resolve_expr(arg, env.outer or EMPTY, depth + 1)
                    if how == "default" and arg is not None:
                        return self.resolve_expr(arg, EMPTY, depth + 1)
                return expr, env
            if b.kind == "assign" and isinstance(b.value, ast.AST):
                if b.path:
                    value = _pick(b.value, b.path)
                    return (self.resolve_expr(value, env, depth + 1) if value is not None else (expr, env))
                return self.resolve_expr(b.value, env, depth + 1)
            if b.kind == "for":
                fixed = env.item_of(b.node)
                if fixed is not None:
                    element, element_env = fixed
                    part = _pick(element, b.path) if b.path else element
                    if part is not None:
                        return self.resolve_expr(part, element_env or EMPTY, depth + 1)
            return expr, env
        if isinstance(expr, ast.Subscript):
            key = self.strings(expr.slice, env)
            if key is not None and len(key) == 1:
                mapping, mapping_env = self.resolve_expr(expr.value, env, depth + 1)
                if isinstance(mapping, ast.Dict):
                    for k, v in zip(mapping.keys, mapping.values):
                        if isinstance(k, ast.Constant) and k.value == key[0]:
                            return self.resolve_expr(v, mapping_env, depth + 1)
            return expr, env
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            found = self._self_attribute(expr, env)
            if found is not None:
                return self.resolve_expr(found[0], found[1], depth + 1)
        return expr, env

    def _self_attribute(self, expr: ast.Attribute, env: Env) -> tuple[ast.expr, Env] | None:
        """``self.attr`` set once, from an argument of ``__init__`` (or of the
        method running now): the expression the call site gave."""
        cls = self.model.enclosing_class(expr)
        if cls is None:
            return None
        assigned = cls.attribute(expr.attr)
        if len(assigned) != 1:
            return None
        value, scope, _node = assigned[0]
        method = scope.node
        if not isinstance(value, ast.Name) or value.id not in positional_params(method):
            return None
        site = env.site
        if site is not None and site.function is method:
            return value, env
        if method.name != "__init__" or site is None:  # type: ignore[attr-defined]
            return None
        # `obj.method(...)` with `obj = Cls(...)`: the constructor call holds the argument
        if site.self_expr is None:
            return None
        made, made_env = self.resolve_expr(site.self_expr, env.outer or EMPTY)
        if isinstance(made, ast.Call) and self._constructed(made) is not None:
            init = self._constructed(made).method("__init__")  # type: ignore[union-attr]
            if init is method:
                return value, Env(Site(made, method, bound=1, constructor=True), (), made_env)
        return None

    def strings(self, expr: ast.AST, env: Env, depth: int = 0) -> list[str] | None:
        """Every string ``expr`` can be, or None when one of them cannot be known."""
        if depth > 8:
            return None
        if isinstance(expr, ast.Constant):
            return [expr.value] if isinstance(expr.value, str) else None
        if isinstance(expr, ast.JoinedStr):
            parts: list[list[str]] = []
            for value in expr.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    parts.append([value.value])
                elif isinstance(value, ast.FormattedValue) and value.format_spec is None \
                        and value.conversion in (-1, 115):
                    inner = self.strings(value.value, env, depth + 1)
                    if inner is None:
                        return None
                    parts.append(inner)
                else:
                    return None
            return _joined(parts)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            left, right = self.strings(expr.left, env, depth + 1), self.strings(expr.right, env, depth + 1)
            return None if left is None or right is None else _joined([left, right])
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and isinstance(expr.left, ast.Constant) \
                and isinstance(expr.left.value, str) and expr.left.value.count("%s") == 1 \
                and "%" not in expr.left.value.replace("%s", ""):
            inner = self.strings(expr.right.elts[0] if isinstance(expr.right, ast.Tuple) and len(expr.right.elts) == 1
                                 else expr.right, env, depth + 1)
            return None if inner is None else [expr.left.value.replace("%s", s) for s in inner]
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format" \
                and isinstance(expr.func.value, ast.Constant) and isinstance(expr.func.value.value, str) \
                and expr.func.value.value.count("{}") == len(expr.args) == 1 and not expr.keywords:
            inner = self.strings(expr.args[0], env, depth + 1)
            template = expr.func.value.value
            return None if inner is None else [template.replace("{}", s) for s in inner]
        if isinstance(expr, ast.IfExp):
            decided = decide(self.model, expr.test)
            if decided is None:
                decided = self.truth(expr.test, env)
            if decided is not None:
                return self.strings(expr.body if decided else expr.orelse, env, depth + 1)
            a, b = self.strings(expr.body, env, depth + 1), self.strings(expr.orelse, env, depth + 1)
            return None if a is None or b is None else list(dict.fromkeys(a + b))
        if isinstance(expr, (ast.Name, ast.Subscript, ast.Attribute)):
            resolved, where = self.resolve_expr(expr, env)
            if resolved is not expr:
                return self.strings(resolved, where, depth + 1)
            if isinstance(expr, ast.Name):
                # a loop over literal strings that is not fixed: all of them
                bindings = self.model.bindings_at(expr) if hasattr(expr, "_hl_scope") else []
                if len(bindings) == 1 and bindings[0].kind == "for" and isinstance(bindings[0].value, ast.AST):
                    items = self._items(bindings[0].value, env)  # type: ignore[arg-type]
                    if items is not None:
                        out: list[str] = []
                        for element, element_env in items:
                            part = _pick(element, bindings[0].path) if bindings[0].path else element
                            found = self.strings(part, element_env, depth + 1) if part is not None else None
                            if found is None:
                                return None
                            out += found
                        return list(dict.fromkeys(out))[:MAX_STRINGS]
        return None

    def value(self, expr: ast.AST | None, env: Env, depth: int = 0) -> Value:
        """The abstract value of ``expr`` under ``env`` (see values.Inference)."""
        if expr is None:
            return None
        if depth > 12 or (env is EMPTY and isinstance(expr, (ast.Name, ast.Lambda) + FunctionNode)):
            return self.inference.infer(expr)
        resolved, where = self.resolve_expr(expr, env)
        if resolved is not expr:
            value = self.value(resolved, where, depth + 1)
            if isinstance(expr, ast.Name) and (value is None or isinstance(value, ModuleValue) and
                                               value.torch_class is None and value.local_class is None):
                narrowing = self.inference.identity.narrowing(expr)
                if narrowing is not None:
                    return narrowed_module(value if isinstance(value, ModuleValue) else None, narrowing, expr.id)
            return value
        if isinstance(expr, ast.Call):
            return self._call_value(expr, env, depth)
        if isinstance(expr, ast.Attribute):
            base = self.value(expr.value, env, depth + 1)
            if base is None:
                return self.inference.infer(expr)
            return self.inference.attribute_of(base, expr)
        if isinstance(expr, ast.IfExp):
            decided = decide(self.model, expr.test)
            if decided is not None:
                return self.value(expr.body if decided else expr.orelse, env, depth + 1)
        if isinstance(expr, ast.Name):
            bindings = self.model.bindings_at(expr) if hasattr(expr, "_hl_scope") else []
            if len(bindings) == 1 and bindings[0].kind == "for" and isinstance(bindings[0].value, ast.AST):
                iterated = self._iterated(bindings[0], env, depth)
                if iterated is not None:
                    narrowing = self.inference.identity.narrowing(expr)
                    if narrowing is not None and iterated.torch_class is None and iterated.local_class is None:
                        return narrowed_module(iterated, narrowing, expr.id)
                    return iterated
        return self.inference.infer(expr)

    def _iterated(self, binding: Binding, env: Env, depth: int) -> ModuleValue | None:
        """``for name, m in model.named_modules()`` with ``model`` from the call site."""
        iterable = binding.value
        if not (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute)):
            return None
        method = iterable.func.attr
        if method not in ("modules", "named_modules", "children", "named_children"):
            return None
        if binding.path != ((1,) if method.startswith("named_") else ()):
            return None
        receiver = self.value(iterable.func.value, env, depth + 1)
        if isinstance(receiver, ModuleValue):
            shown, _ = self._substituted(iterable.func.value, env, 0)
            return ModuleValue(description=f"each module of {short_source(shown)}")
        return None

    def _call_value(self, call: ast.Call, env: Env, depth: int) -> Value:
        func = call.func
        qual = self.model.qualify(func)
        if qual == "functools.partial" and call.args:
            inner = self.value(call.args[0], env, depth + 1)
            if isinstance(inner, CallableValue):
                return CallableValue(inner.node, bound=inner.bound + len(call.args) - 1,
                                     bound_keywords=inner.bound_keywords | {k.arg for k in call.keywords if k.arg},
                                     owner=inner.owner, via="partial")
            return None
        if isinstance(func, ast.Name) and func.id == "getattr" and len(call.args) >= 2:
            names = self.strings(call.args[1], env)
            if names is not None and len(names) == 1:
                base = self.value(call.args[0], env, depth + 1)
                fake = ast.Attribute(value=call.args[0], attr=names[0], ctx=ast.Load())
                return self.inference.attribute_of(base, fake) if base is not None else None
            return None
        target = self.value(func, env, depth + 1)
        if isinstance(target, CallableValue) and isinstance(target.node, FunctionNode):
            returned = self.inference._returned_callable(target.node)
            if returned is not None:
                return CallableValue(returned.node, bound_keywords=returned.bound_keywords, via="factory")
            return None
        if isinstance(target, ClassValue) and target.local_class is not None:
            return self.inference.infer(call)
        if isinstance(func, ast.Attribute):
            receiver = self.value(func.value, env, depth + 1)
            if isinstance(receiver, ModuleValue) and func.attr in ("to", "cuda", "cpu", "train", "eval", "float",
                                                                  "double", "half", "requires_grad_"):
                return receiver
            if isinstance(receiver, ModuleValue) and func.attr == "get_submodule":
                return ModuleValue(description=short_source(call))
        return self.inference.infer(call)

    def callable(self, expr: ast.AST | None, env: Env) -> CallableValue | None:
        """The code a hook argument runs (see Inference.callable_of)."""
        if expr is None:
            return None
        found = self.inference.callable_of(expr)
        if found is not None or (env is EMPTY and isinstance(expr, ast.Name)):
            return found
        value = self.value(expr, env)
        if isinstance(value, CallableValue):
            return value
        if isinstance(value, ObjectValue):
            call = value.local_class.method("__call__")
            if call is not None:
                return CallableValue(call, bound=1, owner=value.local_class, via="__call__")
        return None

    def origin_text(self, expr: ast.AST | None, env: Env) -> str | None:
        """The source the expression stands for at the outermost call site."""
        if expr is None or env is EMPTY:
            return None
        resolved, _ = self.resolve_expr(expr, env)
        return None if resolved is expr else short_source(resolved)

    def origin(self, expr: ast.AST | None, env: Env) -> ast.AST | None:
        """The expression at the outermost call site that ``expr`` stands for
        (``net.fc`` for a helper's ``model.fc`` called with ``net``), or None
        when it stands for itself.  Attribute and item chains are rebuilt on
        the substituted base, so the result may be a new node whose base is real."""
        if expr is None or env is EMPTY:
            return None
        node, changed = self._substituted(expr, env, 0)
        return node if changed else None

    def _substituted(self, expr: ast.AST, env: Env, depth: int) -> tuple[ast.AST, bool]:
        if depth > 10:
            return expr, False
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            found = self._self_attribute(expr, env)
            if found is not None:
                node, _ = self._substituted(found[0], found[1], depth + 1)
                return node, True
        if isinstance(expr, (ast.Attribute, ast.Subscript)):
            base, changed = self._substituted(expr.value, env, depth + 1)
            if not changed:
                return expr, False
            if isinstance(expr, ast.Attribute):
                rebuilt: ast.expr = ast.Attribute(value=base, attr=expr.attr, ctx=ast.Load())
            else:
                rebuilt = ast.Subscript(value=base, slice=expr.slice, ctx=ast.Load())
            return ast.copy_location(rebuilt, expr), True
        if not (isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope")):
            return expr, False
        bindings = self.model.bindings_at(expr)
        if len(bindings) != 1:
            return expr, False
        b = bindings[0]
        if b.kind == "param" and env.site is not None and b.scope.node is env.site.function:
            how, arg = env.site.argument(expr.id)
            if how in ("arg", "self") and arg is not None:
                return self._substituted(arg, env.outer or EMPTY, depth + 1)[0], True
            return expr, False
        if b.kind == "for":
            fixed = env.item_of(b.node)
            if fixed is not None:
                part = _pick(fixed[0], b.path) if b.path else fixed[0]
                if part is not None:
                    return self._substituted(part, fixed[1] or EMPTY, depth + 1)[0], True
            return expr, False
        if b.kind == "assign" and not b.path and isinstance(b.value, ast.AST) and b.scope.kind == "function":
            node, changed = self._substituted(b.value, env, depth + 1)
            return (node, True) if changed else (expr, False)
        return expr, False


def _targets_of(node: ast.AST) -> list[ast.AST]:
    target = getattr(node, "target", None)
    return [target] if target is not None else []


def _pick(value: ast.AST, path: tuple[int, ...]) -> ast.AST | None:
    for index in path:
        if isinstance(value, (ast.Tuple, ast.List)) and 0 <= index < len(value.elts):
            value = value.elts[index]
        else:
            return None
    return value


def _joined(parts: list[list[str]]) -> list[str] | None:
    out = [""]
    for options in parts:
        out = [a + b for a in out for b in options]
        if len(out) > MAX_STRINGS:
            return None
    return out



__all__ = ["EMPTY", "Env", "Resolver", "Site", "is_staticmethod"]
