"""HKL335: a handle kept on the hooked module (or its forward) is removed by whichever object finds it there."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.foreign_hooks import removals_of_found_handles


class FoundHandleRemoved(Rule):
    """
    ## What it does
    Reports `<holder>.<attr>.remove()` in a method when the file keeps a
    hook handle under `<attr>` on an object other than `self`: the hooked
    module, or a function installed as its forward (`wrapper.__handle__ =
    module.register_forward_hook(...)`), and nothing before the removal
    compares the holder with `self`.

    ## Why is this bad?
    A handle kept on the module is found by every object that looks there,
    not only by the one that registered the hook.  A wrapper that re-wraps a
    module by first removing "its" previous hooks found on the module's
    forward removes another wrapper's hooks when two wrappers (two
    tracing sessions, two interpreters built on one model) share the
    module: the first wrapper's hooks silently stop firing, with no error
    (nnsight 0.5: a second `NNsight` wrapper on the same model disabled the
    first one's interventions).  Handles an object keeps on itself
    (`self.handles.append(handle)`) are its own.

    ## Known problems
    Only handles stored and removed through attribute names the same file
    spells are matched, and only removals in a method of the wrapper's class
    itself (the object's own act on a module it is handed); a helper nested
    in a method and applied over the model (a profiler's teardown through
    `model.apply`) is not reported.  The severity is *warning*: two wrappers must share
    the module for it to matter.

    ## Example
    ```python
    class Tracer:
        def wrap(self, module):
            forward = module.forward
            if hasattr(forward, "__traced__"):
                forward.__handle__.remove()
                forward = forward.__traced__

            def traced(*args, **kwargs):
                return forward(*args, **kwargs)

            handle = module.register_forward_hook(self.record)
            traced.__traced__ = forward
            traced.__handle__ = handle
            module.forward = traced

        def record(self, module, args, output):
            pass
    ```

    ## Use instead
    ```python
    class Tracer:
        def __init__(self):
            self.handles = []

        def wrap(self, module):
            self.handles.append(module.register_forward_hook(self.record))

        def unwrap(self):
            for handle in self.handles:
                handle.remove()
            self.handles = []

        def record(self, module, args, output):
            pass
    ```

    ## Fix safety
    There is no automatic fix: keep the handles on the object that
    registered the hooks, or record the owner next to the handle and remove
    only your own.

    ## References
    - [`torch.utils.hooks.RemovableHandle`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook):
      removing a handle removes that registration, whoever holds the handle
    - nnsight commit 8c41f55 (handles kept by the interleaver instead of on the wrapped forward)
    """

    code = "HKL335"
    name = "found-handle-removed"
    summary = "A hook handle kept on the hooked module is removed by whichever object finds it there"
    severity = Severity.WARNING
    triggers = ("remove",)
    trigger_pattern = r"\.remove[ \t]*\([ \t]*\)"
    VALID: ClassVar[tuple[str, ...]] = (
        # handles kept on the object that registered them
        "class Tracer:\n"
        "    def __init__(self):\n"
        "        self.handles = []\n"
        "    def wrap(self, module):\n"
        "        self.handles.append(module.register_forward_hook(self.record))\n"
        "    def unwrap(self):\n"
        "        for handle in self.handles:\n"
        "            handle.remove()\n"
        "    def record(self, module, args, output):\n"
        "        pass\n",
        # the holder records its owner, and the removal checks it
        "class Tracer:\n"
        "    def wrap(self, module):\n"
        "        old = getattr(module, '_tracer_handle', None)\n"
        "        if old is not None and module._tracer_owner is self:\n"
        "            module._tracer_handle.remove()\n"
        "        module._tracer_handle = module.register_forward_hook(self.record)\n"
        "        module._tracer_owner = self\n"
        "    def record(self, module, args, output):\n"
        "        pass\n",
        # a plain function: no owner to confuse
        "def rewrap(module, hook):\n"
        "    if hasattr(module, '_handle'):\n"
        "        module._handle.remove()\n"
        "    module._handle = module.register_forward_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class Tracer:\n"
            "    def wrap(self, module):\n"
            "        forward = module.forward\n"
            "        if hasattr(forward, '__traced__'):\n"
            "            forward.__handle__.remove()  # HKL335\n"
            "            forward = forward.__traced__\n"
            "        def traced(*args, **kwargs):\n"
            "            return forward(*args, **kwargs)\n"
            "        handle = module.register_forward_hook(self.record)\n"
            "        traced.__traced__ = forward\n"
            "        traced.__handle__ = handle\n"
            "        module.forward = traced\n"
            "    def record(self, module, args, output):\n"
            "        pass\n"
        ),
        Invalid(
            "class Probe:\n"
            "    def attach(self, layer):\n"
            "        if getattr(layer, 'probe_handle', None) is not None:\n"
            "            layer.probe_handle.remove()  # HKL335\n"
            "        layer.probe_handle = layer.register_forward_pre_hook(self.seen)\n"
            "    def seen(self, module, args):\n"
            "        pass\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in removals_of_found_handles(ctx):
            yield self.finding(
                ctx, found.call,
                message=(f"this removes the hook whose handle is kept on `{found.holder}` (`.{found.attr}`), "
                         f"whoever registered it: the handle lives on the shared object, not on `self`, so when "
                         f"two of these objects wrap the same module the second removes the first one's hook, "
                         f"whose effects then silently stop"),
                help="Keep the handles on the object that registered the hooks (`self.handles`) and remove only "
                     "those, or store the owner with the handle and compare it with `self` first.",
                related=[Related("the handle is kept on the shared object here", ctx.display_path,
                                 ctx.span(found.stored)[0])],
            )
