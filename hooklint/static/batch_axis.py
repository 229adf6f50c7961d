"""Activation hooks that squeeze the batch axis away and then index axis 0.

``t.squeeze(0)`` removes axis 0 only when its size is 1.  A hook that
receives a batched activation (``(batch, pos, d)``), squeezes axis 0 to
drop "the" batch axis, then indexes or assigns along axis 0 of the result
(``t[positions] = 0``) addresses token positions for a batch of one and
whole batch items for a batch of several: the same call gives results that
disagree with per-sample runs, with no error (verified in
tests/behaviour/test_batch_axis_hooks.py).

Which functions receive an activation:

- forward hooks of the file (``register_forward_hook``): ``output``;
- TransformerLens-style hooks: TransformerLens calls a hook as
  ``fn(activation, hook=hook_point)``, so a hook function has a parameter
  named ``hook`` (second positional); it is recognised where it is handed
  to the hook API: the callable element of a ``(name, fn)`` pair (also
  wrapped in ``functools.partial``), or an argument of ``add_hook`` /
  ``run_with_hooks`` / ``hooks``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.static.flow import executed_nodes
from hooklint.static.hooks import HookKind
from hooklint.static.semantic import FunctionNode, positional_params
from hooklint.static.tree_walk import walk_tree

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

_HOOK_API_CALLS = frozenset({"add_hook", "run_with_hooks", "hooks", "add_perma_hook"})
_BATCH_TESTS = ("shape[0]", "size(0)", "len(")


@dataclass(frozen=True)
class SqueezedAxisUse:
    hook: ast.AST  # the hook function
    activation: str  # its activation parameter
    squeeze: ast.Call  # the `.squeeze(0)` call
    name: str  # the variable holding the squeezed value
    use: ast.Subscript  # `t[k]` along axis 0
    api: str  # "a forward hook" / "a TransformerLens hook"


def activation_hooks(ctx: "FileContext") -> list[tuple[ast.AST, str, str]]:
    """(function, activation parameter, words) for each hook of the file that receives an activation."""
    out: list[tuple[ast.AST, str, str]] = []
    seen: set[int] = set()
    for reg in ctx.hooks.instances_by_kind(HookKind.FORWARD):
        hook = reg.hook
        output = reg.param("output")
        if hook is None or output is None or id(hook.node) in seen or not isinstance(hook.node, FunctionNode):
            continue
        seen.add(id(hook.node))
        out.append((hook.node, output, "a forward hook"))
    for func in ctx.model.functions:
        if not isinstance(func, FunctionNode) or id(func) in seen:
            continue
        params = positional_params(func)
        if params[:1] in (["self"], ["cls"]):
            params = params[1:]
        if len(params) < 2 or params[1] != "hook":
            continue
        if _handed_to_hook_api(ctx, func):
            seen.add(id(func))
            out.append((func, params[0], "a TransformerLens-style hook (called as `fn(activation, hook=...)`)"))
    return out


def _handed_to_hook_api(ctx: "FileContext", func: ast.AST) -> bool:
    for node in _references(ctx, func):
        cur = getattr(node, "_hl_parent", None)
        # functools.partial(fn, ...)
        if isinstance(cur, ast.Call) and cur.args and cur.args[0] is node and _called(cur) == "partial":
            node, cur = cur, getattr(cur, "_hl_parent", None)
        if isinstance(cur, ast.Tuple) and len(cur.elts) == 2 and cur.elts[1] is node \
                and isinstance(cur.elts[0], (ast.Constant, ast.JoinedStr, ast.Name, ast.Attribute, ast.Call)):
            return True
        if isinstance(cur, ast.Call) and node in cur.args and _called(cur) in _HOOK_API_CALLS:
            return True
        if isinstance(cur, ast.keyword) and cur.arg in ("hook", "fwd_hooks", "bwd_hooks"):
            return True
    return False


def _references(ctx: "FileContext", func: ast.AST) -> list[ast.AST]:
    """Loads of the function's name (``fn``, ``self.fn``) that resolve to it."""
    out: list[ast.AST] = []
    name = func.name  # type: ignore[attr-defined]
    for node in walk_tree(ctx.tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            bindings = ctx.model.bindings_at(node)
            if any(b.node is func for b in bindings):
                out.append(node)
        elif isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.value, ast.Name) \
                and node.value.id in ("self", "cls"):
            owner = ctx.model.enclosing_class(node)
            if owner is not None and owner.method(name) is func:
                out.append(node)
    return out


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def squeezed_axis_uses(ctx: "FileContext") -> list[SqueezedAxisUse]:
    out: list[SqueezedAxisUse] = []
    for func, activation, api in activation_hooks(ctx):
        if _tests_batch_size(func):
            continue
        squeezed: dict[str, ast.Call] = {}
        for node in executed_nodes(func):  # source order: a later rebinding ends the squeezed value
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                call = _squeeze0_in_chain(node.value)
                if call is not None and _mentions(node.value, activation):
                    squeezed[node.targets[0].id] = call
                else:
                    squeezed.pop(node.targets[0].id, None)
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                    and node.value.id in squeezed and _picks_along_axis0(node.slice):
                out.append(SqueezedAxisUse(func, activation, squeezed[node.value.id], node.value.id, node, api))
                break
    return out


def _squeeze0_in_chain(expr: ast.AST) -> ast.Call | None:
    cur = expr
    while isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
        if cur.func.attr == "squeeze" and _is_axis0(cur):
            return cur
        cur = cur.func.value
    return None


def _is_axis0(call: ast.Call) -> bool:
    args = call.args[:1] or [k.value for k in call.keywords if k.arg == "dim"]
    return bool(args) and isinstance(args[0], ast.Constant) and args[0].value == 0 \
        and not isinstance(args[0].value, bool)


def _mentions(expr: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expr))


def _picks_along_axis0(index: ast.AST) -> bool:
    """The first index picks positions of axis 0 (not ``:``, ``...`` or ``None``)."""
    first = index.elts[0] if isinstance(index, ast.Tuple) and index.elts else index
    if isinstance(first, ast.Slice):
        return not (first.lower is None and first.upper is None and first.step is None)
    if isinstance(first, ast.Constant) and (first.value is Ellipsis or first.value is None):
        return False
    return True


def _tests_batch_size(func: ast.AST) -> bool:
    """The hook looks at the batch size itself (``x.shape[0]``, ``x.size(0)``, ``len(x)``)."""
    for node in executed_nodes(func):
        if isinstance(node, (ast.Assert, ast.If, ast.IfExp, ast.Compare)):
            text = ast.unparse(node.test if isinstance(node, (ast.Assert, ast.If, ast.IfExp)) else node)
            if any(marker in text for marker in _BATCH_TESTS):
                return True
    return False
