"""Control-flow graphs of one function (or module) body, and the questions
the rules ask of them.

A graph has one node per statement as it can run (a ``finally`` body is
copied once per way of entering it: falling through, ``return``, ``break``,
``continue``, an exception), one node per compound statement's header (the
test of ``if``/``while``, the iterable of ``for``, the items of ``with``, the
subject of ``match``), and four special nodes: the entry, the end of the body
reached by falling off it (``implicit``), the normal exit and the
exceptional exit.  Edges are normal (the next statement, a branch, a jump)
or exceptional (a statement that may raise, to the handlers or ``finally``
that catch it, else out of the function).

Conditions whose value is known before the code runs cut their dead branch:
literals (``if False:``, ``while True:``), ``typing.TYPE_CHECKING``,
``__debug__``, module-level switches bound once to a boolean (``DEBUG =
False``), and the compatibility gates :mod:`hooklint.static.fallbacks`
decides for every torch >= 1.8.  ``raise``, ``assert False``,
``sys.exit()`` (and ``exit``, ``quit``, ``os._exit``, ``os.abort``) and calls
of functions of the file that never return end their path.

Questions (:class:`CFG`): can a statement run (:meth:`CFG.reachable`), can
the body fall off its end (:meth:`CFG.falls_off_end`), does every path from
a statement to the exit pass one of some statements
(:meth:`CFG.every_path_passes`), does an exception raised by a statement
reach the exit without passing them (:meth:`CFG.exception_escapes`).
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable

from hooklint.static.semantic import FunctionNode

ENTRY, EXIT, RAISE, IMPLICIT = 0, 1, 2, 3

# Calls that end the program (they raise SystemExit, or do not return at all).
EXIT_CALLS = frozenset({"sys.exit", "builtins.exit", "builtins.quit", "os._exit", "os.abort", "exit", "quit"})
# Handlers that catch what a call of the user's code raises.
_CATCH_ALL = frozenset({"Exception", "BaseException", "builtins.Exception", "builtins.BaseException"})
# Copies of a `finally` body: beyond this nesting the graph stops copying and
# links the kinds together (less precise, never unsound for reachability).
_MAX_FINALLY_DEPTH = 6
_TryStar = getattr(ast, "TryStar", ())


class Node:
    __slots__ = ("index", "stmt", "succ", "exc")

    def __init__(self, index: int, stmt: ast.AST | None):
        self.index = index
        self.stmt = stmt
        self.succ: list[int] = []
        self.exc: list[int] = []


class _Frame:
    """A context a jump can meet on its way out: a loop, a ``try`` with a
    ``finally`` (the jumps wait there until the finally is built), a handler
    dispatch, a ``with suppress(...)``."""

    __slots__ = ("kind", "head", "breaks", "pending", "exc_target", "in_final")

    def __init__(self, kind: str):
        self.kind = kind
        self.head: int | None = None  # loop: where `continue` goes
        self.breaks: list[int] = []
        self.pending: dict[str, list[int]] = {}  # try-finally: jumps waiting for the finally
        self.exc_target: int | None = None  # where an exception raised inside goes
        self.in_final = False


class CFG:
    """The graph of one body.  Built by :func:`build`; read-only afterwards."""

    def __init__(self, owner: ast.AST):
        self.owner = owner
        self.nodes: list[Node] = [Node(i, None) for i in range(4)]
        self.by_stmt: dict[int, list[int]] = {}
        self._reach: set[int] | None = None
        self._reach_normal: set[int] | None = None

    # ------------------------------------------------------------ building
    def add(self, stmt: ast.AST | None) -> int:
        node = Node(len(self.nodes), stmt)
        self.nodes.append(node)
        if stmt is not None:
            self.by_stmt.setdefault(id(stmt), []).append(node.index)
        return node.index

    def link(self, preds: Iterable[int], target: int) -> None:
        for p in preds:
            succ = self.nodes[p].succ
            if target not in succ:
                succ.append(target)

    # ------------------------------------------------------------ questions
    def reachable_nodes(self) -> set[int]:
        """Nodes some path from the entry reaches (normal and exceptional edges)."""
        if self._reach is None:
            self._reach = self._forward([ENTRY], exceptional=True)
        return self._reach

    def _forward(self, starts: Iterable[int], exceptional: bool = True, avoid: set[int] | frozenset[int] = frozenset(),
                 ) -> set[int]:
        seen: set[int] = set()
        stack = [s for s in starts if s not in avoid]
        while stack:
            cur = stack.pop()
            if cur in seen:
                continue
            seen.add(cur)
            node = self.nodes[cur]
            for nxt in node.succ:
                if nxt not in seen and nxt not in avoid:
                    stack.append(nxt)
            if exceptional:
                for nxt in node.exc:
                    if nxt not in seen and nxt not in avoid:
                        stack.append(nxt)
        return seen

    def nodes_of(self, stmt: ast.AST) -> list[int]:
        return self.by_stmt.get(id(stmt), [])

    def has(self, stmt: ast.AST) -> bool:
        return id(stmt) in self.by_stmt

    def reachable(self, stmt: ast.AST) -> bool:
        """Can ``stmt`` (a statement of this body, or a compound statement's
        header) run?  True for statements the graph does not hold."""
        nodes = self.nodes_of(stmt)
        if not nodes:
            return True
        reach = self.reachable_nodes()
        return any(n in reach for n in nodes)

    def falls_off_end(self) -> bool:
        """Can the body end without a ``return`` (an implicit ``return None``)?"""
        return IMPLICIT in self.reachable_nodes()

    def can_exit_normally(self) -> bool:
        """Can a call of this function return (not only raise)?"""
        return EXIT in self.reachable_nodes()

    def reachable_returns(self) -> list[ast.Return]:
        reach = self.reachable_nodes()
        out = []
        for node in self.nodes:
            if isinstance(node.stmt, ast.Return) and node.index in reach and node.stmt not in out:
                out.append(node.stmt)
        return out

    def every_path_passes(self, start: ast.AST, through: Iterable[ast.AST], *, exceptional: bool = False) -> bool:
        """Does every path from ``start`` (after it ran) to the normal exit
        pass one of the statements ``through``?  With ``exceptional``, paths
        to the exceptional exit count too (an exception raised after
        ``start`` must also meet one of them).  Vacuously true when ``start``
        cannot run."""
        starts = [n for n in self.nodes_of(start) if n in self.reachable_nodes()]
        if not starts:
            return True
        avoid = {n for stmt in through for n in self.nodes_of(stmt)}
        after: list[int] = []
        for s in starts:
            if s in avoid:
                return True  # the statement itself is one of them
            after += self.nodes[s].succ  # (when `start` itself raises, it did not run)
        seen = self._forward(after, exceptional=exceptional, avoid=avoid)
        if EXIT in seen:
            return False
        return not (exceptional and RAISE in seen)

    def some_path_reaches(self, start: ast.AST, target: ast.AST, *, exceptional: bool = True) -> bool:
        """Can ``target`` run after ``start`` (normal and, unless
        ``exceptional`` is false, exceptional edges)?  The search stops at the
        first node of ``target`` it meets."""
        targets = set(self.nodes_of(target))
        stack = [n for s in self.nodes_of(start)
                 for n in self.nodes[s].succ + (self.nodes[s].exc if exceptional else [])]
        seen: set[int] = set()
        while stack:
            cur = stack.pop()
            if cur in targets:
                return True
            if cur in seen:
                continue
            seen.add(cur)
            node = self.nodes[cur]
            stack.extend(node.succ)
            if exceptional:
                stack.extend(node.exc)
        return False

    def statements_between(self, start: ast.AST, through: Iterable[ast.AST]) -> list[ast.AST]:
        """The statements (and headers) that can run after ``start`` before
        one of ``through`` runs, in source order."""
        avoid = {n for stmt in through for n in self.nodes_of(stmt)}
        nexts = [n for s in self.nodes_of(start) if s in self.reachable_nodes() for n in self.nodes[s].succ]
        seen = self._forward(nexts, exceptional=False, avoid=avoid)
        out: dict[int, ast.AST] = {}
        for n in seen:
            stmt = self.nodes[n].stmt
            if stmt is not None and not isinstance(stmt, ast.excepthandler):
                out[id(stmt)] = stmt
        return sorted(out.values(), key=lambda s: (getattr(s, "lineno", 0), getattr(s, "col_offset", 0)))

    def exception_escapes(self, risky: ast.AST, through: Iterable[ast.AST]) -> bool:
        """When ``risky`` raises, can the exception leave the function (or be
        swallowed and the function return) without ever meeting one of the
        statements ``through``?  A ``finally`` or a handler that holds one of
        them counts as meeting it, even under a condition (``if
        remove_at_end:`` in a ``finally`` is the normal path's condition too).
        False when ``risky`` cannot raise here."""
        points = {n for stmt in through for n in self.nodes_of(stmt)}
        starts = [e for n in self.nodes_of(risky) if n in self.reachable_nodes() for e in self.nodes[n].exc]
        if not starts:
            return False
        seen = self._forward(starts, exceptional=True)
        if seen & points:
            return False
        return RAISE in seen or EXIT in seen


# ---------------------------------------------------------------- the builder

class _Builder:
    def __init__(self, cfg: CFG, truth: Callable[[ast.AST], bool | None], noreturn: Callable[[ast.Call], bool]):
        self.cfg = cfg
        self.truth = truth
        self.noreturn = noreturn
        self.frames: list[_Frame] = []
        self.finally_depth = 0

    # -- where jumps go
    def exc_target(self) -> int:
        for frame in reversed(self.frames):
            if frame.exc_target is not None:
                return frame.exc_target
        return RAISE

    def jump(self, kind: str, preds: list[int]) -> None:
        """Send ``preds`` out by ``return`` / ``break`` / ``continue`` / ``raise``."""
        if not preds:
            return
        if kind == "raise":
            self.cfg.link(preds, self.exc_target())
            return
        for frame in reversed(self.frames):
            if frame.kind == "finally" and not frame.in_final:
                frame.pending.setdefault(kind, []).extend(preds)
                return
            if frame.kind == "loop" and kind == "break":
                frame.breaks.extend(preds)
                return
            if frame.kind == "loop" and kind == "continue":
                assert frame.head is not None
                self.cfg.link(preds, frame.head)
                return
        if kind == "return":
            self.cfg.link(preds, EXIT)

    def may_raise(self, node: int) -> None:
        target = self.exc_target()
        exc = self.cfg.nodes[node].exc
        if target not in exc:
            exc.append(target)

    # -- statements
    def block(self, stmts: list[ast.stmt], preds: list[int]) -> list[int]:
        for stmt in stmts:
            if not preds:
                # unreachable code still gets nodes (never linked from the entry)
                preds = self.stmt(stmt, [])
                continue
            preds = self.stmt(stmt, preds)
        return preds

    def stmt(self, stmt: ast.stmt, preds: list[int]) -> list[int]:
        cfg = self.cfg
        kind = type(stmt)
        if kind is ast.If:
            return self._if(stmt, preds)  # type: ignore[arg-type]
        if kind in (ast.For, ast.AsyncFor):
            return self._for(stmt, preds)  # type: ignore[arg-type]
        if kind is ast.While:
            return self._while(stmt, preds)  # type: ignore[arg-type]
        if kind is ast.Try or (_TryStar and kind is _TryStar):
            return self._try(stmt, preds)  # type: ignore[arg-type]
        if kind in (ast.With, ast.AsyncWith):
            return self._with(stmt, preds)  # type: ignore[arg-type]
        if kind is ast.Match:
            return self._match(stmt, preds)  # type: ignore[arg-type]
        node = cfg.add(stmt)
        cfg.link(preds, node)
        if kind is ast.Return:
            if stmt.value is not None and _can_raise(stmt.value):  # type: ignore[attr-defined]
                self.may_raise(node)
            self.jump("return", [node])
            return []
        if kind is ast.Raise:
            self.may_raise(node)
            return []
        if kind is ast.Break:
            self.jump("break", [node])
            return []
        if kind is ast.Continue:
            self.jump("continue", [node])
            return []
        if kind is ast.Assert:
            self.may_raise(node)
            if self.truth(stmt.test) is False:  # type: ignore[attr-defined]
                return []
            return [node]
        if kind is ast.Expr and isinstance(stmt.value, ast.Call) and self.noreturn(stmt.value):  # type: ignore[attr-defined]
            self.may_raise(node)
            return []
        if kind not in (ast.Pass, ast.Global, ast.Nonlocal) and _can_raise(stmt):
            self.may_raise(node)
        return [node]

    def _if(self, stmt: ast.If, preds: list[int]) -> list[int]:
        cfg = self.cfg
        test = cfg.add(stmt)
        cfg.link(preds, test)
        if _can_raise(stmt.test):
            self.may_raise(test)
        value = self.truth(stmt.test)
        body_preds = [test] if value is not False else []
        else_preds = [test] if value is not True else []
        out = self.block(stmt.body, body_preds) if body_preds else self._dead(stmt.body)
        if stmt.orelse:
            out = out + (self.block(stmt.orelse, else_preds) if else_preds else self._dead(stmt.orelse))
        else:
            out = out + else_preds
        return out

    def _dead(self, stmts: list[ast.stmt]) -> list[int]:
        self.block(stmts, [])
        return []

    def _while(self, stmt: ast.While, preds: list[int]) -> list[int]:
        cfg = self.cfg
        head = cfg.add(stmt)
        cfg.link(preds, head)
        if _can_raise(stmt.test):
            self.may_raise(head)
        value = self.truth(stmt.test)
        frame = _Frame("loop")
        frame.head = head
        self.frames.append(frame)
        body_out = self.block(stmt.body, [head] if value is not False else [])
        self.frames.pop()
        cfg.link(body_out, head)
        exhausted = [head] if value is not True else []
        out = self.block(stmt.orelse, exhausted) if stmt.orelse and exhausted else exhausted
        if stmt.orelse and not exhausted:
            self._dead(stmt.orelse)
        return out + frame.breaks

    def _for(self, stmt: ast.For | ast.AsyncFor, preds: list[int]) -> list[int]:
        cfg = self.cfg
        header = cfg.add(stmt)  # the iterable, evaluated once, and each next()
        cfg.link(preds, header)
        self.may_raise(header)
        frame = _Frame("loop")
        frame.head = header
        self.frames.append(frame)
        body_out = self.block(stmt.body, [header])
        self.frames.pop()
        cfg.link(body_out, header)
        out = self.block(stmt.orelse, [header]) if stmt.orelse else [header]
        return out + frame.breaks

    def _with(self, stmt: ast.With | ast.AsyncWith, preds: list[int]) -> list[int]:
        cfg = self.cfg
        enter = cfg.add(stmt)
        cfg.link(preds, enter)
        self.may_raise(enter)
        if any(_is_suppress(item.context_expr) for item in stmt.items):
            after = cfg.add(None)  # where a suppressed exception continues
            frame = _Frame("suppress")
            frame.exc_target = after
            self.frames.append(frame)
            out = self.block(stmt.body, [enter])
            self.frames.pop()
            return out + [after]
        return self.block(stmt.body, [enter])

    def _match(self, stmt: ast.Match, preds: list[int]) -> list[int]:
        cfg = self.cfg
        subject = cfg.add(stmt)
        cfg.link(preds, subject)
        self.may_raise(subject)
        out: list[int] = []
        exhaustive = False
        for case in stmt.cases:
            out += self.block(case.body, [subject])
            if case.guard is None and _irrefutable(case.pattern):
                exhaustive = True
        return out if exhaustive else out + [subject]

    def _try(self, stmt: ast.Try, preds: list[int]) -> list[int]:
        cfg = self.cfg
        has_finally = bool(stmt.finalbody)
        fin = _Frame("finally") if has_finally else None
        if fin is not None:
            self.frames.append(fin)
            # an exception not handled here runs the finally, then goes on outwards
            fin.exc_target = cfg.add(None)
        dispatch: int | None = None
        if stmt.handlers:
            dispatch = cfg.add(None)
            frame = _Frame("handlers")
            frame.exc_target = dispatch
            self.frames.append(frame)
        body_out = self.block(stmt.body, preds) if preds else self._dead(stmt.body)
        if stmt.handlers:
            self.frames.pop()
        out = self.block(stmt.orelse, body_out) if stmt.orelse else body_out
        if dispatch is not None:
            catches_all = False
            for handler in stmt.handlers:
                entry = cfg.add(handler)
                cfg.link([dispatch], entry)
                out += self.block(handler.body, [entry])
                if handler.type is None or _names_catch_all(handler.type):
                    catches_all = True
            if not catches_all:
                cfg.link([dispatch], self.exc_target())
        if fin is None:
            return out
        fin.in_final = True
        self.frames.pop()
        assert fin.exc_target is not None
        exceptional = [fin.exc_target]
        pending = dict(fin.pending)
        if self.finally_depth >= _MAX_FINALLY_DEPTH:
            # one shared copy for every way in: falls through to everything
            everyone = out + exceptional + [p for ps in pending.values() for p in ps]
            fin_out = self.block(stmt.finalbody, everyone)
            self.jump("raise", fin_out)
            for kind in pending:
                self.jump(kind, list(fin_out))
            return fin_out
        self.finally_depth += 1
        try:
            result = self.block(stmt.finalbody, out) if out else self._dead(stmt.finalbody)
            raised = self.block(stmt.finalbody, exceptional)
            self.jump("raise", raised)
            for kind, jumpers in pending.items():
                self.jump(kind, self.block(stmt.finalbody, jumpers))
        finally:
            self.finally_depth -= 1
        return result


def _is_suppress(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Call) and (
        isinstance(expr.func, ast.Attribute) and expr.func.attr == "suppress"
        or isinstance(expr.func, ast.Name) and expr.func.id == "suppress")


def _names_catch_all(expr: ast.AST) -> bool:
    names = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    for name in names:
        text = name.id if isinstance(name, ast.Name) else \
            f"builtins.{name.attr}" if isinstance(name, ast.Attribute) and isinstance(name.value, ast.Name) \
            and name.value.id == "builtins" else ""
        if text in _CATCH_ALL:
            return True
    return False


def _irrefutable(pattern: ast.AST) -> bool:
    if isinstance(pattern, ast.MatchAs):
        return pattern.pattern is None or _irrefutable(pattern.pattern)
    if isinstance(pattern, ast.MatchOr):
        return any(_irrefutable(p) for p in pattern.patterns)
    return False


_SAFE_EXPRS = (ast.Constant, ast.Name, ast.Lambda, ast.JoinedStr)


def _can_raise(node: ast.AST) -> bool:
    """Could evaluating this statement or expression raise?  Names,
    constants, literals of those and definitions do not (a name error is a
    bug of another kind); calls, attributes, subscripts and operators may."""
    if isinstance(node, _SAFE_EXPRS):
        return False
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_can_raise(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(_can_raise(e) for e in node.keys if e is not None) or any(_can_raise(v) for v in node.values)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        return (value is not None and _can_raise(value)) or any(not isinstance(t, ast.Name) for t in targets)
    if isinstance(node, ast.Expr):
        return _can_raise(node.value)
    if isinstance(node, FunctionNode + (ast.ClassDef,)):
        return bool(node.decorator_list) or isinstance(node, ast.ClassDef) and bool(node.bases)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    return True


def build(owner: ast.AST, truth: Callable[[ast.AST], bool | None],
          noreturn: Callable[[ast.Call], bool] = lambda call: False) -> CFG:
    """The graph of a function's body (or a module's)."""
    cfg = CFG(owner)
    builder = _Builder(cfg, truth, noreturn)
    body = owner.body if isinstance(owner, FunctionNode + (ast.Module,)) else []  # type: ignore[attr-defined]
    out = builder.block(list(body), [ENTRY])
    cfg.link(out, IMPLICIT)
    cfg.link([IMPLICIT], EXIT)
    return cfg
