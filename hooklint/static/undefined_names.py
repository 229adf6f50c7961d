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

from hooklint.static.semantic import FunctionNode
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
        elif hasattr(ast, "TypeAlias") and kind is getattr(ast, "TypeAlias"):
            if isinstance(node.name, ast.Name):
                bound.add(node.name.id)
        elif hasattr(ast, "TypeVar") and kind in (getattr(ast, "TypeVar"), getattr(ast, "ParamSpec", ast.TypeVar),
                                                   getattr(ast, "TypeVarTuple", ast.TypeVar)):
            bound.add(node.name)
    result = None if dynamic else frozenset(bound)
    tree.__dict__[_CACHE_ATTR] = result
    return result


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
