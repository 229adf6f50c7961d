"""The program-analysis core of the static layer: facts about what the
program does, computed once per file (and, through the project index, per
project), and the questions rules ask of them.

- :mod:`~hooklint.static.core.cfg`: control-flow graphs per function, with
  reachability (``return``, ``raise``, loops, ``try``/``finally``, ``with``,
  ``match``, constant conditions, ``sys.exit``).
- :mod:`~hooklint.static.core.places`: where a value comes from, in a
  function's own terms (a parameter, an attribute of ``self``, an element).
- :mod:`~hooklint.static.core.summary`: per-function summaries (the hooks a
  function registers and for whom, what becomes of their handles, what it
  removes, runs and yields), composed over calls to a fixpoint.
- :mod:`~hooklint.static.core.imports`: module names as Python resolves
  them from the project's roots.

A rule asks :class:`Core` (``ctx.core``); nothing here imports torch or runs
the checked code, and everything is computed lazily, for the functions a
question is about.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Callable

from hooklint.static.core import places as P
from hooklint.static.core.cfg import CFG, EXIT_CALLS, build
from hooklint.static.core.constants import truth
from hooklint.static.core.places import Places
from hooklint.static.core.summary import STORE_METHODS, Edge, Facts, FileFacts
from hooklint.static.semantic import FunctionNode, SemanticModel

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.callgraph import Summarizer
    from hooklint.static.hooks import HookIndex, Registration
    from hooklint.static.values import Inference

__all__ = ["CFG", "Core", "Edge", "Facts"]

# Functions that make a new object out of the one they are given.
_COPIES = frozenset({"deepcopy", "copy", "clone", "compile", "script", "trace", "quantize", "prepare", "convert",
                     "fuse", "wrap", "to", "cuda", "cpu", "half", "float", "double", "bfloat16"})
# nn.Module methods that run no forward of the module (calling them runs none of the caller's code).
_MODULE_API = frozenset({
    "eval", "train", "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "type", "modules", "children",
    "named_modules", "named_children", "parameters", "named_parameters", "buffers", "named_buffers",
    "state_dict", "load_state_dict", "zero_grad", "requires_grad_", "apply", "get_submodule", "get_parameter",
    "get_buffer", "add_module", "register_module", "register_buffer", "register_parameter", "extra_repr",
    "share_memory", "get_extra_state", "set_extra_state", "keys", "values", "items", "get", "append", "extend",
    "pop", "update", "setdefault", "copy", "clear", "index", "count", "insert", "remove", "numel", "size", "dim",
    "item", "tolist", "detach", "clone", "cpu", "numpy", "format", "join", "split", "startswith", "endswith",
})
# Builtins a handle or a container of handles may be handed to without leaving the function.
_NEUTRAL_BUILTINS = frozenset({"len", "bool", "isinstance", "id", "print", "repr", "str", "type", "hasattr"})


def core_of(model: SemanticModel, inference: "Inference") -> "Core":
    """The core of the file a semantic model is of: the one its checker made
    (``FileContext.core``), or one made here for shared analysis that only has
    the model (it then sees this file alone)."""
    found = getattr(inference, "_hl_core", None)
    if found is None or found.model is not model:
        found = Core(model, inference)
    return found


class Core:
    """The facts of one file, and the questions about them."""

    def __init__(self, model: SemanticModel, inference: "Inference", *, hooks: "HookIndex | None" = None,
                 summarizer: "Summarizer | None" = None,
                 external: Callable[[str], tuple[Facts, str, str, int, int, bool] | None] | None = None,
                 self_removing: Callable[[str], list[str] | None] | None = None):
        self.model = model
        # what a hook callable of another file removes when it runs (self_removal.py), by qualified name
        self._self_removing_lookup = self_removing
        self.inference = inference
        if getattr(inference, "_hl_core", None) is None:
            inference._hl_core = self  # type: ignore[attr-defined]
        self._hooks = hooks
        self.summarizer = summarizer
        self._external_lookup = external
        self.places = Places(model, self._elements_of_call, self._returned_by_call)
        self.facts_of = FileFacts(self, self._external)
        self._cfgs: dict[int, CFG] = {}
        self._building: set[int] = set()
        self._loads: dict[int, dict[str, list[ast.Name]]] = {}
        self._fates: dict[int, str] = {}
        self._relevant: list[ast.Call] | None = None
        self._wrapped: list[Any] | None = None
        self._attr_loads: dict[str, list[ast.Attribute]] | None = None
        self._fate_points: dict[int, list[tuple[ast.AST, ast.AST]]] = {}
        self._as_registration: dict[tuple, Any] = {}
        self._bound: dict[str, ast.AST] | None = None
        self._external_known: bool | None = None
        self._store_cache: dict[int, frozenset[str]] = {}
        self._last_points: list[tuple[ast.AST, ast.AST]] = []

    @property
    def hooks(self) -> "HookIndex":
        if self._hooks is None:
            from hooklint.static.hooks import HookIndex

            self._hooks = HookIndex(self.model, self.inference)
        return self._hooks

    # ------------------------------------------------------------ control flow
    def cfg(self, owner: ast.AST) -> CFG:
        """The graph of a function's body (or the module's: pass the tree)."""
        key = id(owner)
        found = self._cfgs.get(key)
        if found is None:
            self._building.add(key)
            try:
                found = build(owner, lambda test: truth(self.model, test), self._noreturn)
            finally:
                self._building.discard(key)
            self._cfgs[key] = found
        return found

    def _noreturn(self, call: ast.Call) -> bool:
        qual = self.model.qualify(call.func) if hasattr(call.func, "_hl_scope") or \
            isinstance(call.func, ast.Attribute) else None
        if qual in EXIT_CALLS:
            return True
        local = self.local_callee(call)
        if local is None or local[2]:
            return False
        node = local[0]
        if id(node) in self._building or not isinstance(node, FunctionNode):
            return False
        if not any(isinstance(n, ast.Raise) for n in self.facts_of.exits_in(node)):
            return False  # no `raise` of its own: it returns (or calls something that exits: not followed)
        if any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(node)):
            return False
        return not self.cfg(node).can_exit_normally()

    @staticmethod
    def statement(node: ast.AST) -> ast.AST:
        """The innermost statement holding ``node`` (for a condition, the ``if``)."""
        cur: ast.AST | None = node
        while cur is not None and not isinstance(cur, (ast.stmt, ast.excepthandler)):
            cur = getattr(cur, "_hl_parent", None)
        return cur if cur is not None else node

    def removal_point(self, node: ast.AST) -> ast.AST:
        """The statement after which the handles a removing call removes are
        gone: for ``for h in handles: h.remove()``, the loop (it removes every
        element, and runs its body zero times only when there is none)."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return self.facts_of._removal_point(node, node.func.value)
        return self.statement(node)

    def owner(self, node: ast.AST) -> ast.AST:
        """The function (or the module) whose body holds the statement ``node``."""
        cur = getattr(node, "_hl_parent", None)
        while cur is not None and not isinstance(cur, FunctionNode + (ast.Module, ast.ClassDef, ast.Lambda)):
            cur = getattr(cur, "_hl_parent", None)
        return cur if cur is not None else self.model.tree

    def can_run(self, node: ast.AST) -> bool:
        """Can ``node`` run: its statement is reachable in its function, and
        the function's own ``def`` in the code around it (a class body counts
        as reachable when the class statement is)."""
        stmt = self.statement(node)
        for _ in range(64):
            owner = self.owner(stmt)
            if isinstance(owner, ast.Lambda):
                stmt = self.statement(owner)
                continue
            if isinstance(owner, FunctionNode + (ast.Module,)) and not self.cfg(owner).reachable(stmt):
                return False
            if isinstance(owner, ast.Module):
                return True
            stmt = owner
        return True

    def unreachable_reason(self, node: ast.AST) -> str | None:
        """Why ``node`` never runs, in words (None when it can run)."""
        if self.can_run(node):
            return None
        stmt = self.statement(node)
        owner = self.owner(stmt)
        pos = _previous_exit(stmt, owner)
        if pos is not None:
            word = {ast.Return: "`return`", ast.Raise: "`raise`", ast.Break: "`break`",
                    ast.Continue: "`continue`"}.get(type(pos), "a statement that never returns")
            return f"it follows the {word} at line {pos.lineno}"
        branch = _dead_branch(stmt, owner, self.model)
        if branch is not None:
            return branch
        before = self._blocking_statement(stmt)
        if before is not None:
            if isinstance(before, ast.Expr) and isinstance(before.value, ast.Call):
                return f"it follows `{_short_src(before.value.func)}(...)` at line {before.lineno}, which never returns"
            return (f"every path through the statement at line {before.lineno} before it returns, raises or "
                    f"exits")
        return "no path from the start of the function reaches it"

    def _blocking_statement(self, stmt: ast.AST) -> ast.AST | None:
        """The nearest earlier statement of an enclosing block that can run
        but never completes (both branches of an `if` raise, `sys.exit()`)."""
        child = stmt
        cur = getattr(stmt, "_hl_parent", None)
        while cur is not None and not isinstance(cur, FunctionNode + (ast.Module, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(cur, field, None)
                if isinstance(block, list) and child in block:
                    for earlier in reversed(block[:block.index(child)]):
                        if self.can_run(earlier):
                            return earlier
            child, cur = cur, getattr(cur, "_hl_parent", None)
        if cur is not None:
            block = getattr(cur, "body", [])
            if child in block:
                for earlier in reversed(block[:block.index(child)]):
                    if self.can_run(earlier):
                        return earlier
        return None

    # ------------------------------------------------------------ summaries
    def facts(self, func: ast.AST | None) -> Facts:
        """The summary of a function of this file (None: the module body)."""
        return self.facts_of.facts(func)

    def export(self) -> dict[str, Any]:
        """The own facts of this file's functions, for the project index."""
        from hooklint.static.callgraph import local_qualname

        return self.facts_of.export(local_qualname)

    def export_self_removing(self) -> dict[str, list[str]]:
        """The hook callables of this file that remove their own registration
        when they run (self_removal.py), for the project index."""
        from hooklint.static.callgraph import local_qualname
        from hooklint.static.core.self_removal import export

        return export(self, self.model.tree, local_qualname)

    def hook_removes_itself(self, reg: "Registration") -> str | None:
        """Does the hook of ``reg`` take its own registration off when it runs
        (a one-shot hook)?  Words saying how, or None.  The hook may be a
        function or method of this file, a closure removing the handle its
        registering function bound, or a hook object whose class (here or in
        another checked file) deletes itself from the module's hook dict in
        ``__call__``."""
        from hooklint.static.core.self_removal import DICT, marks_of

        hook = reg.hook
        marks: list[str] = []
        name = ""
        if hook is not None:
            marks = marks_of(self, hook.node, hook.bound)
            name = hook.name if hook.via != "__call__" or hook.owner is None else hook.owner.name
        elif reg.hook_expr is not None and self._self_removing_lookup is not None and self.summarizer is not None:
            expr = reg.hook_expr.func if isinstance(reg.hook_expr, ast.Call) else reg.hook_expr
            qual = self.summarizer.absolute(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
            if qual is not None:
                marks = list(self._self_removing_lookup(qual) or ())
                name = qual.rpartition(".")[2]
        if not marks:
            return None
        if DICT in marks:
            return f"`{name}` deletes its own entry from the module's hook dict when it runs"
        func = self.places.owner(reg.call)
        fate = self.fate(reg.call, func)
        if fate.startswith("at:s.") and fate[3:] in marks and hook is not None and hook.bound \
                and isinstance(reg.hook_expr, ast.Attribute) and self.places.of(reg.hook_expr.value, func) == P.SELF:
            return f"`{name}` removes its own handle, `self.{fate[5:]}`, when it runs"
        parent = getattr(reg.call, "_hl_parent", None)
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name) \
                and f"n:{parent.targets[0].id}" in marks and hook is not None and func is not None \
                and _inside(hook.node, func) and not _in_loop(reg.call, func):
            # one handle per call of ``func``: in a loop the name holds only the last one, and every
            # registration's closure removes that one
            return f"`{name}` removes its own handle, `{parent.targets[0].id}`, when it runs"
        return None

    def relevant_calls(self) -> list[ast.Call]:
        """The calls of this file that can reach a function with a summary (a
        wrapper, a helper that removes handles, a generator of the caller's
        submodules), found by name to a fixpoint: composing only these keeps
        the cost linear in the file."""
        if self._relevant is not None:
            return self._relevant

        facts_of = self.facts_of
        names: set[str] = set()
        # functions that register hooks themselves (by their registering calls: no summary needed to name
        # them); their callers are found by name below
        for reg in self.hooks.registrations:
            owner = self.places.owner(reg.call)
            if isinstance(owner, FunctionNode):
                names.add(owner.name)
        for inner in self.model.name_calls.get("getattr", ()):
            outer = getattr(inner, "_hl_parent", None)
            owner = self.places.owner(inner)
            if isinstance(outer, ast.Call) and outer.func is inner and isinstance(owner, FunctionNode):
                names.add(owner.name)
        if self._external_lookup is not None and self.summarizer is not None:
            answers = self._external_names()
            names |= {name.rpartition(".")[2] for name in answers}
        by_name: dict[str, list[ast.Call]] = {}
        for group in (self.model.method_calls, self.model.name_calls):
            for name, calls in group.items():
                by_name.setdefault(name, []).extend(calls)
        for call in self.model.method_calls.get("apply", ()):
            # `model.apply(fn)`, `model.apply(partial(fn, ...))`: a call of `fn`
            arg = call.args[0] if len(call.args) == 1 else None
            if isinstance(arg, ast.Call) and arg.args:
                arg = arg.args[0]
            name = arg.attr if isinstance(arg, ast.Attribute) else getattr(arg, "id", None)
            if name:
                by_name.setdefault(name, []).append(call)
        found: dict[int, ast.Call] = {}
        pending = list(names)
        seen: set[str] = set()
        external = set(self._external_names()) if self._external_lookup is not None else set()
        if external and self.summarizer is not None:
            # calls of another file's functions, under whatever name this file imports them as
            for group in (self.model.method_calls, self.model.name_calls):
                for calls in group.values():
                    for call in calls:
                        callee = self.summarizer.callee(call)
                        if callee is not None and callee[0] in external \
                                and self._external_lookup(callee[0]) is not None \
                                and self._external_lookup(callee[0])[0].regs:
                            found[id(call)] = call
                            owner_name = getattr(self.places.owner(call), "name", None)
                            if owner_name:
                                pending.append(owner_name)
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            for call in by_name.get(name, ()):
                if id(call) in found:
                    continue
                found[id(call)] = call
                owner = self.places.owner(call)
                owner_name = getattr(owner, "name", None)
                if owner_name and owner_name not in seen:
                    pending.append(owner_name)
        del facts_of
        self._relevant = sorted(found.values(), key=lambda c: (c.lineno, c.col_offset))
        return self._relevant

    def _external_names(self) -> list[str]:
        """The callee names the project answers facts for (asks once)."""
        lookup = self._external_lookup
        view = getattr(lookup, "__self__", None)
        names = getattr(view, "external_names", None)
        return list(names()) if callable(names) else []

    def wrapped(self) -> list["Registration"]:
        """Registrations through functions of the project, one per call site
        in this file of a function that registers a hook for its caller (a
        wrapper, a helper, a constructor): the kind as the call's arguments
        choose it, the module and the hook as the call passes them, and the
        fate of the handle as the caller sees it."""
        if self._wrapped is not None:
            return self._wrapped
        out: list[Registration] = []
        owners: dict[int, ast.AST | None] = {}
        for call in self.relevant_calls():
            owner = self.places.owner(call)
            owners.setdefault(id(owner), owner)
        for owner in owners.values():
            for reg in self.facts(owner).regs:
                if not reg.chain or reg.site is None or not reg.kind:
                    continue
                found = self.registration_of(reg)
                if found is not None:
                    out.append(found)
        out.sort(key=lambda r: (r.call.lineno, r.call.col_offset))
        self._wrapped = out
        return out

    def registration_of(self, reg: Any) -> "Registration | None":
        """A summary registration as the rules see registrations: the direct
        one, or one at the call of the wrapper (``summary`` holds ``reg``)."""
        if reg.registration is not None:
            return reg.registration
        if reg.site is None or not reg.kind:
            return None
        from hooklint.static.hooks import HookKind, Registration

        key = (id(reg.site), reg.kind, reg.line, reg.path, reg.target)
        found = self._as_registration.get(key)
        if found is None:
            kind = HookKind(reg.kind)
            receiver = reg.target_expr if isinstance(reg.target_expr, ast.expr) else None
            hook_expr = reg.hook_expr if isinstance(reg.hook_expr, ast.expr) else None
            value = self.inference.infer(receiver) if receiver is not None else None
            if kind.is_module and type(value).__name__ == "TensorValue":
                value = None
            hook = self.inference.callable_of(hook_expr) if hook_expr is not None else None
            from hooklint.static.core.summary import API_KINDS

            api = reg.api if reg.api in API_KINDS else next(a for a, k in API_KINDS.items() if k == reg.kind)
            found = self._as_registration[key] = Registration(reg.site, kind, receiver, value, hook_expr, hook,
                                                              method=api, summary=reg)
        return found

    def related_classes(self, cls: Any) -> list[Any]:
        """The class, its local bases and the local classes deriving from it:
        the methods that share its ``self``."""
        out = [cls]
        stack = list(cls.local_bases)
        while stack:
            base = stack.pop()
            if base not in out:
                out.append(base)
                stack.extend(base.local_bases)
        for other in self.model.classes.values():
            cur = [other]
            seen: list[Any] = []
            while cur:
                c = cur.pop()
                if c in seen:
                    continue
                seen.append(c)
                if c is cls and other not in out:
                    out.append(other)
                    break
                cur.extend(c.local_bases)
        return out

    def removals_of(self, cls: Any, attr: str) -> list[tuple[ast.AST, Any]]:
        """(method, Removal) for each removal, in the methods of ``cls`` (and
        related classes), of the handles kept in ``self.<attr>``: directly,
        or through a helper the method calls."""
        wanted = (f"s.{attr}", f"e:s.{attr}")
        out = []
        for info in self.related_classes(cls):
            for method in info.methods.values():
                for removal in self.facts(method).removes:
                    place = removal.place
                    if place in wanted or place.startswith(tuple(w + "." for w in wanted)) \
                            or place.startswith(f"e:s.{attr}"):
                        out.append((method, removal))
        return out

    def handles_released(self, cls: Any, attr: str) -> bool | None:
        """Are the handles kept in ``self.<attr>`` ever removed?  True when a
        method (or a helper it calls) removes them; False when no code can:
        every read of the attribute appends to it, clears it, takes its length
        or tests it; None when it goes where this file cannot follow (returned,
        handed to other code, read from outside the class)."""
        if any(not self._method_never_called(method) for method, _removal in self.removals_of(cls, attr)):
            return True
        classes = self.related_classes(cls)
        for info in classes:
            for method in info.methods.values():
                if self._method_never_called(method):
                    continue  # its removals never run
                for use in self._attribute_loads(method, attr):
                    if not self._neutral_attribute_use(use, method):
                        return None
        # reads outside the class's methods (another object's `x.handles`): cannot tell
        for node in self._all_attribute_loads(attr):
            owner = self.places.owner(node)
            if owner is None or self.places.of(node.value, owner) != P.SELF:
                return None
            # `self.<attr>` in an unrelated class's method is that object's own attribute
        return False

    def _method_never_called(self, method: ast.AST) -> bool:
        """A method of a module-private class (``_Helper``) that nothing in the file calls or names:
        a cleanup written but never wired up (brevitas 0.9.1's ``correct_bias_hooks_cleanup``).  Users
        do not reach a private class's methods; dunders are called by Python itself."""
        name = getattr(method, "name", "")
        if not name or name.startswith("__"):
            return False
        cls = self.model.enclosing_class(method)
        if cls is None or not cls.name.startswith("_") or cls.name.startswith("__") \
                or method not in cls.methods.values():
            return False
        if self.model.method_calls.get(name) or self._all_attribute_loads(name) or self.model.name_calls.get(name):
            return False
        for node in getattr(self.model, "_visited", ()):
            if (type(node) is ast.Name and node.id == name) or \
                    (type(node) is ast.Constant and node.value == name):
                return False
        return True

    def _attribute_loads(self, method: ast.AST, attr: str) -> list[ast.Attribute]:
        return [n for n in self._all_attribute_loads(attr) if self.places.owner(n) is method]

    def _all_attribute_loads(self, attr: str) -> list[ast.Attribute]:
        if self._attr_loads is None:
            loads: dict[str, list[ast.Attribute]] = {}
            for node in getattr(self.model, "_visited", ()):
                if type(node) is ast.Attribute and isinstance(node.ctx, ast.Load):
                    loads.setdefault(node.attr, []).append(node)  # type: ignore[attr-defined]
            self._attr_loads = loads
        return self._attr_loads.get(attr, [])

    def _neutral_attribute_use(self, use: ast.Attribute, method: ast.AST) -> bool:
        """A read of ``self.<attr>`` that neither removes its handles nor lets them go elsewhere."""
        if self.places.of(use.value, method) != P.SELF:
            return False
        parent = getattr(use, "_hl_parent", None)
        if isinstance(parent, ast.Attribute) and parent.value is use:
            return parent.attr in ("append", "extend", "insert", "add", "clear", "update", "setdefault", "keys",
                                   "__len__")
        if isinstance(parent, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.If, ast.While, ast.IfExp, ast.Assert)):
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in ("len", "bool"):
            return True
        if isinstance(parent, ast.Subscript) and parent.value is use and isinstance(parent.ctx, ast.Store):
            return True
        if isinstance(parent, (ast.Assign, ast.AugAssign)) and use is getattr(parent, "target", None):
            return True
        return False

    def reg_of(self, registration: "Registration") -> Any:
        """The summary's view of a registration (direct, or through a wrapper)."""
        summary = getattr(registration, "summary", None)
        if summary is not None:
            return summary
        owner = self.places.owner(registration.call)
        for reg in self.facts_of.direct(owner).regs:
            if reg.site is registration.call:
                return reg
        return None

    def external_facts(self, call: ast.Call) -> tuple[Facts, Edge, str, str, int] | None:
        return self._external(call)

    def _external(self, call: ast.Call, with_edge: bool = True) -> tuple[Facts, Edge, str, str, int] | None:
        if self._external_lookup is None or self.summarizer is None or not self._has_external():
            return None
        callee = self.summarizer.callee(call)
        if callee is None:
            return None
        found = self._external_lookup(callee[0])
        if found is None:
            return None
        facts, name, path, line, bound, construct = found
        edge = self.facts_of.edge(call, self.places.owner(call), bound, construct) if with_edge else None
        return facts, edge, name, path, line  # type: ignore[return-value]

    def _has_external(self) -> bool:
        """Does the project know facts of another file's functions this file calls?  (Asked once.)"""
        if self._external_known is None:
            self._external_known = bool(self._external_names())
        return self._external_known

    def _returned_by_call(self, call: ast.Call, func: ast.AST | None) -> str | None:
        return self._through_call(call, func, "returns")

    def _elements_of_call(self, call: ast.Call, func: ast.AST | None) -> str | None:
        return self._through_call(call, func, "elems")

    def _through_call(self, call: ast.Call, func: ast.AST | None, fact: str) -> str | None:
        """A callee's place fact (what it returns, what it yields) in the caller's
        terms, from the callee's own facts (cheap: no composition, no edge)."""
        facts_of = getattr(self, "facts_of", None)
        if facts_of is None:
            return None
        target = facts_of.callee(call, func, with_edge=False, composed=False)
        if target is None or not getattr(target[0], fact):
            return None
        facts = target[0]
        local = self.local_callee(call)
        bound = local[1] if local is not None else 0
        construct = local[2] if local is not None else False
        recv = P.NEW if construct else (self.places.of(call.func.value, func) if isinstance(call.func, ast.Attribute)
                                        else P.UNKNOWN)
        edge = Edge(recv, ["*" if isinstance(a, ast.Starred) else self.places.of(a, func) for a in call.args],
                    {("**" if k.arg is None else k.arg): self.places.of(k.value, func) for k in call.keywords},
                    "?", bound=bound, construct=construct)
        found = P.substitute(getattr(facts, fact), lambda param: edge.argument(facts, param), recv)
        return found if found != P.UNKNOWN else None

    def local_callee(self, call: ast.Call) -> tuple[ast.AST, int, bool] | None:
        """(function, parameters the call supplies itself, is a constructor)
        for a call of a function or method of this file."""
        model = self.model
        func = call.func
        if isinstance(func, ast.Name) and hasattr(func, "_hl_scope"):
            bindings = model.bindings_at(func)
            if len(bindings) != 1:
                return None
            b = bindings[0]
            if b.kind == "def" and isinstance(b.node, FunctionNode):
                return b.node, 0, False
            if b.kind == "class":
                info = model.classes.get(b.node)  # type: ignore[arg-type]
                init = info.method("__init__") if info is not None else None
                return (init, 1, True) if init is not None else None
            return None
        if isinstance(func, ast.Attribute):
            receiver = func.value
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
                cls = model.enclosing_class(call)
                for base in cls.local_bases if cls is not None else ():
                    found = base.method(func.attr)
                    if found is not None:
                        return found, 1, False
                return None
            if isinstance(receiver, ast.Name) and hasattr(receiver, "_hl_scope"):
                if self.places.of(receiver, self.places.owner(call)) == P.SELF:
                    cls = model.enclosing_class(self.places.owner(call))
                    found = cls.method(func.attr) if cls is not None else None
                    if found is not None and not _is_static(found):
                        return found, 1, False
                    return None
            value = self.inference.infer(receiver)
            local_class = getattr(value, "local_class", None)
            if local_class is not None and type(value).__name__ in ("ObjectValue", "ModuleValue"):
                found = local_class.method(func.attr)
                if found is not None and not _is_static(found):
                    return found, 1, False
                return None
            bound = self._bound_functions().get(func.attr)
            if bound is not None:
                return bound, 1, False  # `net.start = start.__get__(net)`, then `net.start()`
            if value is None:
                annotated = self._annotated_class(receiver)
                if annotated is not None:
                    found = annotated.method(func.attr)
                    return (found, 1, False) if found is not None and not _is_static(found) else None
                return self._only_method_taking(call)
        return None

    def _annotated_class(self, receiver: ast.AST) -> Any:
        """The local class of an element of ``self.<attr>`` that an annotation
        names (``self.hook_dict: Dict[str, HookPoint] = {}``), or of
        ``self.<attr>`` itself (``self.point: HookPoint``)."""
        func = self.places.owner(receiver)
        place = self.places.of(receiver, func)
        element = place.startswith(P.ELEMENT)
        base = place[len(P.ELEMENT):] if element else place
        if not base.startswith("s.") or "." in base[2:]:
            return None
        cls = self.model.enclosing_class(func) if func is not None else None
        if cls is None:
            return None
        for _value, _scope, node in cls.attribute(base[2:]):
            annotation = getattr(node, "annotation", None)
            if annotation is None:
                continue
            if element and isinstance(annotation, ast.Subscript):
                inner = annotation.slice
                annotation = inner.elts[-1] if isinstance(inner, ast.Tuple) and inner.elts else inner
            elif element:
                return None
            if isinstance(annotation, (ast.Name, ast.Attribute)):
                found = self.model.class_for_expr(annotation) if isinstance(annotation, ast.Name) else None
                if found is not None:
                    return found
        return None

    def _bound_functions(self) -> dict[str, ast.AST]:
        """Functions of this file bound onto objects as methods
        (``obj.name = function.__get__(obj)``, ``types.MethodType(function, obj)``),
        by the attribute name they are bound under."""
        if self._bound is None:
            found: dict[str, ast.AST] = {}
            for call in list(self.model.method_calls.get("__get__", ())) + list(self.model.name_calls.get("MethodType", ())) \
                    + list(self.model.method_calls.get("MethodType", ())):
                parent = getattr(call, "_hl_parent", None)
                if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1
                        and isinstance(parent.targets[0], ast.Attribute)):
                    continue
                fn = call.func.value if isinstance(call.func, ast.Attribute) and call.func.attr == "__get__" \
                    else (call.args[0] if call.args else None)
                if not isinstance(fn, ast.Name) or not hasattr(fn, "_hl_scope"):
                    continue
                bindings = self.model.bindings_at(fn)
                if len(bindings) == 1 and bindings[0].kind == "def" and isinstance(bindings[0].node, FunctionNode):
                    found.setdefault(parent.targets[0].attr, bindings[0].node)
            self._bound = found
        return self._bound

    def _only_method_taking(self, call: ast.Call) -> tuple[ast.AST, int, bool] | None:
        """A method call on an object of unknown class (``self.points[name].add_hook(fn, dir="fwd")``):
        the method of that name of the one class of this file whose signature
        accepts the call's arguments.  A guess, made only when exactly one
        class fits and the name is not a common one."""
        func = call.func
        assert isinstance(func, ast.Attribute)
        name = func.attr
        if name.startswith("__") or name in _MODULE_API or name in _COMMON_METHODS:
            return None
        found = []
        for info in self.model.classes.values():
            method = info.methods.get(name)
            if method is not None and not _is_static(method) and _accepts(method, call, 1):
                found.append(method)
        return (found[0], 1, False) if len(found) == 1 else None

    def runs_callers_code(self, stmt: ast.AST, func: ast.AST | None) -> ast.Call | None:
        """The first call in the statement ``stmt`` (of a compound statement:
        in its header) that runs code of the function's caller: a parameter
        called (``forward_fn(x)``), an object the instance keeps called
        (``self.model(x)``, ``model.forward(x)``), a function of the project
        whose summary runs what it is given; and, where the callee cannot be
        seen, a call handed a model or function to run whose name says so
        (``_run_forward(forward_fn, inputs)``: a heuristic on names, the last
        resort)."""
        from hooklint.static.handles import is_recursive_call, runs_callers_code_by_name

        for call in _calls_in_header(stmt):
            f = call.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("remove", "apply") or name.startswith("register"):
                continue  # more registrations, or taking them off: not the caller's code
            if is_recursive_call(call, func):
                continue  # the function again on a child (`add_hooks(child, ...)`): more of the same, no forward
            if isinstance(f, ast.Name) and P.is_callers(self.places.of(f, func)):
                return call
            if isinstance(f, ast.Attribute):
                base = self.places.of(f.value, func)
                if f.attr in ("forward", "__call__") and P.is_callers(base):
                    return call
                if base == P.SELF and self.facts_of._is_stored(func, f):
                    return call
                if P.is_callers(base) and base != P.SELF and f.attr not in _MODULE_API \
                        and self.local_callee(call) is None and self.belongs_to_caller(base, func):
                    # a method of an object the caller handed over (`self.predictor.get_gradients(...)`,
                    # `model.generate(...)`): its code, not the library's; the module API that runs no
                    # forward (`eval()`, `modules()`, `register_*`) is not
                    return call
            target = self.facts_of.callee(call, func)
            if target is not None and target[1] is not None:
                facts, edge, _name, _path, _line = target
                recv = P.NEW if edge.construct else edge.recv
                if any(P.is_callers(P.substitute(r, lambda param: edge.argument(facts, param), recv))
                       for r in facts.runs):
                    return call
                continue  # a function of the project that runs nothing of the caller's
            if target is not None:
                continue
            if isinstance(func, FunctionNode) and runs_callers_code_by_name(call, func, self.model):
                return call
        return None

    def belongs_to_caller(self, place: str, func: ast.AST | None) -> bool:
        """Is the object at ``place`` (in ``func``'s terms) the caller's: a
        parameter, a part of one, or an attribute of ``self`` that is not
        built by the object itself (every assignment a constructor call of
        this file's classes or of ``nn`` layers)?"""
        if not P.is_callers(place):
            return False
        base = P.root(place)
        if not base.startswith("s."):
            return True
        cls = self.model.enclosing_class(func) if func is not None else None
        if cls is None:
            return True
        assigned = cls.attribute(base[2:])
        if not assigned:
            return True  # set elsewhere (a base class of another file, the caller)
        for value, scope, _node in assigned:
            # `self.model = model`, `self.model = model.to(device)`, `self.point = model.hook_point`: the
            # caller's; `self.model = get_model(config)`, `HookPoint()`, `nn.Linear(...)`: the object's own
            if P.is_callers(self.places.of(value, scope.node)):
                return True
        return False

    def looked_up_in_callers(self, expr: ast.AST, func: ast.AST | None, depth: int = 0) -> str | None:
        """For an object the summaries cannot place (``layer =
        find_embedding_layer(self.model)``, ``rgetattr(self.model, name)``):
        the caller's place it is looked up in, when it comes from a call handed
        that place and the call is neither a constructor nor a copy.  A guess
        from the shape of the call (a function that takes a model and returns
        one of its layers), used only where a wrong guess costs a warning."""
        if depth > 3:
            return None
        if isinstance(expr, ast.Name) and hasattr(expr, "_hl_scope"):
            bindings = self.model.bindings_at(expr)
            if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                    and isinstance(bindings[0].value, ast.AST):
                return self.looked_up_in_callers(bindings[0].value, func, depth + 1)
            return None
        if not isinstance(expr, ast.Call):
            return None
        name = expr.func.attr if isinstance(expr.func, ast.Attribute) else getattr(expr.func, "id", "")
        if not name or name[:1].isupper() or name in _COPIES:
            return None
        qual = self.model.qualify(expr.func) if isinstance(expr.func, (ast.Name, ast.Attribute)) else None
        if qual is not None and qual.split(".")[0] in ("copy", "torch", "builtins"):
            return None
        for arg in expr.args:
            place = self.places.of(arg, func)
            if P.is_callers(place):
                return P.element(place)
        return None

    def once_guarded(self, node: ast.AST, func: ast.AST | None) -> bool:
        """Does a test around ``node`` (or an earlier ``if ...: return``) read
        a flag that the guarded code itself sets, so that the second run
        skips it: ``if self._handle is None: self._handle = ...``, ``if not
        hasattr(m, "_hooked"): m._hooked = True``, ``if self.done: return``
        with ``self.done = True`` further on?  Stricter than :meth:`guarded`:
        a configuration switch is not one."""
        owner = func if func is not None else self.model.tree
        body = owner.body if isinstance(getattr(owner, "body", None), list) else []  # a lambda's body is one expression
        child: ast.AST = node
        cur = getattr(node, "_hl_parent", None)
        while cur is not None and cur is not owner:
            if isinstance(cur, ast.If) and child in cur.body and _sets_what_it_tests(cur.test, self._stores(cur)):
                return True
            if isinstance(cur, ast.stmt) or isinstance(child, ast.stmt):
                for field in ("body", "orelse", "finalbody"):
                    block = getattr(cur, field, None)
                    if isinstance(block, list) and child in block:
                        for earlier in block[:block.index(child)]:
                            if isinstance(earlier, ast.If) and earlier.body and isinstance(
                                    earlier.body[-1], (ast.Return, ast.Raise, ast.Continue)) \
                                    and _sets_what_it_tests(earlier.test, self._stores(owner)):
                                return True
            child, cur = cur, getattr(cur, "_hl_parent", None)
        if cur is owner:
            for earlier in body[:_index_in(body, child)]:
                if isinstance(earlier, ast.If) and earlier.body and isinstance(
                        earlier.body[-1], (ast.Return, ast.Raise)) \
                        and _sets_what_it_tests(earlier.test, self._stores(owner)):
                    return True
        return False

    def _stores(self, node: ast.AST) -> frozenset[str]:
        """The attribute names the code of ``node`` (an ``if``, a function)
        sets: stores, ``setattr``, and additions to containers kept in
        attributes (``self.seen.add(m)``, ``self.seen[m] = ...``).  Walked
        once per node."""
        found = self._store_cache.get(id(node))
        if found is None:
            names: set[str] = set()
            body = node.body if isinstance(getattr(node, "body", None), list) else []
            stack = list(body)
            while stack:
                cur = stack.pop()
                if isinstance(cur, (ast.Lambda,) + FunctionNode + (ast.ClassDef,)):
                    continue
                if isinstance(cur, ast.Attribute) and isinstance(cur.ctx, ast.Store):
                    names.add(cur.attr)
                elif isinstance(cur, ast.Subscript) and isinstance(cur.ctx, ast.Store) \
                        and isinstance(cur.value, ast.Attribute):
                    names.add(cur.value.attr)
                elif isinstance(cur, ast.Call) and isinstance(cur.func, ast.Name) and cur.func.id == "setattr" \
                        and len(cur.args) >= 2 and isinstance(cur.args[1], ast.Constant) \
                        and isinstance(cur.args[1].value, str):
                    names.add(cur.args[1].value)
                elif isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute) \
                        and cur.func.attr in ("add", "append", "update", "setdefault") \
                        and isinstance(cur.func.value, ast.Attribute):
                    names.add(cur.func.value.attr)
                stack.extend(ast.iter_child_nodes(cur))
            found = self._store_cache[id(node)] = frozenset(names)
        return found

    def guarded(self, node: ast.AST, func: ast.AST | None) -> bool:
        """Is ``node`` under a condition that can make it run once (a flag, a handle check)?"""
        if self.summarizer is None:
            return False
        return self.summarizer.guards.guarded(node, func if func is not None else self.model.tree)

    # ------------------------------------------------------------ where a value goes
    def fate(self, call: ast.Call, func: ast.AST | None) -> str:
        """What becomes of the value of ``call`` (a handle, usually): see
        :mod:`hooklint.static.core.summary` for the words."""
        key = id(call)
        found = self._fates.get(key)
        if found is None:
            self._fates[key] = "?"  # recursion guard
            self._last_points = []
            try:
                found = self._fate(call, func)
            except RecursionError:
                found = "?"
            self._fates[key] = found
            if found == "rm" or found.startswith("rm?"):
                self._fate_points[key] = list(self._last_points)
        return found

    def removals_after(self, func: ast.AST | None, reg: Any) -> list[tuple[ast.AST, ast.AST]]:
        """(statement, removing call) for each removal in ``func`` of the
        handle of the summary registration ``reg`` (made in ``func``, directly
        or through a wrapper): the statement after which it is removed (a
        loop over a list of handles: the loop) and the call to name."""
        handle = reg.handle
        if reg.site is None:
            return []
        if handle == "rm" or handle.startswith("rm?"):
            self.fate(reg.site, func)
            return list(self._fate_points.get(id(reg.site), ()))
        if handle.startswith("at:"):
            place = handle[3:]
            base = place[len(P.ELEMENT):] if place.startswith(P.ELEMENT) else place
            wanted = {place, base, P.element(base)}
            out = []
            removes = [r for r in self.facts(func).removes if r.site is not None and self.can_run(r.site)]
            for removal in removes:
                if removal.place in wanted:
                    out.append((removal.site, removal.node if removal.node is not None else removal.site))
            if not out:
                # kept in an element of one of the object's containers and removed through another that
                # holds the same objects (`self.mod_dict[name]` and `self.hook_dict.values()`): the same
                # attribute path under the element pairs them (a guess on names, said as such in the docs)
                suffix = _element_suffix(place)
                if suffix:
                    for removal in removes:
                        if _element_suffix(removal.place) == suffix:
                            out.append((removal.site, removal.node if removal.node is not None else removal.site))
            return out
        return []

    def _fate(self, node: ast.AST, func: ast.AST | None) -> str:
        parent = getattr(node, "_hl_parent", None)
        in_container = False
        while True:
            if isinstance(parent, (ast.List, ast.Tuple, ast.Set)) and not isinstance(getattr(parent, "ctx", None),
                                                                                      ast.Store):
                in_container = True
            elif isinstance(parent, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) and node is parent.elt:
                in_container = True
            elif isinstance(parent, ast.Dict) and any(node is v for v in parent.values):
                in_container = True  # `self.hooks.update({name: handle})`
            elif isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Add):
                # `self.handles = self.handles + [h]`, `hs + self._add_hooks(...)`: the concatenation holds them
                in_container = True
            else:
                break
            node, parent = parent, getattr(parent, "_hl_parent", None)
        found = self._value_fate(node, parent, func)
        if in_container:
            if found == "ret":
                return "ret*"
            if found.startswith("at:") and not found[3:].startswith(P.ELEMENT):
                return "at:" + P.element(found[3:])
        return found

    def _value_fate(self, node: ast.AST, parent: ast.AST | None, func: ast.AST | None) -> str:
        places = self.places
        if isinstance(parent, ast.Expr):
            return "drop"
        if isinstance(parent, ast.Return):
            return "ret"
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if len(targets) != 1:
                return "?"
            target = targets[0]
            if isinstance(target, ast.Name):
                return self._name_fate(target, parent, func, parent)
            if isinstance(target, ast.Attribute):
                place = places.of(target, func)
                return "?" if place in (P.UNKNOWN, P.NEW) else "at:" + place
            if isinstance(target, ast.Subscript):
                holder = places.of(target.value, func)
                if holder.startswith("l:") and isinstance(target.value, ast.Name) \
                        and not self._captured(target.value, func):
                    return self._container_fate(target.value, func, parent)
                return "?" if holder in (P.UNKNOWN, P.NEW) else "at:" + P.element(holder)
            return "?"
        if isinstance(parent, ast.AugAssign) and parent.value is node and isinstance(parent.op, ast.Add):
            # `self.handles += self._add_hooks(...)`, `hs += [h]`: the handles join the container
            return self._extended_fate(parent, func)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) \
                and parent.func.attr in STORE_METHODS and node in parent.args:
            holder = places.of(parent.func.value, func)
            if holder.startswith("l:") and isinstance(parent.func.value, ast.Name) \
                    and not self._captured(parent.func.value, func):
                return self._container_fate(parent.func.value, func, self.statement(parent))
            if holder in (P.UNKNOWN, P.NEW) or holder.startswith("c:"):
                return "?"
            return "at:" + P.element(holder)
        return "?"

    def _extended_fate(self, stmt: ast.AugAssign, func: ast.AST | None) -> str:
        """The fate of handles added to a container with ``+=``: kept in its
        elements (an attribute, an item), or the fate of the local list."""
        target = stmt.target
        if isinstance(target, ast.Name):
            scope = self.model.scope_of(target)
            if target.id in scope.globals_ or target.id in scope.nonlocals:
                return "?"
            made = [b for b in scope.bindings.get(target.id, ()) if b.kind != "augassign"]
            if len(made) != 1 or made[0].kind != "assign" or not isinstance(made[0].node, ast.AST) \
                    or not isinstance(made[0].value, (ast.List, ast.ListComp)):
                return "?"
            if self.places.owner(made[0].node) is not (func if isinstance(func, FunctionNode) else None):
                return "?"  # a closure's captured list
            # the uses that follow see the `+=` binding: what becomes of the list from there on
            return self._name_fate(target, stmt, func, stmt)
        holder = self.places.of(target.value if isinstance(target, ast.Subscript) else target, func)
        if holder in (P.UNKNOWN, P.NEW) or holder.startswith(("c:", "l:")):
            return "?"
        return "at:" + P.element(P.element(holder) if isinstance(target, ast.Subscript) else holder)

    def _captured(self, name: ast.Name, func: ast.AST | None) -> bool:
        """Is ``name`` a local of an enclosing function (a closure's captured container)?"""
        bindings = self.model.bindings_at(name) if hasattr(name, "_hl_scope") else []
        return len(bindings) == 1 and bindings[0].scope.node is not (func if func is not None else self.model.tree)

    def _container_fate(self, holder: ast.Name, func: ast.AST | None, start: ast.AST) -> str:
        """A local list (or dict) that handles go into: its own fate."""
        bindings = self.model.bindings_at(holder) if hasattr(holder, "_hl_scope") else []
        if len(bindings) != 1 or bindings[0].kind != "assign" or not isinstance(bindings[0].node, ast.AST):
            return "?"
        target = next((t for t in ast.walk(bindings[0].node) if isinstance(t, ast.Name) and t.id == holder.id
                       and isinstance(t.ctx, ast.Store)), None)
        if target is None:
            return "?"
        found = self._name_fate(target, bindings[0].node, func, start)
        return found

    def _name_fate(self, target: ast.Name, stmt: ast.AST, func: ast.AST | None, start: ast.AST) -> str:
        """What becomes of the value bound to ``target`` at ``stmt``; paths are
        followed from ``start`` (the statement that put the handle there)."""
        model = self.model
        scope = model.scope_of(target)
        if target.id in scope.globals_ or target.id in scope.nonlocals:
            return "?"
        binding = next((b for b in scope.bindings.get(target.id, ()) if b.node is stmt), None)
        if binding is None:
            return "?"
        owner = func if func is not None else model.tree
        points: list[ast.AST] = []
        stored = ""
        for use in self._loads_of(owner, target.id):
            if binding not in model.bindings_at(use) and not self._reaches_past(binding, use):
                continue
            if self.places.owner(use) is not (func if isinstance(func, FunctionNode) else None):
                return "?"  # a nested function uses it
            kind, detail = self._use(use, func)
            if kind == "escape":
                return "?"
            if kind == "ret":
                return "ret"
            if kind == "remove":
                points.append(detail)  # type: ignore[arg-type]
            elif kind == "store" and not stored:
                stored = detail  # type: ignore[assignment]
            elif kind == "into":
                # appended to a local list: what becomes of the list
                inner = self._container_fate(detail, func, start)
                if inner == "?":
                    return "?"
                if inner == "ret":
                    return "ret*"
                if inner.startswith("at:") and not stored:
                    stored = inner
                elif inner == "rm" or inner.startswith("rm?"):
                    points += self._last_points
        return self._settle(points, stored, start, owner)

    def _reaches_past(self, binding: Any, use: ast.Name) -> bool:
        """Can ``binding`` reach ``use`` although the semantic model names
        another binding (the last one in the text) there?  True when every
        binding in between is in a branch (``if``/``try``/``match``) that does not
        hold ``binding`` (``if custom: h = a(...) else: h = b(...)``, then ``use(h)``)."""
        if use.lineno <= binding.lineno:
            return False
        others = [b for b in self.model.bindings_at(use) if b is not binding]
        if not others:
            return False
        for other in others:
            cur = getattr(other.node, "_hl_parent", None)
            in_branch = False
            child: ast.AST = other.node
            while cur is not None and not isinstance(cur, FunctionNode + (ast.Module,)):
                if isinstance(cur, (ast.If, ast.Try, ast.Match)):
                    if not _holds(cur, binding.node) or _branch_of(cur, child) != _branch_of(cur, binding.node):
                        in_branch = True
                        break
                child, cur = cur, getattr(cur, "_hl_parent", None)
            if not in_branch:
                return False
        return True

    def _settle(self, removals: list[tuple[ast.AST, ast.AST]], stored: str, start: ast.AST, owner: ast.AST) -> str:
        points = [point for point, _node in removals]
        self._last_points = [(point, node) for point, node in removals if self.can_run(point)]
        if points:
            live = [p for p in points if self.can_run(p)]
            start_stmt = self.statement(start)
            if live and self.cfg(owner).every_path_passes(start_stmt, live):
                return "rm"
            if stored:
                return stored
            if live:
                return f"rm?:{min(getattr(p, 'lineno', 0) for p in live)}"
            return f"dead:{min(getattr(p, 'lineno', 0) for p in points)}"
        if stored:
            return stored
        return "drop"

    def _use(self, use: ast.Name, func: ast.AST | None) -> tuple[str, Any]:
        """How one read of a handle (or of a container of handles) uses it."""
        parent = getattr(use, "_hl_parent", None)
        places = self.places
        if isinstance(parent, ast.Return) and parent.value is use:
            return "ret", None
        if isinstance(parent, ast.Attribute) and parent.value is use:
            call = getattr(parent, "_hl_parent", None)
            is_call = isinstance(call, ast.Call) and call.func is parent
            if parent.attr == "remove" and is_call and not call.args:  # type: ignore[union-attr]
                return "remove", (self.statement(call), call)  # type: ignore[arg-type]
            if is_call and call.args and parent.attr in STORE_METHODS | {"pop", "get"}:  # type: ignore[union-attr]
                return "neutral", None
            if is_call and parent.attr in ("values", "items", "copy") and not call.args:  # type: ignore[union-attr]
                return self._iterated_use(call, func)  # type: ignore[arg-type]
            if is_call and parent.attr in ("clear",):
                return "neutral", None
            return "neutral", None
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is use:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            if len(targets) == 1 and isinstance(targets[0], (ast.Attribute, ast.Subscript)):
                place = places.of(targets[0] if isinstance(targets[0], ast.Attribute) else targets[0].value, func)
                if place.startswith(("s", "p:", "e:", "g:")):
                    if isinstance(targets[0], ast.Subscript):
                        place = P.element(place)
                    return "store", "at:" + place
            return "escape", None
        if isinstance(parent, ast.Call) and use in parent.args:
            f = parent.func
            if isinstance(f, ast.Attribute) and f.attr in STORE_METHODS:
                holder = places.of(f.value, func)
                if holder.startswith(("s", "p:", "e:", "g:")):
                    return "store", "at:" + P.element(holder)
                if holder.startswith("l:") and isinstance(f.value, ast.Name) and not self._captured(f.value, func):
                    return "into", f.value
                return "escape", None
            if isinstance(f, ast.Name) and f.id in _NEUTRAL_BUILTINS:
                return "neutral", None
            if isinstance(f, ast.Name) and f.id in ("list", "tuple", "reversed", "sorted", "iter", "enumerate"):
                return self._iterated_use(parent, func)
            # handed to a helper: does it remove what it is given?
            removal = self._helper_removes(parent, use, func)
            if removal is not None:
                return removal
            kept = self._kept_by_constructor(parent, use, func)
            if kept is not None:
                return "store", kept
            return "escape", None
        if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is use:
            return self._loop_removes(parent, func)
        if isinstance(parent, ast.comprehension) and parent.iter is use:
            return self._loop_removes(parent, func)
        if isinstance(parent, (ast.Compare, ast.BoolOp, ast.If, ast.While, ast.UnaryOp, ast.IfExp, ast.Assert)):
            return "neutral", None
        if isinstance(parent, ast.Subscript) and parent.value is use:
            outer = getattr(parent, "_hl_parent", None)
            call = getattr(outer, "_hl_parent", None)
            if isinstance(outer, ast.Attribute) and outer.attr == "remove" and isinstance(call, ast.Call):
                return "remove", (self.statement(call), call)
            return "neutral", None
        if isinstance(parent, ast.Delete):
            return "neutral", None
        return "escape", None

    def _kept_by_constructor(self, call: ast.Call, use: ast.Name, func: ast.AST | None) -> str | None:
        """``self.hooks.append(Handle(handle, permanent))`` of a class of this
        file whose ``__init__`` keeps the argument (``self.hook = hook``), or a
        dataclass with that field: the handle is kept as that attribute of the
        new object, wherever the object goes."""
        if use not in call.args or not isinstance(call.func, ast.Name) or not hasattr(call.func, "_hl_scope"):
            return None
        bindings = self.model.bindings_at(call.func)
        if len(bindings) != 1 or bindings[0].kind != "class":
            return None
        cls = self.model.classes.get(bindings[0].node)  # type: ignore[arg-type]
        if cls is None:
            return None
        position = call.args.index(use)
        attr = None
        init = cls.method("__init__")
        if init is not None:
            params = [a.arg for a in list(init.args.posonlyargs) + list(init.args.args)][1:]
            if position >= len(params):
                return None
            for name, assigned in cls.attributes.items():
                for value, scope, _node in assigned:
                    if scope.node is init and isinstance(value, ast.Name) and value.id == params[position]:
                        attr = name
        elif any("dataclass" in (getattr(d, "id", "") or getattr(d, "attr", "") or
                                 getattr(getattr(d, "func", None), "id", "") or "") for d in cls.node.decorator_list):
            fields = [stmt.target.id for stmt in cls.node.body
                      if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)]
            attr = fields[position] if position < len(fields) else None
        if attr is None:
            return None
        outer = self.fate(call, func)
        if outer.startswith("at:"):
            return outer + "." + attr
        return None

    def _iterated_use(self, call: ast.Call, func: ast.AST | None) -> tuple[str, Any]:
        parent = getattr(call, "_hl_parent", None)
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) and parent.iter is call:
            return self._loop_removes(parent, func)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in ("list", "tuple",
                                                                                                    "reversed"):
            return self._iterated_use(parent, func)
        return "escape", None

    def _loop_removes(self, loop: ast.AST, func: ast.AST | None) -> tuple[str, Any]:
        """``for h in handles: h.remove()`` (or ``[h.remove() for h in handles]``)."""
        target = loop.target  # type: ignore[attr-defined]
        names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        body = loop.body if isinstance(loop, (ast.For, ast.AsyncFor)) else \
            [getattr(loop, "_hl_parent", None)]
        for stmt in body:
            if stmt is None:
                continue
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "remove" \
                        and not node.args:
                    base = node.func.value
                    while isinstance(base, ast.Subscript):
                        base = base.value
                    if isinstance(base, ast.Name) and base.id in names:
                        point = loop if isinstance(loop, (ast.For, ast.AsyncFor)) else self.statement(loop)
                        return "remove", (point, node)
        return "neutral", None

    def _helper_removes(self, call: ast.Call, use: ast.Name, func: ast.AST | None) -> tuple[str, Any] | None:
        target = self.facts_of.callee(call, func)
        if target is None or target[1] is None:
            return None
        facts, edge, _name, _path, _line = target
        index = call.args.index(use)
        position = index + edge.bound
        if position >= len(facts.params):
            return None
        param = facts.params[position]
        for removal in facts.removes:
            if removal.place in (f"p:{param}", f"e:p:{param}"):
                return "remove", (self.statement(call), call)
        return None

    def _loads_of(self, owner: ast.AST, name: str) -> list[ast.Name]:
        found = self._loads.get(id(owner))
        if found is None:
            found = {}
            body = owner.body if isinstance(owner, (ast.Module,) + FunctionNode) else []  # type: ignore[attr-defined]
            stack = list(body)
            while stack:
                node = stack.pop()
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    found.setdefault(node.id, []).append(node)
                stack.extend(ast.iter_child_nodes(node))
            self._loads[id(owner)] = found
        return found.get(name, [])


# Method names too common to guess a class from.
_COMMON_METHODS = frozenset({"forward", "step", "run", "update", "reset", "close", "add", "call", "setup", "build",
                             "init", "start", "stop", "save", "load", "read", "write", "log", "process", "compute",
                             "__call__", "fit", "predict", "transform"})


def _accepts(func: ast.AST, call: ast.Call, bound: int) -> bool:
    """Can ``func`` be called with ``call``'s arguments (``bound`` leading ones supplied)?"""
    args = func.args  # type: ignore[attr-defined]
    positional = [a.arg for a in list(args.posonlyargs) + list(args.args)][bound:]
    n_defaults = len(args.defaults)
    required = positional[:len(positional) - n_defaults] if n_defaults else positional
    passed = [a for a in call.args if not isinstance(a, ast.Starred)]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return True  # cannot tell
    if len(passed) > len(positional) and args.vararg is None:
        return False
    names = {k.arg for k in call.keywords}
    known = set(positional) | {a.arg for a in args.kwonlyargs}
    if args.kwarg is None and not names <= known:
        return False
    filled = set(positional[:len(passed)]) | names
    if not set(required) <= filled:
        return False
    kw_required = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    return set(kw_required) <= names


def _branch_of(stmt: ast.AST, node: ast.AST) -> str:
    """Which block of a compound statement holds ``node``: ``body``, ``orelse``,
    a handler, a case (or "" when none does)."""
    for field in ("body", "orelse", "finalbody"):
        for child in getattr(stmt, field, None) or ():
            if _holds(child, node):
                return field
    for i, handler in enumerate(getattr(stmt, "handlers", None) or ()):
        if _holds(handler, node):
            return f"handler{i}"
    for i, case in enumerate(getattr(stmt, "cases", None) or ()):
        if _holds(case, node):
            return f"case{i}"
    return ""


def _index_in(block: list, node: ast.AST) -> int:
    return block.index(node) if node in block else 0


def _sets_what_it_tests(test: ast.AST, stored: frozenset[str]) -> bool:
    """Does the guarded code set (``stored``: :meth:`Core._stores`) an
    attribute that ``test`` reads, or that a ``hasattr``/``getattr`` in it
    asks for?  Attributes only: a local name does not outlive the call, so a
    test of one is no guard against the next call."""
    if not stored:
        return False
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute) and node.attr in stored:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr") \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in stored:
            return True
    return False


def _builds_layer(model: SemanticModel, value: ast.AST) -> bool:
    """``nn.Linear(...)``, ``torch.nn.ReLU()``: a layer made here."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, (ast.Name, ast.Attribute)):
        return False
    from hooklint.static.semantic import is_torch_module_class

    try:
        return is_torch_module_class(model.qualify(value.func))
    except Exception:  # noqa: BLE001 - an expression the model did not visit
        return False


def _short_src(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # noqa: BLE001 - odd trees must not crash a rule
        return "?"
    return text if len(text) <= 40 else text[:37] + "..."


def _holds(ancestor: ast.AST, node: ast.AST) -> bool:
    cur: ast.AST | None = node
    while cur is not None:
        if cur is ancestor:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def _is_static(func: ast.AST) -> bool:
    from hooklint.static.semantic import is_staticmethod

    return is_staticmethod(func)


def _previous_exit(stmt: ast.AST, owner: ast.AST) -> ast.AST | None:
    """The ``return``/``raise``/``break``/``continue`` before ``stmt`` in a
    block around it, that makes it unreachable."""
    child = stmt
    cur = getattr(stmt, "_hl_parent", None)
    while cur is not None and child is not owner:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(cur, field, None)
            if isinstance(block, list) and child in block:
                for earlier in block[:block.index(child)]:
                    if isinstance(earlier, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
                        return earlier
        if cur is owner:
            break
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return None


def _dead_branch(stmt: ast.AST, owner: ast.AST, model: SemanticModel) -> str | None:
    child = stmt
    cur = getattr(stmt, "_hl_parent", None)
    while cur is not None and child is not owner:
        if isinstance(cur, (ast.If, ast.While)) and child is not cur.test:
            value = truth(model, cur.test)
            in_body = child in cur.body
            if value is not None and value != in_body:
                try:
                    text = ast.unparse(cur.test)
                except Exception:  # noqa: BLE001 - odd trees must not crash a rule
                    text = "the condition"
                if len(text) > 40:
                    text = text[:37] + "..."
                return f"it is in a branch that never runs: `{text}` is always {'true' if value else 'false'}"
        if cur is owner:
            break
        child, cur = cur, getattr(cur, "_hl_parent", None)
    return None


def _element_suffix(place: str) -> str:
    """``e:s.hook_dict.fwd_hooks.hook`` -> ``fwd_hooks.hook``: the path kept
    under an element of one of the object's own containers ("" otherwise)."""
    if not place.startswith("e:s."):
        return ""
    rest = place[len("e:s."):]
    if rest.startswith(P.ELEMENT):
        return ""
    _container, dot, suffix = rest.partition(".")
    return suffix if dot and not suffix.startswith(P.ELEMENT) else ""


def _calls_in_header(stmt: ast.AST) -> list[ast.Call]:
    """The calls a statement makes itself (a compound statement: in its
    header), in evaluation order, not in nested functions or lambdas."""
    if isinstance(stmt, (ast.If, ast.While)):
        roots: list[ast.AST] = [stmt.test]
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        roots = [stmt.iter]
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        roots = [item.context_expr for item in stmt.items]
    elif isinstance(stmt, ast.Match):
        roots = [stmt.subject]
    elif isinstance(stmt, (ast.Try, ast.excepthandler) + FunctionNode + (ast.ClassDef,)):
        roots = []
    else:
        roots = [stmt]
    out: list[ast.Call] = []
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Lambda,) + FunctionNode + (ast.ClassDef,)):
            continue
        children = list(ast.iter_child_nodes(node))
        stack.extend(reversed(children))
        if isinstance(node, ast.Call):
            out.append(node)
    # arguments are evaluated before the call that takes them
    out.sort(key=lambda c: (getattr(c, "end_lineno", 0), getattr(c, "end_col_offset", 0)))
    return out


def _inside(node: ast.AST, scope: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None:
        if cur is scope:
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def _in_loop(node: ast.AST, scope: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not scope:
        if isinstance(cur, (ast.For, ast.AsyncFor, ast.While, ast.comprehension, ast.ListComp, ast.SetComp,
                            ast.DictComp, ast.GeneratorExp)):
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False
