"""HKL418: a post-accumulate-grad hook reads `.grad` that another such hook, run before it, sets to None."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.post_accumulate_order import late_grad_reads


class PostAccumulateHookAfterGradCleared(Rule):
    """
    ## What it does
    Reports a `register_post_accumulate_grad_hook` hook that reads its
    parameter's `.grad` when another post-accumulate-grad hook of the file
    clears that gradient: it calls `zero_grad()` (an optimizer stepped in
    backward; `set_to_none=True` is the default) or sets `param.grad = None`.
    When both are registered in one function, only a reader registered after
    the clearing hook is reported; registered in different functions, the
    order depends on which runs first, and the message says so.

    ## Why is this bad?
    The post-accumulate-grad hooks of one tensor run in registration order,
    each with the same tensor.  Once the hook that steps the optimizer has
    set `.grad` to None, every hook after it sees None: a `.grad is not None`
    guard turns it into a silent no-op (LLaMA-Factory 0.6.2's layer-wise
    GaLore scheduler hook never stepped, so the learning rate never
    followed its schedule), and any other read raises on None.

    ## Example
    ```python
    def attach(params, optimizers, schedulers):
        def optimizer_hook(param):
            optimizers[param].step()
            optimizers[param].zero_grad()

        def scheduler_hook(param):
            if param.grad is not None:
                schedulers[param].step()

        for p in params:
            p.register_post_accumulate_grad_hook(optimizer_hook)
        for p in params:
            p.register_post_accumulate_grad_hook(scheduler_hook)
    ```

    ## Use instead
    ```python
    def attach(params, optimizers, schedulers):
        def optimizer_hook(param):
            optimizers[param].step()
            optimizers[param].zero_grad()

        def scheduler_hook(param):
            schedulers[param].step()  # runs after every update: no grad test

        for p in params:
            p.register_post_accumulate_grad_hook(optimizer_hook)
        for p in params:
            p.register_post_accumulate_grad_hook(scheduler_hook)
    ```

    ## Fix safety
    There is no automatic fix: drop the `.grad` test, read what the hook needs
    before the clearing hook runs, or do both in one hook.

    ## References
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - [How to save memory by fusing the optimizer step into the backward pass](https://pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html)
    """

    code = "HKL418"
    name = "post-accumulate-hook-after-grad-cleared"
    summary = "A post-accumulate-grad hook reads .grad that an earlier such hook sets to None"
    severity = Severity.WARNING
    triggers = ("register_post_accumulate_grad_hook",)
    trigger_pattern = r"zero_grad|\.grad\s*=\s*None|del\s+[\w.]+\.grad"

    VALID: ClassVar[tuple[str, ...]] = (
        # one hook does both
        "def attach(params, optimizers, schedulers):\n"
        "    def hook(param):\n"
        "        if param.grad is not None:\n"
        "            optimizers[param].step()\n"
        "            schedulers[param].step()\n"
        "            optimizers[param].zero_grad()\n"
        "    for p in params:\n"
        "        p.register_post_accumulate_grad_hook(hook)\n",
        # the reader is registered first in the same body: it runs before the clearing hook
        "def attach(params, optimizers, log):\n"
        "    def record(param):\n"
        "        log.append(param.grad.norm())\n"
        "    def step(param):\n"
        "        optimizers[param].step()\n"
        "        optimizers[param].zero_grad()\n"
        "    for p in params:\n"
        "        p.register_post_accumulate_grad_hook(record)\n"
        "        p.register_post_accumulate_grad_hook(step)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def attach(params, optimizers, schedulers):\n"
            "    def optimizer_hook(param):\n"
            "        optimizers[param].step()\n"
            "        optimizers[param].zero_grad()\n"
            "    def scheduler_hook(param):\n"
            "        if param.grad is not None:  # HKL418\n"
            "            schedulers[param].step()\n"
            "    for p in params:\n"
            "        p.register_post_accumulate_grad_hook(optimizer_hook)\n"
            "    for p in params:\n"
            "        p.register_post_accumulate_grad_hook(scheduler_hook)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for hit in late_grad_reads(ctx):
            reader = getattr(hit.reader.hook.node, "name", "a lambda hook")  # type: ignore[union-attr]
            clearer = getattr(hit.clearer.hook.node, "name", "a lambda hook")  # type: ignore[union-attr]
            clear_line = ctx.span(hit.clear)[0].row
            same = ctx.core.places.owner(hit.clearer.call) is ctx.core.places.owner(hit.reader.call)
            order = ("it is registered after that hook" if same else
                     "if it is registered after that hook on the same parameters (they are registered in "
                     "different functions: the order is the order those run)")
            effect = ("this test always finds None and the guarded work never runs" if hit.guarded
                      else "this read gets None")
            yield self.finding(
                ctx, hit.read,
                f"`{reader}` reads `.grad` in a post-accumulate-grad hook, but `{clearer}` (line {clear_line}) "
                f"sets the gradient to None in one; post-accumulate-grad hooks run in registration order, so "
                f"{order}, {effect}",
                help="Do not test or read `.grad` after the hook that clears it: drop the test, or do both in "
                     "one hook (read first, then step and zero_grad).",
                related=[Related("the gradient is cleared here", ctx.display_path, ctx.span(hit.clear)[0])],
            )
