"""HKL516: a custom Function's backward re-runs the forward's function without restoring the RNG state."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.autograd_function import FUNCTION_TRIGGER_PATTERN
from hooklint.static.context import FileContext
from hooklint.static.recompute import recomputations, touches_rng_state
from hooklint.static.values import src


class RecomputeWithoutRngState(Rule):
    """
    ## What it does
    Reports the `backward` of a custom `torch.autograd.Function` that runs
    a function again under `torch.enable_grad()` to rebuild the forward's
    activations (activation checkpointing: the function is an argument of
    `forward` kept on `ctx`, such as `ctx.run_function`), in a file that
    never saves, restores or seeds a random number generator state
    (`torch.get_rng_state` / `set_rng_state`, `torch.cuda.get_rng_state`,
    `torch.random.fork_rng`, `manual_seed`).

    ## Why is this bad?
    Each draw from torch's generator advances it.  The re-run in `backward`
    starts from whatever state the generator has reached by then, not the
    state the first forward started from, so every random operation in the
    function (`nn.Dropout`, `F.dropout`, stochastic depth, random masking)
    draws different numbers.  The rebuilt activations then belong to
    another forward than the one that produced the loss, and the gradients
    are silently wrong: with one dropout layer the gradient is zero where
    the original mask kept a unit and the new one dropped it, and the other
    way round.  `torch.utils.checkpoint` avoids this by saving the CPU and
    CUDA generator states in forward and restoring them, under
    `torch.random.fork_rng`, around the re-run (`preserve_rng_state=True`,
    its default).

    ## Known problems
    The file cannot show whether the function it re-runs draws random
    numbers: a block without dropout or other random operations
    recomputes exactly, so the finding is a *warning*.  A file that names
    any generator-state API anywhere is taken to handle it and is not
    reported.

    ## Example
    ```python
    import torch

    class Checkpoint(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run_function, x):
            ctx.run_function = run_function
            ctx.save_for_backward(x)
            with torch.no_grad():
                return run_function(x)

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            x = x.detach().requires_grad_(True)
            with torch.enable_grad():
                output = ctx.run_function(x)
            torch.autograd.backward(output, grad_output)
            return None, x.grad
    ```

    ## Use instead
    ```python
    import torch

    class Checkpoint(torch.autograd.Function):
        @staticmethod
        def forward(ctx, run_function, x):
            ctx.run_function = run_function
            ctx.cpu_state = torch.get_rng_state()
            ctx.save_for_backward(x)
            with torch.no_grad():
                return run_function(x)

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            x = x.detach().requires_grad_(True)
            with torch.random.fork_rng(devices=[]):
                torch.set_rng_state(ctx.cpu_state)
                with torch.enable_grad():
                    output = ctx.run_function(x)
            torch.autograd.backward(output, grad_output)
            return None, x.grad
    ```
    (or use `torch.utils.checkpoint.checkpoint`, which does this and the
    CUDA generators too).

    ## Fix safety
    There is no automatic fix: which generators (CPU, each CUDA device) to
    save depends on where the function runs.

    ## References
    - [`torch.utils.checkpoint`](https://pytorch.org/docs/stable/checkpoint.html):
      "stashes and restores the RNG state during each checkpoint" (`preserve_rng_state`)
    - [`torch.random.fork_rng`](https://pytorch.org/docs/stable/random.html#torch.random.fork_rng)
    """

    code = "HKL516"
    name = "recompute-without-rng-state"
    summary = ("A custom autograd Function's backward re-runs the forward's function under enable_grad without "
               "restoring the random number generator state")
    severity = Severity.WARNING
    triggers = ("enable_grad", "set_grad_enabled")
    trigger_pattern = FUNCTION_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # the state is saved in forward and restored around the re-run
        "import torch\n"
        "class Checkpoint(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, fn, x):\n"
        "        ctx.fn = fn\n"
        "        ctx.state = torch.get_rng_state()\n"
        "        ctx.save_for_backward(x)\n"
        "        with torch.no_grad():\n"
        "            return fn(x)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        x = x.detach().requires_grad_(True)\n"
        "        with torch.random.fork_rng(devices=[]):\n"
        "            torch.set_rng_state(ctx.state)\n"
        "            with torch.enable_grad():\n"
        "                y = ctx.fn(x)\n"
        "        torch.autograd.backward(y, g)\n"
        "        return None, x.grad\n",
        # a function kept on ctx but called outside enable_grad: not a recomputation
        "import torch\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, scale_fn, x):\n"
        "        ctx.scale_fn = scale_fn\n"
        "        return x * 1.0\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        return None, ctx.scale_fn(g)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Checkpoint(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, run_function, x):\n"
            "        ctx.run_function = run_function\n"
            "        ctx.save_for_backward(x)\n"
            "        with torch.no_grad():\n"
            "            return run_function(x)\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        (x,) = ctx.saved_tensors\n"
            "        x = x.detach().requires_grad_(True)\n"
            "        with torch.enable_grad():\n"
            "            y = ctx.run_function(x)  # HKL516\n"
            "        torch.autograd.backward(y, g)\n"
            "        return None, x.grad\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        found = recomputations(ctx)
        if not found or touches_rng_state(ctx):
            return
        for rerun in found:
            name = rerun.function_class.name
            yield self.finding(
                ctx, rerun.call,
                message=(f"`{name}.backward` runs `{src(rerun.call.func)}` (the `{rerun.source}` argument of "
                         f"`{name}.forward`) again under `torch.enable_grad()` to rebuild its activations, but "
                         f"nothing in this file saves or restores the random number generator state: if that "
                         f"function draws random numbers (dropout), the re-run draws different ones, and the "
                         f"gradients belong to another forward than the one that produced the loss"),
                help=("Save `torch.get_rng_state()` (and `torch.cuda.get_rng_state()`) in forward and restore "
                      "them under `torch.random.fork_rng()` around the re-run, or use "
                      "`torch.utils.checkpoint.checkpoint`."),
            )
