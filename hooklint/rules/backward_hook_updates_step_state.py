"""HKL343: a backward-time hook changes state its module's forward reads, once
per backward pass (once per micro-batch)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.accumulation import accumulations, nearest
from hooklint.static.context import FileContext
from hooklint.static.describe import MODULE_BACKWARD_KINDS, describe_registrations, hook_label, registrations_by_hook
from hooklint.static.hooks import HookKind
from hooklint.static.step_state import hook_owner, state_changes, state_read

_KINDS = (HookKind.POST_ACCUMULATE, HookKind.TENSOR, *MODULE_BACKWARD_KINDS)

_HELP = ("If the update is meant once per optimizer step, make it there: in an optimizer step pre-hook "
         "(`optimizer.register_step_pre_hook(...)`) or in the training loop after the last micro-batch; "
         "or gate it in the hook on a flag the loop sets on the last micro-batch.")


class BackwardHookUpdatesStepState(Rule):
    """
    ## What it does
    Reports a backward-time hook (a module's backward hook, a tensor hook or
    a post-accumulate-grad hook) of a module class that changes an attribute
    of the module which the class's `forward` reads: an in-place update of a
    buffer (`self.expert_bias.add_(delta)`), a reset of a statistic that
    forward accumulates (`self.tokens_per_expert.zero_()`), a counter
    (`self.updates += 1`), when the change does not come from the hook's
    own gradient arguments and is not made under a test.

    ## Why is this bad?
    A backward-time hook runs once per backward pass.  Under gradient
    accumulation, or a pipeline schedule that runs several micro-batches
    before the optimizer step, that is once per micro-batch: state meant to
    change once per optimizer step (an auxiliary-loss-free load-balancing
    bias, an EMA, a step counter, statistics gathered over the step) changes
    N times per step, each time from one micro-batch's statistics, and the
    next micro-batch's forward already sees the changed value, so the
    micro-batches of one step run different models.  Nothing fails or warns
    (`tests/behaviour/test_backward_hook_step_state.py` accumulates over four
    micro-batches and counts four updates; the optimizer step pre-hook twin
    counts one).

    ## Known problems
    Whether the project accumulates gradients is usually decided in another
    file (the trainer's configuration), so the rule does not require it; the
    message says so, and names the accumulation when the file shows one.
    Without accumulation (one backward per optimizer step) the hook runs once
    per step and the code is correct: suppress the finding there.  Changes
    computed from the hook's gradient arguments (gradient statistics, which
    accumulate like the gradients) are not reported, nor are changes made
    under a test (`if self.sync_now:`).  An optimizer stepped from a hook
    under visible accumulation is HKL205's case.

    ## Example
    ```python
    import torch
    from torch import nn

    class BalancedRouter(nn.Module):
        def __init__(self, dim, experts):
            super().__init__()
            self.gate = nn.Linear(dim, experts)
            self.register_buffer("bias", torch.zeros(experts))
            self.register_buffer("load", torch.zeros(experts))
            self.register_full_backward_hook(self._rebalance)

        def _rebalance(self, module, grad_input, grad_output):
            with torch.no_grad():
                self.bias.add_(0.01 * torch.sign(self.load.mean() - self.load))
                self.load.zero_()

        def forward(self, x):
            choice = (self.gate(x) + self.bias).argmax(-1)
            self.load += torch.bincount(choice, minlength=self.load.numel()).float()
            return self.gate(x)
    ```

    ## Use instead
    ```python
    import torch
    from torch import nn

    class BalancedRouter(nn.Module):
        def __init__(self, dim, experts):
            super().__init__()
            self.gate = nn.Linear(dim, experts)
            self.register_buffer("bias", torch.zeros(experts))
            self.register_buffer("load", torch.zeros(experts))

        def rebalance(self):
            with torch.no_grad():
                self.bias.add_(0.01 * torch.sign(self.load.mean() - self.load))
                self.load.zero_()

        def forward(self, x):
            choice = (self.gate(x) + self.bias).argmax(-1)
            self.load += torch.bincount(choice, minlength=self.load.numel()).float()
            return self.gate(x)

    # once per optimizer step, after the last micro-batch's backward:
    # optimizer.register_step_pre_hook(lambda opt, args, kwargs: router.rebalance())
    ```

    ## Fix safety
    There is no automatic fix: where the step boundary is known (an
    optimizer hook, the trainer) is the project's choice.

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [`Optimizer.register_step_pre_hook`](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.register_step_pre_hook.html)
    """

    code = "HKL343"
    name = "backward-hook-updates-step-state"
    summary = ("A backward-time hook changes module state that forward reads, once per backward pass (once per "
               "micro-batch under gradient accumulation)")
    severity = Severity.WARNING
    triggers = ("backward_hook", "backward_pre_hook", "register_hook", "register_post_accumulate_grad_hook")
    trigger_pattern = (r"\.(?:add_|sub_|mul_|div_|copy_|zero_|fill_|lerp_|clamp_|addcmul_|addcdiv_|neg_|sign_|"
                       r"exp_|sqrt_|clamp_min_|clamp_max_|masked_fill_|index_add_|scatter_add_|uniform_|normal_)\("
                       r"|(?<![\w.])\w+\.\w+[ \t]*(?:[-+*/]=|=[ \t]*\d)")
    VALID: ClassVar[tuple[str, ...]] = (
        # the hook collects gradient statistics: they accumulate like the gradients
        "import torch\n"
        "class Probe(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "        self.register_buffer('grad_sq', torch.zeros(4))\n"
        "        self.register_full_backward_hook(self._collect)\n"
        "    def _collect(self, module, grad_input, grad_output):\n"
        "        self.grad_sq.add_(grad_output[0].pow(2).sum(0))\n"
        "    def forward(self, x):\n"
        "        return self.lin(x) * (1 + self.grad_sq.mean())\n",
        # state that forward never reads: a record for the caller
        "import torch\n"
        "class Counted(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "        self.backward_calls = 0\n"
        "        self.register_full_backward_hook(self._count)\n"
        "    def _count(self, module, grad_input, grad_output):\n"
        "        self.backward_calls += 1\n"
        "    def forward(self, x):\n"
        "        return self.lin(x)\n",
        # the hook updates only on the last micro-batch (a flag the loop sets)
        "import torch\n"
        "class Gated(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "        self.register_buffer('bias', torch.zeros(4))\n"
        "        self.last_micro_batch = False\n"
        "        self.register_full_backward_hook(self._update)\n"
        "    def _update(self, module, grad_input, grad_output):\n"
        "        if self.last_micro_batch:\n"
        "            self.bias.add_(0.1)\n"
        "    def forward(self, x):\n"
        "        return self.lin(x) + self.bias\n",
        # forward only tests the buffer against None and overwrites it: nothing it computes depends on the value
        "import torch\n"
        "class Bucketed(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "        self.buffer = torch.zeros(4)\n"
        "        self.lin.weight.register_hook(self._scale)\n"
        "    def _scale(self, grad):\n"
        "        self.buffer.div_(2)\n"
        "    def forward(self, x):\n"
        "        if self.buffer is not None:\n"
        "            self.buffer.zero_()\n"
        "        return self.lin(x)\n",
        # a forward hook runs once per forward: another question
        "import torch\n"
        "class Fwd(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(4, 4)\n"
        "        self.register_buffer('bias', torch.zeros(4))\n"
        "        self.register_forward_hook(self._update)\n"
        "    def _update(self, module, args, out):\n"
        "        self.bias.add_(0.1)\n"
        "    def forward(self, x):\n"
        "        return self.lin(x) + self.bias\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Router(torch.nn.Module):\n"
            "    def __init__(self, n):\n"
            "        super().__init__()\n"
            "        self.gate = torch.nn.Linear(4, n)\n"
            "        self.register_buffer('bias', torch.zeros(n))\n"
            "        self.register_buffer('counts', torch.zeros(n))\n"
            "        self.register_full_backward_hook(self._rebalance)\n"
            "    def _rebalance(self, *_):\n"
            "        self.bias.add_(0.001 * torch.sign(self.counts.mean() - self.counts))  # HKL343\n"
            "        self.counts.zero_()  # HKL343\n"
            "    def forward(self, x):\n"
            "        scores = self.gate(x) + self.bias\n"
            "        self.counts += torch.bincount(scores.argmax(-1), minlength=self.counts.numel()).float()\n"
            "        return scores\n"
        ),
        # a tensor hook on the module's weight, the update two helpers deep
        Invalid(
            "import torch\n"
            "class Scaled(torch.nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.weight = torch.nn.Parameter(torch.ones(4))\n"
            "        self.scale = torch.ones(())\n"
            "        self.weight.register_hook(lambda g: self._decay())\n"
            "    def _decay(self):\n"
            "        self._apply_decay()\n"
            "    def _apply_decay(self):\n"
            "        self.scale.mul_(0.99)  # HKL343\n"
            "    def forward(self, x):\n"
            "        return x * self.weight * self.scale\n"
        ),
        # a module-level function registered by the class on itself: its module argument is the object
        Invalid(
            "import torch\n"
            "def _tick(mod, grad_in, grad_out):\n"
            "    mod.steps += 1  # HKL343\n"
            "class Warmup(torch.nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.lin = torch.nn.Linear(4, 4)\n"
            "        self.steps = 0\n"
            "        self.register_full_backward_hook(_tick)\n"
            "    def forward(self, x):\n"
            "        return self.lin(x) * min(1.0, self.steps / 100)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        hooks = registrations_by_hook(ctx, _KINDS)
        found_accumulation = None
        reported: set[int] = set()
        for func, regs in hooks.items():
            reg = regs[0]
            located = hook_owner(ctx.model, func, reg.receiver, reg.kind.is_module_backward)
            if located is None:
                continue
            owner, names = located
            changes = state_changes(ctx.model, owner, func, names)
            if not changes:
                continue
            for change in changes:
                found = state_read(ctx.model, owner, change.attr)
                if found is None or id(change.node) in reported:
                    continue
                reader, read = found
                reported.add(id(change.node))
                if found_accumulation is None:
                    found_accumulation = accumulations(ctx.model, ctx.tree)
                if found_accumulation:
                    where = nearest(found_accumulation, ctx.model, func, reg.call)
                    accumulation = (f"this file accumulates gradients (line {where.node.lineno}: {where.text}), "
                                    f"so it runs once per micro-batch")
                else:
                    accumulation = ("under gradient accumulation or a pipeline schedule's micro-batches it runs once "
                                    "per micro-batch (hooklint does not see whether this project accumulates; "
                                    "without accumulation this is correct)")
                what = "resets" if change.reset else "changes"
                yield self.finding(
                    ctx, change.node,
                    f"`{hook_label(reg)}` ({describe_registrations(regs)}) {what} `{owner.name}.{change.attr}` "
                    f"with {change.how}, which `{reader.name}.forward` reads (line {read.lineno}): the hook runs "
                    f"once per backward pass, and {accumulation}: state meant to change once per optimizer step "
                    f"would change on every micro-batch, and the next micro-batch's forward would see it changed",
                    help=_HELP,
                    related=[Related(f"registered as {describe_registrations(regs[:1])}", ctx.display_path,
                                     ctx.span(reg.call)[0]),
                             Related(f"`forward` reads `{change.attr}` here", ctx.display_path, ctx.span(read)[0])],
                )
