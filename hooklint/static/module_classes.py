"""Module classes seen across the project: is a class of another file an
``nn.Module``, and does its ``__call__`` still run torch's hooks?

Facts of torch (tests/behaviour/test_forward_binding.py):

- module hooks run from ``nn.Module.__call__`` (``_call_impl``); a class
  that overrides ``__call__`` and never reaches it (gpytorch's ``Module``:
  ``outputs = self.forward(*inputs)``) runs no torch hook whichever way it is
  called, so ``module.forward(x)`` skips nothing there;
- a parameter annotated with a module class of another file, or an
  attribute set from one, is a module like a local one.

The per-file part (:func:`bypassing_calls`) goes into the file's summary
(``"bypass_call"``); the project index answers the question
``modcls:<class>`` (``ProjectIndex.module_class``).

Never imports torch, never runs the checked code.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Iterator

from hooklint.static.semantic import FunctionNode, SemanticModel

if TYPE_CHECKING:
    from hooklint.static.context import FileContext

# what a `__call__` override calls to reach torch's own (the hooks run there)
_REACHES_TORCH_CALL = frozenset({"__call__", "_call_impl", "_wrapped_call_impl"})


def bypassing_calls(model: SemanticModel) -> dict[str, int]:
    """``{class local name: line}`` of the classes of the file whose own
    ``__call__`` never calls ``super().__call__`` (or ``Base.__call__``,
    ``_call_impl``): torch's hooks do not run when such an object is called."""
    from hooklint.static.callgraph import local_qualname

    out: dict[str, int] = {}
    for info in model.classes.values():
        method = info.method("__call__")
        if not isinstance(method, FunctionNode) or _reaches_torch_call(method):
            continue
        local = local_qualname(info.node)
        if local is not None:
            out[local] = method.lineno
    return out


def _reaches_torch_call(method: ast.AST) -> bool:
    for node in ast.walk(method):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _REACHES_TORCH_CALL:
            return True
    return False


def declared_class(ctx: "FileContext", expr: ast.AST) -> str | None:
    """The absolute name of the class ``expr`` is declared or built as, when
    the file says it: a parameter's annotation (``attention: Attention``), an
    attribute of ``self`` assigned from such a parameter or from a
    constructor call (``self.attention = attention``, ``self.block =
    Block(...)``), or annotated in the class (``self.block: Block``).  None
    when the declarations disagree or say nothing."""
    found: set[str] = set()
    for source in _declarations(ctx, expr):
        qual = ctx.summarizer.absolute(source)
        if qual is None:
            return None
        found.add(qual)
    return found.pop() if len(found) == 1 else None


def _declarations(ctx: "FileContext", expr: ast.AST) -> Iterator[ast.AST]:
    if isinstance(expr, ast.Name):
        annotation = _param_annotation(ctx, expr) or _local_annotation(ctx, expr)
        if annotation is not None:
            yield annotation
            return
        constructed = _constructed_by(ctx, expr)
        if constructed is not None:
            yield constructed
        bindings = ctx.model.bindings_at(expr) if hasattr(expr, "_hl_scope") else []
        if len(bindings) == 1 and bindings[0].kind == "for" and not bindings[0].path:
            yield from _element_declarations(ctx, bindings[0].value)  # `for m in self.blocks[1:]`
        return
    if isinstance(expr, ast.Subscript):
        yield from _element_declarations(ctx, expr.value)  # `self.blocks[0]`
        return
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return
    func = ctx.model.enclosing_function(expr)
    cls = ctx.model.enclosing_class(func) if func is not None else None
    if cls is None:
        return
    for stmt in _self_assignments(cls).get(expr.attr, ()):
        if isinstance(stmt, ast.AnnAssign):
            yield stmt.annotation
        else:
            value = stmt.value
            if isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
                yield value.func
            elif isinstance(value, ast.Name):
                annotation = _param_annotation(ctx, value)
                if annotation is None:
                    yield value  # unknown: `absolute` of a plain local gives None, which ends the search
                else:
                    yield annotation
            else:
                yield value


def _element_declarations(ctx: "FileContext", container: ast.AST) -> Iterator[ast.AST]:
    """The constructors of the elements of ``self.<attr>`` (or a slice of
    it) when the class builds it from a list of constructor calls:
    ``nn.ModuleList([Block(...) for ...])``, ``nn.Sequential(Block(), Block())``."""
    while isinstance(container, ast.Subscript) and isinstance(container.slice, ast.Slice):
        container = container.value
    if not (isinstance(container, ast.Attribute) and isinstance(container.value, ast.Name)
            and container.value.id == "self"):
        return
    func = ctx.model.enclosing_function(container)
    cls = ctx.model.enclosing_class(func) if func is not None else None
    if cls is None:
        return
    seen = False
    for stmt in _self_assignments(cls).get(container.attr, ()):
        if not isinstance(stmt, ast.Assign):
            continue
        seen = True
        value = stmt.value
        items: list[ast.AST] = []
        if isinstance(value, ast.Call):
            args = list(value.args)
            if len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
                items = list(args[0].elts)
            elif len(args) == 1 and isinstance(args[0], (ast.ListComp, ast.GeneratorExp)):
                items = [args[0].elt]
            else:
                items = args
        if not items:
            yield container  # not a list of constructor calls: unknown, which ends the search
            return
        for item in items:
            if isinstance(item, ast.Call) and isinstance(item.func, (ast.Name, ast.Attribute)):
                yield item.func
            else:
                yield container
                return
    if not seen:
        yield container


def _constructed_by(ctx: "FileContext", name: ast.Name) -> ast.AST | None:
    """``Cls`` of ``name = Cls(...)``, the name's one binding in its function."""
    bindings = ctx.model.bindings_at(name) if hasattr(name, "_hl_scope") else []
    if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
        return None
    value = bindings[0].value
    if isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
        return value.func
    return None


def _self_assignments(cls) -> dict[str, list[ast.AST]]:
    """``self.<attr> = ...`` and ``self.<attr>: T`` statements of a class, by
    attribute, walked once per class."""
    found = getattr(cls, "_hl_self_assignments", None)
    if found is None:
        found = {}
        for stmt in ast.walk(cls.node):
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Attribute) \
                    and _is_self_attr(stmt.target, stmt.target.attr):
                found.setdefault(stmt.target.attr, []).append(stmt)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Attribute) and _is_self_attr(target, target.attr):
                        found.setdefault(target.attr, []).append(stmt)
        cls._hl_self_assignments = found
    return found


def _is_self_attr(target: ast.AST, attr: str) -> bool:
    return isinstance(target, ast.Attribute) and target.attr == attr \
        and isinstance(target.value, ast.Name) and target.value.id == "self"


def _local_annotation(ctx: "FileContext", name: ast.Name) -> ast.AST | None:
    """``T`` of ``x: T = ...`` anywhere in the scope the name is read from
    (a nested function or lambda reads its enclosing function's variable):
    the annotation declares the variable for the whole scope (PEP 526), so
    every other binding of it (``x = y`` in another branch) is a ``T`` too.
    None when the scope annotates it twice, differently, or not as a class."""
    model = ctx.model  # built first: it marks the nodes with their scopes
    if not hasattr(name, "_hl_scope"):
        return None
    found: dict[str, ast.AST] = {}
    for binding in model.lookup(name.id, name._hl_scope):  # type: ignore[attr-defined]
        stmt = binding.node
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name.id:
            if not isinstance(stmt.annotation, (ast.Name, ast.Attribute)):
                return None
            found[ast.dump(stmt.annotation)] = stmt.annotation
    return next(iter(found.values())) if len(found) == 1 else None


def _param_annotation(ctx: "FileContext", name: ast.Name) -> ast.AST | None:
    bindings = ctx.model.bindings_at(name) if hasattr(name, "_hl_scope") else []
    if len(bindings) != 1 or bindings[0].kind != "param":
        return None
    annotation = getattr(bindings[0].value, "annotation", None)
    if isinstance(annotation, (ast.Name, ast.Attribute)):
        return annotation
    return None


def module_class_answer(index: Any, qual: str) -> list[Any] | None:
    """``[is a module (True / None), "path:line" of a __call__ that bypasses
    torch's, or None]`` for the class ``qual`` of the project, looked up along
    its bases (a ``__call__`` defined on the way that calls its parent's
    passes the question on); None when ``qual`` is not a class of the project."""
    from hooklint.static.semantic import is_torch_module_class

    start = index.canonical(qual)
    if start is None or not index.is_class(start):
        return None
    is_module: bool | None = None
    bypass: str | None = None
    call_settled = False
    stack, seen = [start], set()
    while stack and len(seen) < 32:
        cls = stack.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        module, local = index._split(cls, "classes")
        if module is None:
            continue
        summary = index.modules[module]
        raw = summary["classes"][local]
        if any(is_torch_module_class(base) for base in raw if base):
            is_module = True
        if not call_settled and f"{local}.__call__" in summary["functions"]:
            # a `__call__` that calls its parent's passes the call on along the bases
            line = summary.get("bypass_call", {}).get(local)
            if line is not None:
                call_settled = True
                bypass = f"{summary['path']}:{line}"
        stack.extend(index.bases(cls))
    return [is_module, bypass]


def enclosing_class_qual(ctx: "FileContext", node: ast.AST) -> str | None:
    """The absolute name of the class whose method holds ``node``."""
    from hooklint.static.callgraph import local_qualname

    func = ctx.model.enclosing_function(node)
    cls = ctx.model.enclosing_class(func) if func is not None else None
    if cls is None:
        return None
    local = local_qualname(cls.node)
    return None if local is None else f"{ctx.module}.{local}"


def private_unhooked_local(ctx: "FileContext", receiver: ast.AST, call: ast.Call,
                           fresh: Any) -> bool:
    """``model = Cls(...)`` in this function, then ``model.forward(x)``, and
    nothing between can hook it: every other use of the name in the function
    (nested functions included) reads an attribute of it or calls one of its
    methods that is not a hook API, so the object is never handed to code
    that could register a hook on it (a test's or a benchmark's own model).
    ``fresh(ctx, value)`` says whether the constructor call makes an
    unhooked object (forward_binding.fresh_unhooked_instance)."""
    if not isinstance(receiver, ast.Name):
        return False
    bindings = ctx.model.bindings_at(receiver)
    if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
        return False
    value = bindings[0].value
    if not isinstance(value, ast.Call) or not fresh(ctx, value):
        return False
    func = ctx.model.enclosing_function(call)
    scope_node = func if func is not None else None
    if scope_node is None or bindings[0].scope.node is not scope_node:
        return False
    # what runs after the call matters only when a loop brings it round again
    loop = _outermost_loop(call, scope_node)
    before = (call.lineno, call.col_offset)
    stores = 0
    inside_value = {id(sub) for sub in ast.walk(value)}  # `model = Wrapper(model)`: the old object
    for node in ast.walk(scope_node):
        if not (isinstance(node, ast.Name) and node.id == receiver.id) or node is receiver or id(node) in inside_value:
            continue
        if (node.lineno, node.col_offset) > before and not (loop is not None and _inside(node, loop)) \
                and isinstance(node.ctx, ast.Load):
            continue
        if not isinstance(node.ctx, ast.Load):
            stores += 1
            if stores > 1:
                return False  # bound twice: the other value is not the fresh object
            continue
        parent = getattr(node, "_hl_parent", None)
        if not isinstance(parent, ast.Attribute):
            return False  # handed to a call, stored, aliased: someone else may hook it
        attr = parent.attr
        if "hook" in attr.lower() or attr.startswith("register") or attr in ("apply", "__dict__"):
            return False
        if isinstance(getattr(parent, "_hl_parent", None), (ast.Assign, ast.AugAssign)) \
                and isinstance(parent.ctx, ast.Store):
            return False  # `model.forward = ...` and the like
    return True


def _outermost_loop(node: ast.AST, stop: ast.AST) -> ast.AST | None:
    found = None
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not stop:
        if isinstance(cur, (ast.For, ast.AsyncFor, ast.While)):
            found = cur
        cur = getattr(cur, "_hl_parent", None)
    return found


def _inside(node: ast.AST, ancestor: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None:
        if cur is ancestor:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False
