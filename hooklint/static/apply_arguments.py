"""Containers handed to a custom ``autograd.Function``'s ``apply`` and returned by its ``forward``.

``Function.apply`` makes an autograd node whose inputs are the *tensors
passed as direct arguments*: a tensor inside a tuple, list or dict argument
is not an input.  When ``forward`` returns such a tensor, autograd treats it
as made inside ``forward`` without grad: the output comes back detached
(``requires_grad=False``), so no gradient reaches what computed it and the
Function's ``backward`` (often the very reason the Function exists: a hook
fired from it) never runs for it.

:func:`container_pass_through` finds, for one ``apply`` call, the arguments
that are (or may be) containers and that ``forward`` returns as it got them
(``return args``, or inside the returned tuple).  An argument is a container
when it is a tuple / list / dict display or comprehension, a local name bound
only to those, or a parameter of the calling function annotated as one
(``tuple``, ``List[...]``, ``Sequence[...]``); it *may* be one when that
parameter is annotated ``Any`` or ``object`` (said as such).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import positional_params

_CONTAINER_ANNOTATIONS = frozenset({
    "tuple", "list", "dict", "Tuple", "List", "Dict", "Sequence", "MutableSequence", "Mapping", "Iterable",
    "Collection",
})
_OPEN_ANNOTATIONS = frozenset({"Any", "object"})
_DISPLAY_WORDS = {ast.Tuple: "tuple", ast.List: "list", ast.Dict: "dict", ast.ListComp: "list comprehension",
                  ast.DictComp: "dict comprehension", ast.GeneratorExp: "generator"}
_DISPLAYS = tuple(_DISPLAY_WORDS)


@dataclass(frozen=True)
class ContainerArgument:
    call: ast.Call
    arg: ast.AST
    param: str  # forward's parameter that receives it
    certain: bool  # a container for sure (a display, an annotation saying so), or only possibly (`Any`)
    why: str  # "a tuple display", "annotated `Any`"


def passed_through(forward: ast.FunctionDef | ast.AsyncFunctionDef, inputs: list[str]) -> set[str]:
    """The inputs ``forward`` returns as it got them: the returned value, or an element of a returned tuple."""
    out: set[str] = set()
    for node in ast.walk(forward):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        values = node.value.elts if isinstance(node.value, (ast.Tuple, ast.List)) else [node.value]
        for value in values:
            if isinstance(value, ast.Starred):
                value = value.value
            if isinstance(value, ast.Name) and value.id in inputs:
                out.add(value.id)
    return out


def _annotation_head(annotation: ast.AST | None) -> str | None:
    if annotation is None:
        return None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    if isinstance(annotation, ast.Attribute):
        return annotation.attr
    if isinstance(annotation, ast.Name):
        return annotation.id
    return None


def _enclosing_function(node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
        cur = getattr(cur, "_hl_parent", None)
    return cur


def _container(arg: ast.AST, call: ast.Call) -> tuple[bool, str] | None:
    """(certain, why) when ``arg`` is or may be a container."""
    if isinstance(arg, _DISPLAYS):
        return True, f"a {_DISPLAY_WORDS[type(arg)]}"
    if not isinstance(arg, ast.Name):
        return None
    func = _enclosing_function(call)
    if func is None:
        return None
    values = [n.value for n in ast.walk(func) if isinstance(n, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets)]
    if values:
        if all(isinstance(v, _DISPLAYS) for v in values):
            return True, f"bound to a {_DISPLAY_WORDS[type(values[0])]}"
        return None
    for param in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]:
        if param.arg != arg.id:
            continue
        head = _annotation_head(param.annotation)
        if head in _CONTAINER_ANNOTATIONS:
            return True, f"annotated `{ast.unparse(param.annotation)}`"
        if head in _OPEN_ANNOTATIONS:
            return False, f"annotated `{ast.unparse(param.annotation)}`: it may be a tuple or list"
    return None


def container_pass_through(call: ast.Call, forward: ast.FunctionDef | ast.AsyncFunctionDef,
                           inputs: list[str]) -> list[ContainerArgument]:
    returned = passed_through(forward, inputs)
    if not returned:
        return []
    out = []
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break  # the rest cannot be lined up with forward's parameters
        if position >= len(inputs) or inputs[position] not in returned:
            continue
        found = _container(arg, call)
        if found is not None:
            out.append(ContainerArgument(call, arg, inputs[position], found[0], found[1]))
    for keyword in call.keywords:
        if keyword.arg in returned:
            found = _container(keyword.value, call)
            if found is not None:
                out.append(ContainerArgument(call, keyword.value, keyword.arg, found[0], found[1]))
    return out


def backward_calls_out(backward: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Calls ``backward`` makes for their effect (statement calls other than on ``ctx``): the side effects a
    pass-through Function exists for (firing hooks)."""
    ctx_name = (positional_params(backward) or [""])[0]
    out = []
    for node in ast.walk(backward):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            root = func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id == ctx_name:
                continue
            out.append(ast.unparse(func))
    return out
