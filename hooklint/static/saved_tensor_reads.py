"""Reads of ``ctx.saved_tensors`` in a custom Function's backward, and which of them can run twice.

Every read of ``ctx.saved_tensors`` (or the legacy ``ctx.saved_variables``)
unpacks *all* the tensors ``forward`` saved again: the active
saved-tensor hooks' unpack runs once per tensor per read.  The question this
module answers is "on some path through one backward, can a read run after
another read (or after itself, in a loop or a comprehension)?", asked of the
backward's own body and of the helpers it passes ``ctx`` to, over the
control-flow graph of ``hooklint.static.core``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterator

from hooklint.static.autograd_function import registered_backwards
from hooklint.static.backward_flow import function_backwards
from hooklint.static.context import FileContext
from hooklint.static.semantic import is_classmethod, is_staticmethod, positional_params

READ_ATTRS = frozenset({"saved_tensors", "saved_variables"})
TRIGGERS = ("saved_tensors", "saved_variables")
# `.saved_tensors` as an attribute, not `saved_tensors_hooks` (a word boundary cannot follow `_`).
TRIGGER_PATTERN = r"\.saved_(?:tensors|variables)\b"

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_MAX_HELPER_DEPTH = 3


@dataclass
class UnpackSite:
    """A place in one function where the saved tensors are unpacked: a read, or a call of a helper that reads."""

    node: ast.AST  # the read (``ctx.saved_tensors``) or the helper call
    read: ast.Attribute  # the read itself (in the helper, for a call)
    via: list[ast.AST] = field(default_factory=list)  # helper defs between the site and the read

    @property
    def attr(self) -> str:
        return self.read.attr


@dataclass
class RepeatedUnpack:
    """A site that can unpack the saved tensors again after ``earlier`` did (``earlier is site``: a loop)."""

    func: ast.AST  # the function whose body holds both sites
    site: UnpackSite
    earlier: UnpackSite
    repeat: str | None  # "loop" or "comprehension" when the site repeats itself; None for two sites


@dataclass
class BackwardUnpacks:
    label: str  # "`Fn.backward`", or the op a backward is registered for
    backward: ast.AST
    ctx_name: str
    repeated: list[RepeatedUnpack]


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``func``'s body, not those of functions, lambdas or classes nested in it (comprehensions
    are part of the body: they run where they are written)."""
    stack = list(reversed(getattr(func, "body", [])))
    while stack:
        node = stack.pop()
        yield node
        for child in reversed(list(ast.iter_child_nodes(node))):
            if not isinstance(child, _SCOPES):
                stack.append(child)


def _lambda_or_own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    if isinstance(func, ast.Lambda):
        yield from ast.walk(func.body)
    else:
        yield from _own_nodes(func)


def ctx_aliases(func: ast.AST, ctx_name: str) -> set[str]:
    """``ctx_name`` and the local names bound to it (``c = ctx``, ``c: Any = ctx``)."""
    names = {ctx_name}
    for _ in range(3):
        grown = False
        for node in _own_nodes(func):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names:
                targets = node.targets
            elif isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Name) and node.value.id in names:
                targets = [node.target]
            elif isinstance(node, ast.NamedExpr) and isinstance(node.value, ast.Name) and node.value.id in names:
                targets = [node.target]
            else:
                continue
            for target in targets:
                if isinstance(target, ast.Name) and target.id not in names:
                    names.add(target.id)
                    grown = True
        if not grown:
            break
    return names


def _is_read(node: ast.AST, names: set[str]) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in READ_ATTRS and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name) and node.value.id in names)


class _Reads:
    """Unpack sites per function, helpers followed through the argument that receives ``ctx``."""

    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self.model = ctx.model
        self._cache: dict[tuple[int, str], list[UnpackSite]] = {}

    def sites(self, func: ast.AST, ctx_name: str, depth: int = 0) -> list[UnpackSite]:
        key = (id(func), ctx_name)
        if key in self._cache:
            return self._cache[key]
        self._cache[key] = []  # a recursive helper adds nothing while it is computed
        names = ctx_aliases(func, ctx_name)
        out: list[UnpackSite] = []
        for node in _own_nodes(func):
            if _is_read(node, names):
                out.append(UnpackSite(node, node))  # type: ignore[arg-type]
            elif isinstance(node, ast.Call) and depth < _MAX_HELPER_DEPTH:
                helper = self._helper_read(node, names, depth)
                if helper is not None:
                    out.append(helper)
        out.sort(key=lambda s: (s.node.lineno, s.node.col_offset))  # type: ignore[attr-defined]
        self._cache[key] = out
        return out

    def _closure_read(self, call: ast.Call, names: set[str], depth: int) -> UnpackSite | None:
        """A call of a function or lambda defined in this body that reads the enclosing ``ctx`` itself:
        `load = lambda i: ctx.saved_tensors[i]`, `def get(i): return ctx.saved_tensors[i]`."""
        if not isinstance(call.func, ast.Name):
            return None
        bindings = self.model.bindings_at(call.func)
        if len(bindings) != 1:
            return None
        binding = bindings[0]
        inner: ast.AST | None = None
        if binding.kind == "def" and isinstance(binding.node, _FUNCS):
            inner = binding.node
        elif isinstance(binding.value, ast.Lambda):
            inner = binding.value
        if inner is None or not any(_is_read(n, names) for n in _lambda_or_own_nodes(inner)):
            return None
        own_params = {a.arg for a in inner.args.posonlyargs + inner.args.args + inner.args.kwonlyargs}  # type: ignore[attr-defined]
        free = names - own_params
        read = next((n for n in _lambda_or_own_nodes(inner) if _is_read(n, free)), None)
        if read is None:
            return None
        return UnpackSite(call, read, [inner])  # type: ignore[arg-type]

    def _helper_read(self, call: ast.Call, names: set[str], depth: int) -> UnpackSite | None:
        closure = self._closure_read(call, names, depth)
        if closure is not None:
            return closure
        position: int | None = None
        keyword: str | None = None
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                return None
            if isinstance(arg, ast.Name) and arg.id in names:
                position = i
                break
        if position is None:
            keyword = next((k.arg for k in call.keywords
                            if k.arg is not None and isinstance(k.value, ast.Name) and k.value.id in names), None)
            if keyword is None:
                return None
        callee, shift = self._callee(call)
        if callee is None:
            return None
        params = positional_params(callee) + [a.arg for a in callee.args.kwonlyargs]
        if keyword is not None:
            param = keyword if keyword in params else None
        else:
            index = position + shift  # type: ignore[operator]
            param = params[index] if index < len(positional_params(callee)) else None
        if param is None:
            return None
        inner = self.sites(callee, param, depth + 1)
        if not inner:
            return None
        first = inner[0]
        return UnpackSite(call, first.read, [callee, *first.via])

    def _callee(self, call: ast.Call) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, int]:
        """The function of this file a call runs, and how many leading parameters the call does not pass
        (``cls`` of a classmethod)."""
        func = call.func
        if isinstance(func, ast.Name):
            bindings = self.model.bindings_at(func)
            if len(bindings) == 1 and bindings[0].kind == "def" and isinstance(bindings[0].node, _FUNCS):
                node = bindings[0].node
                return node, 0
            return None, 0
        if isinstance(func, ast.Attribute):
            info = self.model.class_for_expr(func.value)
            if info is None:
                return None, 0
            method = info.method(func.attr)
            if method is None:
                return None, 0
            if is_staticmethod(method):
                return method, 0
            if is_classmethod(method):
                return method, 1
            return None, 0  # an instance method called through the class or an object: ctx's slot is unclear
        return None, 0


def _loop_repeat(site_node: ast.AST, func: ast.AST, core) -> str | None:
    """Does this site run more than once per call of ``func``: inside a comprehension's repeated part, or a
    loop that can come back to it."""
    child = site_node
    parent = getattr(child, "_hl_parent", None)
    while parent is not None and parent is not func:
        if isinstance(parent, _COMPREHENSIONS):
            first_iter = parent.generators[0].iter if parent.generators else None
            if child is not first_iter:
                return "comprehension"
        if isinstance(parent, _SCOPES):
            return None
        child, parent = parent, getattr(parent, "_hl_parent", None)
    stmt = core.statement(site_node)
    if isinstance(stmt, (ast.For, ast.AsyncFor)) and _inside(site_node, stmt.iter):
        return None  # the iterable is evaluated once
    cfg = core.cfg(func)
    if cfg.has(stmt) and cfg.some_path_reaches(stmt, stmt, exceptional=False):
        return "loop"
    return None


def _inside(node: ast.AST, root: ast.AST) -> bool:
    cur: ast.AST | None = node
    while cur is not None:
        if cur is root:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def _exclusive_in_statement(a: ast.AST, b: ast.AST, stmt: ast.AST) -> bool:
    """Are ``a`` and ``b`` (in one statement) in the two branches of one conditional expression, or in two
    cases of a ``match``, so that one run of the statement evaluates at most one of them?"""
    chain_a: list[ast.AST] = []
    cur: ast.AST | None = a
    while cur is not None and cur is not stmt:
        chain_a.append(cur)
        cur = getattr(cur, "_hl_parent", None)
    ids = {id(n) for n in chain_a}
    cur, prev = b, None
    while cur is not None and cur is not stmt:
        if id(cur) in ids:
            break
        prev, cur = cur, getattr(cur, "_hl_parent", None)
    if isinstance(cur, ast.IfExp) and prev is not None:
        a_child = next((n for n in chain_a if getattr(n, "_hl_parent", None) is cur), None)
        return a_child is not None and a_child is not cur.test and prev is not cur.test and a_child is not prev
    return False


def repeated_unpacks(func: ast.AST, sites: list[UnpackSite], core) -> list[RepeatedUnpack]:
    """The sites that can unpack again after some site (possibly themselves) of the same call of ``func``."""
    out: list[RepeatedUnpack] = []
    cfg = core.cfg(func)
    for j, site in enumerate(sites):
        if not core.can_run(site.node):
            continue
        repeat = _loop_repeat(site.node, func, core)
        if repeat is not None:
            out.append(RepeatedUnpack(func, site, site, repeat))
            continue
        stmt_b = core.statement(site.node)
        for earlier in sites:
            if earlier is site or not core.can_run(earlier.node):
                continue
            stmt_a = core.statement(earlier.node)
            if stmt_a is stmt_b:
                if (earlier.node.lineno, earlier.node.col_offset) >= (site.node.lineno, site.node.col_offset):  # type: ignore[attr-defined]
                    continue
                if _exclusive_in_statement(earlier.node, site.node, stmt_a):
                    continue
                out.append(RepeatedUnpack(func, site, earlier, None))
                break
            if cfg.has(stmt_a) and cfg.has(stmt_b) and cfg.some_path_reaches(stmt_a, stmt_b, exceptional=False):
                out.append(RepeatedUnpack(func, site, earlier, None))
                break
    return out


def backward_unpacks(ctx: FileContext) -> list[BackwardUnpacks]:
    """For each custom Function's backward of the file: its unpack sites that can run more than once in one
    backward (reads in its body and in the helpers of the file it passes ``ctx`` to)."""
    reads = _Reads(ctx)
    core = ctx.core
    out: list[BackwardUnpacks] = []
    backwards: list[tuple[str, ast.AST]] = [(f"`{fn.name}.backward`", fn.backward)
                                            for fn in function_backwards(ctx.model)]
    backwards += [(f"the backward registered for `{reg.name}`", reg.backward) for reg in registered_backwards(ctx)]
    for name, backward in backwards:
        params = positional_params(backward)
        if not params:
            continue
        sites = reads.sites(backward, params[0])
        if not sites:
            continue
        repeated = repeated_unpacks(backward, sites, core)
        # a helper that unpacks twice by itself repeats in every backward that calls it
        seen_helpers: set[int] = set()
        for site in sites:
            for helper in site.via[:1]:
                if id(helper) in seen_helpers:
                    continue
                seen_helpers.add(id(helper))
                repeated.extend(_helper_repeats(reads, helper, site.node, core))
        if repeated:
            out.append(BackwardUnpacks(name, backward, params[0], repeated))
    return out


def _helper_repeats(reads: _Reads, helper: ast.AST, call: ast.AST, core) -> list[RepeatedUnpack]:
    for name, sites in _helper_param_sites(reads, helper):
        if sites:
            return repeated_unpacks(helper, sites, core)
    return []


def _helper_param_sites(reads: _Reads, helper: ast.AST) -> Iterator[tuple[str, list[UnpackSite]]]:
    for (func_id, name), sites in list(reads._cache.items()):
        if func_id == id(helper):
            yield name, sites
