"""HKL309: the container of hook handles reset to another kind of container (hook-lifetime.md)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.handle_attrs import HandleAttributes
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, REGISTRATION_TRIGGERS

_ERRORS = {
    ("list", "get"): "AttributeError: 'list' object has no attribute 'get'",
    ("list", "values"): "AttributeError: 'list' object has no attribute 'values'",
    ("list", "items"): "AttributeError: 'list' object has no attribute 'items'",
    ("list", "keys"): "AttributeError: 'list' object has no attribute 'keys'",
    ("list", "setdefault"): "AttributeError: 'list' object has no attribute 'setdefault'",
    ("list", "pop"): "TypeError: 'str' object cannot be interpreted as an integer",
    ("list", "[]"): "TypeError: list indices must be integers or slices, not str",
    ("dict", "append"): "AttributeError: 'dict' object has no attribute 'append'",
    ("dict", "extend"): "AttributeError: 'dict' object has no attribute 'extend'",
    ("dict", "insert"): "AttributeError: 'dict' object has no attribute 'insert'",
    ("set", "append"): "AttributeError: 'set' object has no attribute 'append'",
    ("set", "get"): "AttributeError: 'set' object has no attribute 'get'",
    ("set", "[]"): "TypeError: 'set' object is not subscriptable",
}


class HandleContainerType(Rule):
    """
    ## What it does
    Reports an assignment that resets the attribute holding a class's hook
    handles to another kind of container than the one the class's other
    methods use it as: a dict of handles (`self.handles.get(name)`,
    `self.handles[name] = handle`, `.values()`) reset to `[]` after the
    hooks are removed, or a list (`.append(handle)`) reset to `{}`.

    ## Why is this bad?
    The reset usually sits in the cleanup method (`unhook_all`,
    `remove_hooks`), so everything works until the object is used again
    after a cleanup: the next registration, or a removal by name, then
    fails with an `AttributeError` (`'list' object has no attribute
    'get'`) or a `TypeError` on the string key.  Watching a model, stopping
    and watching it again is exactly that sequence, and tests that create a
    fresh object each time never run it.

    ## Known problems
    The attribute must be shown to hold hooks: a registration's handle is
    stored in it, or it (or its items) are `remove()`d.  Only operations
    that exist on one kind of container count (`.get`, `.values`,
    `.append`, a string subscript); when the uses disagree among
    themselves the rule stays quiet.

    ## Example
    ```python
    class Watcher:
        def __init__(self):
            self.handles = {}

        def watch(self, name, tensor, fn):
            if self.handles.get(name) is not None:
                raise ValueError(name)
            self.handles[name] = tensor.register_hook(fn)

        def unwatch_all(self):
            for handle in self.handles.values():
                handle.remove()
            self.handles = []
    ```

    ## Use instead
    ```python
    class Watcher:
        def __init__(self):
            self.handles = {}

        def watch(self, name, tensor, fn):
            if self.handles.get(name) is not None:
                raise ValueError(name)
            self.handles[name] = tensor.register_hook(fn)

        def unwatch_all(self):
            for handle in self.handles.values():
                handle.remove()
            self.handles = {}
    ```

    ## Fix safety
    There is no automatic fix; the container that the uses need is named
    in the message.

    ## References
    - [`torch.utils.hooks.RemovableHandle`](https://github.com/pytorch/pytorch/blob/main/torch/utils/hooks.py)
    - wandb's `TorchHistory.unhook_all` reset its dict of handles to a list (fixed in wandb 0.16.0)
    """

    code = "HKL309"
    name = "handle-container-type"
    summary = "The attribute holding hook handles is reset to another kind of container than its uses need"
    severity = Severity.ERROR
    triggers = REGISTRATION_TRIGGERS + DYNAMIC_NAME_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # reset to the same kind
        "class W:\n"
        "    def __init__(self):\n"
        "        self.hs = []\n"
        "    def add(self, m, fn):\n"
        "        self.hs.append(m.register_forward_hook(fn))\n"
        "    def clear(self):\n"
        "        for h in self.hs:\n"
        "            h.remove()\n"
        "        self.hs = list()\n",
        # a dict and a list of something that is not hooks
        "class Cache:\n"
        "    def __init__(self):\n"
        "        self.items = {}\n"
        "    def get(self, k):\n"
        "        return self.items.get(k)\n"
        "    def clear(self):\n"
        "        self.items = []\n",
        # uses that fit both (iteration, len, clear)
        "class W:\n"
        "    def __init__(self):\n"
        "        self.hs = {}\n"
        "    def add(self, key, m, fn):\n"
        "        self.hs[key] = m.register_forward_hook(fn)\n"
        "    def clear(self):\n"
        "        for h in list(self.hs):\n"
        "            pass\n"
        "        self.hs = []\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class W:\n"
            "    def __init__(self):\n"
            "        self.hs = []\n"
            "    def add(self, m, fn):\n"
            "        self.hs.append(m.register_forward_hook(fn))\n"
            "    def clear(self):\n"
            "        for h in self.hs:\n"
            "            h.remove()\n"
            "        self.hs = {}  # HKL309\n"
        ),
        Invalid(
            "class W:\n"
            "    def __init__(self):\n"
            "        self.hs = dict()\n"
            "    def add(self, name, t, fn):\n"
            "        self.hs['grad/' + name] = t.register_hook(fn)\n"
            "    def remove(self, name):\n"
            "        self.hs.pop(name).remove()\n"
            "    def reset(self):\n"
            "        self.hs = []  # HKL309\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        attrs = HandleAttributes(ctx)
        for cls in ctx.model.classes.values():
            for attr in attrs.holders(cls):
                assigned = attrs.assignments(cls, attr)
                kinds = {a.kind for a in assigned if a.kind is not None}
                if len(kinds) < 2:
                    continue
                uses = attrs.uses(cls, attr)
                if not uses:
                    continue
                allowed = frozenset.intersection(*(u.kinds for u in uses))
                if not allowed:
                    continue  # the uses disagree among themselves: not ours to judge
                wanted = " or ".join(sorted(allowed))
                for assignment in assigned:
                    if assignment.kind is None or assignment.kind in allowed:
                        continue
                    conflicting = [u for u in uses if assignment.kind not in u.kinds]
                    first = conflicting[0]
                    where = getattr(first.method, "name", "?")
                    op = first.text.split("(")[0].strip("`.") if first.text.startswith("`.") else "[]"
                    error = _ERRORS.get((assignment.kind, op), f"a {assignment.kind} has no {first.text}")
                    others = ", ".join(f"{u.text} (line {u.node.lineno})" for u in conflicting[:3])
                    method = getattr(assignment.method, "name", None)
                    place = f"in `{cls.name}.{method}`" if method else f"in the body of `{cls.name}`"
                    yield self.finding(
                        ctx, assignment.node,
                        message=(f"`self.{attr}` holds hook handles as a {wanted} (used with {others}), but is "
                                 f"set to a {assignment.kind} {place}: once this runs, `{where}` fails with "
                                 f"\"{error}\""),
                        help=f"Assign the same kind of container the uses need: a {wanted}.",
                        related=[Related(f"uses `self.{attr}` as a {wanted}", ctx.display_path, ctx.span(u.node)[0])
                                 for u in conflicting[:3]],
                    )
