"""Modules of the caller's model swapped, in place, for a wrapper class that captures their inputs.

The shape: ``layers[0] = Catcher(layers[0])`` (or ``setattr(parent, name, Catcher(child))``), where
``Catcher`` is an ``nn.Module`` class of the file whose ``forward`` ends in a ``raise`` (to stop the model
once the inputs are recorded) and which forwards no attribute lookups to the module it wraps (no
``__getattr__``).  While the wrapper sits in the slot, the model sees another module there.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import ClassInfo, SemanticModel
from hooklint.static.tree_walk import walk_tree

SWAP_TRIGGERS = ("raise",)
# `slot = Wrapper(slot, ...)` (a class: capitalised) with the same slot on both sides, the assignment
# starting its line (anchored at line starts it costs 0.9 s less on the corpus than trying every position; a
# swap written after `if ...:` on the same line is not admitted), or
# `setattr(parent, name, Wrapper(getattr(...` on one line
SWAP_TRIGGER_PATTERN = r"(?m)^[ \t]*(\w+(?:\.\w+)*\[[^\]\n]{1,60}\]|\w+(?:\.\w+)+)[ \t]*=[ \t]*[A-Z]\w*\([ \t]*\1|setattr\([^\n]{0,80}[A-Z]\w*\([ \t]*getattr\("


@dataclass
class CaptureSwap:
    assign: ast.stmt  # the statement that puts the wrapper in the slot
    slot: str  # the slot as written (`layers[0]`)
    wrapper: ClassInfo
    raise_line: int  # the `raise` in the wrapper's forward


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.unparse(a) == ast.unparse(b)  # (ast.dump would differ in Load and Store)


def _capture_wrapper(model: SemanticModel, expr: ast.AST) -> tuple[ClassInfo, int] | None:
    info = model.class_for_expr(expr)
    if info is None or model.is_module_class(info) is not True:
        return None
    if info.method("__getattr__") is not None or info.method("__getattribute__") is not None:
        return None
    forward = info.methods.get("forward")
    if forward is None:
        return None
    # the capture idiom ends its forward with the `raise` that stops the model (a wrapper that runs the
    # module and raises only on bad input is a lasting replacement, not a capture)
    last = forward.body[-1] if forward.body else None
    if isinstance(last, ast.Raise):
        return info, last.lineno
    return None


def capture_swaps(model: SemanticModel, tree: ast.AST) -> list[CaptureSwap]:
    out = []
    for node in walk_tree(tree):
        slot = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], (ast.Subscript, ast.Attribute)):
            slot, value = node.targets[0], node.value
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "setattr" \
                and len(node.value.args) == 3:
            value = node.value.args[2]
            slot = node.value.args  # matched below against getattr(parent, name)
        if value is None or not isinstance(value, ast.Call) or not value.args:
            continue
        wrapped = value.args[0]
        if isinstance(slot, list):
            parent, name = slot[0], slot[1]
            ok = isinstance(wrapped, ast.Call) and isinstance(wrapped.func, ast.Name) and wrapped.func.id == "getattr" \
                and len(wrapped.args) >= 2 and _same(wrapped.args[0], parent) and _same(wrapped.args[1], name)
            text = f"{ast.unparse(parent)}.<{ast.unparse(name)}>"
        else:
            ok = _same(wrapped, slot)
            text = ast.unparse(slot)
        if not ok:
            continue
        found = _capture_wrapper(model, value.func)
        if found is None:
            continue
        out.append(CaptureSwap(node, text, found[0], found[1]))
    return out
