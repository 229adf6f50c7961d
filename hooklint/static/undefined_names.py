"""Names that code run only at backward time uses and nothing in its file binds.

A custom ``autograd.Function``'s ``backward`` (its ``jvp`` / ``vjp``, a
backward registered with ``torch.library.register_autograd``) and a
backward hook run only when a gradient flows: inference, a forward-only
smoke test and an import never reach them.  A helper they call that the
file never defines or imports (removed in a refactor, renamed, moved to
another module without an import) stays unseen until the first training
step, which then dies with ``NameError``.

The question is deliberately narrower than a general undefined-name check:
a name counts as unbound only when *nothing anywhere in the file* binds it
(any scope: an assignment, ``def``, ``class``, import, parameter, ``for``
or ``with`` target, ``except ... as``, a ``match`` capture, ``global``), it
is not a builtin, and the file has no way of adding global names the text
cannot show (``from m import *``, ``globals()`` / ``vars()`` /
``__builtins__`` / ``builtins.`` writes, ``exec``, ``setattr`` on a module
object, ``sys.modules``).  A use inside a ``try`` that catches
``NameError`` (or any exception) is the author's own probe.  Annotations
are skipped: they need not be evaluated.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode, SemanticModel
from hooklint.static.tree_walk import walk_tree

# Builtins of the running interpreter, plus those of other Python versions and
# of the shells that run notebooks: code guarded for them must stay quiet.
_BUILTINS = frozenset(dir(builtins)) | frozenset({
    "__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__", "__path__",
    "__cached__", "__annotations__", "__class__", "__debug__", "__dict__", "__module__", "__qualname__",
    "unicode", "xrange", "long", "basestring", "file", "reduce", "raw_input", "unichr", "execfile", "cmp",
    "buffer", "apply", "intern", "coerce", "reload", "WindowsError",
    "get_ipython", "display", "In", "Out", "exit", "quit", "aiter", "anext", "EncodingWarning",
    "ExceptionGroup", "BaseExceptionGroup", "PythonFinalizationError",
})

# Calls and names through which a module can gain global names its text does not show.
_DYNAMIC_NAMES = frozenset({"globals", "vars", "exec", "execfile", "__builtins__", "locals"})
_CATCHES_NAME_ERROR = frozenset({"NameError", "Exception", "BaseException", "UnboundLocalError"})

_CACHE_ATTR = "_hl_file_bound_names"
_MODEL_NAMES_ATTR = "_hl_bound_names"  # on the SemanticModel: every name one of its scopes binds

# Syntax newer than some supported Pythons (3.12's `type X = ...`, PEP 695 type parameters): the node types
# of the running Python, looked up once rather than at every node of every file
_TYPE_ALIAS = getattr(ast, "TypeAlias", None)
_TYPE_PARAMS = tuple(getattr(ast, name) for name in ("TypeVar", "ParamSpec", "TypeVarTuple") if hasattr(ast, name))


@dataclass(frozen=True)
class UnboundUse:
    node: ast.Name
    called: bool  # `helper(...)` rather than a plain read


def file_bound_names(tree: ast.Module) -> frozenset[str] | None:
    """Every name anything in the file binds, in any scope; None when the
    file can bind global names its text does not show."""
    if _CACHE_ATTR in tree.__dict__:
        return tree.__dict__[_CACHE_ATTR]
    bound: set[str] = set()
    dynamic = False
    for node in walk_tree(tree):
        kind = type(node)
        if kind is ast.Name:
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif node.id in _DYNAMIC_NAMES:
                dynamic = True
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            bound.add(node.name)
        elif kind is ast.arg:
            bound.add(node.arg)
        elif kind in (ast.Import, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    dynamic = True
                bound.add(alias.asname or alias.name.split(".")[0])
        elif kind is ast.ExceptHandler:
            if node.name:
                bound.add(node.name)
        elif kind in (ast.Global, ast.Nonlocal):
            bound.update(node.names)
        elif kind in (ast.MatchAs, ast.MatchStar):
            if node.name:
                bound.add(node.name)
        elif kind is ast.MatchMapping:
            if node.rest:
                bound.add(node.rest)
        elif kind is ast.Attribute:
            # `builtins.helper = ...`, `sys.modules[...]`, `setattr(module, ...)` reach the namespace sideways
            if node.attr == "modules" and isinstance(node.value, ast.Name) and node.value.id == "sys":
                dynamic = True
            elif isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) \
                    and node.value.id in ("builtins", "__builtin__"):
                dynamic = True
        elif kind is ast.Call:
            func = node.func
            if isinstance(func, ast.Name) and func.id == "setattr" and node.args \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in ("builtins", "__builtin__"):
                dynamic = True
        elif kind is _TYPE_ALIAS:
            if isinstance(node.name, ast.Name):
                bound.add(node.name.id)
        elif kind in _TYPE_PARAMS:
            bound.add(node.name)
    result = None if dynamic else frozenset(bound)
    tree.__dict__[_CACHE_ATTR] = result
    return result


def may_read_unbound(model: SemanticModel, body: ast.AST) -> bool:
    """Whether ``body`` loads a name that no scope of the semantic model binds
    and no builtin provides: a cheap test that answers False for most
    bodies.  Every name the model binds (definitions, parameters, imports,
    assignment, loop, ``with`` and ``except`` targets) is one
    :func:`file_bound_names` counts too, so when this is False
    :func:`unbound_uses` finds nothing in ``body``, without the walk of the
    whole file that ``file_bound_names`` makes."""
    bound = model.__dict__.get(_MODEL_NAMES_ATTR)
    if bound is None:
        bound = frozenset(name for scope in model.scopes.values() for name in scope.bindings)
        model.__dict__[_MODEL_NAMES_ATTR] = bound
    return any(type(node) is ast.Name and node.id not in bound and node.id not in _BUILTINS
               and isinstance(node.ctx, ast.Load) for node in ast.walk(body))


def unbound_uses(tree: ast.Module, body: ast.AST) -> list[UnboundUse]:
    """Loads of names in ``body`` (a function or lambda, with what it nests)
    that nothing in the file binds and no builtin provides, in source order."""
    bound = file_bound_names(tree)
    if bound is None:
        return []
    out: list[UnboundUse] = []
    for node in ast.walk(body):
        if not (type(node) is ast.Name and isinstance(node.ctx, ast.Load)):
            continue
        if node.id in bound or node.id in _BUILTINS:
            continue
        if _in_annotation(node, body) or _probed(node, body):
            continue
        parent = getattr(node, "_hl_parent", None)
        out.append(UnboundUse(node, isinstance(parent, ast.Call) and parent.func is node))
    out.sort(key=lambda use: (use.node.lineno, use.node.col_offset))
    return out


def _in_annotation(node: ast.AST, stop: ast.AST) -> bool:
    child, cur = node, getattr(node, "_hl_parent", None)
    while cur is not None and child is not stop:
        if isinstance(cur, ast.arg) and cur.annotation is child:
            return True
        if isinstance(cur, FunctionNode) and cur.returns is child:
            return True
        if isinstance(cur, ast.AnnAssign) and cur.annotation is child:
            return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


def _probed(node: ast.AST, stop: ast.AST) -> bool:
    """The use sits in the body of a ``try`` whose handlers catch NameError."""
    child, cur = node, getattr(node, "_hl_parent", None)
    while cur is not None and child is not stop:
        if isinstance(cur, ast.Try) and child in cur.body:
            for handler in cur.handlers:
                if handler.type is None or _caught_names(handler.type) & _CATCHES_NAME_ERROR:
                    return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return False


def _caught_names(spec: ast.AST) -> set[str]:
    elts = spec.elts if isinstance(spec, ast.Tuple) else [spec]
    return {e.id if isinstance(e, ast.Name) else e.attr for e in elts if isinstance(e, (ast.Name, ast.Attribute))}
