"""HKL307: a hook that stays on the caller's model after the call that needed it returned."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import returns_nothing
from hooklint.static.context import FileContext
from hooklint.static.core import places as P
from hooklint.static.flow import function_of
from hooklint.static.handles import is_script, is_test_file
from hooklint.static.hook_targets import hook_words
from hooklint.static.hooks import REGISTRATION_TRIGGERS, HookKind
from hooklint.static.semantic import FunctionNode
from hooklint.static.values import src


class HookLeftOnCallerModel(Rule):
    """
    ## What it does
    Reports a hook that a library function registers on a module its caller
    owns (a parameter, a model the object was given), needs while it runs
    that module, and leaves on it when it returns: the handle is dropped,
    kept where nothing removes it, or removed only in code that never runs.
    It is registered once (a check such as `if self._handle is None:` keeps
    it from stacking, which HKL304 reports), so it does not pile up: it
    stays.

    Registrations through the project's own helpers count (a wrapper that
    returns the handle, `model.apply(fn)`, a generator of the caller's
    submodules), as the summaries of those helpers describe them.

    ## Why is this bad?
    The hook was for one call of the library, but it is now part of the
    caller's model: it runs in every later forward (or backward) pass, in
    training, in evaluation and in other libraries' calls; a hook that
    returns a value keeps changing the module's output or gradients; it
    keeps alive everything it references (the explainer, the activations it
    saved); and the library's next call, seeing its guard set, uses a hook
    whose state the previous call left behind.  Nothing the caller holds
    can remove it.

    ## Known problems
    Only functions that run the caller's code after registering are
    reported (a function whose job is to attach a hook, such as
    `attach(model)`, means it to stay).  A handle kept in an attribute is
    taken as removable when any method of the class removes it.  Library
    code only: not tests, notebooks, or modules with an
    `if __name__ == "__main__":` block.

    ## Example
    ```python
    class FeatureExtractor:
        def __init__(self, model):
            self.model = model
            self.handle = None
            self.features = None

        def __call__(self, x):
            if self.handle is None:
                self.handle = self.model.layer4.register_forward_hook(self._save)
            self.model(x)
            return self.features

        def _save(self, module, args, output):
            self.features = output
    ```

    ## Use instead
    ```python
    class FeatureExtractor:
        def __init__(self, model):
            self.model = model
            self.features = None

        def __call__(self, x):
            handle = self.model.layer4.register_forward_hook(self._save)
            try:
                self.model(x)
            finally:
                handle.remove()
            return self.features

        def _save(self, module, args, output):
            self.features = output
    ```

    ## Fix safety
    There is no automatic fix: whether the hook should come off at the end
    of the call (`try`/`finally`) or on an explicit `close()` is the
    library's choice.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook):
      the returned handle's `remove()` is the only way to take the hook off
    """

    code = "HKL307"
    name = "hook-left-on-caller-model"
    summary = "A hook stays on the caller's model after the library call that needed it returned"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # removed before returning
        "def layer_output(model, layer, x):\n"
        "    out = []\n"
        "    h = layer.register_forward_hook(lambda m, i, o: out.append(o))\n"
        "    try:\n"
        "        model(x)\n"
        "    finally:\n"
        "        h.remove()\n"
        "    return out[0]\n",
        # the handle is handed to the caller
        "def attach(model, fn):\n"
        "    return model.register_forward_hook(fn)\n",
        # attaching is the function's job: it runs nothing of the caller's
        "class Probe:\n"
        "    def __init__(self):\n"
        "        self.handle = None\n"
        "    def attach(self, model):\n"
        "        if self.handle is None:\n"
        "            self.handle = model.register_forward_hook(print)\n",
        # kept, and a method removes it
        "class Probe:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "        self.handle = None\n"
        "    def __call__(self, x):\n"
        "        if self.handle is None:\n"
        "            self.handle = self.model.register_forward_hook(print)\n"
        "        return self.model(x)\n"
        "    def close(self):\n"
        "        self.handle.remove()\n",
        # a module the function builds itself
        "import torch.nn as nn\n"
        "def run(x, seen=[]):\n"
        "    net = nn.Linear(2, 2)\n"
        "    if not seen:\n"
        "        net.register_forward_hook(print)\n"
        "    return net(x)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class Saliency:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "        self.handle = None\n"
            "    def explain(self, x):\n"
            "        if self.handle is None:\n"
            "            self.handle = self.model.register_full_backward_hook(self.clamp)  # HKL307\n"
            "        self.model(x).sum().backward()\n"
            "        return x.grad\n"
            "    def clamp(self, m, gi, go):\n"
            "        return (gi[0].clamp(min=0),)\n"
        ),
        Invalid(
            # the only removal follows the `return`
            "def features(model, layer, x):\n"
            "    out = []\n"
            "    if not hasattr(layer, \"_features_hooked\"):\n"
            "        layer._features_hooked = True\n"
            "        h = layer.register_forward_hook(lambda m, i, o: out.append(o))  # HKL307\n"
            "        model(x)\n"
            "        return out\n"
            "        h.remove()\n"
            "    return model(x)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        if is_script(ctx.tree) or is_test_file(ctx.path) or ctx.path.endswith(".ipynb"):
            return
        core = ctx.core
        owners: dict[int, ast.AST] = {}
        for reg in ctx.hooks.registrations:
            owner = core.places.owner(reg.call)
            if isinstance(owner, FunctionNode):
                owners[id(owner)] = owner
        for call in core.relevant_calls():
            owner = core.places.owner(call)
            if isinstance(owner, FunctionNode):
                owners[id(owner)] = owner
        seen: set[int] = set()
        for func in sorted(owners.values(), key=lambda f: (f.lineno, f.col_offset)):
            if function_of(func) is not None or getattr(func, "name", "") in ("__init__", "__post_init__"):
                continue  # a nested function: its caller decides; a constructor sets the object up
            for reg in core.facts(func).regs:
                if reg.site is None or id(reg.site) in seen or not reg.kind:
                    continue
                if reg.guessed or not core.belongs_to_caller(reg.target, func):
                    continue  # only the caller's own modules and parameters
                if not (reg.once or core.once_guarded(reg.site, func)):
                    continue  # it stacks on every call (HKL304's), or a switch decides (not ours to judge)
                kept = self._kept(ctx, func, reg)
                if kept is None:
                    continue
                run = self._runs_after(ctx, func, reg.site)
                if run is None:
                    continue  # the function's job is to attach it: it is meant to stay
                seen.add(id(reg.site))
                yield self._finding(ctx, func, reg, kept, run)

    @staticmethod
    def _kept(ctx: FileContext, func: ast.AST, reg) -> str | None:
        """Why the handle does not come off, or None when it may."""
        handle: str = reg.handle
        if handle == "drop":
            return "its handle is dropped"
        if handle.startswith("dead:"):
            return f"its only removal, at line {handle.partition(':')[2]}, never runs"
        if handle.startswith("nil:"):
            return "the helper that registers it returns None instead of the handle, so nothing can remove it"
        if handle.startswith("at:"):
            place = handle[3:]
            base = place[len(P.ELEMENT):] if place.startswith(P.ELEMENT) else place
            if not base.startswith("s.") or "." in base[2:]:
                return None
            cls = ctx.model.enclosing_class(func)
            if cls is None or ctx.core.handles_released(cls, base[2:]) is not False:
                return None
            return f"its handle is kept in `self.{base[2:]}`, which no method removes"
        return None

    @staticmethod
    def _runs_after(ctx: FileContext, func: ast.AST, site: ast.Call) -> ast.Call | None:
        core = ctx.core
        for stmt in core.cfg(func).statements_between(core.statement(site), []):
            found = core.runs_callers_code(stmt, func)
            if found is not None:
                return found
        return None

    def _finding(self, ctx: FileContext, func: ast.AST, reg, kept: str, run: ast.Call) -> Finding:
        core = ctx.core
        registration = core.registration_of(reg)
        kind = HookKind(reg.kind)
        name = getattr(func, "name", "?")
        cls = ctx.model.enclosing_class(func)
        where = f"{cls.name}.{name}" if cls is not None and getattr(func, "_hl_parent", None) is cls.node else name
        hook = registration.hook if registration is not None else None
        event = "forward" if kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
        if hook is not None and not returns_nothing(hook.node):
            effect = (f"it keeps changing the module's {'output' if kind is HookKind.FORWARD else 'input' if kind is HookKind.FORWARD_PRE else 'gradients'} "
                      f"in every later {event} pass")
        else:
            effect = f"it keeps running in every later {event} pass"
        words = hook_words(registration) if registration is not None else "hook"
        target = registration.describe_target() if registration is not None else f"`{src(reg.site)}`"
        message = (f"{words} registered on {target} by `{where}` stays on the caller's module after `{where}` "
                   f"returns: {kept}.  `{where}` needs it only while `{src(run.func)}(...)` (line {run.lineno}) "
                   f"runs; afterwards {effect}, in training, evaluation and other libraries' calls, and keeps "
                   f"alive what it references; a later call of `{where}` finds it already registered and runs "
                   f"with the state the previous call left in it")
        return self.finding(
            ctx, registration.name_node if registration is not None else reg.site, message, name_only=True,
            help="Remove the hook before returning (`try`/`finally` around the code that needs it), or keep the "
                 "handle where the caller can remove it (a `close()` method, a context manager).",
            related=[Related("the caller's code that needed the hook", ctx.display_path, ctx.span(run)[0])],
        )
