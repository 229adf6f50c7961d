"""HKL701: a module hook registered after compiled code that contains the module ran (docs/compile.md)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.compile_regions import (
    Compiled,
    CompiledCalls,
    Foreign,
    ModuleRef,
    Refs,
    foreign_registrations,
    is_compiled_handle,
    receiver_views,
    relation,
    runs_after,
)
from hooklint.static.context import FileContext
from hooklint.static.flow import executed_nodes, function_of
from hooklint.static.hooks import Registration
from hooklint.static.values import src

_KIND_WORDS = {
    "forward": "forward hook",
    "forward-pre": "forward pre-hook",
    "backward-legacy": "legacy backward hook",
    "full-backward": "full backward hook",
    "full-backward-pre": "full backward pre-hook",
}

HELP = ("Register the hook before the first compiled call (compiling is lazy: before the first call is enough). "
        "To inspect a compiled model, register a tensor hook instead (`output.register_hook(...)` inside the "
        "model, or a parameter's `register_hook` / `register_post_accumulate_grad_hook`: they fire under "
        "compile), or run the hooked pass on the uncompiled module. `torch._dynamo.reset()` after registering "
        "makes the hook fire, at the cost of recompiling every compiled function of the process.")


def _compiled_again(ctx: FileContext, where: ast.AST, tree: ModuleRef, compiled: list[Compiled]) -> bool:
    """Does compiled code containing ``tree`` run after ``where``: a compiled call
    later (or earlier in the same loop), or a call that is handed a compiled
    handle (``GradCAM(compiled, ...)`` itself, ``explain(compiled, cam)``)?"""
    for candidate in compiled:
        overlaps = any(relation(t, tree) is not None or relation(tree, t) is not None for t, _f in candidate.trees)
        if overlaps and runs_after(where, candidate.call, given_first=True) is not None:
            return True
    function = function_of(where)
    body = function if function is not None else ctx.tree
    for node in executed_nodes(body):
        if not isinstance(node, ast.Call) or (node is not where and runs_after(where, node, given_first=True) is None):
            continue
        if any(is_compiled_handle(ctx, arg) for arg in list(node.args) + [k.value for k in node.keywords]):
            return True
    return False


class HookAfterCompile(Rule):
    """
    ## What it does
    Reports a module hook (forward, forward pre-, full backward or full
    backward pre-hook) registered on a module, or on a submodule of a module,
    after a call that runs `torch.compile`d code containing that module has
    run, when compiled code runs the module again afterwards:
    `cmodel = torch.compile(model)` then `cmodel(x)`, `model.compile()`
    then `model(x)`, or a function decorated with `@torch.compile` that calls
    the model.  A registration later in a loop's body than the compiled call
    counts too: it runs after the compiled call from the loop's second
    iteration on.  A hook registered late but used only with the uncompiled
    module (`model(x)` after `cmodel = torch.compile(model)`) fires, and is
    not reported.  Registrations through a helper are followed, in the same
    file or in another checked file (a Grad-CAM class of a library built
    with `model.layer4[-1]`: reported at that call).

    ## Why is this bad?
    `torch.compile` traces the module's forward, hooks included, the first
    time the compiled code runs, and dynamo does not guard on module hooks
    (`torch._dynamo.config.skip_nnmodule_hook_guards` is True by default).
    The compiled graph is reused as it is: a hook registered afterwards on
    the module or on any submodule never fires, with no error and no
    warning.  A Grad-CAM feature hook captures nothing, a gradient monitor
    added after the first step records nothing.  Hooks registered before the
    first compiled call fire on every call; parameter tensor hooks
    (`param.register_hook`) and post-accumulate-grad hooks fire whenever they
    are registered (they run outside the compiled graph).  A recompilation
    (a new input shape, `torch._dynamo.reset()`) traces the hooks in place at
    that moment, so the late hook may start firing at an unpredictable
    point.

    `torch.compile(model)` of a module whose class is not one of `torch.nn`'s
    runs the root module's own hooks outside the compiled code: a hook on
    `model` itself still fires, and is not reported.  A hook on the root of a
    compiled `nn.Sequential`, or on a model called by a compiled function,
    does not.

    ## Known problems
    The compiled call and the registration (or the call of the helper that
    registers) must be in the same function, in program order; a compiled
    call under a condition the registration is not under is not counted.
    The run-time layer (`hooklint run`, the pytest plugin) reports the same
    problem for hooks registered anywhere, once the compiled code ran
    without calling them.  A second instance of a class another instance of
    which was compiled first reuses that graph and ignores even the hooks
    registered before its own `torch.compile` (docs/compile.md): neither
    layer reports that.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    compiled = torch.compile(model)
    compiled(torch.rand(4, 8))
    features = []
    model[0].register_forward_hook(lambda module, inputs, output: features.append(output))
    compiled(torch.rand(4, 8))
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    features = []
    model[0].register_forward_hook(lambda module, inputs, output: features.append(output))
    compiled = torch.compile(model)
    compiled(torch.rand(4, 8))
    compiled(torch.rand(4, 8))
    ```

    ## Fix safety
    There is no automatic fix: moving the registration before the first
    compiled call changes what the hook sees in between.

    ## References
    - [`torch.compile`](https://pytorch.org/docs/stable/generated/torch.compile.html)
    - [torch.compiler FAQ](https://pytorch.org/docs/stable/torch.compiler_faq.html)
    - `torch._dynamo.config.skip_nnmodule_hook_guards` (torch/_dynamo/config.py)
    """

    code = "HKL701"
    name = "hook-after-compile"
    summary = "A module hook registered after compiled code containing the module ran never fires in that code"
    severity = Severity.ERROR
    origins = (Origin.STATIC, Origin.RUNTIME)
    triggers = ("compile",)
    # `torch.compile(...)`, `@torch.compile`, `model.compile()` / `model.compile(backend=...)`, `from torch import
    # compile`; not `re.compile("...")`, whose first argument is positional
    trigger_pattern = (r"torch\.compile\b|\.compile\(\s*(?:\)|(?:backend|mode|fullgraph|dynamic|options|disable)\s*=)"
                       r"|import[^\n]*\bcompile\b")
    VALID: ClassVar[tuple[str, ...]] = (
        # registered before the first compiled call (compiling is lazy)
        "import torch, torch.nn as nn\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
        "cmodel = torch.compile(model)\n"
        "model[0].register_forward_hook(lambda m, i, o: None)\n"
        "cmodel(torch.rand(1, 2))\n",
        # a tensor hook after compiling fires
        "import torch, torch.nn as nn\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
        "cmodel = torch.compile(model)\n"
        "cmodel(torch.rand(1, 2)).sum().backward()\n"
        "model[0].weight.register_hook(lambda g: g * 2)\n"
        "model[0].weight.register_post_accumulate_grad_hook(lambda p: None)\n",
        # the root of a user-defined class: torch.compile runs its hooks outside the compiled code
        "import torch, torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(2, 2)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
        "model = Net()\n"
        "cmodel = torch.compile(model)\n"
        "cmodel(torch.rand(1, 2))\n"
        "model.register_forward_hook(lambda m, i, o: None)\n",
        # a hook on the compiled wrapper itself runs in its own __call__
        "import torch, torch.nn as nn\n"
        "model = nn.Linear(2, 2)\n"
        "cmodel = torch.compile(model)\n"
        "cmodel(torch.rand(1, 2))\n"
        "cmodel.register_forward_hook(lambda m, i, o: None)\n",
        # another model than the compiled one
        "import torch, torch.nn as nn\n"
        "a, b = nn.Sequential(nn.Linear(2, 2)), nn.Sequential(nn.Linear(2, 2))\n"
        "ca = torch.compile(a)\n"
        "ca(torch.rand(1, 2))\n"
        "b[0].register_forward_hook(lambda m, i, o: None)\n",
        # the compiled call is under a condition the registration is not
        "import torch, torch.nn as nn\n"
        "def main(warmup):\n"
        "    model = nn.Sequential(nn.Linear(2, 2))\n"
        "    cmodel = torch.compile(model)\n"
        "    if warmup:\n"
        "        cmodel(torch.rand(1, 2))\n"
        "    model[0].register_forward_hook(lambda m, i, o: None)\n"
        "    cmodel(torch.rand(1, 2))\n",
        # a compiled function that calls only the encoder: a hook on the decoder is not in it
        "import torch, torch.nn as nn\n"
        "class AE(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.encoder, self.decoder = nn.Linear(2, 2), nn.Linear(2, 2)\n"
        "model = AE()\n"
        "@torch.compile\n"
        "def encode(x):\n"
        "    return model.encoder(x)\n"
        "encode(torch.rand(1, 2))\n"
        "model.decoder.register_forward_hook(lambda m, i, o: None)\n",
        # re.compile is not torch.compile
        "import re, torch.nn as nn\n"
        "model = nn.Sequential(nn.Linear(2, 2))\n"
        "pattern = re.compile('x')\n"
        "pattern.match('x')\n"
        "model[0].register_forward_hook(lambda m, i, o: None)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
            "cmodel = torch.compile(model)\n"
            "cmodel(torch.rand(1, 2))\n"
            "model[0].register_forward_hook(lambda m, i, o: None)  # HKL701\n"
            "cmodel(torch.rand(1, 2))\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
            "model = torch.compile(model, backend='aot_eager')\n"
            "model(torch.rand(1, 2))\n"
            "model.register_forward_hook(lambda m, i, o: None)\n"
            "model[0].register_full_backward_hook(lambda m, gi, go: None)  # HKL701\n"
            "model(torch.rand(1, 2)).sum().backward()\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "def train(model, batches, monitor):\n"
            "    model.compile()\n"
            "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "    for step, (x, y) in enumerate(batches):\n"
            "        loss = (model(x) - y).pow(2).mean()\n"
            "        loss.backward()\n"
            "        optimizer.step()\n"
            "        if step == 1:\n"
            "            for m in model.modules():\n"
            "                m.register_full_backward_hook(monitor)  # HKL701\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
            "@torch.compile(backend='aot_eager')\n"
            "def step(x):\n"
            "    return model(x).sum()\n"
            "for epoch in range(3):\n"
            "    handle = model.register_forward_pre_hook(lambda m, args: None)  # HKL701\n"
            "    step(torch.rand(1, 2)).backward()\n"
            "    handle.remove()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        refs = Refs(ctx)
        compiled = CompiledCalls(ctx, refs).calls()
        if not compiled:
            return
        for reg in ctx.hooks.instances:
            if not reg.kind.is_module or reg.is_global or reg.receiver is None:
                continue
            finding = self._check(ctx, refs, reg, compiled)
            if finding is not None:
                yield finding
        trees = [tree for candidate in compiled for tree, _fires in candidate.trees]
        relevant = lambda views: any(relation(v, tree) is not None for v in views for tree in trees)  # noqa: E731
        for foreign in foreign_registrations(ctx, refs, relevant):
            finding = self._check_foreign(ctx, foreign, compiled)
            if finding is not None:
                yield finding

    def _check_foreign(self, ctx: FileContext, foreign: Foreign, compiled: list[Compiled]) -> Finding | None:
        """A helper of another file registers on what this call gives it (a Grad-CAM class)."""
        target = foreign.views[0]
        found = self._late(ctx, foreign.site, target, compiled)
        if found is None:
            return None
        return self._finding(ctx, None, foreign.site, *found, target, foreign)

    def _check(self, ctx: FileContext, refs: Refs, reg: Registration, compiled: list[Compiled]) -> Finding | None:
        for site, receiver, views in receiver_views(ctx, refs, reg):
            if is_compiled_handle(ctx, receiver) or not views:
                continue  # the OptimizedModule's own hooks run in its __call__, outside the compiled code
            target = views[0]
            where = site if site is not None else reg.call
            found = self._late(ctx, where, target, compiled)
            if found is not None:
                return self._finding(ctx, reg, site, *found, target)
        return None

    @staticmethod
    def _late(ctx: FileContext, where: ast.AST, target: ModuleRef,
              compiled: list[Compiled]) -> tuple[Compiled, str, str] | None:
        """The compiled call that ran before the registration at ``where`` and
        traced ``target``, when compiled code runs the module again afterwards
        (a hook only the uncompiled module runs with is fine)."""
        for candidate in compiled:
            order = runs_after(candidate.call, where)
            if order is None:
                continue
            for tree, root_fires in candidate.trees:
                how = relation(target, tree)
                if how is None or (how == "root" and root_fires and not target.spread):
                    continue
                if _compiled_again(ctx, where, tree, compiled):
                    return candidate, order.how, how
        return None

    def _finding(self, ctx: FileContext, reg: Registration | None, site, compiled: Compiled, order: str,
                 how: str, target: ModuleRef, foreign: Foreign | None = None) -> Finding:
        if reg is not None:
            kind = _KIND_WORDS.get(reg.kind.value, "module hook")
            hook = f" `{reg.hook.name}`" if reg.hook is not None else ""
            receiver_text = reg.receiver_text
        else:
            assert foreign is not None
            kind = _KIND_WORDS.get(foreign.kind, "module hook")
            hook = f" (registered by `{foreign.callee}(...)`, in another file)"
            receiver_text = src(foreign.argument)
        call_row = ctx.span(compiled.call)[0].row
        by_row = ctx.span(compiled.compiled_by)[0].row
        compiled_text = src(compiled.call.func)
        if order == "after":
            when = f"after the compiled call `{compiled_text}(...)` at line {call_row} ran"
        else:
            when = (f"in a loop, before the compiled call `{compiled_text}(...)` at line {call_row}: from the loop's "
                    f"second iteration on it runs after compiled code ran")
        what = {"module": f"`torch.compile(...)` at line {by_row}", "in place": f"`.compile()` at line {by_row}",
                "function": f"the `torch.compile` at line {by_row}"}[compiled.how]
        inside = "" if how == "root" else " (a submodule of the compiled model)" if not target.spread else \
            " (modules inside the compiled model)"
        message = (f"{kind}{hook} is registered on `{receiver_text}`{inside} {when} (compiled by {what}): "
                   f"the compiled code was traced before the hook existed and dynamo does not guard on module hooks "
                   f"(`torch._dynamo.config.skip_nnmodule_hook_guards`), so the hook never fires in the calls that "
                   f"reuse it")
        related = [Related("the compiled call that ran first", ctx.display_path, ctx.span(compiled.call)[0]),
                   Related("compiled here", ctx.display_path, ctx.span(compiled.compiled_by)[0])]
        if site is not None:
            if reg is not None:
                related.append(Related("the hook is registered here", ctx.display_path, ctx.span(reg.call)[0]))
            return self.finding(ctx, site, message, help=HELP, related=related)
        assert reg is not None
        return self.finding(ctx, reg.name_node, message, help=HELP, related=related, name_only=True)
