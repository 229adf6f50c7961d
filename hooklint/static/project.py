"""The project index: the call graph of every checked file, merged.

Each file contributes a summary (``hooklint.static.callgraph``).  The index
resolves every call site to the function it calls, across files: imports,
re-exports in ``__init__.py``, relative imports, constructors (a class's
``__init__``, found through its bases), methods called on instances whose
class the caller's file shows, and ``super()``.  Then it answers the one
question the lifetime rules ask: *does this function run again with the same
arguments?*  (:meth:`ProjectIndex.first_reason`): a call site in a loop or a
comprehension whose relevant arguments are the same object on every
iteration, a call from a module's ``forward``, two calls on the same object,
or, recursively, a call from a function that runs again itself.

Rules reach the index through a :class:`ProjectView`, which records every
question and its answer: the results of a file depend on the rest of the
project only through those answers, so a cached result stays valid as long as
the same questions get the same answers (``hooklint.results_cache``).
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable

# How deep a chain of callers is followed.
MAX_CALLER_DEPTH = 4
# A class with more subclasses than this is a framework's base class (every
# model component of a library): the callers of its subclasses are not searched.
MAX_SUBCLASS_NAMES = 16
_KIND_RANK = {"loop": 0, "comprehension": 0, "step": 1, "repeat": 2}
# Reasons that are not a call shown in the checked files: the function is an
# entry point that users call (the rules report them at a lower severity).
UNPROVEN = frozenset({"public", "constructor", "function", "method"})


@dataclass(frozen=True)
class Reason:
    """Why a function runs again: ``kind`` ("loop", "comprehension", "step",
    "repeat") at the call site ``path:line``, which calls ``call``; ``lines``
    the loop's line (or the lines of the repeated calls); ``via`` the chain of
    callers from the function asked about outwards, as (qualified name, path,
    line of the call)."""

    kind: str
    path: str
    line: int
    lines: tuple[int, ...] = ()
    via: tuple[tuple[str, str, int], ...] = ()
    call: str = ""

    def to_list(self) -> list[Any]:
        return [self.kind, self.path, self.line, list(self.lines), [list(v) for v in self.via], self.call]

    @classmethod
    def from_list(cls, data: list[Any]) -> "Reason":
        kind, path, line, lines, via, call = data
        return cls(kind, path, line, tuple(lines), tuple((q, p, n) for q, p, n in via), call)

    def describe(self, here: str) -> str:
        """In words, with paths relative to the file ``here`` (same file: "line N")."""
        def at(path: str, line: int) -> str:
            return f"line {line}" if path == here else f"{path}:{line}"

        call = f"`{self.call}`" if self.call else "the call"
        if self.kind == "loop":
            text = f"{call} at {at(self.path, self.line)} runs on every iteration of the loop at line " \
                   f"{self.lines[0] if self.lines else self.line}"
        elif self.kind == "comprehension":
            text = f"{call} at {at(self.path, self.line)} runs for each element of a comprehension"
        elif self.kind == "step":
            text = f"{call} at {at(self.path, self.line)} runs in a module's `forward`, on every step"
        elif self.kind == "public":
            text = f"{call} is a public method: every call on the same object registers the hook again"
        elif self.kind == "constructor":
            text = f"every new object, `{self.call}`, registers the hook again on what it is given"
        elif self.kind == "function":
            text = f"{call} is a public function: every call with the same arguments registers the hook again"
        elif self.kind == "method":
            text = f"{call} is a public method: every call with the same arguments registers the hook again"
        else:
            shown = ", ".join(str(n) for n in self.lines[:4])
            where = "this file" if self.path == here else self.path
            same = " on the same object" if self.call.startswith(".") else ""
            text = f"{call} is called {len(self.lines)} times{same} in {where}, lines {shown}"
        if self.via:
            callers = "; ".join(f"called by `{_short(q)}` at {at(p, n)}" for q, p, n in self.via)
            text = f"{callers}; {text}"
        return text

    @property
    def proven(self) -> bool:
        return self.kind not in UNPROVEN

    @property
    def sort_key(self) -> tuple:
        return (not self.proven, len(self.via), _KIND_RANK.get(self.kind, 3), self.path, self.line)


def call_text(callee: str, bound: int = 0, constructs: bool = False, via: str = "") -> str:
    """How a site's callee reads in a message: ``GradCAM(...)``, ``.attach(...)``."""
    if via == "apply":
        return f"apply({callee.rpartition('.')[2]})"
    if constructs:
        bound = 0
    if callee.startswith("super:"):
        return f"super().{callee.rpartition('.')[2]}(...)"
    owner, _, last = callee.rpartition(".")
    if last == "__call__":
        return f"{owner.rpartition('.')[2]}(...)"
    return f"{'.' if bound else ''}{last}(...)"


def _short(qual: str) -> str:
    """``pkg.mod.Cls.method`` -> ``Cls.method`` (a function: its name)."""
    parts = qual.split(".")
    return ".".join(parts[-2:]) if len(parts) > 2 and parts[-2][:1].isupper() else parts[-1]


# Questions about the hooks a function of another file registers on its arguments
# (``ProjectView.hooks_of``) are keyed by this prefix and the callee's name.
HOOKS_QUERY = "hooks:"
# what a hook callable (a function, or a class's `__call__`) of another file removes when it runs
SELF_REMOVING_QUERY = "selfrm:"
# Wrapper names searched in the files the prefilter ruled out, at most.
MAX_WRAPPER_NAMES = 32
# Function names too common to search the project's files for (wrapper_names).
_COMMON_NAMES = frozenset({"forward", "apply", "setup", "register", "call", "run", "build", "init", "hook", "main",
                           "step", "train", "update", "reset", "start", "close", "attach", "add"})
# whether a class of another file is an nn.Module and whether its `__call__` bypasses torch's
MODULE_CLASS_QUERY = "modcls:"
# Keys of the questions that are not "does it run again" (see ProjectView).
EXTERNAL_KEY = "ext:"
APPLY_KEY = "apply:"


def query_key(qual: str, needed: Iterable[str]) -> str:
    return qual + "|" + ",".join(sorted(needed))


Site = tuple[dict[str, Any], list[Any], int]  # (summary, site, bound as resolved)


class ProjectIndex:
    """``facts``: computes a site's facts when a question needs them (the
    file being checked has its syntax tree at hand).  Without it, sites whose
    facts are not computed yet are collected in ``missing`` (by file), for
    the caller to fill in, and count as no reason meanwhile."""

    def __init__(self, summaries: Iterable[dict[str, Any]] = (),
                 facts: Callable[[dict[str, Any], list[Any]], list[Any] | None] | None = None):
        self.modules: dict[str, dict[str, Any]] = {}
        self._all: list[dict[str, Any]] = []
        self._pending_aliases: list[tuple[str, dict[str, Any]]] = []
        # files whose own folder has no __init__.py but sit under a regular package (`pkg/hook/hook.py`,
        # imported as `pkg.hook.hook`): modules of that package, not scripts
        self._namespace_members: set[str] = set()
        self._memo: dict[tuple[str, frozenset[str]], list[Reason]] = {}
        # call sites by the last name they call, in the order of the summaries (their paths): it depends on the
        # summaries only, not on the names, so it is kept up to date as they come (rebuilt after each file the
        # search for callers summarized, it cost 0.2 s over the corpus of bench/corpus.py)
        self._by_last: dict[str, list[tuple[dict[str, Any], list[Any]]]] | None = None
        self._forget_names()
        self.changed()
        self._facts_of = facts
        self.missing: dict[int, tuple[dict[str, Any], set[tuple[int, int, str]]]] = {}
        for summary in summaries:
            self.add(summary)

    def add(self, summary: dict[str, Any], aliases: Iterable[str] = ()) -> None:
        """``aliases``: the other names the file can be imported as from the
        project's roots (hooklint.static.core.imports)."""
        # Two files can claim one module name (two folders of scripts): the one
        # whose path sorts first defines it, whatever order the files came in
        # (a run over one file and a run over the project must agree); the
        # other's call sites still count, keyed by what they call.
        known = self.modules.get(summary["module"])
        if known is None or summary["path"] < known["path"]:
            self.modules[summary["module"]] = summary
        # in path order, for the same reason: ties between reasons go the same way in every run
        bisect.insort(self._all, summary, key=_summary_path)
        if self._by_last is not None:
            path = _summary_path(summary)
            for site in summary["sites"]:
                pairs = self._by_last.setdefault(site[0].rpartition(".")[2], [])
                # after the sites of the summaries whose paths sort before or equal (as insort put it)
                pairs.insert(bisect.bisect_right(pairs, path, key=lambda pair: _summary_path(pair[0])), (summary, site))
        self._pending_aliases += [(alias, summary) for alias in aliases if alias != summary["module"]]
        if "." not in summary["module"] and any(_namespace_subpackage(summary["path"], alias) for alias in aliases):
            self._namespace_members.add(summary["module"])
        self._forget_names()
        self.changed()

    def settle_aliases(self) -> None:
        """Register the names from the project's roots, after every file's own
        name (a file's package name wins over another file's alias; between
        two aliases, the path that sorts first)."""
        for alias, summary in sorted(self._pending_aliases, key=lambda pair: pair[1]["path"]):
            self.modules.setdefault(alias, summary)
        self._pending_aliases = []
        self._forget_names()
        self.changed()

    def changed(self) -> None:
        """Forget the reasons worked out (sites got their facts)."""
        self._memo = {}
        self._hook_memo: dict[str, Any] = {}
        self._hook_active: set[str] = set()
        self._ext_memo: dict[str, dict[str, list[Any]]] = {}
        self._by_path: dict[str, dict[str, Any]] | None = None
        self._applies: dict[str, list[tuple[dict[str, Any], list[Any]]]] | None = None

    def _forget_names(self) -> None:
        self._canonical: dict[str, str | None] = {}
        self._bases: dict[str, list[str]] = {}
        self._resolved: dict[str, tuple[str, bool] | None] = {}
        self._sites: dict[str, list[Site]] = {}
        self._children: dict[str, list[str]] | None = None
        self._call_names: dict[str, set[str]] = {}
        self._aliases: dict[str, set[str]] | None = None
        self._by_caller: dict[int, dict[str, list[list[Any]]]] = {}

    def site_facts(self, summary: dict[str, Any], site: list[Any]) -> list[Any] | None:
        facts = site[5]
        if facts is None:
            if self._facts_of is not None:
                facts = site[5] = self._facts_of(summary, site)
            else:
                self.missing.setdefault(id(summary), (summary, set()))[1].add((site[3], site[4], site[6]))
        return facts

    def summaries(self) -> list[dict[str, Any]]:
        return self._all

    # ------------------------------------------------------------ names
    def function(self, qual: str) -> list[Any] | None:
        module, local = self._split(qual, "functions")
        return None if module is None else self.modules[module]["functions"][local]

    def function_path(self, qual: str) -> str | None:
        module, _local = self._split(qual, "functions")
        return None if module is None else self.modules[module]["path"]

    def is_class(self, qual: str) -> bool:
        return self._split(qual, "classes")[0] is not None

    def bases(self, qual: str) -> list[str]:
        found = self._bases.get(qual)
        if found is None:
            module, local = self._split(qual, "classes")
            found = [] if module is None else \
                [b for b in (self.canonical(b) for b in self.modules[module]["classes"][local] if b) if b]
            self._bases[qual] = found
        return found

    def _split(self, qual: str, table: str) -> tuple[str | None, str]:
        parts = qual.split(".")
        for i in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:i])
            summary = self.modules.get(module)
            if summary is not None:
                local = ".".join(parts[i:])
                return (module, local) if local in summary[table] else (None, "")
        return None, ""

    def canonical(self, name: str, depth: int = 0) -> str | None:
        """The qualified name where a function or class is defined, following
        imports and re-exports (``pkg.GradCAM`` -> ``pkg.grad_cam.GradCAM``)."""
        if depth == 0:
            if name not in self._canonical:
                self._canonical[name] = self._find_canonical(name, 0)
            return self._canonical[name]
        return self._find_canonical(name, depth)

    def _find_canonical(self, name: str, depth: int) -> str | None:
        if depth > 6:
            return None
        parts = name.split(".")
        for i in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:i])
            summary = self.modules.get(module)
            if summary is None:
                continue
            local = ".".join(parts[i:])
            if local in summary["functions"] or local in summary["classes"]:
                return f"{summary['module']}.{local}"  # the file's own name, whatever alias reached it
            target = summary["imports"].get(parts[i])
            if target is None or target == module:
                return None
            return self.canonical(".".join([target] + parts[i + 1:]), depth + 1)
        return None

    def canonical_steps(self, name: str) -> list[str]:
        """The dotted names :meth:`canonical` looks modules up for, in order:
        ``name``, then the name each import it follows leads to (as far as the
        modules known so far go)."""
        steps = [name]
        for _depth in range(7):
            parts = name.split(".")
            following = None
            for i in range(len(parts) - 1, 0, -1):
                module = ".".join(parts[:i])
                summary = self.modules.get(module)
                if summary is None:
                    continue
                local = ".".join(parts[i:])
                if local in summary["functions"] or local in summary["classes"]:
                    return steps
                target = summary["imports"].get(parts[i])
                if target is None or target == module:
                    return steps
                following = ".".join([target] + parts[i + 1:])
                break
            if following is None:
                return steps
            name = following
            steps.append(name)
        return steps

    def lookup_method(self, cls: str, method: str, skip_self: bool = False, depth: int = 0) -> str | None:
        """``cls.method`` found along the class's bases (depth first)."""
        if depth > 8:
            return None
        if not skip_self:
            qual = f"{cls}.{method}"
            if self.function(qual) is not None:
                return qual
        for base in self.bases(cls):
            found = self.lookup_method(base, method, False, depth + 1)
            if found is not None:
                return found
        return None

    def subclasses(self, cls: str) -> list[str]:
        """Every class of the project that derives from ``cls``, directly or not."""
        if self._children is None:
            children: dict[str, list[str]] = {}
            for summary in self.summaries():
                for local in summary["classes"]:
                    qual = f"{summary['module']}.{local}"
                    for base in self.bases(qual):
                        children.setdefault(base, []).append(qual)
            self._children = children
        out: list[str] = []
        stack = [cls]
        while stack and len(out) < 200:
            for child in self._children.get(stack.pop(), ()):
                if child not in out and child != cls:
                    out.append(child)
                    stack.append(child)
        return out

    def resolve(self, callee: str) -> tuple[str, bool] | None:
        """(qualified function, whether the call supplies its first parameter)
        for a site's callee; None when it is not a function of the project."""
        if callee not in self._resolved:
            self._resolved[callee] = self._resolve(callee)
        return self._resolved[callee]

    def _resolve(self, callee: str) -> tuple[str, bool] | None:
        if callee.startswith("super:"):
            cls, _, method = callee[len("super:"):].rpartition(".")
            cls = self.canonical(cls) or cls
            found = self.lookup_method(cls, method, skip_self=True)
            return (found, True) if found else None
        name = self.canonical(callee)
        if name is not None:
            if self.function(name) is not None:
                return name, False
            if self.is_class(name):
                init = self.lookup_method(name, "__init__")
                return (init, True) if init else None
            return None
        owner, _, method = callee.rpartition(".")
        cls = self.canonical(owner) if owner else None
        if cls is not None and self.is_class(cls):
            found = self.lookup_method(cls, method)
            return (found, True) if found else None
        return None

    # ------------------------------------------------------------ sites
    def sites_of(self, qual: str) -> list[Site]:
        """The call sites that call the function ``qual``.  Only the sites whose
        callee ends with a name ``qual`` can be called by are resolved."""
        found = self._sites.get(qual)
        if found is None:
            found = []
            for summary, site in self._candidates(qual):
                resolved = self.resolve(site[0])
                if resolved is not None and resolved[0] == qual:
                    # `Cls(...)` of an imported class is a constructor: its `self` is supplied
                    found.append((summary, site, 1 if resolved[1] else site[1]))
            self._sites[qual] = found
        return found

    def _candidates(self, qual: str) -> list[tuple[dict[str, Any], list[Any]]]:
        if self._by_last is None:
            by_last: dict[str, list[tuple[dict[str, Any], list[Any]]]] = {}
            for summary in self.summaries():
                for site in summary["sites"]:
                    by_last.setdefault(site[0].rpartition(".")[2], []).append((summary, site))
            self._by_last = by_last
        names = self.call_names(qual)
        return [pair for name in sorted(names) for pair in self._by_last.get(name, ())]

    def call_names(self, qual: str) -> set[str]:
        """The last names of the callees that can call ``qual``: its own name,
        for a constructor its class's and subclasses' names, and the names
        these are imported as elsewhere."""
        if qual not in self._call_names:
            self._call_names[qual] = self._find_call_names(qual)
        return self._call_names[qual]

    def _find_call_names(self, qual: str) -> set[str]:
        module, local = self._split(qual, "functions")
        if module is None:
            return set()
        parts = local.split(".")
        names = {parts[-1]}
        if parts[-1] == "__init__" and len(parts) == 2:
            cls = f"{module}.{parts[0]}"
            names.add(parts[0])
            names.update(sub.rpartition(".")[2] for sub in self.subclasses(cls))
        if self._aliases is None:
            aliases: dict[str, set[str]] = {}
            for summary in self.summaries():
                for alias, target in summary["imports"].items():
                    last = target.rpartition(".")[2]
                    if alias != last:
                        aliases.setdefault(last, set()).add(alias)
            self._aliases = aliases
        for name in list(names):
            names |= self._aliases.get(name, set())
        return names

    @property
    def sites(self) -> dict[str, list[Site]]:
        """Every resolved call site, by the function it calls (resolves them all)."""
        out: dict[str, list[Site]] = {}
        for summary in self.summaries():
            for site in summary["sites"]:
                resolved = self.resolve(site[0])
                if resolved is not None:
                    out.setdefault(resolved[0], []).append((summary, site, 1 if resolved[1] else site[1]))
        return out

    # ------------------------------------------------------------ hook summaries
    def hook_facts(self, qual: str) -> Any:
        """The summary of the function ``qual`` (:class:`hooklint.static.core.summary.Facts`),
        its own facts composed with those of the calls it makes, across
        files, to a fixpoint (a cycle of calls adds each function once);
        None when ``qual`` is not a function of the checked files.  Sites
        whose facts are not computed yet are collected in ``missing`` and add
        nothing meanwhile."""
        from hooklint.static.core.summary import Edge, Facts, apply_edge

        if qual in self._hook_memo:
            return self._hook_memo[qual]
        module, local = self._split(qual, "functions")
        if module is None:
            return None
        summary = self.modules[module]
        path = summary["path"]
        own = summary.get("hooks", {}).get(local)
        if own is not None:
            facts = Facts.from_json(own, path)
        else:
            entry = summary["functions"][local]
            facts = Facts(params=list(entry[0]), kwonly=list(entry[1]))
        if qual in self._hook_active:
            return facts
        self._hook_active.add(qual)
        try:
            for site in self._sites_by_caller(summary).get(local, ()):
                resolved = self.resolve(site[0])
                if resolved is None or resolved[0] == qual:
                    continue
                callee = self.hook_facts(resolved[0])
                callee = _for_callers(callee) if callee is not None else None
                if callee is None:
                    continue  # nothing a caller in another file needs: no site facts asked for
                # the sites of a file that call its own wrappers come with their facts; a chain through another
                # file's site is followed when that site's facts are known (parsing the file again for it costs
                # more than the rare wrapper of a wrapper of another file is worth)
                site_facts = site[5] if self._facts_of is None else self.site_facts(summary, site)
                if site_facts is None or len(site_facts) < 7 or site_facts[6] is None:
                    continue
                edge = Edge.from_json(site_facts[6])
                edge.bound = 1 if resolved[1] else site[1]
                edge.construct = _constructs(resolved[0], site)
                entry = self.function(resolved[0])
                part = apply_edge(callee, edge, _short(resolved[0]), self.function_path(resolved[0]) or "",
                                  entry[5] if entry else 0)
                facts.regs += part.regs
                facts.removes += part.removes
                facts.forgets += part.forgets
                facts.runs += part.runs
                if part.regs and not facts.ret and own is not None and own.get("rn"):
                    facts.ret = "none"
        finally:
            self._hook_active.discard(qual)
        self._hook_memo[qual] = facts
        return facts

    def _sites_by_caller(self, summary: dict[str, Any]) -> dict[str, list[list[Any]]]:
        key = id(summary)
        found = self._by_caller.get(key)
        if found is None:
            found = {}
            for site in summary["sites"]:
                if site[2]:
                    found.setdefault(site[2], []).append(site)
            self._by_caller[key] = found
        return found

    def wrapper_names(self) -> set[str]:
        """The names of the functions that register hooks for their callers
        (the handle goes back to the caller, the kind or the module is the
        caller's argument): a file that calls one is checked even when its
        text names no hook API.  Common names are left out (searching every
        file for `forward` would summarize them all)."""
        out: set[str] = set()
        for summary in self.summaries():
            for local, data in summary.get("hooks", {}).items():
                name = local.rpartition(".")[2]
                if name in _COMMON_NAMES or name.startswith("_") or len(name) < 4 \
                        or name.startswith("register_") and name.endswith("_hook"):
                    continue  # a private helper is its own file's business; an API's name is parsed anyway
                for reg in data.get("regs", ()):
                    hook, handle, when, choose = reg[2], reg[3], reg[7], reg[8]
                    # the caller hands it the hook, and it hands the handle back or the caller's argument chooses the
                    # kind: the registration is the caller's (a function that hooks its own callbacks is not a wrapper)
                    if hook and hook.startswith("p:") and (
                            handle in ("ret", "ret*") or choose or any(w[0].startswith("p:") for w in when)):
                        out.add(name)
                        break
        return set(sorted(out)[:MAX_WRAPPER_NAMES])

    def external_facts(self, path: str) -> dict[str, list[Any]]:
        """For the file ``path``: the callees of its call sites that are
        functions of other checked files doing something with hooks, by the
        name the site spells, as ``ProjectView.external_facts`` reads them."""
        if path in self._ext_memo:
            return self._ext_memo[path]
        if self._by_path is None:
            self._by_path = {s["path"]: s for s in self._all}
        summary = self._by_path.get(path)
        if summary is None:
            return {}
        out: dict[str, list[Any]] = {}
        self._ext_memo[path] = out
        for site in summary["sites"]:
            name = site[0]
            if name in out or site[6]:
                continue
            resolved = self.resolve(name)
            if resolved is None:
                continue
            module, _local = self._split(resolved[0], "functions")
            if module is None or self.modules[module] is summary:
                continue
            facts = self.hook_facts(resolved[0])
            facts = _for_callers(facts) if facts is not None else None
            if facts is None:
                continue  # what it runs or returns is followed within files only: answers stay small and stable
            entry = self.function(resolved[0])
            out[name] = [facts.to_json(), _short(resolved[0]), self.function_path(resolved[0]) or "",
                         entry[5] if entry else 0, 1 if resolved[1] else site[1], _constructs(resolved[0], site)]
        return out

    def apply_sites(self, qual: str) -> list[list[Any]]:
        """``[path, line, arguments]`` of each ``Fn.apply(...)`` call of the
        autograd Function class ``qual`` (arguments None when ``*args``)."""
        if self._applies is None:
            applies: dict[str, list[tuple[dict[str, Any], list[Any]]]] = {}
            for summary in self.summaries():
                for site in summary["sites"]:
                    name = site[0]
                    if name.endswith(".apply") and not site[6]:
                        cls = name[:-len(".apply")]
                        applies.setdefault(self.canonical(cls) or cls, []).append((summary, site))
            self._applies = applies
        out = []
        for summary, site in self._applies.get(qual, ()):
            facts = self.site_facts(summary, site)
            if facts is None or facts[1] is None:
                continue
            args, kwargs = facts[1][1], facts[1][2]
            count = None if any(a is None for a in args) else len(args) + len(kwargs)
            out.append([summary["path"], site[3], count])
        out.sort(key=lambda e: (e[0], e[1]))
        return out

    def first_reason(self, qual: str, needed: Iterable[str]) -> Reason | None:
        """The best reason why ``qual`` runs again with the same values of
        its parameters ``needed``: a site in its own file first, the shortest
        chain of callers first."""
        found = self.reasons(qual, frozenset(needed))
        if not found:
            return None
        home = self.function_path(qual)
        return min(found, key=lambda r: (not r.proven, r.path != home) + r.sort_key)

    def reasons(self, qual: str, needed: frozenset[str], depth: int = 0,
                stack: tuple[str, ...] = (), visit: Callable[[str], None] | None = None) -> list[Reason]:
        if visit is not None:
            visit(qual)
        key = (qual, needed)
        if visit is None and key in self._memo:
            return self._memo[key]
        facts = self.function(qual)
        out: list[Reason] = []
        if facts is not None:
            sites = self.sites_of(qual)
            out += self._repeated_calls(qual, facts, needed, sites)
            for summary, site, bound in sites:
                out += self._site_reasons(qual, facts, needed, summary, site, bound, depth, stack, visit)
            entry = self._entry_point(qual, facts, needed, sites)
            if entry is not None:
                out.append(entry)
        if visit is None:
            self._memo[key] = out
        return out

    def _site_reasons(self, qual: str, facts: list[Any], needed: frozenset[str], summary: dict[str, Any],
                      site: list[Any], bound: int, depth: int, stack: tuple[str, ...],
                      visit: Callable[[str], None] | None) -> list[Reason]:
        caller, line = site[2], site[3]
        path = summary["path"]
        caller_qual = f"{summary['module']}.{caller}" if caller else None
        site_facts = self.site_facts(summary, site)
        if site_facts is None:
            return []  # its facts are computed first; the callers are followed once they are known
        loop, fn, step, guarded, _key, attrs = site_facts[:6]
        sources = _map_needed(facts, needed, bound, qual.endswith(".__init__"))
        if sources is None:
            return []
        call = call_text(site[0], bound, _constructs(qual, site), site[6])
        if loop is not None and all(_loop_fact(loop, s) for s in sources):
            return [Reason(loop[1], path, line, (loop[0],), call=call)]
        if fn is None or guarded or caller_qual is None or fn[3] is None:
            return []
        deps: set[str] = set(fn[3])
        for source in sources:
            fact = _fn_fact(fn, source, attrs)
            if fact is None:
                return []
            deps |= set(fact)
        caller_facts = self.function(caller_qual)
        if step and caller_facts is not None and all(_is_self(d) for d in deps):
            return [Reason("step", path, line, call=call)]
        if depth >= MAX_CALLER_DEPTH or caller_qual in stack or caller_qual == qual:
            return []
        outer = self.reasons(caller_qual, frozenset(deps), depth + 1, stack + (qual,), visit)
        return [Reason(r.kind, r.path, r.line, r.lines, ((caller_qual, path, line),) + r.via, r.call) for r in outer]

    def _repeated_calls(self, qual: str, facts: list[Any], needed: frozenset[str], sites: list[Site]) -> list[Reason]:
        """Two or more calls in one file on the same object (or of a function
        whose target does not depend on its arguments)."""
        if any(not _is_self(n) for n in needed) or (needed and facts[3] not in ("m", "c")):
            return []
        groups: dict[tuple[str, str | None], list[tuple[dict[str, Any], list[Any]]]] = {}
        for summary, site, bound in sites:
            site_facts = self.site_facts(summary, site)
            if site_facts is None:
                continue
            _loop, fn, _step, guarded, key, _attrs = site_facts[:6]
            if fn is None or guarded or fn[3] != []:
                continue
            if needed:  # the same instance: a receiver both sites name the same way
                if not bound or key is None or fn[0] is None:
                    continue
            groups.setdefault((summary["path"], key if needed else None), []).append((summary, site))
        out = []
        for (path, _key), group in groups.items():
            if _runs_per_object(group) >= 2:
                lines = tuple(sorted(site[3] for _s, site in group))
                first = group[0][1]
                out.append(Reason("repeat", path, lines[0], lines,
                                  call=call_text(first[0], first[1], _constructs(qual, first), first[6])))
        return out

    def _entry_point(self, qual: str, facts: list[Any], needed: frozenset[str], sites: list[Site]) -> Reason | None:
        """A reason that is not a call site: ``qual`` is an entry point its
        users call, so it can run again with the same object: a public
        method (or ``__call__``) of a public class whose target is the
        object's own, the constructor of a public class whose target is an
        argument, or a public function of a package that no checked file
        calls, whose target is an argument."""
        module, local = self._split(qual, "functions")
        if module is None:
            return None
        parts = local.split(".")
        kind, line = facts[3], facts[5]
        path = self.modules[module]["path"]
        if kind == "m" and len(parts) == 2 and not parts[0].startswith("_"):
            name = parts[1]
            if name == "__init__":
                if needed and not any(_is_self(n) for n in needed):
                    return Reason("constructor", path, line, call=f"{parts[0]}(...)")
                return None
            if name.startswith("_") and name != "__call__":
                return None
            if not needed:
                return None
            callers = [site[2] for summary, site, _b in sites if summary["module"] == module]
            if callers and all(c in (f"{parts[0]}.__init__", f"{parts[0]}.__post_init__") for c in callers):
                return None  # a set-up step its own constructor takes
            call = f".{name}(...)" if name != "__call__" else f"{parts[0]}(...)"
            if all(_is_self(n) for n in needed):
                return Reason("public", path, line, call=call)
            if self._in_package(module) and not set(facts[6] or ()) & needed:
                # it hooks what its caller passes: one visible call (a demo, a test) does not make it run once
                return Reason("method", path, line, call=call)
            return None
        if kind == "f" and len(parts) == 1 and not parts[0].startswith("_") and self._in_package(module) \
                and needed and not any(_is_self(n) for n in needed) and not set(facts[6] or ()) & needed:
            # a public function of a package that hooks its argument: its users call it, whether or not the
            # checked files happen to call it once
            return Reason("function", path, line, call=f"{parts[0]}(...)")
        return None

    def _in_package(self, module: str) -> bool:
        return "." in module or module in self._namespace_members

    # ------------------------------------------------------------ hooks
    def hooks_of(self, callee: str) -> list[Any] | None:
        """``[bound, positional parameters, facts]`` for a call of ``callee`` (as a
        site names it) whose function registers module hooks on its parameters
        (compile_regions.hook_summary)."""
        resolved = self.resolve(callee)
        if resolved is None:
            return None
        qual, bound = resolved
        module, local = self._split(qual, "functions")
        if module is None:
            return None
        facts = self.modules[module].get("module_hooks", {}).get(local)
        if not facts:
            return None
        function = self.modules[module]["functions"].get(local)
        positional = function[0] if function else []
        return [1 if bound else 0, positional, facts]

    def self_removing(self, name: str) -> list[str] | None:
        """What the hook callable ``name`` (a function, or a class: its
        ``__call__``) removes of its own registration when it runs, from the
        file that defines it (hooklint.static.core.self_removal); None when
        nothing or not a callable of the project."""
        qual = self.canonical(name)
        if qual is None:
            return None
        for table in ("classes", "functions"):
            module, local = self._split(qual, table)
            if module is not None:
                found = self.modules[module].get("self_removing", {}).get(local)
                return list(found) if found else None
        return None

    def module_class(self, qual: str) -> list[Any] | None:
        """``[is an nn.Module (True / None), "path:line" of a __call__ that
        never reaches torch's, or None]`` for the class ``qual`` of the project
        (hooklint.static.module_classes)."""
        from hooklint.static.module_classes import module_class_answer

        return module_class_answer(self, qual)

    # ------------------------------------------------------------ names
    def names_for(self, quals: Iterable[tuple[str, frozenset[str]]]) -> set[str]:
        """Identifiers a file must contain to hold a call site that could
        answer these questions: the function's name, or its class's name
        and those of its subclasses; followed through the callers known so far."""
        visited: set[str] = set()
        for qual, needed in quals:
            self.reasons(qual, needed, visit=visited.add)
        names: set[str] = set()
        for qual in visited:
            facts = self.function(qual)
            if facts is None:
                continue
            module, local = self._split(qual, "functions")
            parts = local.split(".")
            if facts[3] == "f":
                if len(parts) == 1:
                    names.add(parts[0])
                continue
            if len(parts) != 2:
                continue  # a method of a nested class: not reachable from another file
            cls = f"{module}.{parts[0]}"
            names.add(parts[0])
            subclasses = self.subclasses(cls)
            if len(subclasses) <= MAX_SUBCLASS_NAMES:  # a framework's base class: its users are not followed
                names.update(sub.rsplit(".", 1)[-1] for sub in subclasses)
        return {n for n in names if n.isidentifier()}


def _summary_path(summary: dict[str, Any]) -> str:
    return summary["path"]
def _for_callers(facts: Any) -> Any:
    """The part of a summary its callers in other files can use: the hooks it
    registers on what they pass (or for them: the handle comes back, their
    argument picks the kind) and the handles it removes from their objects;
    None when nothing is left."""
    from dataclasses import replace

    def callers(place: str | None) -> bool:
        return bool(place) and (place.startswith(("p:", "e:p:", "s", "e:s")))  # type: ignore[union-attr]

    # what changes a finding at the call: a handle handed back (or None instead), a handle kept on the
    # caller's object (paired with its removal there), a hook the caller passes (its body is checked
    # there), a kind the caller's argument picks; a hook the function keeps to itself is judged where it is
    regs = [r for r in facts.regs
            if r.handle in ("ret", "ret*") or r.handle.startswith("at:s") or r.choose or callers(r.hook)
            or any(w[0].startswith("p:") for w in r.when) or (r.handle == "drop" and facts.ret == "none"
                                                              and callers(r.target))]
    removes = [r for r in facts.removes if callers(r.place)]
    if not regs and not removes:
        return None
    return replace(facts, regs=regs, removes=removes, forgets=[], runs=[])


def _is_self(name: str) -> bool:
    return name == "self" or name.startswith("self.")


def _constructs(qual: str, site: list[Any]) -> bool:
    """Does the site construct an object (``Cls(...)`` reaching ``__init__``)?"""
    return qual.endswith(".__init__") and not site[0].endswith("__init__")


def _map_needed(facts: list[Any], needed: frozenset[str], bound: int, is_init: bool) -> list[tuple[str, Any]] | None:
    """Where each needed parameter's value comes from at a call site:
    ("recv", None), ("param", (index, name, has_default)) or ("kw", name);
    None when unknown (a constructor's ``self`` is a new object each time)."""
    positional, kwonly, n_defaults, kind, _spread, _line, _returns = facts
    if kind == "s":
        bound = 0
    elif kind == "c":
        bound = 1
    out: list[tuple[str, Any]] = []
    for name in sorted(needed):
        if _is_self(name):
            if not bound or is_init:
                return None  # an unbound call, or a constructor's new object
            out.append(("recv", name))
            continue
        if name in positional:
            index = positional.index(name)
            if bound and index == 0:
                if is_init:
                    return None
                out.append(("recv", None))
                continue
            out.append(("param", (index - bound, name, index >= len(positional) - n_defaults)))
        elif name in kwonly:
            out.append(("kw", name))
        else:
            return None
    return out


def _arg_fact(args: list[Any], kwargs: dict[str, Any], source: tuple[str, Any]) -> tuple[bool, Any]:
    """(found, fact) for one needed parameter in a site's argument facts."""
    kind, detail = source
    if kind == "param":
        index, name, has_default = detail
        if 0 <= index < len(args):
            return True, args[index]
        if name in kwargs:
            return True, kwargs[name]
        if any(a is None for a in args):  # *args: cannot tell
            return True, None
        return (True, []) if has_default else (False, None)
    if kind == "kw":
        return (True, kwargs[detail]) if detail in kwargs else (True, [])
    return False, None


def _loop_fact(loop: list[Any], source: tuple[str, Any]) -> bool:
    if source[0] == "recv":
        return bool(loop[2])
    found, fact = _arg_fact(loop[3], loop[4], source)
    if source[0] in ("param", "kw") and not found:
        return False
    return fact is True or fact == []


def _fn_fact(fn: list[Any], source: tuple[str, Any], attrs: dict[str, Any]) -> list[str] | None:
    if source[0] == "recv":
        receiver, need = fn[0], source[1]
        if need != "self" and receiver == ["self"]:
            # the callee's `self.x` is the caller's own `self.x`: what the caller assigned to it, if it did
            attr = need.partition(".")[2]
            return attrs[attr] if attr in attrs else [need]
        return receiver
    found, fact = _arg_fact(fn[1], fn[2], source)
    return fact if found else None


class ProjectView:
    """What one file's rules may ask about the project, and the record of
    what they asked (``asked``: query key -> answer, JSON-able).

    ``answers`` are precomputed by the parent process from the full index;
    a question not among them is answered from ``local()``, an index of the
    file's own summary (what a run on this file alone sees)."""

    def __init__(self, local: Callable[[], ProjectIndex], answers: dict[str, Any] | None = None, path: str = ""):
        self.path = path
        self._local_factory = local
        self._local: ProjectIndex | None = None
        self.answers = answers or {}
        self.asked: dict[str, list[Any] | None] = {}

    def first_reason(self, qual: str, needed: Iterable[str]) -> Reason | None:
        needed = frozenset(needed)
        key = query_key(qual, needed)
        if key in self.answers:
            answer = self.answers[key]
        else:
            if self._local is None:
                self._local = self._local_factory()
            found = self._local.first_reason(qual, needed)
            answer = None if found is None else found.to_list()
        self.asked[key] = answer
        return None if answer is None else Reason.from_list(answer)

    def hooks_of(self, callee: str) -> list[Any] | None:
        """What a call of ``callee`` registers on its arguments, from the file
        that defines it (:meth:`ProjectIndex.hooks_of`); recorded like every question."""
        key = HOOKS_QUERY + callee
        if key in self.answers:
            answer = self.answers[key]
        else:
            if self._local is None:
                self._local = self._local_factory()
            answer = self._local.hooks_of(callee)
        self.asked[key] = answer
        return answer

    def self_removing(self, name: str) -> list[str] | None:
        """What the hook callable ``name`` removes of its own registration when
        it runs (:meth:`ProjectIndex.self_removing`); recorded like every question."""
        key = SELF_REMOVING_QUERY + name
        if key in self.answers:
            answer = self.answers[key]
        else:
            if self._local is None:
                self._local = self._local_factory()
            answer = self._local.self_removing(name)
        self.asked[key] = answer
        return answer

    def module_class(self, qual: str) -> list[Any] | None:
        """Whether the class ``qual`` of another file is a module and whether its
        ``__call__`` bypasses torch's (:meth:`ProjectIndex.module_class`);
        recorded like every question."""
        key = MODULE_CLASS_QUERY + qual
        if key in self.answers:
            answer = self.answers[key]
        else:
            if self._local is None:
                self._local = self._local_factory()
            answer = self._local.module_class(qual)
        self.asked[key] = answer
        return answer

    def external_facts(self, name: str) -> tuple[Any, str, str, int, int, bool] | None:
        """The summary (:class:`hooklint.static.core.summary.Facts`) of the
        function of another checked file that a call naming ``name`` reaches,
        with its display name, path, line, the parameters a call supplies
        itself and whether the call constructs an object; None when it is not
        a function of the project or does nothing with hooks."""
        key = EXTERNAL_KEY + self.path
        if key in self.answers:
            answer = self.answers[key] or {}
        else:
            answer = {}
        self.asked[key] = answer
        found = answer.get(name)
        if found is None:
            return None
        from hooklint.static.core.summary import Facts

        data, display, path, line, bound, construct = found
        return Facts.from_json(data, path), display, path, line, bound, construct

    def external_names(self) -> list[str]:
        """The callee names :meth:`external_facts` has answers for."""
        key = EXTERNAL_KEY + self.path
        answer = self.answers.get(key) or {}
        self.asked[key] = answer
        return list(answer)

    def apply_sites(self, qual: str) -> list[tuple[str, int, int | None]]:
        """(path, line, number of arguments or None) of the ``Cls.apply(...)``
        calls of the autograd Function ``qual`` in the checked files."""
        key = APPLY_KEY + qual
        if key in self.answers:
            answer = self.answers[key]
        else:
            if self._local is None:
                self._local = self._local_factory()
            answer = self._local.apply_sites(qual)
        self.asked[key] = answer
        return [tuple(site) for site in answer or ()]  # type: ignore[misc]

    def local_callers(self, qual: str) -> list[str]:
        """The functions of this file that call ``qual`` ("" for module level)."""
        return [caller for caller, _line in self.local_call_sites(qual)]

    def local_call_sites(self, qual: str) -> list[tuple[str, int]]:
        """(caller, line) of the calls of ``qual`` in this file (caller "" at module level)."""
        if self._local is None:
            self._local = self._local_factory()
        return [(f"{summary['module']}.{site[2]}" if site[2] else "", site[3])
                for summary, site, _bound in self._local.sites_of(qual)]


def summarize_source(path: str, text: str, display_path: str, names: Iterable[str] = ()) -> dict[str, Any] | None:
    """The call-graph summary of a file the rules do not check (None when it
    does not parse).  The sites whose callee spells one of ``names`` (the
    names the file was searched for) get their facts now, while the syntax
    tree is at hand; the others' are left to compute when needed."""
    wanted = set(names)

    def job(summarizer: Any) -> dict[str, Any]:
        # a file with no hook API: its call sites matter, its own hook facts are empty or not worth the cost
        summary = summarizer.summary(hooks=False)
        for site in summary["sites"]:
            if wanted and wanted.intersection(site[0].replace(":", ".").split(".")):
                site[5] = summarizer.site_facts(site[3], site[4], site[6])
        return summary

    return _with_summarizer(path, text, display_path, job)


def site_facts_of_source(path: str, text: str, display_path: str,
                         positions: Iterable[tuple[int, int, str]]) -> dict[tuple[int, int, str], Any] | None:
    """The facts of the call sites at ``positions`` (line, column, via) of a
    file, without summarizing the rest of it (None when it does not parse)."""
    wanted = sorted(set(positions))
    return _with_summarizer(path, text, display_path,
                            lambda summarizer: {p: summarizer.site_facts(*p) for p in wanted})


def _with_summarizer(path: str, text: str, display_path: str, job: Callable[[Any], Any]) -> Any:
    import ast
    import warnings

    from hooklint.static.callgraph import Summarizer
    from hooklint.static.garbage import collected_after
    from hooklint.static.semantic import SemanticModel
    from hooklint.static.values import Inference

    if len(text) > 4 * 2 ** 20:
        return None
    with collected_after() as collecting:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(text, filename=display_path)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None
        model = SemanticModel(tree)
        try:
            return job(Summarizer(model, Inference(model), path, display_path))
        except RecursionError:
            return None
        finally:
            if collecting:
                model.release_shared()
            else:
                model.release()


def parse_key(key: str) -> tuple[str, frozenset[str]]:
    qual, _, needed = key.partition("|")
    return qual, frozenset(n for n in needed.split(",") if n)


def answers_digest(asked: dict[str, list[Any] | None]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:24]


def _namespace_subpackage(path: str, alias: str) -> bool:
    """Whether ``alias`` (a dotted name the file at ``path`` is imported as
    from a root) goes through a regular package: a folder of the alias with
    an ``__init__.py`` (namespace subfolders of a package import as its
    submodules, PEP 420)."""
    depth = alias.count(".")
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(depth):
        if os.path.isfile(os.path.join(folder, "__init__.py")):
            return True
        folder = os.path.dirname(folder)
    return False


# Methods of which one object runs only one: a fresh object runs __init__, a
# copy or an unpickled one runs __setstate__ instead (its __init__ never runs).
_ALTERNATIVE_INITS = ("__init__", "__setstate__")


def _runs_per_object(group: list[tuple[dict[str, Any], list[Any]]]) -> int:
    """How many of the group's calls can run on one object: calls from
    ``__init__`` and from ``__setstate__`` are alternatives, so only the
    larger of the two counts (fairseq's LegacyDistributedDataParallel
    registers its gradient hooks from both)."""
    per_init = {name: 0 for name in _ALTERNATIVE_INITS}
    others = 0
    for _summary, site in group:
        method = str(site[2]).rsplit(".", 1)[-1]
        if method in per_init and "." in str(site[2]):
            per_init[method] += 1
        else:
            others += 1
    return others + max(per_init.values())

