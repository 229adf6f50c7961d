"""Compatibility fallbacks that never run on torch >= 1.8.

Code that still supports torch < 1.8 registers the legacy backward hook only
when the full one is missing::

    if hasattr(module, "register_full_backward_hook"):
        module.register_full_backward_hook(hook)
    else:
        module.register_backward_hook(hook)          # torch < 1.8 only

    try:
        module.register_full_backward_hook(hook)
    except AttributeError:
        module.register_backward_hook(hook)          # torch < 1.8 only

    if version.parse(torch.__version__) < version.parse("1.8"):
        module.register_backward_hook(hook)          # torch < 1.8 only

:func:`dead_on_current_torch` says when a node sits in such a branch, so that
rules do not report code no supported torch runs.  It decides only what it
can prove: a branch that may run on some torch >= 1.8 (a gate at 2.1 whose
``else`` still runs on 1.9) is live.
"""

from __future__ import annotations

import ast
import re

from hooklint.static.semantic import SemanticModel, earlier_exit_guards, short_source

# The first torch release with `Module.register_full_backward_hook`.
FULL_HOOKS_SINCE = (1, 8, 0)
# Names a module has on every torch >= 1.8 (and not before).
_FULL_HOOK_APIS = frozenset({"register_full_backward_hook"})
# Exceptions a missing method raises; a handler catching anything wider can
# run on a new torch too (register_full_backward_hook raises RuntimeError when
# legacy hooks are already registered on the module).
_MISSING_API_ERRORS = frozenset({"AttributeError", "builtins.AttributeError"})
_PARSERS = ("parse", "Version", "TorchVersion", "LooseVersion", "StrictVersion", "parse_version", "digit_version", "version_tuple")
_FLAG_RE = re.compile(r"torch_?(?:version_?)?(?:ge|gte|greater(?:_or_equal)?(?:_than)?|at_least|newer_than|"
                      r"above|geq)_?v?(\d+)_(\d+)", re.I)


def dead_on_current_torch(model: SemanticModel, node: ast.AST) -> str | None:
    """Why ``node`` never runs on torch >= 1.8, or None if it may run."""
    child = node
    parent = getattr(node, "_hl_parent", None)
    while parent is not None:
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            decided = decide(model, parent.test)
            in_body = _in(child, parent.body)
            constant = module_constant(model, parent.test) if isinstance(parent.test, ast.Name) else None
            if constant is not None and decided is (not in_body):
                return f"`{parent.test.id}` is the module constant {constant}"  # type: ignore[attr-defined]
            if decided is False and in_body:
                return f"`{short_source(parent.test)}` is false on torch >= 1.8"
            if decided is True and not in_body:
                return f"`{short_source(parent.test)}` is true on torch >= 1.8"
        elif isinstance(parent, ast.Try) or type(parent).__name__ == "TryStar":
            for handler in parent.handlers:  # type: ignore[attr-defined]
                if child is handler and _catches_only_missing_api(model, handler.type) \
                        and _uses_full_hook_api(parent.body):  # type: ignore[attr-defined]
                    return ("the `except AttributeError` fallback of `register_full_backward_hook`, which every "
                            "torch >= 1.8 has")
        if isinstance(child, ast.stmt):
            for earlier in earlier_exit_guards(child, parent):
                if decide(model, earlier.test) is True:
                    return f"it follows `if {short_source(earlier.test)}:`, which always leaves on torch >= 1.8"
        child, parent = parent, getattr(parent, "_hl_parent", None)
    return None


def decide(model: SemanticModel, test: ast.AST, depth: int = 0) -> bool | None:
    """The value of ``test`` on every torch >= 1.8, or None when it may differ."""
    if depth > 4:
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = decide(model, test.operand, depth + 1)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [decide(model, v, depth + 1) for v in test.values]
        if isinstance(test.op, ast.And):
            if any(v is False for v in values):
                return False
            return True if all(v is True for v in values) else None
        if any(v is True for v in values):
            return True
        return False if all(v is False for v in values) else None
    if isinstance(test, ast.Call):
        return _decide_call(model, test, depth)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        return _decide_compare(model, test, depth)
    if isinstance(test, ast.Name):
        match = _FLAG_RE.search(test.id)
        if match and (int(match.group(1)), int(match.group(2)), 0) <= FULL_HOOKS_SINCE:
            return True
        bindings = model.bindings_at(test) if hasattr(test, "_hl_scope") else []
        if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                and isinstance(bindings[0].value, ast.expr):
            constant = module_constant(model, test)
            if constant is not None:
                return constant
            return decide(model, bindings[0].value, depth + 1)
    return None


def module_constant(model: SemanticModel, name: ast.Name) -> bool | None:
    """``ENABLE_HOOKS = False`` at module level, bound once, named as a
    constant and never declared ``global`` in the file: a switch the code
    ships turned off (or on).  None for anything else."""
    if not name.id.isupper() or not hasattr(name, "_hl_scope"):
        return None
    bindings = model.bindings_at(name)
    if len(bindings) != 1 or bindings[0].scope is not model.module_scope or bindings[0].kind != "assign" \
            or bindings[0].path:
        return None
    value = bindings[0].value
    if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
        return None
    if len(model.module_scope.bindings.get(name.id, ())) != 1 or any(
            name.id in scope.globals_ for scope in model.scopes.values()):
        return None
    return value.value


def _decide_call(model: SemanticModel, call: ast.Call, depth: int) -> bool | None:
    func = call.func
    if isinstance(func, ast.Name) and func.id == "hasattr" and len(call.args) == 2:
        return True if _const_str(call.args[1]) in _FULL_HOOK_APIS else None
    if isinstance(func, ast.Name) and func.id == "callable" and len(call.args) == 1:
        return _decide_getattr(call.args[0])
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    lowered = name.lower()
    if "torch" in lowered and any(w in lowered for w in ("version", "greater", "after", "at_least")):
        # is_torch_version(">=", "1.8"), is_torch_greater_or_equal("1.8"), torch_version_at_least("1.8"),
        # monai's pytorch_after(1, 8)
        op = next((_const_str(a) for a in call.args if _const_str(a) in (">=", ">", "<", "<=")), None)
        numbers = [a.value for a in call.args if isinstance(a, ast.Constant) and type(a.value) is int]
        target = tuple(numbers) if len(numbers) >= 2 and len(numbers) == len(call.args) else \
            next((v for v in (_const_version(model, a) for a in call.args) if v is not None), None)
        if target is None:
            return None
        if op is None:
            op = ">=" if ("greater" in lowered or "at_least" in lowered or "after" in lowered
                          or lowered.endswith(("_ge", "_gte"))) else None
        return _compare_on_new_torch(op, target) if op else None
    return None


def _decide_getattr(expr: ast.AST) -> bool | None:
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" \
            and len(expr.args) >= 2 and _const_str(expr.args[1]) in _FULL_HOOK_APIS:
        return True
    return None


def _decide_compare(model: SemanticModel, test: ast.Compare, depth: int) -> bool | None:
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(op, (ast.IsNot, ast.NotEq)) and isinstance(right, ast.Constant) and right.value is None:
        return _decide_getattr(left)  # getattr(m, "register_full_backward_hook", None) is not None
    symbols = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
    symbol = symbols.get(type(op))
    if symbol is None:
        return None
    if _is_torch_version(model, left, depth):
        target = _const_version(model, right)
    elif _is_torch_version(model, right, depth):
        target = _const_version(model, left)
        symbol = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(symbol, symbol)
    else:
        return None
    return None if target is None else _compare_on_new_torch(symbol, target)


def _compare_on_new_torch(symbol: str, target: tuple[int, ...]) -> bool | None:
    """``torch_version <symbol> target`` for every torch >= 1.8, if the same for all."""
    since = FULL_HOOKS_SINCE
    if symbol == "<":
        return False if target <= since else None
    if symbol == "<=":
        return False if target < since else None
    if symbol == ">":
        return True if target < since else None
    if symbol == ">=":
        return True if target <= since else None
    if symbol == "==":
        return False if target < since else None
    if symbol == "!=":
        return True if target < since else None
    return None


def _is_torch_version(model: SemanticModel, expr: ast.AST, depth: int) -> bool:
    """``torch.__version__``, a parse of it, a tuple made of its parts, or a
    variable named like ``TORCH_VERSION`` holding one."""
    if depth > 10:
        return False
    if isinstance(expr, (ast.Attribute, ast.Name)):
        qual = model.qualify(expr) if hasattr(expr, "_hl_scope") else None
        if qual in ("torch.__version__", "torch.version.__version__"):
            return True
        if isinstance(expr, ast.Attribute) and expr.attr == "release":  # Version(...).release
            return _is_torch_version(model, expr.value, depth + 1)
        if isinstance(expr, ast.Name):
            lowered = expr.id.lower()
            bindings = model.bindings_at(expr) if hasattr(expr, "_hl_scope") else []
            if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                    and isinstance(bindings[0].value, ast.expr):
                return _is_torch_version(model, bindings[0].value, depth + 1)
            return "torch" in lowered and "version" in lowered and all(b.kind == "import" for b in bindings)
        return False
    if isinstance(expr, ast.Call):
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in _PARSERS or name in ("tuple", "map", "list"):
            return any(_is_torch_version(model, a, depth + 1) for a in expr.args)
        if name == "split" and isinstance(func, ast.Attribute):
            return _is_torch_version(model, func.value, depth + 1)
        return False
    if isinstance(expr, ast.Subscript):
        # `torch.__version__.split(".")[:2]` is a version; `[1]` is one of its numbers
        if isinstance(expr.slice, ast.Slice) or (
                isinstance(expr.value, ast.Call) and isinstance(expr.value.func, ast.Attribute)
                and expr.value.func.attr == "split" and _const_str(expr.value.args[0] if expr.value.args else None)
                in ("+", "a", "dev")):
            return _is_torch_version(model, expr.value, depth + 1)
        return False
    if isinstance(expr, (ast.GeneratorExp, ast.ListComp)):
        return any(_is_torch_version(model, g.iter, depth + 1) for g in expr.generators)
    return False


def _const_version(model: SemanticModel, expr: ast.AST | None) -> tuple[int, ...] | None:
    if expr is None:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        match = re.match(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", expr.value)
        if not match:
            return None
        return tuple(int(g or 0) for g in match.groups())
    if isinstance(expr, ast.Tuple) and expr.elts and all(
            isinstance(e, ast.Constant) and isinstance(e.value, int) for e in expr.elts):
        values = [e.value for e in expr.elts][:3]  # type: ignore[attr-defined]
        return tuple(values + [0] * (3 - len(values)))
    if isinstance(expr, ast.Call) and len(expr.args) == 1:
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in _PARSERS:
            return _const_version(model, expr.args[0])
    return None


def _catches_only_missing_api(model: SemanticModel, type_expr: ast.AST | None) -> bool:
    if type_expr is None:
        return False
    items = type_expr.elts if isinstance(type_expr, ast.Tuple) else [type_expr]
    return bool(items) and all(
        (getattr(i, "id", None) == "AttributeError") or model.qualify(i) in _MISSING_API_ERRORS for i in items)


def _uses_full_hook_api(body: list[ast.stmt]) -> bool:
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Attribute) and node.attr in _FULL_HOOK_APIS:
                return True
            if isinstance(node, ast.Constant) and node.value in _FULL_HOOK_APIS:
                return True
    return False


def _in(node: ast.AST, block: object) -> bool:
    if isinstance(block, list):
        return any(stmt is node for stmt in block)
    return node is block


def _const_str(expr: ast.AST | None) -> str | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    return None

