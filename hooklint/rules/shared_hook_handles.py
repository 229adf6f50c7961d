"""HKL305: hook handles kept in a mutable class attribute (hook-lifetime.md)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.handles import (
    assignments,
    class_body_value,
    destination,
    is_mutable_container,
    refuses_held_keys,
    removals,
)
from hooklint.static.hooks import REGISTRATION_TRIGGERS, Registration
from hooklint.static.semantic import ClassInfo


class SharedHookHandles(Rule):
    """
    ## What it does
    Reports a list, dict or set created in a class body (`handles = []`)
    that the class's methods fill with hook handles through `self`
    (`self.handles.append(module.register_forward_hook(...))`), when no
    `__init__` gives each instance a container of its own.

    ## Why is this bad?
    A mutable value in the class body is created once, when the class is
    defined, and shared by every instance: `self.handles.append(h)` finds
    no instance attribute and appends to the class's list.  So every
    instance sees the handles of all the others, and one instance's cleanup
    (`for h in self.handles: h.remove()`) removes the hooks of every
    instance: a feature extractor or an explainer silently stops recording
    as soon as another one is closed.  The handles, and the modules they
    reference, also stay alive for as long as the class does.

    ## Known problems
    The rule follows handles stored through `self` in the class's own
    methods.  A container annotated `ClassVar[...]` is taken as shared on
    purpose and not reported, and so is a dict used as a registry by key:
    each handle stored under a key the storing method is given, after that
    method refuses a key the class already holds (`if name in
    self._masked: raise ...`, a class-body container), and each removal
    taking one key (`self.hooks.pop(name).remove()`): no instance then
    overwrites or removes another's handle (sparseml's `LayerParamMasking`).
    The severity is *warning*: nothing goes wrong while one instance at a
    time holds hooks.

    ## Example
    ```python
    import torch.nn as nn

    class FeatureExtractor:
        handles = []

        def __init__(self, model: nn.Module):
            self.features = {}
            for name, module in model.named_children():
                self.handles.append(module.register_forward_hook(self.save(name)))

        def save(self, name):
            def hook(module, inputs, output):
                self.features[name] = output
            return hook

        def close(self):
            for handle in self.handles:
                handle.remove()
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class FeatureExtractor:
        def __init__(self, model: nn.Module):
            self.handles = []
            self.features = {}
            for name, module in model.named_children():
                self.handles.append(module.register_forward_hook(self.save(name)))

        def save(self, name):
            def hook(module, inputs, output):
                self.features[name] = output
            return hook

        def close(self):
            for handle in self.handles:
                handle.remove()
    ```

    ## Fix safety
    There is no automatic fix: where the instance's container should be
    created (`__init__`, or the method that registers) depends on the class.

    ## References
    - [Class and instance variables](https://docs.python.org/3/tutorial/classes.html#class-and-instance-variables)
      ("shared data can have possibly surprising effects with involving mutable objects such as lists")
    - [`torch.utils.hooks.RemovableHandle`](https://github.com/pytorch/pytorch/blob/main/torch/utils/hooks.py)
    """

    code = "HKL305"
    name = "shared-hook-handles"
    summary = "Hook handles are kept in a mutable class attribute: one instance's cleanup removes every instance's hooks"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # a registry by key: a key held by any instance is refused, removals take one key
        "class Masks:\n"
        "    _masked = {}\n"
        "    _hooks = {}\n"
        "    def add(self, name, layer):\n"
        "        if name in self._masked:\n"
        "            raise ValueError(name)\n"
        "        self._masked[name] = layer\n"
        "        self._hooks[name] = layer.register_forward_hook(print)\n"
        "    def remove(self, name):\n"
        "        self._hooks[name].remove()\n"
        "        del self._hooks[name], self._masked[name]\n",
        # each call that registers first gives the instance its own list (captum's LRP)
        "class Explainer:\n"
        "    handles = []\n"
        "    def attribute(self, model, x):\n"
        "        self.handles = []\n"
        "        self._register(model)\n"
        "        try:\n"
        "            return model(x)\n"
        "        finally:\n"
        "            for h in self.handles:\n"
        "                h.remove()\n"
        "    def _register(self, model):\n"
        "        for m in model.modules():\n"
        "            self.handles.append(m.register_forward_hook(self.save))\n"
        "    def save(self, m, i, o):\n"
        "        pass\n",
        # the container is created per instance in __init__
        "class Probe:\n"
        "    handles = []\n"
        "    def __init__(self, module):\n"
        "        self.handles = []\n"
        "        self.handles.append(module.register_forward_hook(self.save))\n"
        "    def save(self, m, i, o):\n"
        "        pass\n"
        "    def close(self):\n"
        "        for h in self.handles:\n"
        "            h.remove()\n",
        # an immutable default, replaced by each instance
        "class Probe:\n"
        "    handle = None\n"
        "    def attach(self, module):\n"
        "        self.handle = module.register_forward_hook(self.save)\n"
        "    def save(self, m, i, o):\n"
        "        pass\n",
        # shared on purpose: annotated ClassVar
        "from typing import ClassVar\n"
        "class Registry:\n"
        "    all_handles: ClassVar[list] = []\n"
        "    def attach(self, module):\n"
        "        self.all_handles.append(module.register_forward_hook(print))\n",
        # a class-level list of other things, not handles
        "class Probe:\n"
        "    names = []\n"
        "    def attach(self, module):\n"
        "        self.names.append(type(module).__name__)\n"
        "        self.handle = module.register_forward_hook(print)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class ActivationRecorder:\n"
            "    handles = []  # HKL305\n"
            "    def attach(self, module):\n"
            "        h = module.register_forward_hook(self.save)\n"
            "        self.handles.append(h)\n"
            "    def save(self, m, i, o):\n"
            "        pass\n"
            "    def detach(self):\n"
            "        for h in self.handles:\n"
            "            h.remove()\n"
        ),
        Invalid(
            # shared until the first cleanup rebinds it
            "class Probe:\n"
            "    handles = []  # HKL305\n"
            "    def attach(self, module):\n"
            "        self.handles.append(module.register_forward_hook(print))\n"
            "    def detach(self):\n"
            "        for h in self.handles:\n"
            "            h.remove()\n"
            "        self.handles = []\n"
        ),
        Invalid(
            "class Hooks:\n"
            "    hooks = {}  # HKL305\n"
            "    def register(self, name, module):\n"
            "        self.hooks[name] = module.register_full_backward_hook(self.grad)\n"
            "    def grad(self, m, gi, go):\n"
            "        pass\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        stored: dict[tuple[int, str], list[tuple[ClassInfo, Registration, ast.AST]]] = {}
        for reg in ctx.hooks.registrations:
            dest = destination(ctx, reg)
            if dest.kind != "container" or dest.owner is None or dest.attr is None:
                continue
            stored.setdefault((id(dest.owner), dest.attr), []).append((dest.owner, reg, dest.node))
        for (_key, attr), entries in stored.items():
            cls = entries[0][0]
            finding = self._check_attribute(ctx, cls, attr, entries)
            if finding is not None:
                yield finding

    def _check_attribute(self, ctx: FileContext, cls: ClassInfo, attr: str,
                         entries: list[tuple[ClassInfo, Registration, ast.AST]]) -> Finding | None:
        owner = _defining_class(cls, attr)
        if owner is None:
            return None
        stmt, value = owner
        if not is_mutable_container(ctx, value) or _is_classvar(ctx, stmt):
            return None
        if _own_container_in_init(cls, attr):
            return None
        if all(_rebound_before(ctx, cls, attr, _method_of(node), node.lineno) for _c, _r, node in entries):
            return None  # each call that stores handles first gives the instance a new container
        kind = _container_kind(ctx, value)
        if kind == "dict" and refuses_held_keys(ctx, cls, attr, [node for _c, _r, node in entries]):
            return None  # a registry by key, shared on purpose: no instance touches another's keys
        first = entries[0][2]
        store_method = getattr(ctx.model.enclosing_class(first), "name", cls.name)
        where = _method_name(first)
        gone = removals(ctx, cls, attr)
        if gone:
            remover = _method_name(gone[0].call)
            consequence = (f"`{remover}()` (line {gone[0].call.lineno}) removes the hooks of every instance, "
                           f"not only its own")
        else:
            consequence = "each instance sees, and can remove, the others' handles"
        message = (f"`{cls.name}.{attr}` is a {kind} created once in the class body and shared by every "
                   f"`{cls.name}`: `{store_method}.{where}` stores each instance's hook handles in it "
                   f"(line {first.lineno}), so {consequence}")
        related = [Related("the handles are stored here", ctx.display_path, ctx.span(node)[0])
                   for _c, _r, node in entries[:3]]
        related += [Related("and removed here", ctx.display_path, ctx.span(r.call)[0]) for r in gone[:2]]
        return self.finding(
            ctx, stmt, message,
            help=f"Create the {kind} per instance: `self.{attr} = {_empty(kind)}` in `__init__` "
                 f"(and drop the class attribute).",
            related=related,
        )


def _defining_class(cls: ClassInfo, attr: str, depth: int = 0) -> tuple[ast.stmt, ast.expr] | None:
    """The class-body assignment of ``attr`` in ``cls`` or a local base."""
    found = class_body_value(cls, attr)
    if found is not None or depth > 8:
        return found
    for base in cls.local_bases:
        found = _defining_class(base, attr, depth + 1)
        if found is not None:
            return found
    return None


def _own_container_in_init(cls: ClassInfo, attr: str, depth: int = 0) -> bool:
    """Does ``__init__`` (the class's, or a local base's it inherits) give
    each instance its own ``self.<attr>``?"""
    for method, _value in assignments(cls, attr):
        if getattr(method, "name", "") in ("__init__", "__post_init__"):
            return True
    if "__init__" in cls.methods or depth > 8:
        # an own __init__ that does not assign it: a base's is only run through super()
        return any(_own_container_in_init(base, attr, depth + 1) for base in cls.local_bases) \
            and _calls_super_init(cls)
    return any(_own_container_in_init(base, attr, depth + 1) for base in cls.local_bases)


def _rebound_before(ctx: FileContext, cls: ClassInfo, attr: str, method: ast.AST | None, line: int,
                    depth: int = 0) -> bool:
    """Is ``self.<attr> = ...`` assigned in ``method`` before ``line``, or
    before the call in every method of the class that calls ``method``?"""
    if method is None or depth > 3:
        return False
    for assigned_in, value in assignments(cls, attr):
        if assigned_in is method and value.lineno < line:
            return True
    qual = ctx.qualname(method)
    sites = ctx.project.local_call_sites(qual) if qual else []
    if not sites:
        return False
    prefix = ctx.qualname(cls.node)
    for caller, call_line in sites:
        name = caller.rpartition(".")[2]
        if caller.rpartition(".")[0] != prefix or not _rebound_before(ctx, cls, attr, cls.methods.get(name),
                                                                      call_line, depth + 1):
            return False
    return True


def _method_of(node: ast.AST) -> ast.AST | None:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
        cur = getattr(cur, "_hl_parent", None)
    return cur


def _calls_super_init(cls: ClassInfo) -> bool:
    init = cls.methods.get("__init__")
    return init is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "__init__"
        for n in ast.walk(init))


def _is_classvar(ctx: FileContext, stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.AnnAssign):
        return False
    annotation = stmt.annotation
    head = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    qual = ctx.model.qualify(head) or ""
    return qual.rsplit(".", 1)[-1] == "ClassVar" or (isinstance(head, ast.Constant) and "ClassVar" in str(head.value))


def _method_name(node: ast.AST) -> str:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
        cur = getattr(cur, "_hl_parent", None)
    return getattr(cur, "name", "?")


def _container_kind(ctx: FileContext, value: ast.expr) -> str:
    if isinstance(value, (ast.List, ast.ListComp)):
        return "list"
    if isinstance(value, (ast.Dict, ast.DictComp)):
        return "dict"
    if isinstance(value, (ast.Set, ast.SetComp)):
        return "set"
    qual = (ctx.model.qualify(value.func) or "") if isinstance(value, ast.Call) else ""
    last = qual.rsplit(".", 1)[-1]
    return {"list": "list", "dict": "dict", "set": "set", "OrderedDict": "dict", "defaultdict": "dict",
            "deque": "deque"}.get(last, "container")


def _empty(kind: str) -> str:
    return {"list": "[]", "dict": "{}", "set": "set()"}.get(kind, "[]")
