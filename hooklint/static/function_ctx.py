"""What a custom ``autograd.Function``'s ``ctx`` holds: attributes its
``backward`` reads that nothing in the class ever sets.

``ctx`` is an instance of the ``<Name>Backward`` class torch builds for the
Function (a ``BackwardCFunction``), not of the Function itself: it carries
what torch gives every node (``saved_tensors``, ``needs_input_grad``...) and
what ``forward`` / ``setup_context`` put on it, nothing else (a class
attribute of the Function is not visible on it).  Checked on torch 2.13:
``ctx.alpha`` never assigned raises ``AttributeError: 'FBackward' object has
no attribute 'alpha'`` when backward runs.

The answer is conservative: a class whose ``ctx`` escapes into a call
(a helper may set anything), that is subclassed or has a base other than
torch's Function, or whose backward tests attributes (``hasattr``,
``getattr``, ``except AttributeError``) is left alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.autograd_function import AutogradFunction, autograd_functions
from hooklint.static.context import FileContext

# dir(torch.autograd.function.BackwardCFunction) on torch 2.13, plus `_forward_cls` (set per Function);
# names starting with `_` are never judged (private and version-dependent).
CTX_PROVIDED = frozenset({
    "apply", "apply_boxed", "apply_jvp", "dirty_tensors", "mark_dirty", "mark_non_differentiable",
    "mark_shared_storage", "materialize_grads", "maybe_clear_saved_tensors", "metadata", "name",
    "needs_input_grad", "next_functions", "non_differentiable", "register_hook", "register_prehook",
    "requires_grad", "save_for_backward", "save_for_forward", "saved_for_forward", "saved_tensors",
    "saved_variables", "set_materialize_grads", "to_save",
})

_TORCH_FUNCTION_BASES = frozenset({
    "torch.autograd.Function", "torch.autograd.function.Function",
    "torch.autograd.function.InplaceFunction", "torch.autograd.InplaceFunction",
})



@dataclass
class UnsetCtxRead:
    fn: AutogradFunction
    attr: str
    read: ast.Attribute  # the first read in backward
    saved_in: ast.Call | None  # forward's save_for_backward call that received a name `attr`, if any


def _first_param(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    return params[0] if params else None


def _ctx_escapes(fn: ast.FunctionDef | ast.AsyncFunctionDef, ctx_name: str) -> bool:
    """``ctx`` used other than as ``ctx.attr`` or ``ctx.<known method>(...)``: passed to a
    call, aliased, stored, captured by a nested function, or reached through ``__dict__``."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(fn):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not fn:
            if any(isinstance(n, ast.Name) and n.id == ctx_name for n in ast.walk(node)):
                return True
        if not (isinstance(node, ast.Name) and node.id == ctx_name):
            continue
        parent = parents.get(node)
        if not isinstance(parent, ast.Attribute) or parent.value is not node:
            return True
        if parent.attr.startswith("__"):
            return True
    return False


def _attribute_tests(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The body asks whether an attribute exists: it may read one that is set only sometimes."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "hasattr", "getattr", "vars"):
            return True
        if isinstance(node, ast.ExceptHandler):
            names = [node.type] if not isinstance(node.type, ast.Tuple) else list(node.type.elts)
            if node.type is None or any(isinstance(n, ast.Name) and n.id in ("AttributeError", "Exception",
                                                                              "BaseException") for n in names):
                return True
    return False


def _stored_attributes(cls: ast.ClassDef) -> set[str] | None:
    """Every attribute name the class body stores on any object (``x.a = ``, ``x.a += ``,
    ``setattr(x, "a", ...)``); None when a ``setattr`` takes a computed name."""
    out: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                out.add(node.args[1].value)
            else:
                return None
    return out


def unset_ctx_reads(ctx: FileContext) -> list[UnsetCtxRead]:
    model = ctx.model
    subclassed = {id(base) for info in model.classes.values() for base in info.local_bases}
    out: list[UnsetCtxRead] = []
    for fn in autograd_functions(ctx):
        info = fn.info
        if id(info) in subclassed or not info.bases or any(q not in _TORCH_FUNCTION_BASES for q in info.bases):
            continue
        if info.node.keywords or info.node.decorator_list:
            continue  # a metaclass or class decorator may build what ctx holds
        if fn.forward is not info.methods.get("forward") or fn.backward is not info.methods.get("backward"):
            continue
        writers = [fn.forward]
        setup = info.methods.get("setup_context")
        if setup is not None:
            writers = [setup]
        ctx_names = [(w, _first_param(w)) for w in writers]
        if any(name is None or _ctx_escapes(w, name) for w, name in ctx_names):
            continue
        back_ctx = fn.ctx_name
        if back_ctx is None or _attribute_tests(fn.backward) or _ctx_escapes_to_store(fn.backward, back_ctx):
            continue
        stored = _stored_attributes(info.node)
        if stored is None:
            continue
        seen: set[str] = set()
        for node in sorted(ast.walk(fn.backward), key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0))):
            if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                    and isinstance(node.value, ast.Name) and node.value.id == back_ctx):
                continue
            attr = node.attr
            if attr in seen or attr.startswith("_") or attr in CTX_PROVIDED or attr in stored:
                continue
            seen.add(attr)
            out.append(UnsetCtxRead(fn, attr, node, _saved_under_name(writers, attr)))
    return out


def _ctx_escapes_to_store(fn: ast.FunctionDef | ast.AsyncFunctionDef, ctx_name: str) -> bool:
    """backward rebinds ``ctx`` (then ``ctx.x`` may be another object)."""
    return any(isinstance(n, ast.Name) and n.id == ctx_name and isinstance(n.ctx, ast.Store) for n in ast.walk(fn))


def _saved_under_name(writers: list[ast.FunctionDef | ast.AsyncFunctionDef], attr: str) -> ast.Call | None:
    for w in writers:
        for node in ast.walk(w):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "save_for_backward" \
                    and any(isinstance(a, ast.Name) and a.id == attr for a in node.args):
                return node
    return None
