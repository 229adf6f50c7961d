"""Function summaries: what a function does with hooks, in its callers' terms.

For each function the core computes, once and only when a question needs
it, a :class:`Facts`:

- ``regs``: the hooks it registers (:class:`Reg`), directly or through the
  functions it calls: the kind (or the parameter that chooses it:
  ``dir="bwd"``, ``kind="forward"``, ``backward=True``), the object hooked
  and the hook as places (:mod:`hooklint.static.core.places`), and what
  becomes of the handle (returned, dropped, kept in ``self.handles``,
  removed on every path before the function returns, removed on some paths
  only, removed only in code that never runs);
- ``removes``: where the handles it removes are kept (``s.handles``,
  ``e:s.handles``, ``p:handle``), directly or through helpers;
- ``forgets``: handle containers it empties or rebinds without removing;
- ``runs``: the modules or functions of its caller it runs (``p:model``,
  ``s.model``);
- ``ret``: ``"h"`` (returns the handle of a hook it registers), ``"hs"``
  (a list of them), ``"none"`` (registers hooks and returns None on every
  path: its callers get no handle), or ``""``;
- ``elems``: the place of the elements of what it returns or yields (a
  generator of the caller's submodules: ``e:p:model``);
- ``noreturn``: it never returns normally (it always raises or exits).

A call applies the callee's facts through its arguments (:func:`apply_edge`);
the facts of a function are its own (:meth:`FileFacts.direct`) and those of
its calls, to a fixpoint over the call graph (recursion counts once).  The
same :func:`apply_edge` composes summaries across files in the project index
(:mod:`hooklint.static.project`), from the JSON form stored with each file's
results (:meth:`Facts.to_json`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable

from hooklint.static.core import places as P
from hooklint.static.semantic import FunctionNode, positional_params

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.core import Core
    from hooklint.static.hooks import Registration

# Registration APIs by method name (kept here so that the JSON facts need no enum).
API_KINDS = {
    "register_forward_hook": "forward",
    "register_forward_pre_hook": "forward-pre",
    "register_backward_hook": "backward-legacy",
    "register_full_backward_hook": "full-backward",
    "register_full_backward_pre_hook": "full-backward-pre",
    "register_hook": "tensor",
    "register_post_accumulate_grad_hook": "post-accumulate-grad",
}
# Methods that put what they are given into their receiver (a container).
STORE_METHODS = frozenset({"append", "extend", "add", "insert", "update", "setdefault", "appendleft"})
# Uses of a local container or handle that neither remove nor leak it.
_NEUTRAL_METHODS = frozenset({"append", "extend", "add", "insert", "clear", "copy", "__len__", "keys", "index",
                              "count", "setdefault", "update"})
MAX_DEPTH = 6

# Fates of a handle (strings, stored in summaries):
#   "drop"        nothing keeps it
#   "ret"         returned to the caller ("ret*": inside a returned container)
#   "at:<place>"  kept there (``at:s.handle``, ``at:e:s.handles``)
#   "rm"          removed on every path before the function returns
#   "rm?:<line>"  removed at <line>, but not on every path
#   "dead:<line>" its only removal, at <line>, never runs
#   "nil:<fate>"  the function that registers it returns None: the caller's <fate> holds None
#   "?"           it goes where the analysis does not follow


@dataclass(frozen=True)
class Reg:
    kind: str  # HookKind value; "" when not known here
    target: str
    hook: str | None
    handle: str
    line: int  # of the registering torch call, in its file
    api: str
    path: str = ""  # file of the registering torch call ("": this file)
    when: tuple[tuple[str, str, Any], ...] = ()  # conditions on parameters: (place, op, value)
    choose: tuple[str, str, str] | None = None  # (place, prefix, suffix): the API named by a parameter's value
    chain: tuple[tuple[str, str, int], ...] = ()  # wrappers, from this function inwards: (name, path, line)
    guarded: bool = False
    chosen: bool = False  # the API was named by the call's argument (`getattr(m, f"register_{kind}_hook")`)
    passed: bool = False  # the callee handed the handle out: ``handle`` is what the call's caller does with it
    guessed: bool = False  # ``target`` is a guess from the shape of a lookup (Core.looked_up_in_callers)
    once: bool = False  # under a test of a flag the guarded code sets: a second run does not register it
    # in the file that computed it (never stored):
    site: ast.Call | None = field(default=None, compare=False, hash=False)  # the call here that makes it
    target_expr: ast.AST | None = field(default=None, compare=False, hash=False)
    target_text: str = field(default="", compare=False, hash=False)  # how to name the target, when not `target_expr`
    hook_expr: ast.AST | None = field(default=None, compare=False, hash=False)
    registration: "Registration | None" = field(default=None, compare=False, hash=False)
    # the target is an attribute the constructor called here set from the call's argument (``self.model =
    # model``): the constructor's own file sees a new object's attribute, only this call sees whose module
    through_init: bool = field(default=False, compare=False, hash=False)

    def to_json(self) -> list[Any]:
        return [self.kind, self.target, self.hook, self.handle, self.line, self.api, self.path,
                [list(w) for w in self.when], list(self.choose) if self.choose else None,
                [list(c) for c in self.chain], self.guarded, self.chosen, self.passed, self.guessed, self.once]

    @classmethod
    def from_json(cls, data: list[Any], path: str = "") -> "Reg":
        kind, target, hook, handle, line, api, rpath, when, choose, chain, guarded, chosen, passed, guessed, once = data
        return cls(kind, target, hook, handle, line, api, rpath or path,
                   tuple(tuple(w) for w in when), tuple(choose) if choose else None,  # type: ignore[arg-type]
                   tuple((n, p or path, ln) for n, p, ln in chain), guarded, chosen, passed, guessed, once)


@dataclass
class Removal:
    place: str
    site: ast.AST | None = None  # the statement after which they are removed (this file only)
    line: int = 0
    chain: tuple[tuple[str, str, int], ...] = ()
    node: ast.AST | None = None  # the removing call (`h.remove()`, `self._remove_hooks()`)


@dataclass
class Facts:
    params: list[str] = field(default_factory=list)  # positional, in order
    kwonly: list[str] = field(default_factory=list)
    defaults: dict[str, str] = field(default_factory=dict)  # parameter -> place of its default
    regs: list[Reg] = field(default_factory=list)
    removes: list[Removal] = field(default_factory=list)
    forgets: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    ret: str = ""
    elems: str = ""
    returns: str = ""  # the place of what it returns, when every return agrees (a part of an argument)
    noreturn: bool = False
    # a constructor's attributes set from its parameters (``self.model = model``: {"model": "p:model"}),
    # so that a registration on ``self.model`` is, at ``Cls(net)``, one on ``net``
    inits: dict[str, str] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.regs or self.removes or self.forgets or self.runs or self.ret or self.elems
                    or self.returns or self.noreturn)

    def removes_place(self, place: str) -> list[Removal]:
        return [r for r in self.removes if r.place == place]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"params": self.params}
        if self.kwonly:
            out["kwonly"] = self.kwonly
        if self.defaults:
            out["defaults"] = self.defaults
        if self.regs:
            out["regs"] = [r.to_json() for r in self.regs]
        if self.removes:
            out["removes"] = [[r.place, r.line, [list(c) for c in r.chain]] for r in self.removes]
        for name in ("forgets", "runs"):
            if getattr(self, name):
                out[name] = sorted(set(getattr(self, name)))
        for name in ("ret", "elems", "returns"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.noreturn:
            out["noreturn"] = True
        if self.inits:
            out["inits"] = self.inits
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], path: str = "") -> "Facts":
        return cls(
            params=list(data.get("params", ())), kwonly=list(data.get("kwonly", ())),
            defaults=dict(data.get("defaults", {})),
            regs=[Reg.from_json(r, path) for r in data.get("regs", ())],
            removes=[Removal(p, None, line, tuple((n, cp or path, ln) for n, cp, ln in chain))
                     for p, line, chain in data.get("removes", ())],
            forgets=list(data.get("forgets", ())), runs=list(data.get("runs", ())),
            ret=data.get("ret", ""), elems=data.get("elems", ""), returns=data.get("returns", ""),
            noreturn=bool(data.get("noreturn")), inits=dict(data.get("inits", {})))


@dataclass
class Edge:
    """A call, as its callee's facts need it: the caller's places for the
    receiver and the arguments, and what becomes of the returned value."""

    recv: str
    args: list[str]  # "*" for a starred argument
    kwargs: dict[str, str]  # "**" key for a spread
    fate: str
    guarded: bool = False
    line: int = 0
    bound: int = 0  # leading parameters the call supplies itself (a bound method's self)
    construct: bool = False
    once: bool = False  # the call is under a test of a flag the guarded code sets (Core.once_guarded)

    def to_json(self) -> list[Any]:
        return [self.recv, self.args, self.kwargs, self.fate, self.guarded, self.line, self.bound, self.construct,
                self.once]

    @classmethod
    def from_json(cls, data: list[Any]) -> "Edge":
        recv, args, kwargs, fate, guarded, line, bound, construct, once = data
        return cls(recv, list(args), dict(kwargs), fate, guarded, line, bound, construct, once)

    def argument(self, facts: Facts, name: str) -> str | None:
        """The caller's place for the callee's parameter ``name``."""
        if name in facts.params:
            index = facts.params.index(name)
            if index < self.bound:
                return self.recv if index == 0 else None
            position = index - self.bound
            if "*" in self.args[:position + 1]:
                return None
            if position < len(self.args):
                return self.args[position]
        if name in self.kwargs:
            return self.kwargs[name]
        if "**" in self.kwargs or "*" in self.args:
            return None
        return facts.defaults.get(name, P.UNKNOWN)


def apply_edge(callee: Facts, edge: Edge, name: str, path: str, line: int) -> Facts:
    """What a call contributes to its caller's facts: the callee's facts with
    the call's arguments put in for its parameters.  ``name``, ``path``,
    ``line``: how to name the callee in the chain of wrappers."""
    recv = P.NEW if edge.construct else edge.recv

    def sub(place: str) -> str:
        return P.substitute(place, lambda param: edge.argument(callee, param), recv)

    out = Facts()
    link = (name, path, line)
    for reg in callee.regs:
        mapped = map_reg(reg, callee, edge, link)
        if mapped is not None:
            out.regs.append(mapped)
    for removal in callee.removes:
        place = sub(removal.place)
        if place != P.UNKNOWN and not place.startswith("c:"):
            out.removes.append(Removal(place, None, edge.line, (link,) + removal.chain))
    out.forgets = [p for p in (sub(f) for f in callee.forgets) if p != P.UNKNOWN]
    out.runs = [p for p in (sub(r) for r in callee.runs) if P.is_callers(p)]
    return out


def map_reg(reg: Reg, callee: Facts, edge: Edge, link: tuple[str, str, int]) -> Reg | None:
    """The callee's registration as the call makes it (None: the call never makes it)."""
    recv = P.NEW if edge.construct else edge.recv

    def sub(place: str) -> str:
        if edge.construct and callee.inits:
            place = through_inits(place, callee.inits)
        return P.substitute(place, lambda param: edge.argument(callee, param), recv)

    when: list[tuple[str, str, Any]] = []
    for place, op, value in reg.when:
        mapped = sub(place)
        known, actual = P.constant_value(mapped)
        if known:
            if not _holds(op, actual, value):
                return None  # this call never takes the branch that registers
            continue
        if conditional_place(mapped):
            when.append((mapped, op, value))
    kind, choose, chosen = reg.kind, reg.choose, reg.chosen
    if choose is not None:
        mapped = sub(choose[0])
        known, actual = P.constant_value(mapped)
        if known:
            if not isinstance(actual, str):
                return None
            kind = API_KINDS.get(f"{choose[1]}{actual}{choose[2]}", "")
            if not kind:
                return None  # another API, not a registration
            choose, chosen = None, True
        elif mapped.startswith("p:") and "." not in mapped:
            choose = (mapped, choose[1], choose[2])
        else:
            choose = None
    handle = _combine_fate(reg.handle, edge.fate, callee, sub) if not edge.construct else \
        ("?" if reg.handle in ("ret", "ret*") else _combine_fate(reg.handle, "?", callee, sub))
    return Reg(kind, sub(reg.target), sub(reg.hook) if reg.hook else None, handle, reg.line, reg.api, reg.path,
               tuple(when), choose, (link,) + reg.chain, reg.guarded or edge.guarded, chosen,
               reg.handle in ("ret", "ret*"), reg.guessed, reg.once or edge.once)


def conditional_place(place: str) -> bool:
    """A place a registration's condition may name: a parameter, or an
    attribute of the object itself (``self.flag``), which its class's
    constructor may fix (:func:`hooklint.static.core.constants.constructed_attribute`)."""
    if place.startswith("p:"):
        return "." not in place
    return place.startswith("s.") and "." not in place[2:]


def through_inits(place: str, inits: dict[str, str]) -> str:
    """``s.model.fc`` (or a part of it) of an object under construction, as
    the constructor's parameter it was set from: ``p:model.fc``."""
    prefix = ""
    while place.startswith(P.ELEMENT):
        prefix, place = prefix + P.ELEMENT, place[len(P.ELEMENT):]
    if not place.startswith("s."):
        return prefix + place
    attr, dot, rest = place[2:].partition(".")
    found = inits.get(attr)
    if found is None:
        return prefix + place
    return prefix + (f"{found}.{rest}" if dot else found)


def _combine_fate(handle: str, outer: str, callee: Facts, sub: Callable[[str], str]) -> str:
    if handle == "ret":
        return outer
    if handle == "ret*":
        if outer.startswith("at:") and not outer[3:].startswith(P.ELEMENT):
            return "at:" + P.element(outer[3:])
        return "ret*" if outer == "ret" else outer
    if handle.startswith("at:"):
        place = sub(handle[3:])
        return "?" if place == P.UNKNOWN else "at:" + place
    if handle == "drop" and callee.ret == "none" and (outer in ("rm", "ret") or outer.startswith(("rm?", "at:",
                                                                                                   "dead:"))):
        return "nil:" + outer
    return handle


def _holds(op: str, actual: Any, value: Any) -> bool:
    if op == "==":
        return actual == value
    if op == "!=":
        return actual != value
    if op == "in":
        return actual in value
    if op == "notin":
        return actual not in value
    if op == "truthy":
        return bool(actual)
    if op == "falsy":
        return not actual
    return True


class FileFacts:
    """The facts of the functions of one file, computed when asked.

    ``external(call)`` gives the facts of a function of another file that a
    call reaches (from the project index), with its display name, path and
    line, or None."""

    def __init__(self, core: "Core", external: Callable[[ast.Call, bool], tuple[Facts, Edge, str, str, int] | None]):
        self.core = core
        self.model = core.model
        self.places = core.places
        self.external = external
        self._direct: dict[int, Facts] = {}
        self._facts: dict[int, Facts] = {}
        self._active: set[int] = set()
        self._calls: dict[int, list[ast.Call]] | None = None
        self._regs: dict[int, list["Registration"]] | None = None
        self._exits: dict[int, list[ast.AST]] | None = None
        self._direct_active: set[int] = set()
        self._exported: dict[str, Any] | None = None

    # ------------------------------------------------------------ indexes
    def calls_in(self, func: ast.AST | None) -> list[ast.Call]:
        """The calls whose code is ``func``'s own (None: module level), in source order."""
        if self._calls is None:
            calls: dict[int, list[ast.Call]] = {}
            every: list[ast.Call] = []
            for group in (self.model.method_calls, self.model.name_calls):
                for found in group.values():
                    every.extend(found)
            # `getattr(m, name)(fn)`: a call of a call, which neither table holds
            for inner in self.model.name_calls.get("getattr", ()):
                outer = getattr(inner, "_hl_parent", None)
                if isinstance(outer, ast.Call) and outer.func is inner:
                    every.append(outer)
            for call in every:
                owner = self.places.owner(call)
                calls.setdefault(id(owner) if owner is not None else 0, []).append(call)
            for found in calls.values():
                found.sort(key=lambda c: (c.lineno, c.col_offset))
            self._calls = calls
        return self._calls.get(id(func) if func is not None else 0, [])

    def exits_in(self, func: ast.AST | None) -> list[ast.AST]:
        """The ``return``, ``yield`` and ``raise`` nodes of ``func``'s own code."""
        if self._exits is None:
            exits: dict[int, list[ast.AST]] = {}
            for node in self.model.exits:
                owner = self.places.owner(node)
                exits.setdefault(id(owner) if owner is not None else 0, []).append(node)
            self._exits = exits
        return self._exits.get(id(func) if func is not None else 0, [])

    def is_generator(self, func: ast.AST) -> bool:
        return any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in self.exits_in(func))

    def registrations_in(self, func: ast.AST | None) -> list["Registration"]:
        if self._regs is None:
            regs: dict[int, list["Registration"]] = {}
            for reg in self.core.hooks.registrations:
                owner = self.places.owner(reg.call)
                regs.setdefault(id(owner) if owner is not None else 0, []).append(reg)
            self._regs = regs
        return self._regs.get(id(func) if func is not None else 0, [])

    # ------------------------------------------------------------ facts
    def facts(self, func: ast.AST | None) -> Facts:
        """Own facts and those of the calls it makes (to a fixpoint; a call
        back into a function being computed adds nothing)."""
        key = id(func) if func is not None else 0
        found = self._facts.get(key)
        if found is not None:
            return found
        if key in self._active:
            return self.direct(func)
        self._active.add(key)
        try:
            facts = self._compose(func)
        finally:
            self._active.discard(key)
        self._facts[key] = facts
        return facts

    def _compose(self, func: ast.AST | None) -> Facts:
        own = self.direct(func)
        out = replace(own, regs=list(own.regs), removes=list(own.removes), forgets=list(own.forgets),
                      runs=list(own.runs))
        for call in self.calls_in(func):
            target = self.callee(call, func)
            if target is None:
                continue
            callee, edge, name, path, line = target
            if callee.empty():
                continue
            link = (name, path, line)
            applied = _is_apply(call)
            for reg in callee.regs:
                mapped = map_reg(reg, callee, edge, link)
                if mapped is None:
                    continue
                if applied:
                    # `model.apply(fn)`: fn's module parameter is each submodule of `model`
                    first = callee.params[edge.bound] if len(callee.params) > edge.bound else None
                    on_module = first is not None and reg.target.startswith(f"p:{first}")
                    out.regs.append(replace(
                        mapped, site=call, target_expr=call.func.value if on_module else None,  # type: ignore[attr-defined]
                        target_text=f"each submodule of `{_src(call.func.value)}`" if on_module else "",  # type: ignore[attr-defined]
                        hook_expr=None))
                    continue
                target_expr = self._argument_expr(call, callee, edge, reg.target)
                target_text = ""
                through_init = False
                if target_expr is None and edge.construct and callee.inits:
                    # `Extractor(model)` whose methods hook `self.model` (or a layer of it): the argument
                    through = through_inits(reg.target, callee.inits)
                    whole = through[len(P.ELEMENT):] if through.startswith(P.ELEMENT) else through
                    target_expr = self._argument_expr(call, callee, edge, whole) if whole != reg.target else None
                    through_init = target_expr is not None
                    if target_expr is not None and whole != through:
                        target_text = f"a part of `{_src(target_expr)}`"
                out.regs.append(replace(mapped, site=call, target_expr=target_expr, target_text=target_text,
                                        hook_expr=self._argument_expr(call, callee, edge, reg.hook),
                                        through_init=through_init))
            part = apply_edge(replace(callee, regs=[]), edge, name, path, line)
            stmt = self.core.statement(call)
            for removal in part.removes:
                removal.site = stmt
                removal.node = call
                out.removes.append(removal)
            out.forgets += part.forgets
            out.runs += part.runs
        if out.regs and func is not None:
            out.regs = [r for r in out.regs if not self._never_made(r, func)]
        if out.regs and not out.ret and func is not None and self._returns_none(func):
            out.ret = "none"
        return out

    def _never_made(self, reg: Reg, func: ast.AST) -> bool:
        """Does a condition on the object's own attribute (``if self.flag:``) fail for
        every object of ``func``'s class, as its constructor chain fixes the attribute?"""
        tests = [w for w in reg.when if w[0].startswith("s.")]
        if not tests:
            return False
        cls = self.model.enclosing_class(func)
        if cls is None or cls.methods.get(getattr(func, "name", "")) is not func:
            return False
        from hooklint.static.core.constants import constructed_attribute

        for place, op, value in tests:
            known, actual = constructed_attribute(self.model, cls, place[2:])
            if known and not _holds(op, actual, value):
                return True
        return False

    def callee(self, call: ast.Call, func: ast.AST | None, *, with_edge: bool = True,
               composed: bool = True) -> tuple[Facts, Edge, str, str, int] | None:
        """The facts of the function a call runs, with the call's edge (None
        when ``with_edge`` is False: the edge costs more than the facts, and
        most callees have none).  ``composed``: the callee's facts with its
        own calls', else only its own (what a place needs: cheap and never
        recursive)."""
        applied = self._applied(call, func, with_edge, composed)
        if applied is not None:
            return applied
        local = self.core.local_callee(call)
        if local is not None:
            node, bound, construct = local
            if node is func and not construct:
                return None  # recursion: nothing new
            facts = self.facts(node) if composed else self.direct(node)
            edge = self.edge(call, func, bound, construct) if with_edge and not facts.empty() else None
            return facts, edge, _display(self.core, node), "", node.lineno  # type: ignore[return-value]
        return self.external(call, with_edge)

    def _applied(self, call: ast.Call, func: ast.AST | None, with_edge: bool = True,
                 composed: bool = True) -> tuple[Facts, Edge, str, str, int] | None:
        """``model.apply(fn)``: ``fn`` runs on each submodule of ``model``."""
        f = call.func
        if not (isinstance(f, ast.Attribute) and f.attr == "apply" and len(call.args) == 1 and not call.keywords):
            return None
        arg = call.args[0]
        target: ast.AST | None = None
        recv = P.UNKNOWN
        bound = 0
        extra_args: list[str] = []
        extra_kwargs: dict[str, str] = {}
        if isinstance(arg, ast.Call) and isinstance(arg.func, (ast.Name, ast.Attribute)) and arg.args \
                and (getattr(arg.func, "id", None) == "partial" or getattr(arg.func, "attr", None) == "partial"):
            # `model.apply(partial(fn, **options))`: fn(*bound_args, module, **options)
            extra_args = ["*" if isinstance(a, ast.Starred) else self.places.of(a, func) for a in arg.args[1:]]
            extra_kwargs = {("**" if k.arg is None else k.arg): self.places.of(k.value, func) for k in arg.keywords}
            arg = arg.args[0]
        if isinstance(arg, ast.Name) and hasattr(arg, "_hl_scope"):
            bindings = self.model.bindings_at(arg)
            if len(bindings) == 1 and bindings[0].kind == "def" and isinstance(bindings[0].node, FunctionNode):
                target = bindings[0].node
        elif isinstance(arg, ast.Attribute) and self.places.of(arg.value, func) == P.SELF:
            cls = self.model.enclosing_class(func) if func is not None else None
            found = cls.method(arg.attr) if cls is not None else None
            if found is not None:
                target, recv, bound = found, P.SELF, 1
        if target is None or target is func:
            return None
        facts = self.facts(target) if composed else self.direct(target)
        if not with_edge or facts.empty():
            return facts, None, _display(self.core, target), "", target.lineno  # type: ignore[return-value]
        module = P.element(self.places.of(f.value, func))
        edge = Edge(recv, extra_args + [module], extra_kwargs, "drop", self.core.guarded(call, func), call.lineno,
                    bound)
        return facts, edge, _display(self.core, target), "", target.lineno

    def edge(self, call: ast.Call, func: ast.AST | None, bound: int, construct: bool = False) -> Edge:
        places = self.places
        recv = P.UNKNOWN
        if isinstance(call.func, ast.Attribute):
            recv = places.of(call.func.value, func)
            if isinstance(call.func.value, ast.Call) and isinstance(call.func.value.func, ast.Name) \
                    and call.func.value.func.id == "super":
                recv = P.SELF
        args = ["*" if isinstance(a, ast.Starred) else places.of(a, func) for a in call.args]
        kwargs = {("**" if k.arg is None else k.arg): places.of(k.value, func) for k in call.keywords}
        return Edge(recv, args, kwargs, self.core.fate(call, func), self.core.guarded(call, func), call.lineno,
                    bound, construct, self.core.once_guarded(call, func))

    def _argument_expr(self, call: ast.Call, callee: Facts, edge: Edge, place: str | None) -> ast.AST | None:
        """The expression at ``call`` that stands for the callee's place (a
        parameter, or the receiver for ``self``), when the place is exactly that."""
        if place is None:
            return None
        if place == P.SELF:
            return call.func.value if isinstance(call.func, ast.Attribute) and not edge.construct else None
        if not place.startswith("p:") or "." in place:
            return None
        name = place[2:]
        if name in callee.params:
            position = callee.params.index(name) - edge.bound
            if position < 0:
                return call.func.value if position == -1 and isinstance(call.func, ast.Attribute) else None
            if any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
                return None
            if position < len(call.args):
                return call.args[position]
        for kw in call.keywords:
            if kw.arg == name:
                return kw.value
        return None

    def _returns_none(self, func: ast.AST) -> bool:
        """Every return that can run returns nothing (or None), or it falls off its end."""
        if not isinstance(func, FunctionNode):
            return False
        cfg = self.core.cfg(func)
        if not cfg.can_exit_normally():
            return False
        for ret in cfg.reachable_returns():
            if ret.value is not None and not (isinstance(ret.value, ast.Constant) and ret.value.value is None):
                return False
        return not self.is_generator(func)

    # ------------------------------------------------------------ export
    def export(self, qualname: Callable[[ast.AST], str | None]) -> dict[str, Any]:
        """The own facts of the file's functions that register hooks or remove
        handles, by local qualified name, for the project index (what callers
        in other files need: :func:`hooklint.static.project._for_callers`).
        What a function runs, returns or yields is followed within its file."""
        if self._exported is not None:
            return self._exported
        candidates: dict[int, ast.AST] = {}
        for name in ("remove",) + tuple(API_KINDS):
            for call in self.model.method_calls.get(name, ()):
                owner = self.places.owner(call)
                if isinstance(owner, FunctionNode):
                    candidates[id(owner)] = owner
        for reg in self.core.hooks.registrations:
            owner = self.places.owner(reg.call)
            if isinstance(owner, FunctionNode):
                candidates[id(owner)] = owner
        for inner in self.model.name_calls.get("getattr", ()):
            # `getattr(m, f"register_{kind}_hook")(fn)`: the API named by an argument
            outer = getattr(inner, "_hl_parent", None)
            owner = self.places.owner(inner)
            if isinstance(outer, ast.Call) and outer.func is inner and isinstance(owner, FunctionNode):
                candidates[id(owner)] = owner
        for owner in list(candidates.values()):
            # the constructor of a class whose methods register: what its attributes are set from
            cls = self.model.enclosing_class(owner)
            init = cls.methods.get("__init__") if cls is not None and owner in cls.methods.values() else None
            if isinstance(init, FunctionNode):
                candidates.setdefault(id(init), init)
        out: dict[str, Any] = {}
        for func in sorted(candidates.values(), key=lambda f: (f.lineno, f.col_offset)):
            local = qualname(func)
            if local is None:
                continue
            facts = self.direct(func)
            if facts.empty() and not facts.inits:
                continue
            data = facts.to_json()
            if facts.regs or self._calls_with_facts(func) or facts.inits:
                if self._returns_none(func):
                    data["rn"] = True
            out[local] = data
        self._exported = out
        return out

    def _calls_with_facts(self, func: ast.AST) -> bool:
        return False

    # ------------------------------------------------------------ direct facts
    def direct(self, func: ast.AST | None) -> Facts:
        key = id(func) if func is not None else 0
        found = self._direct.get(key)
        if found is None:
            if key in self._direct_active:
                return Facts()  # asked again while being computed (a call back into it): nothing yet
            self._direct_active.add(key)
            try:
                found = self._direct[key] = self._compute_direct(func)
            finally:
                self._direct_active.discard(key)
        return found

    def _compute_direct(self, func: ast.AST | None) -> Facts:
        core = self.core
        places = self.places
        facts = Facts()
        if isinstance(func, FunctionNode):
            args = func.args
            facts.params = [a.arg for a in list(args.posonlyargs) + list(args.args)]
            facts.kwonly = [a.arg for a in args.kwonlyargs]
            defaults = list(args.defaults)
            for name, default in zip(facts.params[len(facts.params) - len(defaults):], defaults):
                facts.defaults[name] = places.of(default, None) if isinstance(default, ast.Constant) else P.UNKNOWN
            for a, default in zip(args.kwonlyargs, args.kw_defaults):
                if default is not None:
                    facts.defaults[a.arg] = places.of(default, None) if isinstance(default, ast.Constant) \
                        else P.UNKNOWN
        chosen: set[int] = set()
        for call in self.calls_in(func):
            dynamic = self._dynamic_registration(call, func)
            if dynamic is not None:
                facts.regs.append(dynamic)
                chosen.add(id(call))
        for reg in self.registrations_in(func):
            if id(reg.call) in chosen:
                continue
            target = places.of(reg.receiver, func) if reg.receiver is not None else "global"
            if target.startswith("s.") and "." not in target[2:]:
                target = self._set_just_before(reg.receiver, reg.call, func) or target
            guessed = False
            if target == P.UNKNOWN and reg.receiver is not None:
                looked_up = core.looked_up_in_callers(reg.receiver, func)
                if looked_up is not None:
                    target, guessed = looked_up, True
            hook = places.of(reg.hook_expr, func) if reg.hook_expr is not None else None
            facts.regs.append(Reg(
                reg.kind.value, target, hook if hook and (hook.startswith("p:") or hook == P.SELF) else None,
                core.fate(reg.call, func), reg.call.lineno, reg.method_name,
                when=tuple(self._conditions(reg.call, func)), guarded=core.guarded(reg.call, func),
                guessed=guessed, once=core.once_guarded(reg.call, func), site=reg.call, target_expr=reg.receiver,
                hook_expr=reg.hook_expr, registration=reg))
        for call in self.calls_in(func):
            f = call.func
            if not isinstance(f, ast.Attribute):
                if isinstance(f, ast.Name) and P.is_callers(places.of(f, func)):
                    facts.runs.append(places.of(f, func))
                continue
            if f.attr == "remove" and not call.args and not call.keywords:
                for place in self._removed_places(f.value, func):
                    facts.removes.append(Removal(place, self._removal_point(call, f.value), call.lineno, node=call))
            elif f.attr == "clear" and not call.args:
                place = places.of(f.value, func)
                if place != P.UNKNOWN:
                    facts.forgets.append(place)
            else:
                # the caller's code: `self.model(x)`, `model.forward(x)`; not a method call on it
                place = P.UNKNOWN
                if f.attr in ("forward", "__call__"):
                    place = places.of(f.value, func)
                elif places.of(f.value, func) == P.SELF and self._is_stored(func, f):
                    place = places.of(f, func)
                if P.is_callers(place):
                    facts.runs.append(place)
        if isinstance(func, FunctionNode):
            facts.forgets += self._rebound_containers(func)
            regs_here = bool(facts.regs)
            returns = self._return_kinds(func, facts)
            if returns:
                facts.ret = returns
            elif regs_here and self._returns_none(func):
                facts.ret = "none"
            facts.elems = self._elements(func)
            facts.returns = self._returned_place(func)
            facts.inits = self._inits(func)
            if any(isinstance(n, ast.Raise) for n in self.exits_in(func)) and not self.is_generator(func):
                facts.noreturn = not core.cfg(func).can_exit_normally()
        return facts

    def _inits(self, func: ast.AST) -> dict[str, str]:
        """A constructor's ``self.<attr> = <parameter or part of one>``, in its
        own body (not under a branch), for attributes no other statement of
        the class assigns: what the new object's attribute is at the call."""
        if getattr(func, "name", "") != "__init__" or not isinstance(func, FunctionNode):
            return {}
        cls = self.model.enclosing_class(func)
        if cls is None or func not in cls.methods.values():
            return {}
        out: dict[str, str] = {}
        for stmt in func.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Attribute)):
                continue
            target = stmt.targets[0]
            if self.places.of(target.value, func) != P.SELF or len(cls.attribute(target.attr)) != 1:
                continue
            place = self.places.of(stmt.value, func)
            if P.root(place).startswith("p:"):
                out[target.attr] = place
        return out

    def _set_just_before(self, receiver: ast.AST, site: ast.Call, func: ast.AST | None) -> str | None:
        """``self.layer = dict(self.model.named_modules())[name]`` and then
        ``self.layer.register_forward_hook(...)`` in the same method: the hook
        is on what was assigned (a part of the caller's model), whatever the
        attribute holds later.  Only one assignment of the attribute in the
        method, in a block that holds the registration, before it."""
        if not isinstance(func, FunctionNode) or not isinstance(receiver, ast.Attribute) \
                or self.places.of(receiver.value, func) != P.SELF:
            return None
        stores = [node for node in ast.walk(func) if isinstance(node, ast.Attribute)
                  and isinstance(node.ctx, ast.Store) and node.attr == receiver.attr
                  and self.places.of(node.value, func) == P.SELF]
        if len(stores) != 1:
            return None
        assign = getattr(stores[0], "_hl_parent", None)
        if not isinstance(assign, ast.Assign) or assign.targets != [stores[0]]:
            return None
        block_owner = getattr(assign, "_hl_parent", None)
        cur: ast.AST | None = site
        while cur is not None and cur is not block_owner:
            cur = getattr(cur, "_hl_parent", None)
        if cur is None or assign.lineno >= site.lineno:
            return None
        place = self.places.of(assign.value, func)
        return place if P.is_callers(place) and P.root(place) != f"s.{receiver.attr}" else None

    def _is_stored(self, func: ast.AST | None, attr: ast.Attribute) -> bool:
        """``self.<name>`` naming an object the class stores (``self.model =
        model``), not one of its methods: calling it runs that object."""
        cls = self.model.enclosing_class(func) if func is not None else None
        return cls is not None and cls.method(attr.attr) is None and bool(cls.attribute(attr.attr))

    def _removed_places(self, expr: ast.AST, func: ast.AST | None) -> list[str]:
        """Where the handles ``<expr>.remove()`` removes are kept; a loop over
        several containers (``for h in self.fwd + self.bwd``,
        ``itertools.chain(a, b)``) removes from each."""
        place = self.places.of(expr, func)
        if place not in (P.UNKNOWN, P.NEW) and not place.startswith("c:"):
            return [place]
        if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
            bindings = self.model.bindings_at(expr)
            if len(bindings) == 1 and bindings[0].kind == "for" and not bindings[0].path \
                    and isinstance(bindings[0].value, ast.AST):
                out = []
                for part in _concatenated(bindings[0].value):
                    found = self.places.element_of(part, func)
                    if found not in (P.UNKNOWN, P.NEW):
                        out.append(found)
                return out
        return []

    def _removal_point(self, call: ast.Call, receiver: ast.AST) -> ast.AST | None:
        """The statement after which the handles are removed: for ``for h in
        handles: h.remove()``, the loop (it removes every element)."""
        stmt = self.core.statement(call)
        if isinstance(receiver, ast.Name) and hasattr(receiver, "_hl_scope"):
            bindings = self.model.bindings_at(receiver)
            if len(bindings) == 1 and bindings[0].kind == "for":
                node = bindings[0].node
                if isinstance(node, (ast.For, ast.AsyncFor)):
                    return node
                if isinstance(node, ast.comprehension):
                    return self.core.statement(node)
        return stmt

    def _rebound_containers(self, func: ast.AST) -> list[str]:
        """``self.handles = []`` (or None, ``{}``) outside ``__init__``: the
        old handles are forgotten."""
        if getattr(func, "name", "") in ("__init__", "__post_init__"):
            return []
        cls = self.model.enclosing_class(func)
        if cls is None or getattr(func, "_hl_parent", None) is not cls.node:
            return []
        out = []
        for attr, assigned in cls.attributes.items():
            for value, scope, _node in assigned:
                if scope.node is func and (
                        isinstance(value, (ast.List, ast.Dict, ast.Set, ast.Tuple)) and not _size(value)
                        or isinstance(value, ast.Constant) and value.value is None
                        or isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))
                        and not value.args and _last_name(value.func) in ("list", "dict", "OrderedDict", "set")):
                    out.append(f"s.{attr}")
        return out

    def _return_kinds(self, func: ast.AST, facts: Facts) -> str:
        if any(r.handle == "ret" for r in facts.regs):
            return "h"
        if any(r.handle == "ret*" for r in facts.regs):
            return "hs"
        return ""

    def _elements(self, func: ast.AST) -> str:
        """The place of the elements a generator yields, or a function returns
        a collection of."""
        places = self.places
        found: set[str] = set()
        yields = [n for n in self.exits_in(func) if isinstance(n, (ast.Yield, ast.YieldFrom))]
        if yields:
            for node in yields:
                if isinstance(node, ast.YieldFrom):
                    found.add(places.element_of(node.value, func))
                elif node.value is not None:
                    found.add(places.of(node.value, func))
        else:
            for ret in self.exits_in(func):
                if not isinstance(ret, ast.Return) or ret.value is None or isinstance(ret.value, ast.Constant):
                    continue
                value = ret.value
                if isinstance(value, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.List, ast.Tuple, ast.Call)):
                    found.add(places.element_of(value, func))
                elif isinstance(value, ast.Name):
                    found.add(self._local_list_elements(value, func))
                else:
                    return ""
        found.discard(P.NEW)
        if len(found) != 1:
            return ""
        place = found.pop()
        return place if P.is_callers(place) else ""

    def _returned_place(self, func: ast.AST) -> str:
        """``return module`` after binding methods on it, ``return model.layer4``:
        the argument (or part of one) a function hands back."""
        found: set[str] = set()
        for node in self.exits_in(func):
            if isinstance(node, (ast.Yield, ast.YieldFrom)):
                return ""
            if isinstance(node, ast.Return):
                if node.value is None:
                    return ""
                found.add(self.places.of(node.value, func))
        if len(found) != 1:
            return ""
        place = found.pop()
        return place if P.is_callers(place) and place != P.SELF else ""

    def _local_list_elements(self, name: ast.Name, func: ast.AST) -> str:
        """``out = []; for m in model.modules(): out.append(m); return out``."""
        place = self.places.of(name, func)
        if not place.startswith("l:"):
            return P.UNKNOWN
        found: set[str] = set()
        for call in self.calls_in(func):
            f = call.func
            if isinstance(f, ast.Attribute) and f.attr in ("append", "add", "insert") and call.args \
                    and self.places.of(f.value, func) == place:
                found.add(self.places.of(call.args[-1], func))
            elif isinstance(f, ast.Attribute) and f.attr == "extend" and call.args \
                    and self.places.of(f.value, func) == place:
                found.add(self.places.element_of(call.args[0], func))
        return found.pop() if len(found) == 1 else P.UNKNOWN

    # ------------------------------------------------------------ kinds chosen by parameters
    def _conditions(self, node: ast.AST, func: ast.AST | None) -> list[tuple[str, str, Any]]:
        """The tests on the function's parameters that must hold for ``node`` to run."""
        out: list[tuple[str, str, Any]] = []
        child = node
        cur = getattr(node, "_hl_parent", None)
        while cur is not None:
            if isinstance(cur, (ast.If, ast.IfExp)) and child is not cur.test:
                positive = child in cur.body if isinstance(cur, ast.If) else child is cur.body
                out += self._tests(cur.test, positive, func)
            if isinstance(child, ast.stmt):
                # `if backward: return ...` before it: it runs only when the test is false
                for name in ("body", "orelse", "finalbody"):
                    block = getattr(cur, name, None)
                    if isinstance(block, list) and child in block:
                        for earlier in block[:block.index(child)]:
                            if isinstance(earlier, ast.If) and not earlier.orelse and earlier.body \
                                    and isinstance(earlier.body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                                out += self._tests(earlier.test, False, func)
            if cur is func or isinstance(cur, (ast.Module,) + FunctionNode + (ast.ClassDef, ast.Lambda)):
                break
            child, cur = cur, getattr(cur, "_hl_parent", None)
        return out

    def _tests(self, test: ast.AST, positive: bool, func: ast.AST | None) -> list[tuple[str, str, Any]]:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._tests(test.operand, not positive, func)
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) and positive:
            return [t for v in test.values for t in self._tests(v, True, func)]
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and not positive:
            return [t for v in test.values for t in self._tests(v, False, func)]
        if isinstance(test, (ast.Name, ast.Attribute)):
            place = self.places.of(test, func)
            if conditional_place(place):
                return [(place, "truthy" if positive else "falsy", None)]
            return []
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, right, op = test.left, test.comparators[0], test.ops[0]
            if not isinstance(left, (ast.Name, ast.Attribute)):
                left, right = right, left
                if isinstance(op, (ast.In, ast.NotIn)):
                    return []
            place = self.places.of(left, func)
            if not conditional_place(place):
                return []
            value = _literal(right)
            if value is _NO_VALUE:
                return []
            name = {ast.Eq: "==", ast.Is: "==", ast.NotEq: "!=", ast.IsNot: "!=", ast.In: "in",
                    ast.NotIn: "notin"}.get(type(op))
            if name is None:
                return []
            if not positive:
                name = {"==": "!=", "!=": "==", "in": "notin", "notin": "in"}[name]
            return [(place, name, value)]
        return []

    def _dynamic_registration(self, call: ast.Call, func: ast.AST | None) -> Reg | None:
        """``getattr(m, f"register_{kind}_hook")(fn)`` with ``kind`` a
        parameter: the API is chosen by the caller's argument."""
        callee = call.func
        if isinstance(callee, ast.Name) and hasattr(callee, "_hl_scope"):
            bindings = self.model.bindings_at(callee)
            if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                    and isinstance(bindings[0].value, ast.Call):
                callee = bindings[0].value
        if not (isinstance(callee, ast.Call) and isinstance(callee.func, ast.Name) and callee.func.id == "getattr"
                and len(callee.args) >= 2):
            return None
        template = self._template(callee.args[1], func)
        if template is None:
            return None
        hook_expr = call.args[0] if call.args and not isinstance(call.args[0], ast.Starred) else None
        hook = self.places.of(hook_expr, func) if hook_expr is not None else None
        return Reg("", self.places.of(callee.args[0], func), hook if hook and hook.startswith("p:") else None,
                   self.core.fate(call, func), call.lineno, "getattr", when=tuple(self._conditions(call, func)),
                   choose=template, guarded=self.core.guarded(call, func), site=call, target_expr=callee.args[0],
                   hook_expr=hook_expr)

    def _template(self, expr: ast.AST, func: ast.AST | None) -> tuple[str, str, str] | None:
        if isinstance(expr, ast.JoinedStr):
            parts = expr.values
            fields = [p for p in parts if isinstance(p, ast.FormattedValue)]
            if len(fields) != 1 or not isinstance(fields[0].value, ast.Name):
                return None
            index = parts.index(fields[0])
            prefix = "".join(p.value for p in parts[:index] if isinstance(p, ast.Constant))
            suffix = "".join(p.value for p in parts[index + 1:] if isinstance(p, ast.Constant))
            place = self.places.of(fields[0].value, func)
        elif isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            items: list[ast.AST] = []
            stack: list[ast.AST] = [expr]
            while stack:
                cur = stack.pop()
                if isinstance(cur, ast.BinOp) and isinstance(cur.op, ast.Add):
                    stack += [cur.right, cur.left]
                else:
                    items.append(cur)
            names = [i for i in items if not isinstance(i, ast.Constant)]
            if len(names) != 1 or not isinstance(names[0], ast.Name) or \
                    not all(isinstance(i.value, str) for i in items if isinstance(i, ast.Constant)):
                return None
            index = items.index(names[0])
            prefix = "".join(i.value for i in items[:index])  # type: ignore[attr-defined]
            suffix = "".join(i.value for i in items[index + 1:])  # type: ignore[attr-defined]
            place = self.places.of(names[0], func)
        elif isinstance(expr, ast.Name):
            prefix = suffix = ""
            place = self.places.of(expr, func)
        else:
            return None
        if not (place.startswith("p:") and "." not in place):
            return None
        if not any(api.startswith(prefix) and api.endswith(suffix) for api in API_KINDS):
            return None
        return place, prefix, suffix


_NO_VALUE = object()


def _is_apply(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr == "apply" and len(call.args) == 1


def _src(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - odd trees must not crash a rule
        return "?"
    return text if len(text) <= 60 else text[:57] + "..."


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        values = [_literal(e) for e in node.elts]
        return _NO_VALUE if any(v is _NO_VALUE for v in values) else values
    return _NO_VALUE


def _concatenated(iterable: ast.AST) -> list[ast.AST]:
    """``a + b + c`` and ``itertools.chain(a, b)``: the parts."""
    if isinstance(iterable, ast.BinOp) and isinstance(iterable.op, ast.Add):
        return _concatenated(iterable.left) + _concatenated(iterable.right)
    if isinstance(iterable, ast.Call) and _last_name(iterable.func) == "chain" and not iterable.keywords:
        return [p for a in iterable.args for p in _concatenated(a)]
    return [iterable]


def _size(node: ast.AST) -> int:
    return len(getattr(node, "elts", None) or getattr(node, "keys", None) or ())


def _last_name(expr: ast.AST) -> str:
    return expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")


def _own_nodes(func: ast.AST) -> Iterable[ast.AST]:
    """The nodes of a function's own code (not nested functions or classes)."""
    stack = list(reversed(getattr(func, "body", [])))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _display(core: "Core", node: ast.AST) -> str:
    cls = core.model.enclosing_class(node)
    name = getattr(node, "name", "?")
    if cls is not None and getattr(node, "_hl_parent", None) is cls.node:
        return f"{cls.name}.{name}"
    return name


def positional(func: ast.AST) -> list[str]:
    return positional_params(func)
