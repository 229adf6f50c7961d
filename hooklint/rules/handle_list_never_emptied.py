"""HKL316: handles removed from a list on self that is never emptied, so it grows with every use (hook-lifetime.md)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.handle_lists import emptied, growing_handle_lists, one_shot_instances, removal_sites, stale_guard
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, REGISTRATION_TRIGGERS


class HandleListNeverEmptied(Rule):
    """
    ## What it does
    Reports the removal of the hooks kept in a list (or set) on `self` when
    the handles are added by a method other than the constructor (`register`,
    `attach`, `__enter__`), removed by another (`remove`, `detach`,
    `__exit__`), and no code of the class ever empties the container
    (`.clear()`, `self.handles = []`, `del self.handles[:]`, `.pop()`).

    ## Why is this bad?
    A register / remove pair is meant to run again on the same object: a
    context manager entered once per training step, a profiler attached
    and detached per batch, a callback hooked at each epoch.  The removal
    takes the hooks off the model, but the handles stay in the list, and
    the next registration appends new ones behind them.  After N cycles the
    list holds N sets of handles: memory grows without bound, and each
    removal walks every earlier handle again, calling `remove()` on hooks
    that are long gone, so each step is slower than the one before.
    Nothing fails; the job just slows down and grows.

    ## Known problems
    The container must receive handles by `append`, `extend`, `insert`,
    `add` or `+=` in a method that is not part of construction (`__init__`
    and the methods only it calls run once per object), and the class must
    remove them in a method other than `__del__`.  A container the class
    never assigns belongs to a base class in another file, which may empty
    it, and is not judged.  A class whose every
    construction in its file is used once (`with Collector(...):`,
    `Tracker(model)(x)`) is not reported.  A container handed to
    other code (an argument, a return value, an alias) may be emptied there
    and is not reported.  The severity is *warning*: an object used for one
    cycle only is not affected.

    ## Example
    ```python
    class ActivationCollector:
        def __init__(self, layers):
            self.layers = layers
            self.handles = []
            self.outputs = []

        def __enter__(self):
            for layer in self.layers:
                self.handles.append(layer.register_forward_hook(self.save))
            return self

        def save(self, module, inputs, output):
            self.outputs.append(output)

        def __exit__(self, *exc):
            for handle in self.handles:
                handle.remove()
    ```

    ## Use instead
    ```python
    class ActivationCollector:
        def __init__(self, layers):
            self.layers = layers
            self.handles = []
            self.outputs = []

        def __enter__(self):
            for layer in self.layers:
                self.handles.append(layer.register_forward_hook(self.save))
            return self

        def save(self, module, inputs, output):
            self.outputs.append(output)

        def __exit__(self, *exc):
            for handle in self.handles:
                handle.remove()
            self.handles.clear()
    ```

    ## Fix safety
    There is no automatic fix: empty the container after the removal loop
    (`self.handles.clear()`), or pop the handles as they are removed.

    ## References
    - [`RemovableHandle.remove`](https://pytorch.org/docs/stable/generated/torch.utils.hooks.RemovableHandle.html)
    - bergson pull request 55 (the gradient collector's handle lists grew every step; issue 42)
    """

    code = "HKL316"
    name = "handle-list-never-emptied"
    summary = "Hook handles are removed but the list on self that holds them is never emptied: it grows with every use"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS + DYNAMIC_NAME_TRIGGERS
    trigger_pattern = r"\.remove\(\)"
    VALID: ClassVar[tuple[str, ...]] = (
        # emptied after removal
        "class Probe:\n"
        "    def __init__(self, layers):\n"
        "        self.layers, self.handles = layers, []\n"
        "    def attach(self, hook):\n"
        "        for l in self.layers:\n"
        "            self.handles.append(l.register_forward_hook(hook))\n"
        "    def detach(self):\n"
        "        for h in self.handles:\n"
        "            h.remove()\n"
        "        self.handles = []\n",
        # popped as they are removed
        "class Probe:\n"
        "    def __init__(self, layers):\n"
        "        self.layers, self.handles = layers, []\n"
        "    def attach(self, hook):\n"
        "        for l in self.layers:\n"
        "            self.handles.append(l.register_forward_hook(hook))\n"
        "    def detach(self):\n"
        "        while self.handles:\n"
        "            self.handles.pop().remove()\n",
        # registered once, in the constructor
        "class Probe:\n"
        "    def __init__(self, layers, hook):\n"
        "        self.handles = []\n"
        "        for l in layers:\n"
        "            self.handles.append(l.register_forward_hook(hook))\n"
        "    def close(self):\n"
        "        for h in self.handles:\n"
        "            h.remove()\n",
        # keyed by name: a new cycle replaces the entries
        "class Probe:\n"
        "    def __init__(self, layers):\n"
        "        self.layers, self.handles = layers, {}\n"
        "    def attach(self, hook):\n"
        "        for name, l in self.layers.items():\n"
        "            self.handles[name] = l.register_forward_hook(hook)\n"
        "    def detach(self):\n"
        "        for h in self.handles.values():\n"
        "            h.remove()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class Tracer:\n"
            "    def __init__(self, model):\n"
            "        self.model, self.installed = model, []\n"
            "    def install(self):\n"
            "        if len(self.installed) > 0:\n"
            "            return\n"
            "        for m in self.model.modules():\n"
            "            self.installed += [m.register_forward_pre_hook(self.enter)]\n"
            "    def enter(self, m, args):\n"
            "        pass\n"
            "    def uninstall(self):\n"
            "        for h in self.installed:\n"
            "            h.remove()  # HKL316\n"
        ),
        Invalid(
            "class Probe:\n"
            "    def __init__(self, layers):\n"
            "        self.layers, self.handles = layers, []\n"
            "    def __enter__(self):\n"
            "        for l in self.layers:\n"
            "            self.handles.append(l.register_forward_hook(self.hook))\n"
            "        return self\n"
            "    def hook(self, m, i, o):\n"
            "        pass\n"
            "    def __exit__(self, *exc):\n"
            "        for h in self.handles:\n"
            "            h.remove()  # HKL316\n"
        ),
        Invalid(
            "class Watch:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "        self._hooks = set()\n"
            "    def _one(self, m):\n"
            "        self._hooks.add(m.register_full_backward_hook(self.on_grad))\n"
            "    def start(self):\n"
            "        for m in self.model.modules():\n"
            "            self._one(m)\n"
            "    def on_grad(self, m, gi, go):\n"
            "        pass\n"
            "    def stop(self):\n"
            "        for h in list(self._hooks):\n"
            "            h.remove()  # HKL316\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        core = ctx.core
        for cls in ctx.model.classes.values():
            if one_shot_instances(ctx.model, cls):
                continue  # every object of the class is used once here: its list never sees a second cycle
            for growth in growing_handle_lists(core, cls):
                if any(ctx.model.enclosing_class(a) is not cls for a in growth.adds):
                    continue  # filled by a related class: reported there
                if not any(info.attribute(growth.attr) for info in core.related_classes(cls)):
                    continue  # the container is made by a base class in another file, which may empty it too
                removals = removal_sites(core, cls, growth.attr)
                if not removals or emptied(core, cls, growth.attr) is not None:
                    continue
                method, removal = removals[0]
                node = removal.node if removal.node is not None else removal.site
                if node is None or ctx.model.enclosing_class(node) is not cls:
                    continue
                adders = ", ".join(f"`{m}`" for m in growth.methods)
                first = growth.adds[0]
                adding = cls.methods.get(growth.methods[0]) if len(growth.methods) == 1 else None
                guard = stale_guard(adding, growth.attr) if adding is not None else None
                if guard is not None:
                    message = (f"`{getattr(method, 'name', '?')}` removes the hooks whose handles are kept in "
                               f"`self.{growth.attr}`, but nothing ever empties `self.{growth.attr}`, and "
                               f"{adders} returns early at line {guard.lineno} while `self.{growth.attr}` holds "
                               f"handles: after the first removal the stale handles make it skip, so the hooks "
                               f"are never registered again on a later run")
                else:
                    message = (f"`{getattr(method, 'name', '?')}` removes the hooks whose handles are kept in "
                               f"`self.{growth.attr}`, but nothing ever empties `self.{growth.attr}`, and {adders} "
                               f"adds new handles to it each time it runs: used again (entered once per step, "
                               f"attached per batch), the object keeps every earlier handle, so the list grows "
                               f"without bound and each removal calls `remove()` on all of them again")
                yield self.finding(
                    ctx, node,
                    message=message,
                    help=f"Empty the container after the removal loop: `self.{growth.attr}.clear()`.",
                    related=[Related(f"handles added to `self.{growth.attr}` here", ctx.display_path,
                                     ctx.span(first)[0])],
                )
