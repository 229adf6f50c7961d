"""HKL704: a module hook Dynamo cannot trace, on a module compiled with fullgraph=True (docs/compile.md)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.compile_regions import Compiled, CompiledCalls, Refs, receiver_views, relation, runs_after
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.untraceable import Untraceable, disabled_by, untraceable_in_hook

_KIND_WORDS = {HookKind.FORWARD: "forward hook", HookKind.FORWARD_PRE: "forward pre-hook"}

HELP = ("Do the flag change outside the compiled code (on the model's input before calling it, or "
        "`requires_grad_()` on the frozen layer's weight), or skip it while compiling when it would be a no-op: "
        "`if torch.compiler.is_compiling() and x.requires_grad: return`.  A hook wrapped in "
        "`torch.compiler.disable` only works without `fullgraph=True` (as a graph break).")


def _fullgraph(compiled: Compiled) -> ast.AST | None:
    """The `fullgraph=True` keyword of the compile that made ``compiled``."""
    by = compiled.compiled_by
    if isinstance(by, ast.Call):
        for keyword in by.keywords:
            if keyword.arg == "fullgraph" and isinstance(keyword.value, ast.Constant) and keyword.value.value is True:
                return keyword
    return None


class UntraceableHookUnderFullgraph(Rule):
    """
    ## What it does
    Reports a forward hook or forward pre-hook that does something
    TorchDynamo cannot put in a graph, registered on a module that runs
    inside code compiled with `torch.compile(..., fullgraph=True)` (the
    model, a function calling it, `model.compile(fullgraph=True)`):

    - it switches on `requires_grad` of a tensor it is handed
      (`args[0].requires_grad_(True)`, `output.requires_grad = True`,
      also through items, attributes and loops over its arguments): the
      `enable_input_require_grads` idiom that makes gradient checkpointing
      work over a frozen embedding;
    - it is wrapped in `torch.compiler.disable` / `torch._dynamo.disable`.

    A hook that tests `torch.compiler.is_compiling()` is taken to handle
    compilation and is not reported for the flag change.  Hooks on the root
    of `torch.compile(model)` (a class of your own) run outside the compiled
    code and are not reported.

    ## Why is this bad?
    Dynamo inlines the hooks of the modules inside the code it traces.  It
    cannot trace a `requires_grad` change on a tensor that does not require
    grad yet, nor call a function that was disabled for it; with
    `fullgraph=True` a graph break is an error, so the first call fails
    (torch 2.13):

    ```text
    torch._dynamo.exc.Unsupported: returning intermediate with requires_grad_()
    torch._dynamo.exc.Unsupported: setattr() on Tensor.requires_grad
    torch._dynamo.exc.Unsupported: Skip calling `torch.compiler.disable()`d function
    ```

    Libraries that catch compile failures fall back to eager for good, so
    the region silently loses the speed-up (unsloth-zoo 2026.8.4, the Gemma
    3N embedder).  On a tensor that already requires grad
    `requires_grad_()` is a no-op and compiles; an assignment to
    `.requires_grad` fails either way.

    ## Known problems
    Only what the file shows is reported: the compile with
    `fullgraph=True` and the registration on a module of the compiled
    model.  A hook put on a module found at run time in a model compiled
    elsewhere is not seen.  Without `fullgraph=True` the same hooks cost a
    graph break each call but work; that is not reported.  The error needs
    the tensor not to require grad already, which the file rarely shows;
    hooks that flip the flag exist for exactly that case.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    def make_inputs_require_grad(module, args, output):
        output.requires_grad_(True)

    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4))
    model[0].weight.requires_grad_(False)
    model[0].register_forward_hook(make_inputs_require_grad)
    compiled = torch.compile(model, fullgraph=True)
    compiled(torch.tensor([1, 2]))
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    def make_inputs_require_grad(module, args, output):
        if torch.compiler.is_compiling() and output.requires_grad:
            return
        output.requires_grad_(True)

    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4))
    model[0].weight.requires_grad_(False)
    model[0].register_forward_hook(make_inputs_require_grad)
    compiled = torch.compile(model)
    compiled(torch.tensor([1, 2]))
    ```

    ## Fix safety
    There is no automatic fix: where the flag change belongs depends on the
    model (the input, the frozen layer, or a compile-aware hook).

    ## References
    - [torch.compiler: fullgraph](https://pytorch.org/docs/stable/generated/torch.compile.html)
    - unsloth-zoo PR 991 (gradient-checkpointing hooks calling `requires_grad_` broke the fullgraph Gemma 3N embedder)
    """

    code = "HKL704"
    name = "untraceable-hook-under-fullgraph"
    summary = "A forward hook Dynamo cannot trace (a requires_grad_ flip, a disabled function) on a module compiled with fullgraph=True"
    severity = Severity.ERROR
    # what the hook does (`requires_grad`, `disable`), and the `fullgraph=True` keyword of a compile call of the
    # file (`_fullgraph`): `\b` leaves out `_can_compile_fullgraph = True`, which 66 transformers files say
    triggers = ("requires_grad", "disable")
    trigger_pattern = r"\bfullgraph(?:[ \t\f\r\n\\]|#[^\r\n]*[\r\n])*="
    VALID: ClassVar[tuple[str, ...]] = (
        # no fullgraph: a graph break, not reported
        "import torch, torch.nn as nn\n"
        "def hook(module, args, output):\n"
        "    output.requires_grad_(True)\n"
        "model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4))\n"
        "model[0].register_forward_hook(hook)\n"
        "compiled = torch.compile(model)\n"
        "compiled(torch.tensor([1]))\n",
        # compile-aware hook
        "import torch, torch.nn as nn\n"
        "def hook(module, args, output):\n"
        "    if torch.compiler.is_compiling() and output.requires_grad:\n"
        "        return\n"
        "    output.requires_grad_(True)\n"
        "model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4))\n"
        "model[0].register_forward_hook(hook)\n"
        "compiled = torch.compile(model, fullgraph=True)\n"
        "compiled(torch.tensor([1]))\n",
        # the hooked module is not part of the compiled model
        "import torch, torch.nn as nn\n"
        "def hook(module, args, output):\n"
        "    output.requires_grad_(True)\n"
        "emb = nn.Embedding(10, 4)\n"
        "head = nn.Linear(4, 4)\n"
        "emb.register_forward_hook(hook)\n"
        "compiled = torch.compile(head, fullgraph=True)\n"
        "compiled(emb(torch.tensor([1])))\n",
        # turning the flag off, and a flag change on the module's weight
        "import torch, torch.nn as nn\n"
        "def hook(module, args, output):\n"
        "    output.requires_grad_(False)\n"
        "model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))\n"
        "model[1].register_forward_pre_hook(lambda m, args: m.weight.requires_grad_(True))\n"
        "model[0].register_forward_hook(hook)\n"
        "compiled = torch.compile(model, fullgraph=True)\n"
        "compiled(torch.rand(1, 4))\n",
        # the root of torch.compile(model), a class of the file: its hooks run outside the compiled code
        "import torch, torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        return self.lin(x)\n"
        "def hook(module, args):\n"
        "    args[0].requires_grad_(True)\n"
        "net = Net()\n"
        "net.register_forward_pre_hook(hook)\n"
        "compiled = torch.compile(net, fullgraph=True)\n"
        "compiled(torch.rand(1, 4))\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "def requires_grad_pre_hook(module, args, kwargs):\n"
            "    for key in ('inputs_embeds', 'hidden_states'):\n"
            "        tensor = kwargs.get(key)\n"
            "        if tensor is not None:\n"
            "            tensor.requires_grad_(True)\n"
            "            return\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.embed = nn.Linear(4, 4)\n"
            "        self.block = nn.Linear(4, 4)\n"
            "    def forward(self, x):\n"
            "        return self.block(hidden_states=self.embed(x))\n"
            "net = Net()\n"
            "net.block.register_forward_pre_hook(requires_grad_pre_hook, with_kwargs=True)  # HKL704\n"
            "step = torch.compile(net, fullgraph=True)\n"
            "step(torch.rand(1, 4))\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "@torch.compiler.disable\n"
            "def log_shapes(module, args, output):\n"
            "    print(output.shape)\n"
            "model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())\n"
            "model[0].register_forward_hook(log_shapes)  # HKL704\n"
            "model.compile(fullgraph=True)\n"
            "model(torch.rand(1, 4))\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        refs = Refs(ctx)
        compiled = [c for c in CompiledCalls(ctx, refs).calls() if _fullgraph(c) is not None]
        if not compiled:
            return
        for reg in ctx.hooks.instances:
            if reg.kind not in _KIND_WORDS or reg.is_global or reg.receiver is None:
                continue
            if reg.hook is not None:
                found = untraceable_in_hook(ctx.model, reg.hook.node, reg.hook.params[1:], reg.hook_expr)
            else:
                wrapper = disabled_by(ctx.model, None, reg.hook_expr)
                found = [Untraceable(wrapper, "disable", ast.unparse(wrapper))] if wrapper is not None else []
            if not found:
                continue
            finding = self._check(ctx, refs, reg, found, compiled)
            if finding is not None:
                yield finding

    def _check(self, ctx: FileContext, refs: Refs, reg: Registration, found: list[Untraceable],
               compiled: list[Compiled]) -> Finding | None:
        for site, _receiver, views in receiver_views(ctx, refs, reg):
            where = site if site is not None else reg.call
            for candidate in compiled:
                order = runs_after(candidate.call, where)
                if order is not None and order.how == "after":
                    continue  # registered after the compiled call ran: it never fires there (HKL701)
                for tree, root_fires in candidate.trees:
                    for view in views:
                        how = relation(view, tree)
                        if how is None or (how == "root" and root_fires and not view.spread):
                            continue
                        return self._finding(ctx, reg, site, found, candidate)
        return None

    def _finding(self, ctx: FileContext, reg: Registration, site: ast.Call | None, found: list[Untraceable],
                 compiled: Compiled) -> Finding:
        kind = _KIND_WORDS[reg.kind]
        hook = f" `{reg.hook.name}`" if reg.hook is not None and reg.hook.name else \
            f" `{ast.unparse(reg.hook_expr)}`" if reg.hook_expr is not None else ""
        first = found[0]
        by_row = ctx.span(compiled.compiled_by)[0].row
        if first.what == "disable":
            does = (f"is wrapped in `{first.text.split('(')[0]}`: dynamo cannot inline it, and with `fullgraph=True` "
                    f"a graph break is an error (`Unsupported: Skip calling torch.compiler.disable()d function`)")
        elif isinstance(first.node, ast.Assign):
            does = (f"does `{first.text}`: dynamo inlines the hook and cannot trace an assignment to "
                    f"`requires_grad`, even one that changes nothing (`Unsupported: setattr() on "
                    f"Tensor.requires_grad`; a graph break without fullgraph)")
        else:
            does = (f"calls `{first.text}`: dynamo inlines the hook and cannot trace a requires_grad change, so "
                    f"when the tensor does not require grad already (a frozen layer's output, the reason such hooks "
                    f"exist) compiling fails (`Unsupported: returning intermediate with requires_grad_()`; a graph "
                    f"break without fullgraph)")
        message = (f"{kind}{hook} on `{reg.receiver_text}`, which runs inside the code compiled with `fullgraph=True` "
                   f"at line {by_row}, {does}")
        related = [Related("compiled with fullgraph=True here", ctx.display_path, ctx.span(compiled.compiled_by)[0]),
                   Related("what dynamo cannot trace", ctx.display_path, ctx.span(first.node)[0])]
        if site is not None:
            related.append(Related("the hook is registered here", ctx.display_path, ctx.span(reg.call)[0]))
            return self.finding(ctx, site, message, help=HELP, related=related)
        return self.finding(ctx, reg.name_node, message, help=HELP, related=related, name_only=True)
