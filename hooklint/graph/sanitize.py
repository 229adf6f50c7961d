"""Keep only the definitions of a model file, so that importing it runs no
training loop, writes no file and starts nothing.

Model files are often scripts: classes at the top, then a training loop and
an ``if __name__ == "__main__":`` block.  The worker executes only what
:func:`definitions_only` keeps, at the top level of the file (and of the
user's own modules it imports):

* imports, ``def`` and ``class`` statements (their bodies, decorators and
  default values run as Python runs them: that is the definition);
* assignments of inert values: literals, names, attributes, containers and
  arithmetic of those, lambdas, and a few calls known to have no effect
  (``logging.getLogger``, ``typing.TypeVar``, ``functools.partial``...);
* ``try`` blocks and ``if`` statements whose test is inert (``if
  TYPE_CHECKING:``, ``if sys.version_info >= (3, 10):``), filtered the same way;
* docstrings, ``pass`` and ``raise``.

Everything else is dropped: calls, loops, ``with`` blocks, augmented
assignments, assignments to attributes or items (``torch.backends... = ``),
and every ``if`` that tests ``__name__``.  Line numbers are kept, so
tracebacks and fx stack traces point at the user's real lines.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

# Calls that build a value and do nothing else; by qualified name.
INERT_CALLS = frozenset(
    {
        "logging.getLogger",
        "typing.TypeVar",
        "typing.NewType",
        "typing.NamedTuple",
        "typing.cast",
        "collections.namedtuple",
        "functools.partial",
        "torch.device",
        "os.environ.get",
        "os.getenv",
    }
)


@dataclass
class Sanitized:
    tree: ast.Module  # the statements to execute (original line numbers)
    skipped_lines: list[int] = field(default_factory=list)  # first lines of the dropped statements
    skipped_names: set[str] = field(default_factory=set)  # names only dropped statements bind
    kept_names: set[str] = field(default_factory=set)  # names the kept statements bind at top level


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Top-level names bound by imports, mapped to what they import."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def qualified_name(expr: ast.AST, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    head = aliases.get(expr.id, expr.id)
    return ".".join([head, *reversed(parts)])


_MODULE_DUNDERS = frozenset({"__name__", "__file__", "__doc__", "__package__", "__spec__", "__loader__",
                             "__builtins__", "__annotations__", "__path__"})


class _Filter:
    def __init__(self, tree: ast.Module):
        self.aliases = import_aliases(tree)
        self.result = Sanitized(ast.Module(body=[], type_ignores=[]))
        # names the kept statements bound so far: an inert value may only read these
        self.bound: set[str] = set(dir(builtins)) | _MODULE_DUNDERS

    def is_inert(self, expr: ast.AST | None) -> bool:
        if expr is None or isinstance(expr, (ast.Constant, ast.Lambda)):
            return True
        if isinstance(expr, ast.Name):
            return expr.id in self.bound
        if isinstance(expr, ast.Attribute):
            return self.is_inert(expr.value)
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            return all(self.is_inert(e) for e in expr.elts)
        if isinstance(expr, ast.Dict):
            return all(self.is_inert(k) for k in expr.keys if k is not None) and all(
                self.is_inert(v) for v in expr.values)
        if isinstance(expr, ast.Starred):
            return self.is_inert(expr.value)
        if isinstance(expr, ast.UnaryOp):
            return self.is_inert(expr.operand)
        if isinstance(expr, ast.BinOp):
            return self.is_inert(expr.left) and self.is_inert(expr.right)
        if isinstance(expr, ast.BoolOp):
            return all(self.is_inert(v) for v in expr.values)
        if isinstance(expr, ast.Compare):
            return self.is_inert(expr.left) and all(self.is_inert(c) for c in expr.comparators)
        if isinstance(expr, ast.IfExp):
            return self.is_inert(expr.test) and self.is_inert(expr.body) and self.is_inert(expr.orelse)
        if isinstance(expr, ast.Subscript):  # typing aliases: Optional[int], Dict[str, nn.Module]
            return self.is_inert(expr.value) and self.is_inert(expr.slice)
        if isinstance(expr, ast.Slice):
            return self.is_inert(expr.lower) and self.is_inert(expr.upper) and self.is_inert(expr.step)
        if isinstance(expr, ast.JoinedStr):
            return all(self.is_inert(v) for v in expr.values)
        if isinstance(expr, ast.FormattedValue):
            return self.is_inert(expr.value)
        if isinstance(expr, ast.Call):
            return (qualified_name(expr.func, self.aliases) in INERT_CALLS
                    and all(self.is_inert(a) for a in expr.args)
                    and all(self.is_inert(k.value) for k in expr.keywords))
        return False

    @staticmethod
    def _plain_targets(targets: list[ast.expr]) -> bool:
        """Only names are bound (no attribute or item stores, which mutate objects)."""
        def plain(t: ast.expr) -> bool:
            if isinstance(t, ast.Name):
                return True
            if isinstance(t, (ast.Tuple, ast.List)):
                return all(plain(e) for e in t.elts)
            if isinstance(t, ast.Starred):
                return plain(t.value)
            return False

        return all(plain(t) for t in targets)

    @staticmethod
    def _tests_name(test: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(test))

    def block(self, body: list[ast.stmt]) -> list[ast.stmt]:
        kept: list[ast.stmt] = []
        for stmt in body:
            new = self.statement(stmt)
            if new is None:
                self.result.skipped_lines.append(stmt.lineno)
                for node in ast.walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        self.result.skipped_names.add(node.id)
            else:
                kept.append(new)
                self.bound |= _bound_names(new)
        return kept

    def statement(self, stmt: ast.stmt) -> ast.stmt | None:
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                             ast.Pass, ast.Raise)):
            return stmt
        if isinstance(stmt, ast.Expr):
            return stmt if isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str) else None
        if isinstance(stmt, ast.Assign):
            return stmt if self._plain_targets(stmt.targets) and self.is_inert(stmt.value) else None
        if isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None and isinstance(stmt.target, ast.Name) and self.is_inert(stmt.value):
                return stmt
            return None
        if isinstance(stmt, ast.If):
            if self._tests_name(stmt.test) or not self.is_inert(stmt.test):
                return None
            body = self.block(stmt.body)
            orelse = self.block(stmt.orelse)
            # copy_location: end positions too, or compile() rejects the new node
            return ast.copy_location(ast.If(test=stmt.test, body=body or [_pass(stmt)], orelse=orelse), stmt)
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            body = self.block(stmt.body)  # type: ignore[attr-defined]
            if not body:
                return None
            handlers = []
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                handlers.append(ast.copy_location(ast.ExceptHandler(
                    type=handler.type, name=handler.name, body=self.block(handler.body) or [_pass(handler)]),
                    handler))
            return ast.copy_location(type(stmt)(body=body, handlers=handlers,  # type: ignore[call-arg]
                                                orelse=self.block(stmt.orelse),  # type: ignore[attr-defined]
                                                finalbody=self.block(stmt.finalbody)),  # type: ignore[attr-defined]
                                     stmt)
        return None


def _pass(at: ast.AST) -> ast.Pass:
    return ast.copy_location(ast.Pass(), at)


def definitions_only(tree: ast.Module) -> Sanitized:
    """The statements of ``tree`` that define things, as described above."""
    flt = _Filter(tree)
    flt.result.tree.body = flt.block(tree.body)
    ast.fix_missing_locations(flt.result.tree)
    for stmt in flt.result.tree.body:
        flt.result.kept_names |= _bound_names(stmt)
    flt.result.skipped_names -= flt.result.kept_names
    return flt.result


def _top_level(body: list[ast.stmt]):
    """Statements that bind at module level: the body and the blocks of kept if/try."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            yield from _top_level(stmt.body)  # type: ignore[attr-defined]
            for handler in stmt.handlers:  # type: ignore[attr-defined]
                yield from _top_level(handler.body)
            yield from _top_level(stmt.orelse)  # type: ignore[attr-defined]
            yield from _top_level(stmt.finalbody)  # type: ignore[attr-defined]


def _bound_names(stmt: ast.stmt) -> set[str]:
    """Names a kept top-level statement binds (for the statements after it)."""
    names: set[str] = set()
    for node in _top_level([stmt]):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names
