"""HKL703: a forward hook that accumulates state, on a module the checkpoint recompute runs again (docs/compile.md)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.compile_regions import (
    CHECKPOINT_REGION_PATTERN,
    CheckpointRegions,
    Foreign,
    Refs,
    Region,
    foreign_registrations,
    receiver_views,
    runs_again,
    views_relation,
)
from hooklint.static.context import FileContext
from hooklint.static.hook_effects import Effect, accumulating_effects
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.values import src

HELP = ("Make the hook idempotent (key what it stores by module name and overwrite it, `stats[name] = value`), "
        "or skip the recompute: `if torch.is_grad_enabled() and torch._C._current_graph_task_id() != -1: return` "
        "(a forward running inside a backward), or register the hook on a module outside the checkpointed region.")


class StatefulHookUnderCheckpoint(Rule):
    """
    ## What it does
    Reports a forward hook or forward pre-hook whose body accumulates state
    across calls (appends to a list it does not own, `+=` on a counter,
    in-place updates of an outer tensor such as a running mean, writes keyed
    by a growing count) registered on a module inside an
    activation-checkpointed region (`torch.utils.checkpoint.checkpoint`,
    `checkpoint_wrapper`, `checkpoint_sequential`) whose forward the backward
    runs again.

    ## Why is this bad?
    The backward of a checkpointed region recomputes the region's forward, and
    the forward hooks run again with it: a collector stores every activation
    twice per step, a call counter and a running statistic advance twice, a
    pruning or masking schedule moves two steps at a time.  Nothing fails;
    the numbers are just wrong (a running mean updated by a hook: 6 updates
    for 3 steps).

    Under non-reentrant checkpointing (the default of `checkpoint_wrapper`,
    and `checkpoint(..., use_reentrant=False)`) the recompute stops once the
    last saved activation is rebuilt: forward hooks on the checkpointed module
    itself and on its last layer run once, and are not reported; forward
    pre-hooks run before the forward and always run again.  Reentrant
    checkpointing reruns every hook of the region.

    The severity is *warning*: the double call is certain, but whether it
    matters depends on what the state is for (a list of activations consumed
    once per step may be deduplicated downstream).

    ## Known problems
    Where the order of a non-reentrant region's layers cannot be seen (a
    module class from another file), nothing is reported; `hooklint run`
    observes the recompute itself and reports each hook that ran again.
    Side effects in helpers the hook calls are not followed.

    ## Example
    ```python
    import torch
    import torch.nn as nn
    from torch.utils.checkpoint import checkpoint

    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    activations = []
    model[0].register_forward_hook(lambda module, inputs, output: activations.append(output.detach()))
    checkpoint(model, torch.rand(4, 8), use_reentrant=False).sum().backward()
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn
    from torch.utils.checkpoint import checkpoint

    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))
    activations = {}

    def keep(module, inputs, output):
        activations["0"] = output.detach()

    model[0].register_forward_hook(keep)
    checkpoint(model, torch.rand(4, 8), use_reentrant=False).sum().backward()
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`torch.utils.checkpoint`](https://pytorch.org/docs/stable/checkpoint.html)
    - [`set_checkpoint_early_stop`](https://pytorch.org/docs/stable/checkpoint.html)
    """

    code = "HKL703"
    name = "stateful-hook-under-checkpoint"
    summary = "A forward hook that accumulates state runs again in the checkpoint recompute: its state advances twice"
    severity = Severity.WARNING
    origins = (Origin.STATIC, Origin.RUNTIME)
    triggers = ("checkpoint",)
    trigger_pattern = CHECKPOINT_REGION_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # keyed by name, overwritten: running twice does no harm
        "import torch, torch.nn as nn\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
        "stats = {}\n"
        "def keep(m, i, o):\n"
        "    stats['0'] = o.detach()\n"
        "model[0].register_forward_hook(keep)\n"
        "checkpoint(model, torch.rand(1, 2), use_reentrant=False).sum().backward()\n",
        # no checkpointing
        "import torch, torch.nn as nn\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
        "acts = []\n"
        "model[0].register_forward_hook(lambda m, i, o: acts.append(o))\n"
        "model(torch.rand(1, 2)).sum().backward()\n",
        # the checkpointed module itself: its forward hook runs once (non-reentrant stops early)
        "import torch, torch.nn as nn\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
        "acts = []\n"
        "model.register_forward_hook(lambda m, i, o: acts.append(o))\n"
        "checkpoint(model, torch.rand(1, 2), use_reentrant=False).sum().backward()\n",
        # the last layer of a non-reentrant region
        "import torch, torch.nn as nn\n"
        "from torch.utils.checkpoint import checkpoint\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
        "acts = []\n"
        "model[2].register_forward_hook(lambda m, i, o: acts.append(o))\n"
        "checkpoint(model, torch.rand(1, 2), use_reentrant=False).sum().backward()\n",
        # the last segment of checkpoint_sequential is not checkpointed
        "import torch, torch.nn as nn\n"
        "from torch.utils.checkpoint import checkpoint_sequential\n"
        "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 2), nn.Tanh())\n"
        "acts = []\n"
        "model[2].register_forward_hook(lambda m, i, o: acts.append(o))\n"
        "checkpoint_sequential(model, 2, torch.rand(1, 2), use_reentrant=False).sum().backward()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "from torch.utils.checkpoint import checkpoint\n"
            "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
            "acts = []\n"
            "model[0].register_forward_hook(lambda m, i, o: acts.append(o))  # HKL703\n"
            "checkpoint(model, torch.rand(1, 2), use_reentrant=False).sum().backward()\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper\n"
            "class Block(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.attn, self.mlp = nn.Linear(4, 4), nn.Linear(4, 4)\n"
            "    def forward(self, x):\n"
            "        return self.mlp(torch.relu(self.attn(x)))\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.blocks = nn.ModuleList(Block() for _ in range(2))\n"
            "    def forward(self, x):\n"
            "        for block in self.blocks:\n"
            "            x = block(x)\n"
            "        return x\n"
            "net = Net()\n"
            "for i, block in enumerate(net.blocks):\n"
            "    net.blocks[i] = checkpoint_wrapper(block)\n"
            "calls = {'n': 0}\n"
            "def count(m, i, o):\n"
            "    calls['n'] += 1\n"
            "for block in net.blocks:\n"
            "    block.attn.register_forward_hook(count)  # HKL703\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "from torch.utils.checkpoint import checkpoint\n"
            "model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), nn.Linear(2, 1))\n"
            "seen = []\n"
            "model.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape))  # HKL703\n"
            "checkpoint(model, torch.rand(1, 2), use_reentrant=False).sum().backward()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        refs = Refs(ctx)
        regions = CheckpointRegions(ctx, refs).regions()
        if not regions:
            return
        for reg in ctx.hooks.instances:
            if reg.kind not in (HookKind.FORWARD, HookKind.FORWARD_PRE) or reg.hook is None or reg.receiver is None:
                continue
            effects = accumulating_effects(reg.hook.node)
            if not effects:
                continue
            for site, _receiver, views in receiver_views(ctx, refs, reg):
                found = self._in_region(views, reg.kind, regions)
                if found is not None:
                    yield self._finding(ctx, reg, found[0], found[1], effects, site)
                    break

        relevant = lambda views: any(views_relation(views, region) is not None for region in regions)  # noqa: E731
        for foreign in foreign_registrations(ctx, refs, relevant):
            if not foreign.accumulates or foreign.kind not in (HookKind.FORWARD.value, HookKind.FORWARD_PRE.value):
                continue
            found = self._in_region(foreign.views, HookKind(foreign.kind), regions)
            if found is not None:
                yield self._foreign_finding(ctx, foreign, found[0], found[1])

    @staticmethod
    def _in_region(views, kind: HookKind, regions: list[Region]) -> tuple[Region, str] | None:
        for region in regions:
            rel = views_relation(views, region)
            if rel is not None and runs_again(region, rel[0], rel[1], kind is HookKind.FORWARD_PRE):
                return region, rel[0]
        return None

    def _foreign_finding(self, ctx: FileContext, foreign: Foreign, region: Region, how: str) -> Finding:
        kind = "forward pre-hook" if foreign.kind == HookKind.FORWARD_PRE.value else "forward hook"
        inside = "the checkpointed module" if how == "root" else "a module inside the checkpointed region"
        how_text = "reentrant " if region.reentrant else ""
        message = (f"`{foreign.callee}(...)` (in another file) registers a {kind} that accumulates state on "
                   f"`{src(foreign.argument)}` ({inside} of `{region.text}` at line {ctx.span(region.call)[0].row}), "
                   f"and the {how_text}checkpoint's recompute in backward runs it a second time for every forward: "
                   f"what it collects or counts is doubled")
        related = [Related("the checkpointed region", ctx.display_path, ctx.span(region.call)[0])]
        return self.finding(ctx, foreign.site, message, help=HELP, related=related)

    def _finding(self, ctx: FileContext, reg: Registration, region: Region, how: str,
                 effects: list[Effect], site: ast.Call | None) -> Finding:
        kind = "forward pre-hook" if reg.kind is HookKind.FORWARD_PRE else "forward hook"
        hook = f" `{reg.hook.name}`" if reg.hook is not None else ""
        effect = effects[0]
        effect_row = ctx.span(effect.node)[0].row
        region_row = ctx.span(region.call)[0].row
        inside = "the checkpointed module" if how == "root" else "a module inside the checkpointed region"
        how_text = "reentrant " if region.reentrant else ""
        message = (f"{kind}{hook} on `{reg.receiver_text}` ({inside} of `{region.text}` at line {region_row}) "
                   f"accumulates state ({effect.text} at line {effect_row}), and the {how_text}checkpoint's recompute "
                   f"in backward runs it a second time for every forward: what it collects or counts is doubled")
        related = [Related("the state it accumulates", ctx.display_path, ctx.span(effect.node)[0]),
                   Related("the checkpointed region", ctx.display_path, ctx.span(region.call)[0])]
        where = site
        if where is not None:
            related.append(Related("the hook is registered here", ctx.display_path, ctx.span(reg.call)[0]))
            return self.finding(ctx, where, message, help=HELP, related=related)
        return self.finding(ctx, reg.name_node, message, help=HELP, related=related, name_only=True)
