"""What a forward hook, pre-hook or capture receives and hands back.

Facts of torch (tests/behaviour/test_hook_io.py):

- a forward pre-hook's return value, when not None, replaces the module's
  positional arguments *as a whole*: a tuple is used as the argument tuple,
  anything else becomes the only argument (``Module._call_impl`` wraps it in
  a one-element tuple).  A hook that hands back one element of ``args``
  unchanged drops the other arguments and, when that element is itself a
  tuple, spreads it into several arguments;
- the keyword arguments a module is called with are whatever its caller
  passes: optional inputs (masks, position ids, caches) arrive as ``None``
  as often as absent, and as bools or cache objects, not only tensors;
- a function stored as a module's ``forward`` (``m.forward = partial(fn,
  m)``, a closure a factory returns, a bound method) or a wrapper module put
  in the module's slot (``layers[0] = Catcher(layers[0])``) is called with
  exactly the arguments the parent passes: it stands in for a forward
  pre-hook with ``with_kwargs=True`` and answers the same questions.

``forward_captures`` lists those stand-ins, so that every question asked of
a registered hook's arguments can be asked of them.  Never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode, SemanticModel, positional_params, short_source
from hooklint.static.tree_walk import walk_tree

# ------------------------------------------------------------------ forward replacements acting as hooks


@dataclass(frozen=True)
class ForwardCapture:
    """A function that runs in place of a module's forward, as a hook would."""

    site: ast.AST  # the statement that installs it
    receiver: ast.AST  # the module (or the slot) whose calls now reach ``func``
    func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    bound: int  # leading parameters supplied at installation (the module of `partial(fn, m)`, `self`)
    how: str  # in words, for messages

    @property
    def inputs(self) -> list[str]:
        """The positional parameters the module's caller fills."""
        return positional_params(self.func)[self.bound:]

    @property
    def kwargs(self) -> str | None:
        kwarg = self.func.args.kwarg
        return kwarg.arg if kwarg is not None else None

    @property
    def varargs(self) -> str | None:
        vararg = self.func.args.vararg
        return vararg.arg if vararg is not None else None

    def records_inputs(self) -> bool:
        """Does it keep what it receives beyond the call (``inps.append(inp)``,
        ``cache["mask"] = kwargs["mask"]``, ``store.update(kwargs)``, a store
        into ``self.`` state)?  That is what a capture is for; a lasting
        replacement (padding, dropout, a re-implemented forward) passes its
        arguments on instead."""
        received = set(self.inputs) | {n for n in (self.kwargs, self.varargs) if n}
        local = {t.id for n in _own_nodes(self.func) if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)}
        for node in _own_nodes(self.func):  # `x = args[0]`: x is what it received
            if isinstance(node, ast.Assign) and received & _names(node.value):
                received |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in _own_nodes(self.func):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("append", "extend", "update", "insert") \
                    and _root_name(node.func.value) not in local | received \
                    and any(received & _names(a) for a in node.args):
                return True
            if isinstance(node, ast.Assign) and any(isinstance(t, (ast.Subscript, ast.Attribute))
                                                    and _root_name(t) not in local | received for t in node.targets) \
                    and received & _names(node.value):
                return True
        return False

    def required_inputs(self) -> list[str]:
        """The positional parameters without a default the caller must fill."""
        params = [a.arg for a in list(self.func.args.posonlyargs) + list(self.func.args.args)]
        first_default = len(params) - len(self.func.args.defaults)
        return [p for i, p in enumerate(params) if self.bound <= i < first_default]


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


# Names whose `partial` / `MethodType` / `__get__` binding makes a function a bound forward.
_BINDERS = frozenset({"functools.partial", "types.MethodType"})


def forward_captures(model: SemanticModel, inference, tree: ast.AST) -> list[ForwardCapture]:
    """Computed once per file (several rules ask), see `_forward_captures`."""
    cached = getattr(tree, "_hl_forward_captures", None)
    if cached is None:
        cached = _forward_captures(model, inference, tree)
        tree._hl_forward_captures = cached  # type: ignore[attr-defined]
    return cached


def _forward_captures(model: SemanticModel, inference, tree: ast.AST) -> list[ForwardCapture]:
    """Every place the file installs a function of its own as a module's
    ``forward`` (assignment or ``setattr``), and every wrapper module of the
    file put in a module's own slot around it.  A method of the receiver's
    own class reassigned to ``forward`` (``self.forward = self._impl``) is
    the class choosing its implementation, not a capture: not listed."""
    out: list[ForwardCapture] = []
    for node in walk_tree(tree):
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if isinstance(target, ast.Attribute) and target.attr == "forward":
                receiver = target.value
            elif isinstance(target, (ast.Subscript, ast.Attribute)):
                found = _wrapper_swap(model, target, value)
                if found is not None:
                    out.append(ForwardCapture(node, target, found, 1, f"a `{found_name(found)}` put in its slot"))
                continue
            else:
                continue
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and len(node.args) == 3 and isinstance(node.args[1], ast.Constant) and node.args[1].value == "forward":
            receiver, value = node.args[0], node.args[2]
        else:
            continue
        if _is_self(model, receiver):
            continue  # a module choosing its own forward
        found = _installed_function(model, inference, value)
        if found is None:
            continue
        func, bound, how = found
        params = positional_params(func)
        if bound == 0 and params and params[0] in ("self", "cls"):
            continue  # a method put on a class (`Cls.forward = forward`): a patch of the class, bound per object
        out.append(ForwardCapture(node, receiver, func, bound, how))
    return out


def found_name(func: ast.AST) -> str:
    cls = getattr(func, "_hl_parent", None)
    return cls.name if isinstance(cls, ast.ClassDef) else getattr(func, "name", "<lambda>")


def _is_self(model: SemanticModel, expr: ast.AST) -> bool:
    if not isinstance(expr, ast.Name):
        return False
    func = model.enclosing_function(expr)
    params = positional_params(func) if func is not None else []
    return bool(params) and params[0] == expr.id and model.enclosing_class(func) is not None


def _installed_function(model: SemanticModel, inference, value: ast.AST):
    """(function, parameters bound, words) of a value stored as ``forward``."""
    if isinstance(value, ast.Lambda):
        return value, 0, "a lambda stored as its `forward`"
    if isinstance(value, ast.Call) and (model.qualify(value.func) or "") in _BINDERS and len(value.args) >= 1:
        inner = _installed_function(model, inference, value.args[0])
        if inner is None:
            return None
        func, bound, _how = inner
        extra = len(value.args) - 1
        qual = model.qualify(value.func) or ""
        return func, bound + extra, f"`{qual.rsplit('.', 1)[-1]}({found_name(func)}, ...)` stored as its `forward`"
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "__get__" \
            and len(value.args) >= 1:  # `fn.__get__(module)`: bound like a method
        inner = _installed_function(model, inference, value.func.value)
        if inner is None:
            return None
        func, bound, _how = inner
        return func, bound + 1, f"`{found_name(func)}.__get__(...)` stored as its `forward`"
    try:
        inferred = inference.infer(value)
    except RecursionError:  # pragma: no cover - deep chains of names
        return None
    node = getattr(inferred, "node", None)
    if not isinstance(node, FunctionNode + (ast.Lambda,)):
        return None
    via = getattr(inferred, "via", "")
    if via == "method":
        return None  # `m.forward = m._old_forward`, `obj.forward = other.forward`: a restore or a rebinding
    if via == "__call__":
        return node, getattr(inferred, "bound", 1), f"a `{found_name(node)}` object stored as its `forward`"
    how = {"factory": f"the closure `{found_name(node)}` a factory returns, stored as its `forward`",
           "partial": f"`partial({found_name(node)}, ...)` stored as its `forward`"}.get(
        via, f"`{found_name(node)}` stored as its `forward`")
    return node, getattr(inferred, "bound", 0), how


def _wrapper_swap(model: SemanticModel, slot: ast.AST, value: ast.AST):
    """The ``forward`` of a module class of the file built around the
    module that sat in ``slot`` (``layers[0] = Catcher(layers[0])``)."""
    if not isinstance(value, ast.Call) or not value.args:
        return None
    if ast.unparse(value.args[0]) != ast.unparse(slot):
        return None
    info = model.class_for_expr(value.func)
    if info is None or model.is_module_class(info) is not True:
        return None
    return info.methods.get("forward")


# ------------------------------------------------------------------ a pre-hook handing back one argument


@dataclass(frozen=True)
class UnwrappedReturn:
    node: ast.AST  # the return statement
    text: str  # what it returns, in words
    single_only: bool  # only when the tuple holds one argument (`if len(args) == 1: return args[0]`)


def unwrapped_input_returns(model: SemanticModel, func: ast.AST, args: str) -> list[UnwrappedReturn]:
    """The ``return`` statements of ``func`` (a forward pre-hook whose
    argument tuple is ``args``) that can hand back one element of ``args``
    unchanged: ``args[0]``, a name bound to it (``x = args[0]``, ``(x,) =
    args``), or what a function of the file applied to ``*args`` returns
    when its result is one of its own arguments (an identity
    ``autograd.Function``, ``lambda *a: a[0] if len(a) == 1 else a``)."""
    out: list[UnwrappedReturn] = []
    aliases = _arg_aliases(func, args)
    tuples = _tuple_aliases(func, args)
    for node in _own_nodes(func):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        for value, branch in _returned(node.value):
            text = _element_of(model, value, args, aliases, tuples)
            if text is not None and branch == "multi" and "when it is given one" in text:
                continue  # the callee hands back its argument only for one, and this branch has several
            if text is not None:
                single = branch == "single" or _under_single_test(node, args, tuples, func) \
                    or "when it is given one" in text
                if single and _first_read_as_tensor(func, tuples, aliases):
                    break  # the one argument is a tensor (the hook read it as one), so nothing is spread
                out.append(UnwrappedReturn(node, text, single))
                break
    if isinstance(func, ast.Lambda):
        for value, branch in _returned(func.body):
            text = _element_of(model, value, args, aliases, tuples)
            if text is not None and not (branch == "multi" and "when it is given one" in text):
                out.append(UnwrappedReturn(func.body, text, branch == "single" or "when it is given one" in text))
                break
    return out


_TENSOR_READS = frozenset({"requires_grad", "grad_fn", "is_floating_point", "data", "grad", "is_leaf"})


def _first_read_as_tensor(func: ast.AST, tuples: set[str], aliases: dict[str, str]) -> bool:
    """Does the hook use its first argument as a tensor (``args[0].requires_grad``,
    ``x.shape`` of ``x = args[0]``)?  Then a tuple there would already have
    raised before the return."""
    for node in _own_nodes(func):
        if not isinstance(node, ast.Attribute) or node.attr not in TENSOR_ONLY | _TENSOR_READS:
            continue
        value = node.value
        if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id in tuples \
                and _const_index(value.slice) == 0:
            return True
        if isinstance(value, ast.Name) and aliases.get(value.id, "").endswith("[0]"):
            return True
    return False


def _own_nodes(func: ast.AST):
    stack = list(ast.iter_child_nodes(func))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _returned(value: ast.AST):
    """The values a return expression can give, with whether the branch runs
    only for a one-element tuple (``a[0] if len(a) == 1 else a``)."""
    if isinstance(value, ast.IfExp):
        test = _single_test(value.test)
        for branch, holds in ((value.body, test), (value.orelse, None if test is None else not test)):
            for v, s in _returned(branch):
                yield v, s if s is not None else ({True: "single", False: "multi"}.get(holds) if holds is not None
                                                   else None)
    else:
        yield value, None


def _single_test(test: ast.AST) -> bool | None:
    """``len(x) == 1`` (True), ``len(x) > 1`` / ``!= 1`` (False), else None."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Call) \
            and isinstance(test.left.func, ast.Name) and test.left.func.id == "len" \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 1:
        op = test.ops[0]
        if isinstance(op, ast.Eq):
            return True
        if isinstance(op, (ast.NotEq, ast.Gt)):
            return False
    return None


def _under_single_test(node: ast.AST, args: str, tuples: set[str], func: ast.AST) -> bool:
    child, cur = node, getattr(node, "_hl_parent", None)
    while cur is not None and cur is not func:
        if isinstance(cur, ast.If) and _single_test(cur.test) is (child in cur.body):
            return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


def _arg_aliases(func: ast.AST, args: str) -> dict[str, str]:
    """Names bound to one element of ``args``: ``x = args[0]``, ``(x,) = args``, ``x, *_ = args``."""
    out: dict[str, str] = {}
    tuples = _tuple_aliases(func, args)
    for node in _own_nodes(func):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) \
                and value.value.id in tuples and _const_index(value.slice) is not None:
            out[target.id] = short_source(value, width=40, odd="?")
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, ast.Name) and value.id in tuples \
                and target.elts and isinstance(target.elts[0], ast.Name):
            out[target.elts[0].id] = f"{value.id}[0]"
    # a name reassigned to anything else is no alias
    for node in _own_nodes(func):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id in out and not _binds_element(node.value, tuples):
                    out.pop(t.id, None)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            out.pop(node.target.id, None)
    return out


def _binds_element(value: ast.AST, tuples: set[str]) -> bool:
    return isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id in tuples \
        or isinstance(value, ast.Name) and value.id in tuples


def _tuple_aliases(func: ast.AST, args: str) -> set[str]:
    """``args`` and names that stay the same tuple (``inputs = args``,
    ``inputs = tuple(args)``, ``inputs = _normalize(args)`` of a helper that
    returns its argument or wraps a non-tuple)."""
    names = {args}
    for node in _own_nodes(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
                value = value.args[0]
            if isinstance(value, ast.Name) and value.id in names:
                names.add(node.targets[0].id)
    return names


def _const_index(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, int):
        return -node.operand.value
    return None


def _element_of(model: SemanticModel, value: ast.AST, args: str, aliases: dict[str, str],
                tuples: set[str]) -> str | None:
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id in tuples \
            and _const_index(value.slice) is not None:
        return f"`{short_source(value, width=40, odd='?')}`"
    if isinstance(value, ast.Name) and value.id in aliases:
        return f"`{value.id}` (`{aliases[value.id]}`)"
    if isinstance(value, ast.Name):
        # `out = Fn.apply(*args); return out`
        bound = _single_assignment(value)
        if bound is not None:
            return _element_of(model, bound, args, {}, tuples)
    if isinstance(value, ast.Call) and len(value.args) == 1 and isinstance(value.args[0], ast.Starred) \
            and isinstance(value.args[0].value, ast.Name) and value.args[0].value.id in tuples:
        callee = _callee(model, value.func)
        mode = returns_own_argument(callee) if callee is not None else None
        if mode == "single":
            return f"`{short_source(value, width=40, odd='?')}` (`{found_name(callee)}` returns its argument " \
                   f"itself when it is given one)"
        if mode == "always":
            return f"`{short_source(value, width=40, odd='?')}` (`{found_name(callee)}` returns one of its " \
                   f"arguments itself)"
    return None


def _single_assignment(name: ast.Name) -> ast.AST | None:
    func = getattr(name, "_hl_parent", None)
    while func is not None and not isinstance(func, FunctionNode + (ast.Lambda,)):
        func = getattr(func, "_hl_parent", None)
    if func is None:
        return None
    found = [n for n in _own_nodes(func) if isinstance(n, ast.Assign) and len(n.targets) == 1
             and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name.id]
    return found[0].value if len(found) == 1 else None


def _callee(model: SemanticModel, func: ast.AST) -> ast.AST | None:
    """The function a call of the file runs: a function, or the ``forward`` of an
    ``autograd.Function`` subclass called through ``.apply``."""
    if isinstance(func, ast.Attribute) and func.attr == "apply":
        info = model.class_for_expr(func.value)
        if info is not None:
            return info.methods.get("forward")
        return None
    if isinstance(func, ast.Name):
        for binding in model.bindings_at(func):
            node = getattr(binding, "node", None)
            if isinstance(node, FunctionNode):
                return node
            value = getattr(binding, "value", None)
            if isinstance(value, ast.Lambda):
                return value
    return None


def returns_own_argument(func: ast.AST) -> str | None:
    """Does ``func`` return, on some path, one of its own positional arguments
    unchanged (``return args[0]`` of ``*args``, ``return x``)?  "single" when
    that path runs only for one argument (``if len(args) == 1``), "always"
    otherwise, None when it never does.  ``ctx`` of a Function's forward does
    not count."""
    params = positional_params(func)
    if params and params[0] == "ctx":
        params = params[1:]
    vararg = func.args.vararg.arg if func.args.vararg is not None else None
    returns = [(func.body, func.body)] if isinstance(func, ast.Lambda) else \
        [(n.value, n) for n in _own_nodes(func) if isinstance(n, ast.Return) and n.value is not None]
    found = None
    for returned, stmt in returns:
        for value, branch in _returned(returned):
            own = isinstance(value, ast.Name) and value.id in params or \
                vararg and isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) \
                and value.value.id == vararg and _const_index(value.slice) is not None
            if not own:
                continue
            if branch == "multi":
                continue
            if branch == "single" or _under_single_test(stmt, vararg or "", set(), func):
                found = found or "single"
            else:
                return "always"
    return found


# ------------------------------------------------------------------ keyword arguments assumed to be tensors

# Attributes and methods only a tensor (not None, a bool, a cache object) has, as captures use them.
TENSOR_ONLY = frozenset({
    "to", "cuda", "cpu", "float", "half", "bfloat16", "double", "detach", "clone", "contiguous", "shape",
    "device", "dtype", "size", "view", "reshape", "numel", "dim", "ndim", "unsqueeze", "squeeze", "expand",
    "repeat", "flatten", "split", "chunk", "requires_grad_", "type_as", "view_as", "long", "int", "bool",
})


@dataclass(frozen=True)
class KwargUse:
    node: ast.AST  # the attribute read on the keyword argument's value
    key: str  # the key as written (`"attention_mask"`), or the loop variable


def unguarded_kwarg_uses(func: ast.AST, kwargs: str) -> list[KwargUse]:
    """Reads of a tensor-only attribute on a value taken out of ``kwargs``
    by key (``kwargs["mask"].to(d)``, ``kwargs.get("mask").shape``, a name
    bound to one) with nothing testing it first for None or its type (an
    ``if``, a conditional expression, ``and``, an earlier exit, a ``try``)."""
    out: list[KwargUse] = []
    names = _kwarg_names(func, kwargs)
    for node in _own_nodes(func):
        if not isinstance(node, ast.Attribute) or node.attr not in TENSOR_ONLY or not isinstance(node.ctx, ast.Load):
            continue
        key = _kwarg_key(node.value, kwargs, names)
        if key is None:
            continue
        if _guarded(node, node.value, func, kwargs, key):
            continue
        out.append(KwargUse(node, key))
    return out


def _key_text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return repr(node.value).replace("'", '"')
    return None


def _kwarg_key(value: ast.AST, kwargs: str, names: dict[str, str]) -> str | None:
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == kwargs:
        return _key_text(value.slice)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "get" \
            and isinstance(value.func.value, ast.Name) and value.func.value.id == kwargs and value.args:
        default = value.args[1] if len(value.args) > 1 else None
        if default is not None and not (isinstance(default, ast.Constant) and default.value is None):
            return None  # a default of its own: the author thought about absence
        return _key_text(value.args[0])
    if isinstance(value, ast.Name) and value.id in names:
        return names[value.id]
    return None


def _kwarg_names(func: ast.AST, kwargs: str) -> dict[str, str]:
    """Names bound once to a value taken out of ``kwargs`` by key."""
    bound: dict[str, list[ast.AST]] = {}
    for node in _own_nodes(func):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr)):
            t = node.target
            if isinstance(t, ast.Name):
                bound.setdefault(t.id, []).append(t)
    out = {}
    for name, values in bound.items():
        if len(values) == 1:
            key = _kwarg_key(values[0], kwargs, {})
            if key is not None:
                out[name] = key
    return out


def _mentions_value(test: ast.AST, value: ast.AST, kwargs: str, key: str) -> bool:
    """Does ``test`` look at the value (``x is not None``, ``isinstance(x, T)``,
    ``x``, ``kwargs.get("k") is not None``, ``"k" in kwargs`` does not: presence
    says nothing about None)?"""
    text = ast.unparse(value)
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In) \
                and _key_text(node.left) == key:
            return True  # `"k" in kwargs`: the author reasons about this key's presence, a key of their own
        if isinstance(node, ast.expr) and ast.unparse(node) == text:
            return True
        if isinstance(node, (ast.Subscript, ast.Call)) and _kwarg_key(node, kwargs, {}) == key:
            return True
    return False


def _guarded(node: ast.AST, value: ast.AST, func: ast.AST, kwargs: str, key: str) -> bool:
    child, cur = node, getattr(node, "_hl_parent", None)
    while cur is not None:
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test \
                and _mentions_value(cur.test, value, kwargs, key):
            return True
        if isinstance(cur, ast.BoolOp):
            index = next((i for i, v in enumerate(cur.values) if v is child), 0)
            if any(_mentions_value(v, value, kwargs, key) for v in cur.values[:index]):
                return True
        if isinstance(cur, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)) and any(
                _mentions_value(t, value, kwargs, key) for gen in cur.generators for t in gen.ifs):
            return True
        if isinstance(cur, ast.Try) and child in cur.body and cur.handlers:
            return True
        for field in ("body", "orelse", "finalbody"):
            block = getattr(cur, field, None)
            if isinstance(block, list) and child in block:
                for earlier in block[:block.index(child)]:
                    if isinstance(earlier, ast.If) and _mentions_value(earlier.test, value, kwargs, key):
                        return True  # `if mask is None: return` / `mask = ... if ... else ...`
                    if isinstance(earlier, ast.Assert) and _mentions_value(earlier.test, value, kwargs, key):
                        return True
        if cur is func:
            break
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


# ------------------------------------------------------------------ what the file knows of a hooked module


def hooked_type_known(reg) -> bool:
    """Does the file say which kinds of module a registration hooks (an
    ``isinstance`` narrowing, a test of the type around the call, a class it
    builds)?  Then the hooked module's arguments are known."""
    from hooklint.static.hook_arguments import _type_filtered  # the same test HKL406 makes

    value = reg.receiver_value
    if getattr(value, "narrowing", None) is not None or getattr(value, "torch_class", None) \
            or getattr(value, "local_class", None):
        return True
    return reg.receiver is not None and _type_filtered(reg.call, reg.receiver)


def walks_unknown_model(reg) -> str | None:
    """In words, how a registration hooks every module (or child) of a model
    the file does not build or define (``for m in model.modules()`` where
    ``model`` came from anywhere but the file's own classes), or None."""
    value = reg.receiver_value
    description = getattr(value, "description", "") or ""
    if not description.startswith(("each module of", "each child of")):
        return None
    if hooked_type_known(reg):
        return None
    root = description.split(" of ", 1)[1].strip()
    if root == "self" or root.startswith("self."):
        return None  # a module walking its own parts: its class says what they are
    return f"{description} (any module type)"


# ------------------------------------------------------------------ one collector, outputs paired by position


@dataclass(frozen=True)
class PositionPairing:
    registration: ast.Call  # the registration in the loop
    loop: ast.For  # the loop over the layers
    collector: str  # the list the hook appends to, as the pairing code spells it
    pairing: ast.AST  # where the list is paired with the layers by position
    hook_name: str


def _loop_of(node: ast.AST, stop: ast.AST | None) -> ast.For | None:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not stop and not isinstance(cur, FunctionNode + (ast.ClassDef,)):
        if isinstance(cur, ast.For):
            return cur
        cur = getattr(cur, "_hl_parent", None)
    return None


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _appended_lists(func: ast.AST) -> list[str]:
    """What a hook body appends to: ``self.outputs`` (of its own object), a free name."""
    out = []
    for node in _own_nodes(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" \
                and isinstance(node.func.value, (ast.Name, ast.Attribute)):
            out.append(ast.unparse(node.func.value))
    return out


def position_paired_collectors(model: SemanticModel, hooks, tree: ast.AST) -> list[PositionPairing]:
    """Forward hooks where one hook object (the same callable on every
    iteration) is registered in a loop over a sequence of layers, appends each
    output to one list, and code of the same class or function reads that list
    by the position of the sequence (``outputs[i] for i, name in
    enumerate(layers)``, ``zip(layers, outputs)``)."""
    from hooklint.static.hooks import HookKind

    found: list[PositionPairing] = []
    for reg in hooks.registrations:
        if reg.kind is not HookKind.FORWARD or reg.hook_expr is None:
            continue
        if isinstance(reg.hook_expr, (ast.Call, ast.Lambda)):
            continue  # a hook made per iteration can carry the layer's name
        owner = model.enclosing_function(reg.call)
        loop = _loop_of(reg.call, owner)
        if loop is None:
            continue
        loop_names = _names_in(loop.target)
        if _names_in(reg.hook_expr) & loop_names:
            continue
        hook_text = ast.unparse(reg.hook_expr)
        candidates = [(reg.hook.node, getattr(reg.hook, "via", ""))] if reg.hook is not None \
            else [(call, "__call__") for call in _stored_callables(model, reg.hook_expr)]
        if not candidates:
            continue
        collectors = []
        for node, via in candidates:
            params = positional_params(node)
            for appended in _appended_lists(node):
                if via == "__call__" and params and appended.startswith(params[0] + "."):
                    collectors.append(hook_text + appended[len(params[0]):])  # self.outputs -> self._ex.outputs
                elif "." not in appended and appended not in params:
                    collectors.append(appended)
        if not collectors:
            continue
        seq = ast.unparse(loop.iter)
        scope = model.enclosing_class(reg.call)
        region = scope.node if scope is not None else (owner if owner is not None else tree)
        pairing = _paired_by_position(region, seq, set(collectors))
        if pairing is None:
            continue
        found.append(PositionPairing(reg.call, loop, ast.unparse(pairing[1]), pairing[0], hook_text))
    return found


def _stored_callables(model: SemanticModel, expr: ast.AST) -> list[ast.AST]:
    """The ``__call__`` of every class of the file whose object a ``self.attr``
    hook is assigned in its class (``self._extractor = Handle()`` in one branch,
    ``HandleDetach()`` in the other)."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return []
    cls = model.enclosing_class(expr)
    if cls is None:
        return []
    out = []
    for node in ast.walk(cls.node):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
                and ast.unparse(node.targets[0]) == ast.unparse(expr) and isinstance(node.value, ast.Call):
            info = model.class_for_expr(node.value.func)
            call = info.methods.get("__call__") if info is not None else None
            if call is not None:
                out.append(call)
    return out


def _paired_by_position(region: ast.AST, seq: str, collectors: set[str]):
    for node in ast.walk(region):
        # zip(layers, outputs) / zip(outputs, layers)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "zip" \
                and len(node.args) >= 2:
            texts = [ast.unparse(a) for a in node.args]
            if seq in texts:
                for a, text in zip(node.args, texts):
                    if text in collectors:
                        return node, a
        # outputs[i] where i is enumerate(layers)'s index
        if isinstance(node, ast.comprehension) or isinstance(node, ast.For):
            it = node.iter
            target = node.target
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" \
                    and it.args and ast.unparse(it.args[0]) == seq and isinstance(target, ast.Tuple) \
                    and target.elts and isinstance(target.elts[0], ast.Name):
                index = target.elts[0].id
                holder = getattr(node, "_hl_parent", None) if isinstance(node, ast.comprehension) else node
                for sub in ast.walk(holder):
                    if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Name) and sub.slice.id == index \
                            and ast.unparse(sub.value) in collectors:
                        return sub, sub.value
    return None
