"""HKL308: hooks on the caller's module removed only when the caller's code does not raise."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.core import places as P
from hooklint.static.flow import function_of
from hooklint.static.handles import is_script, is_test_file
from hooklint.static.hook_targets import hook_words
from hooklint.static.hooks import REGISTRATION_TRIGGERS, HookKind
from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import walk_tree
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
        # the registration runs only under a flag the class's constructor chain fixes to False
        "class Base:\n"
        "    def __init__(self, record=False):\n"
        "        self.hs = []\n"
        "        self.record = record\n"
        "    def on(self, m):\n"
        "        if self.record:\n"
        "            self.hs.append(m.register_forward_hook(print))\n"
        "    def off(self):\n"
        "        for h in self.hs:\n"
        "            h.remove()\n"
        "class Quiet(Base):\n"
        "    def __init__(self):\n"
        "        Base.__init__(self, False)\n"
        "    def run(self, model, x):\n"
        "        self.on(model)\n"
        "        model(x)\n"
        "        self.off()\n",
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
        guards = ctx.summarizer.guards
        for func in sorted(owners.values(), key=lambda f: (f.lineno, f.col_offset)):
            if function_of(func) is not None:
                continue  # a nested function: its own caller decides
            found: dict[int, tuple[ast.AST, ast.Call, list]] = {}
            cfg = core.cfg(func)
            for reg in core.facts(func).regs:
                if not reg.kind or not HookKind(reg.kind).is_module or not self._outlives(ctx, reg, func):
                    continue  # a module the function builds dies with it
                if self._removed_by_callee(ctx, reg):
                    continue  # the helper takes its hooks off before it returns: none is left to lose
                removals = core.removals_after(func, reg)
                if not removals or reg.site is None:
                    continue
                start = core.statement(reg.site)
                # only removals that can follow the registration (one before it takes off the last call's hooks)
                removals = [(p, n) for p, n in removals if cfg.some_path_reaches(start, p)]
                if not removals:
                    continue
                points = [point for point, _node in removals]
                for stmt in cfg.statements_between(start, points):
                    risky = core.runs_callers_code(stmt, func)
                    if risky is None:
                        continue
                    if cfg.exception_escapes(stmt, points):
                        # name the removal the call's normal return leads to, not a handler's for other calls
                        normal = [n for p, n in removals if cfg.some_path_reaches(stmt, p, exceptional=False)]
                        node = min(normal or [n for _p, n in removals], key=lambda n: (n.lineno, n.col_offset))
                        entry = found.setdefault(id(node), (node, risky, []))
                        entry[2].append(reg)
                    break
            for node, risky, regs in sorted(found.values(), key=lambda e: (e[0].lineno, e[0].col_offset)):
                yield self._finding(ctx, func, node, risky, regs, guards)

    @staticmethod
    def _removed_by_callee(ctx: FileContext, reg) -> bool:
        """A registration through a helper of this file (``reg.chain``) that
        keeps the handle and removes it itself on every normal path before it
        returns (auto-round's ``cache_inter_data``: ``_replace_forward()``,
        calibrate, ``_recover_forward()``): when the call returns, the hooks
        are gone, so a later call that raises leaves nothing on the module."""
        if not reg.chain or not reg.handle.startswith("at:"):
            return False
        name, path, line = reg.chain[0]
        if path and path != ctx.display_path:
            return False
        short = name.rsplit(".", 1)[-1]
        callee = _function_at(ctx.tree, short, line)
        if callee is None:
            return False
        core = ctx.core
        inner = [r for r in core.facts(callee).regs
                 if r.line == reg.line and r.path == reg.path and r.kind == reg.kind and r.site is not None]
        if not inner:
            return False
        cfg = core.cfg(callee)
        for r in inner:
            removals = core.removals_after(callee, r)
            if not removals:
                return False
            if not cfg.every_path_passes(core.statement(r.site), [p for p, _n in removals]):
                return False
        return True

    @staticmethod
    def _outlives(ctx: FileContext, reg, func: ast.AST) -> bool:
        """Is the hooked module the caller's (a parameter, an object the instance
        keeps, a part of them), not one the function builds?  Where the summary
        cannot name it (``rgetattr(self.model, name)``), it is the caller's
        when it is the same object on every call with the same arguments."""
        if P.is_callers(reg.target):
            return True  # a parameter, an object the instance keeps (its own hook points too): it outlives the call
        if reg.target != P.UNKNOWN or reg.target_expr is None or reg.site is None:
            return False
        unit = ctx.core.places.owner(reg.site)
        if unit is None:
            return False
        return ctx.summarizer.dependence.of(reg.target_expr, unit) is not None \
            or ctx.core.looked_up_in_callers(reg.target_expr, unit) is not None

    def _finding(self, ctx: FileContext, func: ast.AST, node: ast.AST, risky: ast.Call, regs: list,
                 guards) -> Finding:
        core = ctx.core
        registrations = [r for r in (core.registration_of(reg) for reg in regs) if r is not None]
        first = registrations[0]
        hooks = " and ".join(sorted({hook_words(r) for r in registrations}))
        # a registration under a once-guard (`if self.handle is None:`) is not made again by a retry
        stacks = not any(guards.guarded(reg.site, func) for reg in regs)
        message = (f"`{src(node)}` removes the {hooks} registered on {first.describe_target()} (line "
                   f"{first.call.lineno}) only when `{src(risky.func)}(...)` at line {risky.lineno} returns: "
                   f"no `finally` (or handler) removes them when it raises, so the hooks stay on that module, "
                   f"which outlives the call, and keep running in its later forward and backward passes"
                   + (", and every retry adds more" if stacks else
                      " (a retry does not register them again, but they run until one succeeds)"))
        return self.finding(
            ctx, node, message,
            help="Remove the hooks in a `finally:` block (or a `with` block whose `__exit__` removes them).",
            related=[Related("the hook is registered here", ctx.display_path, ctx.span(r.call)[0])
                     for r in registrations[:3]]
            + [Related("this call can raise", ctx.display_path, ctx.span(risky)[0])],
        )


def _function_at(tree: ast.Module, name: str, line: int) -> ast.AST | None:
    """The def named ``name`` at ``line`` (the summaries name a callee by both)."""
    cache = getattr(tree, "_hl_defs_by_line", None)
    if cache is None:
        cache = {(node.name, node.lineno): node for node in walk_tree(tree) if isinstance(node, FunctionNode)}
        tree._hl_defs_by_line = cache  # type: ignore[attr-defined]
    return cache.get((name, line))
