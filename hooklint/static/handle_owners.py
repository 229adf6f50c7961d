"""Hook handles a class keeps on an object its caller owns.

An object that registers hooks owns their handles; where it keeps them says
who can take the hooks off.  A class that keeps them in a container on the
model it was handed (``self.model._handles``, ``model._hooks`` of a method's
argument) shares that container with every other instance built on the same
model: one instance's "remove my hooks" walks the container and removes the
others' hooks too (HKL319).  The facts come from the function summaries
(hooklint.static.core): the fate of each registration's handle and the
places each method removes handles from.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from hooklint.static.core import places as P
from hooklint.static.semantic import ClassInfo


@dataclass
class CallerContainer:
    """A container on the caller's object holding the handles of ``cls``'s hooks."""

    cls: ClassInfo
    container: str  # its place, in the class's terms: `s.model._ood_handles`
    registrations: list = field(default_factory=list)  # summary `Reg`s stored there
    removals: list = field(default_factory=list)  # (method, removing call) taking every handle off


def handles_on_caller_objects(core, cls: ClassInfo) -> list[CallerContainer]:
    """The containers on an object ``cls``'s caller handed over (an attribute
    of ``self`` set from an argument, a method's parameter) into which a
    method of ``cls`` puts hook handles, and from which a method of ``cls``
    removes every handle (``for h in self.model._handles: h.remove()``)."""
    found: dict[str, CallerContainer] = {}
    for method in cls.methods.values():
        for reg in core.facts(method).regs:
            if reg.site is None or not reg.handle.startswith("at:" + P.ELEMENT):
                continue
            container = reg.handle[len("at:" + P.ELEMENT):]
            if container.startswith(P.ELEMENT):
                continue
            base = P.root(container)
            if container == base or not _callers(core, base, method, cls):
                continue  # on the object itself (`self.handles`), or on something it built
            if not _put_into(core, reg.site, container, method):
                continue  # `p._hook = handle` on each of the caller's objects: an attribute, not a shared container
            entry = found.setdefault(container, CallerContainer(cls, container))
            if all(r.site is not reg.site for r in entry.registrations):
                entry.registrations.append(reg)
    if not found:
        return []
    for method in cls.methods.values():
        for removal in core.facts(method).removes:
            if removal.chain or not isinstance(removal.node, ast.Call):
                continue  # through a helper: reported where the helper removes them
            place = removal.place
            if place.startswith(P.ELEMENT) and place[len(P.ELEMENT):] in found:
                found[place[len(P.ELEMENT):]].removals.append((method, removal.node))
    return [entry for entry in found.values() if entry.removals]


def _callers(core, base: str, method: ast.AST, cls: ClassInfo) -> bool:
    """Is ``base`` (``s.model``, ``p:model``) the caller's object?  Besides
    :meth:`Core.belongs_to_caller`: an attribute of ``self`` that a base class
    of another file sets (the class's own assignments all rebuild it from
    itself, ``self.model = nn.Sequential(*list(self.model.modules())[k:])``,
    which keeps the caller's layers)."""
    if core.belongs_to_caller(base, method):
        return True
    if not base.startswith("s.") or not cls.node.bases or cls.local_bases:
        return False
    attr = base[2:]
    assigned = cls.attribute(attr)
    return bool(assigned) and all(_reads_self_attr(value, attr) for value, _scope, _node in assigned)


def _reads_self_attr(value: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.value, ast.Name)
               and n.value.id == "self" for n in ast.walk(value))


_PUTTING = frozenset({"append", "extend", "insert", "add", "appendleft"})


def _put_into(core, site: ast.AST, container: str, method: ast.AST) -> bool:
    """Does the handle made at ``site`` go into the container itself
    (``<container>.append(handle)``, directly or through a name bound to it)?"""
    node = site
    parent = getattr(node, "_hl_parent", None)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        name = parent.targets[0].id
        uses = [n for n in ast.walk(method) if isinstance(n, ast.Name) and n.id == name
                and isinstance(n.ctx, ast.Load)]
        return any(_is_put(core, getattr(use, "_hl_parent", None), use, container, method) for use in uses)
    return _is_put(core, parent, node, container, method)


def _is_put(core, call: ast.AST | None, arg: ast.AST, container: str, method: ast.AST) -> bool:
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in _PUTTING \
        and arg in call.args and core.places.of(call.func.value, method) == container
