"""Which files the graph layer imports, and what it builds from them.

Decided from the static pass alone (no torch, no user code): a file is
imported only when it defines ``nn.Module`` subclasses at its top level, or
registers a module hook on a built-in layer it constructs with literal
arguments (``conv = nn.Conv2d(3, 1, 3)``).  Files without either are never
imported.

For an imported file, the instances to build are, in this order:

1. constructor calls the file itself makes with literal arguments
   (``MyNet()``, ``Conv2d(3, 1, 3)``, ``LinearCraft(20, 5, np.array([1, 3, 5]))``),
   wherever they are (in the ``__main__`` block too), except inside class
   bodies, where they are parts of a bigger model;
2. the no-argument constructor of every module class not built by step 1.

Factories from ``[tool.hooklint] models`` are handled by the worker.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from hooklint.graph.sanitize import Sanitized, definitions_only, import_aliases, qualified_name
from hooklint.static.semantic import SemanticModel, is_torch_module_class

# Calls that build an array from literals, accepted inside constructor arguments.
ARRAY_CALLS = frozenset(
    f"{lib}.{name}"
    for lib, names in (
        ("numpy", ("array", "asarray", "arange", "zeros", "ones", "full", "eye", "linspace")),
        ("torch", ("tensor", "as_tensor", "arange", "zeros", "ones", "full", "eye", "linspace", "rand",
                   "randn", "randint", "randperm", "empty")),
    )
    for name in names
)
MAX_CALLS_PER_CLASS = 4
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class ClassCandidate:
    name: str
    line: int


@dataclass(frozen=True)
class ConstructorCall:
    node: ast.Call
    text: str
    line: int
    class_name: str


@dataclass
class Plan:
    sanitized: Sanitized
    classes: list[ClassCandidate] = field(default_factory=list)
    calls: list[ConstructorCall] = field(default_factory=list)

    @property
    def has_work(self) -> bool:
        return bool(self.classes or self.calls)


class _Planner:
    def __init__(self, tree: ast.Module, sanitized: Sanitized):
        self.tree = tree
        self.model = SemanticModel(tree)
        self.sanitized = sanitized
        self.aliases = import_aliases(tree)

    def module_classes(self) -> list[ClassCandidate]:
        imports_torch = self.model.imports_torch()
        out = []
        for stmt in self.tree.body:
            if not isinstance(stmt, ast.ClassDef) or stmt.name not in self.sanitized.kept_names:
                continue
            info = self.model.classes.get(stmt)
            if info is None:
                continue
            is_module = self.model.is_module_class(info)
            # A base from another file may be a module: worth a look when torch is around.
            if is_module or (is_module is None and imports_torch):
                out.append(ClassCandidate(stmt.name, stmt.lineno))
        return out

    def _callee(self, call: ast.Call) -> tuple[str, bool] | None:
        """(class name, is a local class) when ``call`` constructs a module."""
        info = self.model.class_for_expr(call.func)
        if info is not None:
            if info.scope is self.model.module_scope and info.name in self.sanitized.kept_names \
                    and self.model.is_module_class(info) is not False:
                return info.name, True
            return None
        qual = self.model.qualify(call.func) if hasattr(call.func, "_hl_scope") else None
        if qual is not None and is_torch_module_class(qual):
            return qual.rsplit(".", 1)[-1], False
        return None

    def is_literal(self, expr: ast.AST | None) -> bool:
        if expr is None or isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.Name):
            return expr.id in self.sanitized.kept_names or expr.id in _BUILTINS
        if isinstance(expr, ast.Attribute):
            return self.is_literal(expr.value)
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return all(self.is_literal(e) for e in expr.elts)
        if isinstance(expr, ast.Dict):
            return all(self.is_literal(k) for k in expr.keys) and all(self.is_literal(v) for v in expr.values)
        if isinstance(expr, ast.UnaryOp):
            return self.is_literal(expr.operand)
        if isinstance(expr, ast.BinOp):
            return self.is_literal(expr.left) and self.is_literal(expr.right)
        if isinstance(expr, ast.Call):
            literal_args = all(self.is_literal(a) for a in expr.args) and all(
                self.is_literal(k.value) for k in expr.keywords)
            if not literal_args:
                return False
            return qualified_name(expr.func, self.aliases) in ARRAY_CALLS or self._callee(expr) is not None
        return False

    def hooked_calls(self) -> set[int]:
        """ids of built-in layer constructions that receive a module hook in this file."""
        from hooklint.static.hooks import HookIndex
        from hooklint.static.values import Inference

        hooks = HookIndex(self.model, Inference(self.model))
        out = set()
        for reg in hooks.registrations:
            module = reg.receiver_module
            if reg.kind.is_module and module is not None and module.call is not None:
                out.add(id(module.call))
        return out

    def constructor_calls(self, classes: list[ClassCandidate]) -> list[ConstructorCall]:
        local_names = {c.name for c in classes}
        hooked: set[int] | None = None
        seen: set[str] = set()
        per_class: dict[str, int] = {}
        calls = self.model.name_calls.values(), self.model.method_calls.values()
        candidates = sorted((c for group in calls for lst in group for c in lst),
                            key=lambda c: (c.lineno, c.col_offset))
        out = []
        for call in candidates:
            callee = self._callee(call)
            if callee is None or self._inside_class(call):
                continue
            name, local = callee
            if local and name not in local_names:
                continue
            if not local:
                if hooked is None:
                    hooked = self.hooked_calls()
                if id(call) not in hooked:
                    continue
            if not (all(self.is_literal(a) for a in call.args) and all(
                    k.arg is not None and self.is_literal(k.value) for k in call.keywords)):
                continue
            text = ast.unparse(call)
            if text in seen or per_class.get(name, 0) >= MAX_CALLS_PER_CLASS:
                continue
            seen.add(text)
            per_class[name] = per_class.get(name, 0) + 1
            out.append(ConstructorCall(call, text, call.lineno, name))
        return out

    def _inside_class(self, node: ast.AST) -> bool:
        return any(isinstance(a, ast.ClassDef) for a in self.model.ancestors(node))


def plan_for(tree: ast.Module) -> Plan:
    sanitized = definitions_only(tree)
    planner = _Planner(tree, sanitized)
    classes = planner.module_classes()
    return Plan(sanitized, classes, planner.constructor_calls(classes))


# A module class or layer can only come from an import naming one of these.
_TEXT_HINTS = ("torch", "lightning", "transformers")


def wants_import(text: str) -> bool:
    """Whether the graph layer should import this file (see the module docstring)."""
    if not any(h in text for h in _TEXT_HINTS):
        return False
    try:
        return plan_for(ast.parse(text)).has_work
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
