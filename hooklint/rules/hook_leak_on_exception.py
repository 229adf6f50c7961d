"""HKL308: hooks on the caller's module removed only when the caller's code does not raise."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.flow import function_of
from hooklint.static.handles import RemovalFlow, functions_reaching, is_script, is_test_file
from hooklint.static.hook_targets import hook_words
from hooklint.static.hooks import REGISTRATION_TRIGGERS
from hooklint.static.semantic import FunctionNode
from hooklint.static.values import src


class HookLeakOnException(Rule):
    """
    ## What it does
    Reports the `remove()` of hooks that a library function registers on a
    module its caller owns, runs the caller's code (`model(x)`, a
    `forward_fn` it was given), then removes, when the removal is not on
    the path an exception takes: not in a `finally`, not in a handler that
    removes and re-raises.  Helpers count on both sides: hooks registered
    through `self._register()` or `model.apply(fn)` and removed through
    `self._remove_hooks()` (or a function of another checked file) are paired
    through their summaries.

    Library code is checked, not tests, notebooks or modules with an
    `if __name__ == "__main__":` block: library functions are what callers
    retry after an error.

    ## Why is this bad?
    When the caller's forward raises (a wrong input shape, an out-of-memory
    error, a `KeyboardInterrupt`), the function leaves before its
    `remove()`: the hooks stay on the caller's model.  They run in every
    later forward or backward pass, in training and in the library's other
    methods, and each retry of the call registers them once more, so they
    stack.  A gradient-clamping hook left this way keeps clamping the
    model's gradients in training.  Published releases of captum, thop and
    ptflops had this bug and fixed it with `try`/`finally`.

    It is a leak only when something raises, which is why it is reported
    apart from HKL304 (hooks that stack on every call), as a warning.

    ## Example
    ```python
    def layer_output(model, layer, x):
        outputs = []
        handle = layer.register_forward_hook(lambda module, args, output: outputs.append(output))
        model(x)
        handle.remove()
        return outputs[0]
    ```

    ## Use instead
    ```python
    def layer_output(model, layer, x):
        outputs = []
        handle = layer.register_forward_hook(lambda module, args, output: outputs.append(output))
        try:
            model(x)
        finally:
            handle.remove()
        return outputs[0]
    ```

    ## Fix safety
    There is no automatic fix: the statements to put in the `try` depend
    on what the function does between registering and removing.

    ## References
    - [`RemovableHandle`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook):
      the handle is also a context manager: `with layer.register_forward_hook(fn):` removes it on the way out
    """

    code = "HKL308"
    name = "hook-leak-on-exception"
    summary = "Hooks on the caller's module are removed only when the caller's code does not raise"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # removed in `finally`
        "def layer_output(model, layer, x):\n"
        "    outputs = []\n"
        "    handle = layer.register_forward_hook(lambda m, i, o: outputs.append(o))\n"
        "    try:\n"
        "        model(x)\n"
        "    finally:\n"
        "        handle.remove()\n"
        "    return outputs[0]\n",
        # a handler that removes and re-raises
        "def layer_output(model, layer, x):\n"
        "    outputs = []\n"
        "    handle = layer.register_forward_hook(lambda m, i, o: outputs.append(o))\n"
        "    try:\n"
        "        model(x)\n"
        "    except BaseException:\n"
        "        handle.remove()\n"
        "        raise\n"
        "    handle.remove()\n"
        "    return outputs[0]\n",
        # the handle as a context manager
        "def layer_output(model, layer, x):\n"
        "    outputs = []\n"
        "    with layer.register_forward_hook(lambda m, i, o: outputs.append(o)):\n"
        "        model(x)\n"
        "    return outputs[0]\n",
        # nothing of the caller's runs between registering and removing
        "def count(layer):\n"
        "    handle = layer.register_forward_hook(print)\n"
        "    n = len(layer._forward_hooks)\n"
        "    handle.remove()\n"
        "    return n\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def layer_output(model, layer, x):\n"
            "    outputs = []\n"
            "    handle = layer.register_forward_hook(lambda m, i, o: outputs.append(o))\n"
            "    model(x)\n"
            "    handle.remove()  # HKL308\n"
            "    return outputs[0]\n",
        ),
        Invalid(
            # registered and removed through helper methods
            "class Guided:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "        self.handles = []\n"
            "    def attribute(self, x):\n"
            "        self._hook()\n"
            "        grads = self.model(x)\n"
            "        self._unhook()  # HKL308\n"
            "        return grads\n"
            "    def _hook(self):\n"
            "        for m in self.model.modules():\n"
            "            self.handles.append(m.register_full_backward_hook(self._clamp))\n"
            "    def _unhook(self):\n"
            "        for h in self.handles:\n"
            "            h.remove()\n"
            "    def _clamp(self, m, gi, go):\n"
            "        return (gi[0].clamp(min=0),)\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        if is_script(ctx.tree) or is_test_file(ctx.path) or ctx.path.endswith(".ipynb"):
            return  # a script, a test, a notebook: library code is what callers retry after an error
        removing = functions_reaching(ctx, {id(f): f for f in (function_of(c) for c in
                                                              ctx.model.calls_of_method("remove"))
                                            if isinstance(f, FunctionNode)})
        registering = functions_reaching(ctx, {id(f): f for f in (function_of(r.call) for r in
                                                                  ctx.hooks.registrations)
                                               if isinstance(f, FunctionNode)})
        candidates = {key: func for key, func in removing.items() if key in registering}
        if not candidates:
            return
        flow = RemovalFlow(ctx)
        dependence = ctx.summarizer.dependence
        guards = ctx.summarizer.guards
        for func in sorted(candidates.values(), key=lambda f: f.lineno):
            if function_of(func) is not None:
                continue  # a nested function: its own caller decides
            for found in flow.unprotected(func):
                # the module outlives the call: the caller's (not one the function builds)
                regs = [r for r in found.registrations if r.kind.is_module and r.receiver is not None
                        and dependence.of(r.receiver, function_of(r.call)) is not None]
                if not regs:
                    continue
                first = regs[0]
                risky = src(found.risky.func)
                removal = src(found.removal)
                hooks = " and ".join(sorted({hook_words(r) for r in regs}))
                # a registration under a once-guard (`if self.handle is None:`) is not made again by a retry
                stacks = not any(guards.guarded(anchor, func) for anchor in found.anchors)
                message = (f"`{removal}` removes the {hooks} registered on {first.describe_target()} (line "
                           f"{first.call.lineno}) only when `{risky}(...)` at line {found.risky.lineno} returns: "
                           f"no `finally` (or handler) removes them when it raises, so the hooks stay on the "
                           f"caller's module and keep running in its later forward and backward passes"
                           + (", and every retry adds more" if stacks else
                              " (a retry does not register them again, but they run until one succeeds)"))
                yield self.finding(
                    ctx, found.removal, message,
                    help="Remove the hooks in a `finally:` block (or a `with` block whose `__exit__` removes them).",
                    related=[Related("the hook is registered here", ctx.display_path, ctx.span(r.call)[0])
                             for r in regs[:3]]
                    + [Related("this call can raise", ctx.display_path, ctx.span(found.risky)[0])],
                )
