"""HKL306: a hook registered once and removed in a method that runs again (hook-lifetime.md)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Location, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.callgraph import SELF, is_step_method
from hooklint.static.context import FileContext
from hooklint.static.handles import Removal, destination
from hooklint.static.hooks import REGISTRATION_TRIGGERS, HookKind, Registration
from hooklint.static.semantic import ClassInfo

# Words in the name of a method whose job is to take hooks off (`remove_hooks`,
# `close`, `__exit__`, `releaseAll`): a whole part of a snake_case name, or its start.
_CLEANUP_WORDS = frozenset({
    "remove", "release", "close", "detach", "clean", "cleanup", "clear", "reset", "unregister", "unhook",
    "teardown", "disable", "stop", "finish", "finalize", "deactivate", "dispose", "shutdown", "exit", "del",
    "off", "restore", "free", "destroy", "uninstall", "undo", "end", "done", "unpatch", "delete", "drop",
    # adapters injected by hooks (peft's `unload()`, `merge_and_unload()`): merged weights replace the hooks
    "unload", "unmerge", "merge",
})
_CLEANUP_PREFIXES = ("remove", "release", "close", "detach", "clean", "clear", "reset", "unregister", "unhook",
                     "teardown", "disable", "stop", "deactivate", "dispose", "destroy", "uninstall")
_SETUP_METHODS = ("__init__", "__post_init__")
_KIND_WORDS = {
    HookKind.FORWARD: "forward hook",
    HookKind.FORWARD_PRE: "forward pre-hook",
    HookKind.BACKWARD_LEGACY: "legacy backward hook",
    HookKind.FULL_BACKWARD: "full backward hook",
    HookKind.FULL_BACKWARD_PRE: "full backward pre-hook",
    HookKind.TENSOR: "tensor hook",
    HookKind.POST_ACCUMULATE: "post-accumulate-grad hook",
}


class HookRemovedWhileNeeded(Rule):
    """
    ## What it does
    Reports the `remove()` of a hook that a class registers once, in
    `__init__` (or in a method only `__init__` calls), when the removal is in
    a method that runs again: a module's `forward`, `__call__`, or a public
    method that is not a cleanup method (`close`, `remove_hooks`,
    `__exit__`, an adapter's `unload`...).  The removal may go through a
    helper (`self._remove_hooks()`, a helper of another object or another
    checked file): the function summaries of hooklint.static.core pair it
    with the handles it removes, and the finding is at the helper's call in
    the method that runs again.  Telling cleanup methods by their name is
    the last resort, said as such here.

    ## Why is this bad?
    A removed hook is gone for good.  The first call of the method runs with
    the hook and takes it off; every later call runs without it, with no
    error: an explainer returns the activations its hook saved during the
    first call, a wrapper stops scaling gradients after the first step.  A
    tensor hook on a parameter that `forward` removes never fires at all:
    tensor hooks are looked up when backward runs, after `forward` returned.

    ## Known problems
    A hook that removes itself when it runs (a lazy layer's initialising
    pre-hook calling `self._hook.remove()`, directly or through a helper;
    a hook object deleting its own entry from the module's hook dict) is a
    one-shot hook on purpose and is not reported.
    A removal under a condition (`if self.step == last:`) is not reported,
    nor one in a class that registers the hook again elsewhere (an
    `attach()` method, or the same method).  A public method that nothing in
    the checked files calls twice is reported as a *warning*: a class used
    once per instance never calls it again.

    ## Example
    ```python
    import torch.nn as nn

    class SaveFeatures(nn.Module):
        def __init__(self, model: nn.Module):
            super().__init__()
            self.model = model
            self.features = None
            self.handle = model.layer4.register_forward_hook(self.save)

        def save(self, module, inputs, output):
            self.features = output

        def forward(self, x):
            out = self.model(x)
            self.handle.remove()
            return out, self.features
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class SaveFeatures(nn.Module):
        def __init__(self, model: nn.Module):
            super().__init__()
            self.model = model
            self.features = None
            self.handle = model.layer4.register_forward_hook(self.save)

        def save(self, module, inputs, output):
            self.features = output

        def forward(self, x):
            out = self.model(x)
            return out, self.features

        def close(self):
            self.handle.remove()
    ```

    ## Fix safety
    There is no automatic fix: whether the hook belongs to the object's
    lifetime (remove it in a cleanup method) or to one call (register it in
    that call, remove it in a `finally`) depends on the class.

    ## References
    - [`torch.utils.hooks.RemovableHandle`](https://github.com/pytorch/pytorch/blob/main/torch/utils/hooks.py):
      `remove()` deletes the hook from the module's dictionary of hooks
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    """

    code = "HKL306"
    name = "hook-removed-while-needed"
    summary = "A hook registered once is removed in a method that runs again: later calls run without it"
    severity = Severity.ERROR
    triggers = REGISTRATION_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # removed in a cleanup method
        "class Probe:\n"
        "    def __init__(self, layer):\n"
        "        self.handle = layer.register_forward_hook(self.save)\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n"
        "    def close(self):\n"
        "        self.handle.remove()\n",
        # registered again by the method that removes it (a refresh)
        "class Probe:\n"
        "    def __init__(self, layer):\n"
        "        self.layer = layer\n"
        "        self.handle = layer.register_forward_hook(self.save)\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n"
        "    def refresh(self):\n"
        "        self.handle.remove()\n"
        "        self.handle = self.layer.register_forward_hook(self.save)\n",
        # removed once, on a condition
        "import torch.nn as nn\n"
        "class Warmup(nn.Module):\n"
        "    def __init__(self, model):\n"
        "        super().__init__()\n"
        "        self.model, self.steps = model, 0\n"
        "        self.handle = model.register_forward_hook(lambda m, i, o: o * 0.1)\n"
        "    def forward(self, x):\n"
        "        self.steps += 1\n"
        "        if self.steps == 100:\n"
        "            self.handle.remove()\n"
        "        return self.model(x)\n",
        # registered per call and removed in the same call
        "class Explainer:\n"
        "    def __init__(self, model, layer):\n"
        "        self.model, self.layer = model, layer\n"
        "    def __call__(self, x):\n"
        "        handle = self.layer.register_forward_hook(self.save)\n"
        "        try:\n"
        "            return self.model(x)\n"
        "        finally:\n"
        "            handle.remove()\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n",
        # a lazy initialiser: the pre-hook removes itself once it has run
        "import torch.nn as nn\n"
        "class LazyLinear(nn.Module):\n"
        "    def __init__(self, out_features):\n"
        "        super().__init__()\n"
        "        self.out_features = out_features\n"
        "        self.weight = nn.parameter.UninitializedParameter()\n"
        "        self._hook = self.register_forward_pre_hook(self.initialize_parameters)\n"
        "    def initialize_parameters(self, module, args):\n"
        "        self.weight.materialize((self.out_features, args[0].shape[-1]))\n"
        "        self._hook.remove()\n"
        "    def forward(self, x):\n"
        "        return x @ self.weight.t()\n",
        # a private helper called from the cleanup method
        "class Probe:\n"
        "    def __init__(self, layer):\n"
        "        self.handles = [layer.register_forward_hook(self.save)]\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n"
        "    def _drop(self):\n"
        "        for h in self.handles:\n"
        "            h.remove()\n"
        "    def __exit__(self, *exc):\n"
        "        self._drop()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class Wrapper(nn.Module):\n"
            "    def __init__(self, model):\n"
            "        super().__init__()\n"
            "        self.model = model\n"
            "        self.handles = [m.register_forward_hook(self.record) for m in model.children()]\n"
            "    def record(self, m, i, o):\n"
            "        pass\n"
            "    def forward(self, x):\n"
            "        out = self.model(x)\n"
            "        for h in self.handles:\n"
            "            h.remove()  # HKL306\n"
            "        return out\n"
        ),
        Invalid(
            "class GradCAM:\n"
            "    def __init__(self, model, layer):\n"
            "        self.model = model\n"
            "        self.fwd = layer.register_forward_hook(self.save_activation)\n"
            "        self.bwd = layer.register_full_backward_hook(self.save_gradient)\n"
            "    def save_activation(self, m, i, o):\n"
            "        self.activation = o\n"
            "    def save_gradient(self, m, gi, go):\n"
            "        self.gradient = go[0]\n"
            "    def __call__(self, x):\n"
            "        self.model(x).max().backward()\n"
            "        self.fwd.remove()  # HKL306\n"
            "        self.bwd.remove()  # HKL306\n"
            "        return self.activation * self.gradient\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        by_removal: dict[int, tuple[Removal, ClassInfo, str, tuple[ast.AST, str, bool], list[Registration]]] = {}
        kept = [(reg, dest) for reg, dest in ((r, destination(ctx, r)) for r in ctx.hooks.registrations)
                if dest.kind in ("attribute", "container") and dest.owner is not None and dest.attr is not None]
        stored_by: dict[tuple[int, str], list[ast.AST | None]] = {}
        for _reg, dest in kept:
            stored_by.setdefault((id(dest.owner), dest.attr), []).append(dest.method)  # type: ignore[arg-type]
        for reg, dest in kept:
            if not self._registered_once(ctx, dest.owner, dest.method):  # type: ignore[arg-type]
                continue
            if ctx.core.hook_removes_itself(reg) is not None:
                continue  # a one-shot hook (a lazy initialiser) taking itself off: its removal is its purpose
            if any(method is not dest.method for method in stored_by[(id(dest.owner), dest.attr)]):  # type: ignore[index]
                continue  # another method stores a new handle there: registered again on demand
            for removal in _removals(ctx, dest.owner, dest.attr):
                if removal.conditional or removal.method is dest.method:
                    continue
                key = id(removal.call)
                if key not in by_removal:
                    runner = self._runs_again(ctx, dest.owner, removal.method)
                    if runner is None:
                        continue
                    by_removal[key] = (removal, dest.owner, dest.attr, runner, [])
                by_removal[key][4].append(reg)
        for removal, cls, attr, runner, regs in sorted(by_removal.values(), key=lambda e: e[0].call.lineno):
            yield self._finding(ctx, regs, cls, attr, removal, *runner)

    @staticmethod
    def _registered_once(ctx: FileContext, cls: ClassInfo, method: ast.AST | None) -> bool:
        name = getattr(method, "name", "")
        if name in _SETUP_METHODS:
            return True
        qual = ctx.qualname(method) if method is not None else None
        if qual is None:
            return False
        callers = ctx.project.local_callers(qual)
        owner = ctx.qualname(cls.node)
        return bool(callers) and all(c in (f"{owner}.__init__", f"{owner}.__post_init__") for c in callers)

    def _runs_again(self, ctx: FileContext, cls: ClassInfo, method: ast.AST,
                    depth: int = 0) -> tuple[ast.AST, str, bool] | None:
        """(the method that runs again, why, proven) for the method holding a removal."""
        name = getattr(method, "name", "")
        qual = ctx.qualname(method)
        if qual is None or name in _SETUP_METHODS:
            return None
        if name.startswith("_") and name != "__call__":
            # a helper: what matters is who calls it
            if depth > 2:
                return None
            for caller in ctx.project.local_callers(qual):
                caller_node = _method_node(cls, caller)
                if caller_node is not None:
                    found = self._runs_again(ctx, cls, caller_node, depth + 1)
                    if found is not None:
                        return found
            return None
        if _is_cleanup(name):
            return None
        if is_step_method(ctx.model, method):
            return method, f"torch calls `{cls.name}.{name}` on every step", True
        reason = ctx.project.first_reason(qual, {SELF})
        if reason is not None and reason.proven:
            return method, reason.describe(ctx.display_path), True
        what = "`__call__`" if name == "__call__" else "a public method"
        return method, (f"{what} of `{cls.name}`, so it can be called again; nothing in the checked files "
                        f"shows a second call, so this is reported as a warning"), False

    def _finding(self, ctx: FileContext, regs: list[Registration], cls: ClassInfo, attr: str, removal: Removal,
                 runner: ast.AST, why: str, proven: bool) -> Finding:
        first = regs[0]
        hooks = " and ".join(f"{_KIND_WORDS[r.kind]}" + (f" `{r.hook.name}`" if r.hook is not None else "")
                             for r in regs[:3])
        registered_in = getattr(_enclosing_method(first.call), "name", "__init__")
        runner_name = f"{cls.name}.{getattr(runner, 'name', '?')}"
        holder = getattr(removal.method, "name", "?")
        if all(r.kind.is_tensor for r in regs):
            effect = ("it never fires: tensor hooks are looked up when backward runs, after this method "
                      "returned" if is_step_method(ctx.model, runner) else "after the first call it is gone")
        elif any(r.kind.is_module_backward for r in regs):
            effect = "every later call runs without them (a backward hook still fires for the first call's " \
                     "graph: the forward bound it)"
        else:
            effect = "every later call runs without " + ("them" if len(regs) > 1 else "it")
        lines = ", ".join(str(r.call.lineno) for r in regs[:3])
        message = (f"`{_removal_text(removal)}` in `{cls.name}.{holder}` removes the {hooks} that `{registered_in}` "
                   f"registered once on `{first.receiver_text}` (line{'s' if len(regs) > 1 else ''} {lines}, kept in "
                   f"`self.{attr}`), and `{runner_name}` runs again ({why}): {effect}")
        finding = self.finding(
            ctx, removal.call, message,
            help="Remove the hook where the object is done with (a `close()` or `__exit__` method), or register "
                 "it in the call that removes it (register first, `remove()` in a `finally`).",
            related=[Related("the hook is registered here, once", ctx.display_path, ctx.span(r.call)[0])
                     for r in regs[:3]]
            + ([] if runner is removal.method else
               [Related("the method that runs again", ctx.display_path, Location(runner.lineno, 1))]),
        )
        return finding if proven else finding.with_changes(severity=Severity.WARNING)


def _removals(ctx: FileContext, cls: ClassInfo, attr: str) -> list[Removal]:
    """The removals of the handles kept in ``self.<attr>``: direct ones, and
    calls of helpers whose summary removes them (``self._remove_hooks()``,
    ``self.point.reset_hooks()``), where they are called.  A private helper's
    own ``remove()`` is named at its callers' calls instead."""
    out = []
    core = ctx.core
    for method, removal in core.removals_of(cls, attr):
        node = removal.node
        if not isinstance(node, ast.Call):
            continue
        name = getattr(method, "name", "")
        if not removal.chain and name.startswith("_") and not name.startswith("__") and \
                ctx.project.local_callers(ctx.qualname(method) or ""):
            continue  # a helper: reported at the call that runs it
        out.append(Removal(node, method, _conditional(node, method)))
    return out


def _conditional(node: ast.AST, method: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not method:
        if isinstance(cur, (ast.If, ast.IfExp, ast.ExceptHandler, ast.While)):
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def _is_cleanup(name: str) -> bool:
    lowered = name.lower().strip("_")
    return any(part in _CLEANUP_WORDS for part in lowered.split("_")) or lowered.startswith(_CLEANUP_PREFIXES)


def _method_node(cls: ClassInfo, qual: str) -> ast.AST | None:
    name = qual.rpartition(".")[2]
    owner = qual.rpartition(".")[0].rpartition(".")[2]
    return cls.methods.get(name) if owner == cls.name else None


def _enclosing_method(node: ast.AST) -> ast.AST | None:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
        cur = getattr(cur, "_hl_parent", None)
    return cur


def _removal_text(removal: Removal) -> str:
    try:
        text = ast.unparse(removal.call)
    except Exception:  # noqa: BLE001 - odd trees must not crash a rule
        return "remove()"
    return text if len(text) <= 50 else "..." + text[-47:]
