"""HKL310: hooks removed through an attribute that may not be set yet (hook-lifetime.md)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.handle_attrs import HandleAttributes, UnsetRead
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, REGISTRATION_TRIGGERS
from hooklint.static.semantic import ClassInfo


class HandleAttributeUnset(Rule):
    """
    ## What it does
    Reports a read of the attribute that holds a class's hooks (their
    handles, or an object whose `remove()` takes them off) on a way that
    can run before anything assigns it:

    - from `__del__` (directly or through the methods it calls on
      `self`), when the attribute is assigned only in a later lifecycle
      method (`on_train_begin`, `register`, `attach`), not by `__init__`;
    - in `__init__`, through a call such as `self.remove_hooks()` that
      comes before the attribute's assignment there.

    ## Why is this bad?
    `__del__` runs for every object, including one whose hooks were never
    registered: a callback built and dropped, a run interrupted before
    training began, or an `__init__` that raised.  Reading the missing
    attribute raises `AttributeError` in the finalizer (Python prints
    "Exception ignored in ... __del__") and, when `remove()` is also called
    by users or frameworks before registration, it fails there too.

    ## Known problems
    Reads guarded by `hasattr(self, "<attr>")`, `getattr(self, "<attr>",
    None)`, `"<attr>" in self.__dict__` or a `try` that catches
    `AttributeError` are fine.  An attribute declared in the class body
    (a class default, a dataclass or pydantic field) is taken as always
    set.  When a base class is not in the file, it may assign the
    attribute itself: the finding is then a warning and says which base
    could not be seen.

    ## Example
    ```python
    class HookCallback:
        def __init__(self, modules):
            self.modules = modules

        def on_train_begin(self):
            self.handles = [m.register_forward_hook(self.hook) for m in self.modules]

        def hook(self, module, inputs, output):
            pass

        def remove(self):
            for h in self.handles:
                h.remove()

        def __del__(self):
            self.remove()
    ```

    ## Use instead
    ```python
    class HookCallback:
        def __init__(self, modules):
            self.modules = modules
            self.handles = []

        def on_train_begin(self):
            self.handles = [m.register_forward_hook(self.hook) for m in self.modules]

        def hook(self, module, inputs, output):
            pass

        def remove(self):
            for h in self.handles:
                h.remove()
            self.handles = []

        def __del__(self):
            self.remove()
    ```

    ## Fix safety
    There is no automatic fix: give the attribute an empty value in
    `__init__` (before anything that can raise), or guard the read.

    ## References
    - [`object.__del__`](https://docs.python.org/3/reference/datamodel.html#object.__del__)
    - fastai 1.0.51's `HookCallback.remove` (fixed in 1.0.52 with `getattr(self, 'hooks', None)`)
    """

    code = "HKL310"
    name = "handle-attribute-unset"
    summary = "Hooks removed through an attribute that `__del__` or `__init__` can read before it is assigned"
    severity = Severity.ERROR
    triggers = REGISTRATION_TRIGGERS + DYNAMIC_NAME_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # assigned in __init__
        "class H:\n"
        "    def __init__(self):\n"
        "        self.hs = []\n"
        "    def attach(self, m, fn):\n"
        "        self.hs = [m.register_forward_hook(fn)]\n"
        "    def remove(self):\n"
        "        for h in self.hs:\n"
        "            h.remove()\n"
        "    def __del__(self):\n"
        "        self.remove()\n",
        # guarded read
        "class H:\n"
        "    def attach(self, m, fn):\n"
        "        self.h = m.register_forward_hook(fn)\n"
        "    def remove(self):\n"
        "        if getattr(self, 'h', None) is not None:\n"
        "            self.h.remove()\n"
        "    def __del__(self):\n"
        "        self.remove()\n",
        # hasattr early return
        "class H:\n"
        "    def attach(self, m, fn):\n"
        "        self.h = m.register_forward_hook(fn)\n"
        "    def __del__(self):\n"
        "        if not hasattr(self, 'h'):\n"
        "            return\n"
        "        self.h.remove()\n",
        # a class default
        "class H:\n"
        "    h = None\n"
        "    def attach(self, m, fn):\n"
        "        self.h = m.register_forward_hook(fn)\n"
        "    def __del__(self):\n"
        "        if self.h is not None:\n"
        "            self.h.remove()\n",
        # assigned by a helper __init__ calls
        "class H:\n"
        "    def __init__(self, m, fn):\n"
        "        self._setup(m, fn)\n"
        "    def _setup(self, m, fn):\n"
        "        self.h = m.register_forward_hook(fn)\n"
        "    def __del__(self):\n"
        "        self.h.remove()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class H:\n"
            "    def __init__(self, modules):\n"
            "        self.modules = modules\n"
            "    def begin(self, fn):\n"
            "        self.hs = [m.register_forward_hook(fn) for m in self.modules]\n"
            "    def remove(self):\n"
            "        for h in self.hs:  # HKL310\n"
            "            h.remove()\n"
            "    def __del__(self):\n"
            "        self.remove()\n"
        ),
        Invalid(
            "class H:\n"
            "    def __init__(self, m, fn):\n"
            "        self.close()\n"
            "        self.h = m.register_forward_hook(fn)\n"
            "    def close(self):\n"
            "        self.h.remove()  # HKL310\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        attrs = HandleAttributes(ctx)
        reported: set[int] = set()
        for cls in ctx.model.classes.values():
            holders = attrs.holders(cls)
            if not holders:
                continue
            unseen: list[str] | None = None
            for attr in holders:
                for read in attrs.unset_reads(cls, attr):
                    if id(read.read) in reported:
                        continue  # a base class's read, reported for its first subclass
                    reported.add(id(read.read))
                    if unseen is None:
                        unseen = attrs.unseen_bases(cls)
                    yield self._finding(ctx, cls, attr, read, unseen)

    def _finding(self, ctx: FileContext, cls: ClassInfo, attr: str, read: UnsetRead, unseen: list[str]) -> Finding:
        path = " -> ".join(f"`{getattr(m, 'name', '?')}`" for m in read.chain)
        assigned = sorted({getattr(m, "name", "?") for m in read.assigned_in})
        where = ("only in " + ", ".join(f"`{n}`" for n in assigned)) if assigned else "nowhere in this class"
        if read.entry == "__del__":
            when = ("`__del__` runs for every object, also one destroyed before its hooks were registered "
                    "(built and dropped, or a failed `__init__`)")
        else:
            when = "`__init__` reaches this read before it assigns the attribute"
        message = (f"`self.{attr}` (it holds hooks) is read here on the way {path}, but it is assigned {where}: "
                   f"{when}, and the read raises AttributeError")
        finding = self.finding(
            ctx, read.read, message=message,
            help=f"Assign `self.{attr}` an empty value in `__init__` (first), or guard the read with "
                 f"`getattr(self, \"{attr}\", None)`.",
            related=[Related(f"`{getattr(m, 'name', '?')}` assigns `self.{attr}`", ctx.display_path,
                             ctx.span(m)[0]) for m in read.assigned_in[:2]],
        )
        if unseen:
            finding = _as_warning(finding, ", ".join(f"`{b}`" for b in unseen[:2]), attr)
        return finding


def _as_warning(finding: Finding, bases: str, attr: str) -> Finding:
    return finding.with_changes(
        severity=Severity.WARNING,
        message=finding.message + f" (unless the base class {bases}, which this file does not show, assigns "
                                  f"`{attr}` in its own `__init__`)")

