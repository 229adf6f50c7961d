"""HKL327: a gradient all-reduce launched only from per-parameter hooks skips parameters the forward did not use."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.grad_hook_collectives import hook_only_collectives


class GradHookCollectiveSkipsUnused(Rule):
    """
    ## What it does
    Reports a per-parameter gradient hook (on the parameter's AccumulateGrad
    node, `p.register_hook`, `p.register_post_accumulate_grad_hook`) that
    launches a collective (an all-reduce, reduce-scatter, all-gather) and
    records it in a container of its object, when a method of the object
    waits on that container and nothing else in the class launches the
    collective for the parameters whose hook did not fire.

    ## Why is this bad?
    A gradient hook fires only for parameters whose gradient this backward
    computes.  A trainable parameter that takes no part in an iteration's
    forward (an unused branch, a layer skipped on some ranks or some steps)
    never fires it: on that rank its collective is never launched while the
    ranks that used it launch it and wait (a hang), or, when no rank used
    it, the step silently skips it.  torch's `DistributedDataParallel` has
    `find_unused_parameters=True` for this; a hand-written reducer must keep
    the set of parameters that need an update and reduce, before it waits,
    those whose hook did not fire.

    ## Known problems
    Whether a model leaves parameters unused cannot be seen from the
    library; the rule reports the reducer that would hang on one.  A
    collective is recognised by its name.

    ## Example
    ```python
    import torch.distributed as dist

    class Averager:
        def __init__(self, model):
            self.works = []
            for p in model.parameters():
                p.register_post_accumulate_grad_hook(self._launch)

        def _launch(self, p):
            self.works.append(dist.all_reduce(p.grad, async_op=True))

        def wait(self):
            for work in self.works:
                work.wait()
            self.works.clear()
    ```

    ## Use instead
    ```python
    import torch
    import torch.distributed as dist

    class Averager:
        def __init__(self, model):
            self.works = {}
            self.params = [p for p in model.parameters() if p.requires_grad]
            for p in self.params:
                p.register_post_accumulate_grad_hook(self._launch)

        def _launch(self, p):
            self.works[p] = dist.all_reduce(p.grad, async_op=True)

        def wait(self):
            for p in self.params:  # parameters the forward did not use
                if p not in self.works:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    self.works[p] = dist.all_reduce(p.grad, async_op=True)
            for work in self.works.values():
                work.wait()
            self.works.clear()
    ```

    ## Fix safety
    There is no automatic fix; launch the collective, before waiting, for
    every parameter that needs an update and whose hook did not fire (with a
    zero gradient if it has none).

    ## References
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - [`DistributedDataParallel`, `find_unused_parameters`](https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    """

    code = "HKL327"
    name = "grad-hook-collective-skips-unused"
    summary = "A gradient collective launched only from per-parameter hooks never runs for a parameter the forward did not use"
    severity = Severity.WARNING
    triggers = ("register_hook", "register_post_accumulate_grad_hook")
    VALID: ClassVar[tuple[str, ...]] = (
        "import torch\n"
        "import torch.distributed as dist\n"
        "class Averager:\n"
        "    def __init__(self, model):\n"
        "        self.works = {}\n"
        "        self.params = [p for p in model.parameters() if p.requires_grad]\n"
        "        for p in self.params:\n"
        "            p.register_post_accumulate_grad_hook(self._launch)\n"
        "    def _launch(self, p):\n"
        "        self.works[p] = dist.all_reduce(p.grad, async_op=True)\n"
        "    def wait(self):\n"
        "        for p in self.params:\n"
        "            if p not in self.works:\n"
        "                if p.grad is None:\n"
        "                    p.grad = torch.zeros_like(p)\n"
        "                self.works[p] = dist.all_reduce(p.grad, async_op=True)\n"
        "        for work in self.works.values():\n"
        "            work.wait()\n"
        "        self.works.clear()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.distributed as dist\n"
            "class Averager:\n"
            "    def __init__(self, model):\n"
            "        self.works = []\n"
            "        for p in model.parameters():\n"
            "            p.register_post_accumulate_grad_hook(self._launch)  # HKL327\n"
            "    def _launch(self, p):\n"
            "        self.works.append(dist.all_reduce(p.grad, async_op=True))\n"
            "    def wait(self):\n"
            "        for work in self.works:\n"
            "            work.wait()\n"
            "        self.works.clear()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in hook_only_collectives(ctx):
            hook = getattr(found.hook, "name", "<lambda>")
            yield self.finding(
                ctx, found.call,
                message=f"this {found.kind} (`{hook}`) launches a collective for its parameter and records it in "
                f"`self.{found.container}`, which `{found.waiter.name}` waits on, and nothing else launches it: "
                "a trainable parameter that takes no part in a forward never fires its hook, so its collective "
                "is never started on that rank while other ranks wait for it (a hang), or the step skips it",
                help=f"Before waiting in `{found.waiter.name}`, launch the collective for every parameter that "
                "needs an update and whose hook did not fire (with a zero gradient if it has none), as DDP's "
                "`find_unused_parameters` does.",
            )
