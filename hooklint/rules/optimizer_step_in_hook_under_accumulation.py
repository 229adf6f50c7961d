"""HKL205: a hook steps the optimizer while the training loop accumulates
gradients over micro-batches."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.accumulation import accumulations, gating_reads, hook_updates, nearest, refuses_accumulation
from hooklint.static.context import FileContext
from hooklint.static.describe import MODULE_BACKWARD_KINDS, describe_registrations, hook_label, registrations_by_hook
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind

_KINDS = (HookKind.POST_ACCUMULATE, HookKind.TENSOR, *MODULE_BACKWARD_KINDS)

_HELP = ("Step in the hook only after the last micro-batch's backward: set a flag in the loop "
         "(`step_now = (i + 1) % accum_steps == 0`) and test it in the hook before `step()` and `zero_grad()`; "
         "or do not accumulate (an optimizer in backward frees each gradient as soon as it is used, which "
         "accumulation undoes); or call `optimizer.step()` in the loop after the last backward.")


class OptimizerStepInHookUnderAccumulation(Rule):
    """
    ## What it does
    Reports a hook that updates the parameters (calls `step()` or
    `zero_grad()` of an optimizer, or changes the parameter from its own
    `.grad` in a post-accumulate-grad hook), or advances other state meant
    to move once per optimizer step (a learning-rate scheduler's `step()`,
    an averaged model's `update_parameters()`, an EMA's `update()`), from a
    backward-time hook in a file whose training loop
    accumulates gradients over micro-batches: it calls `backward()` on each
    micro-batch and steps once every N (`if (i + 1) % accum_steps == 0:`, a
    loss divided by `gradient_accumulation_steps`, a DDP `no_sync()`
    context, `accelerator.accumulate(model)`, `accumulate_grad_batches=4`).

    ## Why is this bad?
    A post-accumulate-grad hook (or a parameter's tensor hook, or a module
    backward hook) runs in every backward.  The "optimizer in backward"
    pattern steps a per-parameter optimizer from such a hook and zeroes the
    gradient right away, to free it.  Under gradient accumulation, every
    micro-batch's backward then updates the weights with that micro-batch's
    gradient alone: the loop's N backward passes make N optimizer steps, each
    on a gradient divided by N, instead of one step on their sum.  The
    effective batch is one micro-batch, the learning-rate schedule and the
    optimizer's state (Adam's moments, momentum) advance N times per intended
    step, and nothing fails or warns (`tests/behaviour/test_optimizer_in_hook.py`
    compares the weights with those of the correct accumulated step).

    A scheduler stepped from such a hook advances the learning rate N times
    per optimizer step; a weight average updated there takes N updates per
    step, N-1 of them of unchanged weights.

    A hook that only calls `zero_grad()` erases each micro-batch's gradient
    before the next one is added: no gradient is accumulated at all.
    transformers' Trainer refuses gradient accumulation with its layer-wise
    optimizers, which step from such hooks, for this reason.

    ## Known problems
    Reported when one file shows both the hook and the accumulation.  A hook
    in a library whose training loop is elsewhere is not reported by the
    static pass.  At run time (`hooklint run`), what is certain is reported:
    an optimizer step made from a hook while a parameter's `.grad` still holds
    a gradient an earlier step from a hook already applied (the hook steps on
    every micro-batch and the loop zeroes every N); a hook that steps and
    zeroes on every micro-batch looks at run time like the pattern without
    accumulation, and is left to the static pass.  Not reported when the step in
    the hook depends on a flag or count (`if sync_now:`, `if self.micro_step
    % n == 0:`), nor when the file refuses the combination (`if optim_in_bwd
    and grad_accum > 1: raise ...`).  The optimizer is recognised by its
    construction (`torch.optim.*`, or a dict or list of them) or, failing
    that, by its name (`optimizer`, `opt`, `optimizer_dict`), and the message
    says which; so are schedulers (built by `torch.optim.lr_scheduler`, or
    named `scheduler`) and averages (`torch.optim.swa_utils`, or named
    `ema`).  Module state a backward hook changes and forward reads is
    HKL343's case.  Under DDP without accumulation, an optimizer step in a
    post-accumulate-grad hook is HKL602's case (the local gradient).

    ## Example
    ```python
    import torch

    model = torch.nn.Linear(8, 1)
    optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}

    def step_in_backward(param):
        optimizers[param].step()
        optimizers[param].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_in_backward)

    accum_steps = 4
    for i, (x, y) in enumerate(batches):
        loss = torch.nn.functional.mse_loss(model(x), y) / accum_steps
        loss.backward()
    ```

    ## Use instead
    ```python
    import torch

    model = torch.nn.Linear(8, 1)
    optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}
    state = {"last_micro_batch": False}

    def step_in_backward(param):
        if state["last_micro_batch"]:
            optimizers[param].step()
            optimizers[param].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_in_backward)

    accum_steps = 4
    for i, (x, y) in enumerate(batches):
        state["last_micro_batch"] = (i + 1) % accum_steps == 0
        loss = torch.nn.functional.mse_loss(model(x), y) / accum_steps
        loss.backward()
    ```

    ## Fix safety
    There is no automatic fix: whether to gate the hook, drop the
    accumulation or step outside the hook is a choice about memory and batch
    size.

    ## References
    - [How to save memory by fusing the optimizer step into the backward pass](https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html)
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - [`DistributedDataParallel.no_sync`](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync)
    """

    code = "HKL205"
    name = "optimizer-step-in-hook-under-accumulation"
    summary = ("A hook steps the optimizer on every backward while the training loop accumulates gradients over "
               "micro-batches")
    severity = Severity.ERROR
    origins = (Origin.STATIC, Origin.RUNTIME)
    triggers = ("register_post_accumulate_grad_hook", "register_hook", "backward_hook",
                "backward_pre_hook") + DYNAMIC_NAME_TRIGGERS
    trigger_pattern = (r"\.(?:step|zero_grad|add_|sub_|addcdiv_|addcmul_|lerp_|update_parameters)\b"
                       r"|(?:ema|swa|averaged)\w*\.update\(")
    VALID: ClassVar[tuple[str, ...]] = (
        # optimizer in backward without accumulation: one step per backward is the intent
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opts = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}\n"
        "def step(p):\n"
        "    opts[p].step()\n"
        "    opts[p].zero_grad()\n"
        "for p in model.parameters():\n"
        "    p.register_post_accumulate_grad_hook(step)\n"
        "for x, y in batches:\n"
        "    ((model(x) - y) ** 2).mean().backward()\n",
        # the hook steps only on the last micro-batch (a flag the loop sets)
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opts = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}\n"
        "sync = {'now': False}\n"
        "def step(p):\n"
        "    if not sync['now']:\n"
        "        return\n"
        "    opts[p].step()\n"
        "    opts[p].zero_grad()\n"
        "for p in model.parameters():\n"
        "    p.register_post_accumulate_grad_hook(step)\n"
        "for i, (x, y) in enumerate(batches):\n"
        "    sync['now'] = (i + 1) % 4 == 0\n"
        "    (((model(x) - y) ** 2).mean() / 4).backward()\n",
        # accumulation with the step in the loop; the hook only edits the gradient
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model.weight.register_post_accumulate_grad_hook(lambda p: p.grad.clamp_(-1, 1))\n"
        "for i, (x, y) in enumerate(batches):\n"
        "    ((model(x) - y) ** 2).mean().backward()\n"
        "    if (i + 1) % 4 == 0:\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad()\n",
        # a scheduler stepped from a hook without accumulation: one backward per step is the intent
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "scheduler = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(model.parameters()), 10)\n"
        "def tick(p):\n"
        "    scheduler.step()\n"
        "model.weight.register_post_accumulate_grad_hook(tick)\n"
        "for i, (x, y) in enumerate(batches):\n"
        "    model(x).sum().backward()\n",
        # `dict.update` in a hook is not a weight average
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "stats = {}\n"
        "def keep(p):\n"
        "    stats.update(norm=p.grad.norm())\n"
        "model.weight.register_post_accumulate_grad_hook(keep)\n"
        "for i, (x, y) in enumerate(batches):\n"
        "    (model(x).sum() / accum_steps).backward()\n",
        # a loop that steps a scheduler every N backward passes and logs every 10 does not accumulate
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opts = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}\n"
        "def step(p):\n"
        "    opts[p].step()\n"
        "    opts[p].zero_grad()\n"
        "for p in model.parameters():\n"
        "    p.register_post_accumulate_grad_hook(step)\n"
        "for i, (x, y) in enumerate(batches):\n"
        "    ((model(x) - y) ** 2).mean().backward()\n"
        "    if (i + 1) % 1000 == 0:\n"
        "        scheduler.step()\n"
        "    if i % 10 != 0:\n"
        "        continue\n"
        "    print(i)\n",
        # the file refuses to accumulate with the optimizer in backward
        "import torch\n"
        "model = torch.nn.Linear(4, 1)\n"
        "opts = {p: torch.optim.AdamW([p]) for p in model.parameters()}\n"
        "def step(p):\n"
        "    opts[p].step()\n"
        "    opts[p].zero_grad()\n"
        "def train(batches, grad_accum):\n"
        "    if grad_accum > 1:\n"
        "        raise ValueError('optimizer in backward cannot accumulate gradients')\n"
        "    for p in model.parameters():\n"
        "        p.register_post_accumulate_grad_hook(step)\n"
        "    for i, (x, y) in enumerate(batches):\n"
        "        (model(x).sum() / grad_accum).backward()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "model = torch.nn.Linear(4, 1)\n"
            "optimizer_dict = {p: torch.optim.AdamW([p], lr=1e-3) for p in model.parameters()}\n"
            "def optimizer_hook(p):\n"
            "    if p.grad is None:\n"
            "        return\n"
            "    optimizer_dict[p].step()  # HKL205\n"
            "    optimizer_dict[p].zero_grad()\n"
            "for p in model.parameters():\n"
            "    p.register_post_accumulate_grad_hook(optimizer_hook)\n"
            "for step, (x, y) in enumerate(loader):\n"
            "    loss = ((model(x) - y) ** 2).mean() / args.gradient_accumulation_steps\n"
            "    loss.backward()\n"
            "    if step % args.gradient_accumulation_steps != 0:\n"
            "        continue\n"
            "    print(loss.item())\n"
        ),
        Invalid(
            "import torch\n"
            "class Trainer:\n"
            "    def __init__(self, model, accum_steps):\n"
            "        self.model = model\n"
            "        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "        self.accum_steps = accum_steps\n"
            "        model.register_full_backward_hook(self._step)\n"
            "    def _step(self, module, grad_input, grad_output):\n"
            "        self.opt.step()  # HKL205\n"
            "    def fit(self, loader):\n"
            "        for i, (x, y) in enumerate(loader):\n"
            "            with self.model.no_sync():\n"
            "                self.model(x).sum().backward()\n"
        ),
        Invalid(
            "import torch\n"
            "lr = 0.01\n"
            "w = torch.zeros(3, requires_grad=True)\n"
            "w.register_post_accumulate_grad_hook(lambda p: p.add_(p.grad, alpha=-lr))  # HKL205\n"
            "for i, x in enumerate(data):\n"
            "    (w * x).sum().backward()\n"
            "    if (i + 1) % 8 == 0:\n"
            "        w.grad = None\n"
        ),
        # a learning-rate scheduler stepped from a hook advances once per micro-batch
        Invalid(
            "import torch\n"
            "model = torch.nn.Linear(4, 1)\n"
            "def tick(p):\n"
            "    scheduler.step()  # HKL205\n"
            "model.weight.register_post_accumulate_grad_hook(tick)\n"
            "for i, (x, y) in enumerate(batches):\n"
            "    (model(x).sum() / accum_steps).backward()\n"
        ),
        # an averaged model updated from a module backward hook
        Invalid(
            "import torch\n"
            "from torch.optim.swa_utils import AveragedModel\n"
            "class Trainer:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "        self.average = AveragedModel(model)\n"
            "        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "        model.register_full_backward_hook(self._after_backward)\n"
            "    def _after_backward(self, module, grad_input, grad_output):\n"
            "        self.average.update_parameters(self.model)  # HKL205\n"
            "    def fit(self, loader, grad_accum_steps):\n"
            "        for i, (x, y) in enumerate(loader):\n"
            "            (self.model(x).sum() / grad_accum_steps).backward()\n"
            "            if (i + 1) % grad_accum_steps == 0:\n"
            "                self.optimizer.step()\n"
            "                self.optimizer.zero_grad()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        hooks = registrations_by_hook(ctx, _KINDS)
        if not hooks:
            return
        found = None
        for func, regs in hooks.items():
            param = regs[0].param("param") if regs[0].kind is HookKind.POST_ACCUMULATE else None
            updates = [u for u in hook_updates(ctx.model, func, param)
                       if not gating_reads(ctx.model, func, u.node)]
            if not updates:
                continue
            if found is None:
                found = [] if refuses_accumulation(ctx.tree) else accumulations(ctx.model, ctx.tree)
            if not found:
                return
            where = nearest(found, ctx.model, func, regs[0].call)
            update = updates[0]
            evidence = f" ({update.evidence})" if update.evidence else ""
            if update.heuristic:
                evidence = f" ({update.evidence}: hooklint takes it for one by its name)"
            loop = f"the loop at line {where.loop.lineno}" if where.loop is not None else "training"
            related = [Related(f"registered as {describe_registrations(regs[:1])}", ctx.display_path,
                               ctx.span(regs[0].call)[0]),
                       Related("gradients are accumulated over micro-batches here", ctx.display_path,
                               ctx.span(where.node)[0])]
            yield self.finding(
                ctx, update.node,
                f"`{hook_label(regs[0])}` ({describe_registrations(regs)}) {update.what}{evidence} on every "
                f"backward, but {loop} accumulates gradients over micro-batches (line {where.node.lineno}: "
                f"{where.text}): {update.consequence}",
                help=_HELP,
                related=related,
            )
