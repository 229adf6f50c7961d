"""Saved-tensors-hooks contexts: where they are pushed, where they are popped,
and which functions run as their pack and unpack hooks.

``torch.autograd.graph.saved_tensors_hooks`` (and ``save_on_cpu``, and any
subclass) keeps a per-thread *stack* of (pack, unpack) pairs: ``__enter__``
pushes its pair, ``__exit__`` pops whatever pair is on top, whoever pushed
it.  Code that enters such a context by hand (``ctx.__enter__()``) and exits
it from some other function decides *where* the pop happens; this module
answers, for one file:

- which expressions are such contexts (a constructor call, a name or a
  ``self.<attr>`` every assignment of which is one, ``self`` inside a
  subclass, an object of a class of the file whose ``__exit__`` pops);
- which calls pop the stack (``<context>.__exit__(...)``,
  ``torch._C._autograd._pop_saved_tensors_default_hooks()``), and which
  functions of the file reach such a call through their own calls
  (:meth:`SavedTensorScopes.pop_path`);
- which functions run as pack or unpack hooks (the arguments of the
  constructor, of ``_push_saved_tensors_default_hooks``, of
  ``super().__init__`` in a subclass).

Nothing here imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from hooklint.static.core import Core
from hooklint.static.semantic import ClassInfo, FunctionNode, SemanticModel
from hooklint.static.tree_walk import walk_tree

SCOPE_CLASSES = frozenset({
    "torch.autograd.graph.saved_tensors_hooks",
    "torch.autograd.graph.save_on_cpu",
})
PUSH_CALLS = frozenset({"torch._C._autograd._push_saved_tensors_default_hooks"})
POP_CALLS = frozenset({"torch._C._autograd._pop_saved_tensors_default_hooks"})
# Words a file must contain for any of this to find something.
TRIGGERS = ("saved_tensors_hooks", "save_on_cpu", "_push_saved_tensors_default_hooks", "_pop_saved_tensors_default_hooks")

_HOOK_KEYWORDS = {"pack_hook": "pack", "unpack_hook": "unpack"}


@dataclass(frozen=True, eq=False)
class HookSite:
    """A function that runs as a pack or unpack hook."""

    role: str  # "pack" | "unpack" | a hook that runs during backward ("tensor hook", ...)
    function: ast.AST  # FunctionDef, AsyncFunctionDef or Lambda
    registered_at: ast.AST  # the call that hands it to autograd (for a Function's backward: its def)

    @property
    def during_backward(self) -> bool:
        return self.role != "pack"


@dataclass(frozen=True, eq=False)
class PopPath:
    """How a function reaches a pop of the hooks stack: the calls it makes,
    outermost first; the last one pops."""

    calls: tuple[ast.Call, ...]

    @property
    def first(self) -> ast.Call:
        return self.calls[0]

    @property
    def pop(self) -> ast.Call:
        return self.calls[-1]


class SavedTensorScopes:
    def __init__(self, model: SemanticModel, core: Core):
        self.model = model
        self.core = core
        self._scope_class: dict[int, bool] = {}
        self._pops: dict[int, PopPath | None] = {}
        self._computing: set[int] = set()
        self._switch: dict[int, bool | None] = {}

    # ------------------------------------------------------------ contexts
    def is_scope_class(self, info: ClassInfo, _depth: int = 0) -> bool:
        """A class of the file whose objects push and pop saved-tensors hooks:
        a subclass of ``saved_tensors_hooks`` / ``save_on_cpu``, or a class
        whose own ``__exit__`` pops the stack itself."""
        key = id(info)
        if key in self._scope_class:
            return self._scope_class[key]
        self._scope_class[key] = False  # a cycle of bases adds nothing
        found = any(q in SCOPE_CLASSES for q in info.bases) or (
            _depth < 8 and any(self.is_scope_class(b, _depth + 1) for b in info.local_bases))
        if not found:
            exit_method = info.methods.get("__exit__")
            found = exit_method is not None and any(
                self._qualified(c) in POP_CALLS for c in _own_calls(exit_method))
        self._scope_class[key] = found
        return found

    def is_scope(self, expr: ast.AST, _depth: int = 0) -> bool:
        """Is ``expr`` a saved-tensors-hooks context object, on every way it gets its value?"""
        if _depth > 4:
            return False
        if isinstance(expr, ast.Call):
            if self._qualified(expr.func) in SCOPE_CLASSES:
                return True
            info = self.model.class_for_expr(expr.func) if isinstance(expr.func, ast.Name) else None
            return info is not None and self.is_scope_class(info)
        if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
            if expr.id == "self":
                cls = self.model.enclosing_class(expr)
                bindings = self.model.bindings_at(expr)
                if cls is not None and bindings and bindings[0].kind == "param":
                    return self.is_scope_class(cls)
            bindings = self.model.bindings_at(expr)
            values = [b.value for b in bindings if b.kind == "assign" and not b.path]
            return bool(values) and len(values) == len(bindings) and all(
                isinstance(v, ast.AST) and self.is_scope(v, _depth + 1) for v in values)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            cls = self.model.enclosing_class(expr)
            if cls is None:
                return False
            assigned = cls.attribute(expr.attr)
            values = [v for v, _scope, _node in assigned if v is not None]
            return bool(values) and all(self.is_scope(v, _depth + 1) for v in values)
        return False

    def pops_here(self, call: ast.Call) -> bool:
        """Does this call pop the saved-tensors hooks stack itself?"""
        if self._qualified(call.func) in POP_CALLS:
            return True
        func = call.func
        return isinstance(func, ast.Attribute) and func.attr == "__exit__" and self.is_scope(func.value)

    # ------------------------------------------------------------ who pops
    def pop_path(self, function: ast.AST) -> PopPath | None:
        """The first way the body of ``function`` (a def or a lambda) can pop
        the stack: a pop of its own, or a call of a function of the file that
        pops.  Pops the same function balances with its own earlier push
        (``ctx.__enter__()`` ... ``ctx.__exit__()``) do not count, nor calls
        that cannot run (dead code, a branch behind a switch function of the
        file that always answers the same)."""
        key = id(function)
        if key in self._pops:
            return self._pops[key]
        if key in self._computing:
            return None
        self._computing.add(key)
        found: PopPath | None = None
        try:
            pushed = self._pushed_receivers(function)
            for call in _own_calls(function):
                if not self._can_run(call):
                    continue
                if self.pops_here(call):
                    receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
                    if pop_key(receiver) in pushed:
                        continue
                    found = PopPath((call,))
                    break
                callee = self._callee(call)
                if callee is None:
                    continue
                inner = self.pop_path(callee)
                if inner is not None:
                    found = PopPath((call,) + inner.calls)
                    break
        finally:
            self._computing.discard(key)
        self._pops[key] = found
        return found

    def _pushed_receivers(self, function: ast.AST) -> set[str]:
        found: set[str] = set()
        for call in _own_calls(function):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "__enter__":
                found.add(pop_key(func.value))
            elif self._qualified(func) in PUSH_CALLS:
                found.add(_PUSH_KEY)
        return found

    def _callee(self, call: ast.Call) -> ast.AST | None:
        try:
            local = self.core.local_callee(call)
        except RecursionError:  # pragma: no cover - pathological nesting
            return None
        if local is None:
            return None
        node = local[0]
        return node if isinstance(node, FunctionNode) else None

    def _can_run(self, node: ast.AST) -> bool:
        if not self.core.can_run(node):
            return False
        return not self._behind_constant_switch(node)

    def _behind_constant_switch(self, node: ast.AST) -> bool:
        """Is ``node`` in the branch of an ``if`` that a switch function of the
        file never takes?  A switch function takes no argument and returns the
        same constant on every path (``def _can_exit_inside_hooks(): return
        False``), the way a workaround is switched off until a torch release
        fixes the bug it avoids."""
        child = node
        cur = getattr(node, "_hl_parent", None)
        while cur is not None and not isinstance(cur, FunctionNode + (ast.Lambda, ast.Module, ast.ClassDef)):
            if isinstance(cur, ast.If) and child is not cur.test:
                value = self._switch_value(cur.test)
                if value is not None:
                    if child in cur.body and value is False:
                        return True
                    if child in cur.orelse and value is True:
                        return True
            child, cur = cur, getattr(cur, "_hl_parent", None)
        return False

    def _switch_value(self, test: ast.AST) -> bool | None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._switch_value(test.operand)
            return None if inner is None else not inner
        if isinstance(test, ast.BoolOp):
            values = [self._switch_value(v) for v in test.values]
            if isinstance(test.op, ast.And) and False in values:
                return False
            if isinstance(test.op, ast.Or) and True in values:
                return True
            return None
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and not test.args
                and not test.keywords and hasattr(test.func, "_hl_scope")):
            return None
        bindings = self.model.bindings_at(test.func)
        if len(bindings) != 1 or bindings[0].kind != "def" or not isinstance(bindings[0].node, ast.FunctionDef):
            return None
        func = bindings[0].node
        key = id(func)
        if key not in self._switch:
            self._switch[key] = _constant_answer(func)
        return self._switch[key]

    # ------------------------------------------------------------ hooks
    def hook_sites(self) -> Iterator[HookSite]:
        """Every function of the file handed to autograd as a pack or unpack hook."""
        seen: set[tuple[int, str]] = set()
        for call in _all_calls(self.model.tree):
            if not self._registers_hooks(call):
                continue
            for role, expr in _hook_arguments(call):
                function = self.resolve_callable(expr)
                if function is None or (id(function), role) in seen:
                    continue
                seen.add((id(function), role))
                yield HookSite(role, function, call)

    def backward_sites(self) -> Iterator[HookSite]:
        """Functions of the file that run during backward() other than unpack
        hooks: tensor and autograd-Node hooks, post-accumulate-grad hooks,
        module backward hooks, and the ``backward`` of a custom
        ``autograd.Function``."""
        from hooklint.static.hooks import HookKind

        words = {HookKind.TENSOR: "tensor hook", HookKind.POST_ACCUMULATE: "post-accumulate-grad hook",
                 HookKind.BACKWARD_LEGACY: "module backward hook", HookKind.FULL_BACKWARD: "module backward hook",
                 HookKind.FULL_BACKWARD_PRE: "module backward pre-hook"}
        seen: set[int] = set()
        for reg in self.core.hooks.registrations:
            word = words.get(reg.kind)
            node = reg.hook.node if reg.hook is not None else None
            if word is None or node is None or id(node) in seen:
                continue
            seen.add(id(node))
            yield HookSite(word, node, reg.call)
        for info in self.model.classes.values():
            backward = info.methods.get("backward")
            if backward is not None and id(backward) not in seen and self.model.is_autograd_function_class(info):
                seen.add(id(backward))
                yield HookSite("autograd.Function backward", backward, backward)

    def _registers_hooks(self, call: ast.Call) -> bool:
        qual = self._qualified(call.func)
        if qual in SCOPE_CLASSES or qual in PUSH_CALLS:
            return True
        func = call.func
        if isinstance(func, ast.Name) and hasattr(func, "_hl_scope"):
            info = self.model.class_for_expr(func)
            # a subclass's own constructor takes its own arguments: only one
            # that inherits __init__ hands them to saved_tensors_hooks
            return info is not None and info.method("__init__") is None and self.is_scope_class(info)
        if isinstance(func, ast.Attribute) and func.attr == "__init__":
            cls = self.model.enclosing_class(call)
            if cls is None or not self.is_scope_class(cls):
                return False
            receiver = func.value
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
                return True
            return self._qualified(receiver) in SCOPE_CLASSES
        return False

    def resolve_callable(self, expr: ast.AST, _depth: int = 0) -> ast.AST | None:
        """The function of this file an expression names (a def, a lambda,
        ``self.<method>``, ``functools.partial(f, ...)``), or None."""
        if _depth > 4:
            return None
        if isinstance(expr, ast.Lambda):
            return expr
        if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
            bindings = self.model.bindings_at(expr)
            if len(bindings) != 1:
                return None
            b = bindings[0]
            if b.kind == "def" and isinstance(b.node, FunctionNode):
                return b.node
            if b.kind == "assign" and not b.path and isinstance(b.value, ast.AST):
                return self.resolve_callable(b.value, _depth + 1)
            return None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) \
                and expr.value.id in ("self", "cls") and hasattr(expr.value, "_hl_scope"):
            cls = self.model.enclosing_class(expr)
            return cls.method(expr.attr) if cls is not None else None
        if isinstance(expr, ast.Call) and expr.args and self._qualified(expr.func) == "functools.partial":
            return self.resolve_callable(expr.args[0], _depth + 1)
        return None

    def _qualified(self, expr: ast.AST) -> str | None:
        if not (hasattr(expr, "_hl_scope") or isinstance(expr, ast.Attribute)):
            return None
        try:
            return self.model.qualify(expr)
        except Exception:  # noqa: BLE001 - an expression the model did not visit
            return None


_PUSH_KEY = "<push>"


def pop_key(receiver: ast.AST | None) -> str:
    """A name for the context a push or pop acts on: the source of the
    receiver (``noop``; ``self.ctx`` with its class's name, since every class
    has its own ``self.ctx``), or the raw stack's own key."""
    if receiver is None:
        return _PUSH_KEY
    text = ast.unparse(receiver)
    root = receiver
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    if isinstance(root, ast.Name) and root.id == "self":
        cur = getattr(receiver, "_hl_parent", None)
        while cur is not None and not isinstance(cur, ast.ClassDef):
            cur = getattr(cur, "_hl_parent", None)
        if cur is not None:
            return f"{cur.name}:{text}"
    return text


def _hook_arguments(call: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    args = list(call.args)
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "__init__" and not (
            isinstance(func.value, ast.Call) and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "super"):
        args = args[1:]  # saved_tensors_hooks.__init__(self, pack, unpack)
    for index, role in enumerate(("pack", "unpack")):
        if index < len(args) and not isinstance(args[index], ast.Starred):
            yield role, args[index]
    for keyword in call.keywords:
        if keyword.arg in _HOOK_KEYWORDS:
            yield _HOOK_KEYWORDS[keyword.arg], keyword.value


def _constant_answer(func: ast.FunctionDef) -> bool | None:
    """What a function without parameters returns on every path, when that
    is one constant (None when it takes arguments, or may answer otherwise)."""
    a = func.args
    if a.args or a.posonlyargs or a.kwonlyargs or a.vararg or a.kwarg or func.decorator_list:
        return None
    values: set[bool] = set()
    for node in _own_nodes(func):
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            return None
        if isinstance(node, ast.Return):
            if not isinstance(node.value, ast.Constant) and node.value is not None:
                return None
            values.add(bool(node.value.value) if node.value is not None else False)
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body or not isinstance(body[-1], ast.Return):
        values.add(False)  # may fall off its end: None
    return values.pop() if len(values) == 1 else None


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of functions, lambdas or
    classes nested in it (they run when called, not here)."""
    body = function.body if isinstance(function.body, list) else [function.body]
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        children = [c for c in ast.iter_child_nodes(node)
                    if not isinstance(c, FunctionNode + (ast.Lambda, ast.ClassDef))]
        stack.extend(reversed(children))


def _own_calls(function: ast.AST) -> list[ast.Call]:
    calls = [n for n in _own_nodes(function) if isinstance(n, ast.Call)]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return calls


def _all_calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in walk_tree(tree):
        if isinstance(node, ast.Call):
            yield node
