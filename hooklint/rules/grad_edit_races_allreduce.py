"""HKL602: a hook edits `.grad` where the data-parallel engine does not expect it."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.describe import MODULE_BACKWARD_KINDS, describe_registrations, hook_label, registrations_by_hook
from hooklint.static.distributed import call_text, module_target_path, wraps_of
from hooklint.static.grads import parameter_grads, writes_through
from hooklint.static.values import src

_HELP = ("Edit the gradient before DDP reads it: `param.register_hook(lambda g: ...)` (returns the new gradient) or "
         "`param.register_post_accumulate_grad_hook(fn)` (edits `param.grad` in place); both run before the "
         "all-reduce, so the edit is averaged like the gradient.")


class GradEditRacesAllreduce(Rule):
    """
    ## What it does
    Reports a hook that uses `.grad` where a data-parallel engine does not let
    it:

    - a module backward hook (`register_full_backward_hook`,
      `register_backward_hook`, `register_full_backward_pre_hook`, the global
      forms) that writes `.grad` of a parameter `DistributedDataParallel`
      manages;
    - at run time, a post-accumulate-grad hook on a DDP parameter that reads
      `.grad` and updates the parameter (an optimizer step fused into
      backward);
    - at run time, a module backward hook that reads `.grad` of a parameter
      FSDP2 has sharded, before FSDP wrote this backward's gradient into it.

    Statically, where the file wraps the hooked module (or a module containing
    it) in `DistributedDataParallel`.

    ## Why is this bad?
    DDP all-reduces gradients from hooks on the parameters' `AccumulateGrad`
    nodes: as soon as a gradient is accumulated, DDP copies it into a bucket,
    all-reduces the bucket, and at the end of backward writes the reduced bucket
    back into `.grad`.  A module backward hook runs after that copy, so what it
    writes into `.grad` is overwritten: on two ranks a hook that zeroes a row of
    `weight.grad` leaves the row with the unedited mean gradient, while the
    same hook without DDP works (tests/distributed/test_behaviour.py).
    Post-accumulate-grad hooks and parameter tensor hooks run before DDP's copy:
    their edits are all-reduced with the gradient.  But an optimizer step in a
    post-accumulate-grad hook uses the local gradient, before the all-reduce:
    each replica moves differently.

    Under FSDP2, a module backward hook on a layer fed plain data runs before FSDP
    gathers the layer's parameters: `module.weight` is still the sharded
    parameter, whose `.grad` is None on the first step and the previous step's
    shard afterwards.

    ## Known problems
    Statically, the hooked module must be reached from the same variable (in the
    same function) or the same class as the module given to
    `DistributedDataParallel`; global module hooks are reported in any file
    that wraps a module in DDP.  A hook that only reads `.grad` under DDP sees
    the local gradient and is not reported.  At run time the first backward is
    not judged for module hooks (hooklint learns when each gradient arrives
    during it).

    ## Example
    ```python
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    def zero_row(module, grad_input, grad_output):
        module.weight.grad[0] = 0

    model[0].register_full_backward_hook(zero_row)
    ddp = DDP(model)
    ```

    ## Use instead
    ```python
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

    def zero_row(param):
        param.grad[0] = 0

    model[0].weight.register_post_accumulate_grad_hook(zero_row)
    ddp = DDP(model)
    ```

    ## Fix safety
    There is no automatic fix; HKL201's display-only fix shows the same edit as
    a post-accumulate-grad hook where it can be derived.

    ## References
    - [`DistributedDataParallel`: internal design](https://pytorch.org/docs/stable/notes/ddp.html)
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - [hooklint: hooks under DDP and FSDP2](https://github.com/hooklint/hooklint/blob/main/docs/distributed.md)
    """

    code = "HKL602"
    name = "grad-edit-races-allreduce"
    summary = "A hook edits or relies on `.grad` where DDP's all-reduce or FSDP's sharding overrides it"
    severity = Severity.ERROR
    origins = (Origin.STATIC, Origin.RUNTIME)
    triggers = ("DistributedDataParallel",)
    trigger_pattern = r"backward_(?:pre_)?hook"
    VALID: ClassVar[tuple[str, ...]] = (
        # the fixes: hooks on the parameter run before DDP's all-reduce
        "import torch.nn as nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = nn.Linear(4, 2)\n"
        "model.weight.register_hook(lambda g: g * 0.5)\n"
        "model.bias.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(0.5))\n"
        "ddp = DDP(model)\n",
        # a module hook that only reads `.grad` (the local gradient): not reported
        "import torch.nn as nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = nn.Linear(4, 2)\n"
        "norms = []\n"
        "def log(module, grad_input, grad_output):\n"
        "    if module.weight.grad is not None:\n"
        "        norms.append(module.weight.grad.norm())\n"
        "model.register_full_backward_hook(log)\n"
        "ddp = DDP(model)\n",
        # a module hook editing `.grad` of a model DDP does not wrap
        "import torch.nn as nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "student = nn.Linear(4, 2)\n"
        "teacher = nn.Linear(4, 2)\n"
        "def zero(module, grad_input, grad_output):\n"
        "    module.weight.grad.zero_()\n"
        "teacher.register_full_backward_hook(zero)\n"
        "ddp = DDP(student)\n",
        # a module hook that returns a new grad_input instead of touching `.grad`
        "import torch.nn as nn\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = nn.Linear(4, 2)\n"
        "model.register_full_backward_hook(lambda m, gi, go: (gi[0] * 0.5,))\n"
        "ddp = DDP(model)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\n"
            "def zero_row(module, grad_input, grad_output):\n"
            "    module.weight.grad[0] = 0  # HKL201, HKL602\n"
            "model[0].register_full_backward_hook(zero_row)\n"
            "model = DDP(model)\n"
        ),
        Invalid(
            "import torch\n"
            "import torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(4, 2)\n"
            "        self.fc.register_full_backward_hook(self._clip)\n"
            "    def _clip(self, module, grad_input, grad_output):\n"
            "        self.fc.weight.grad.clamp_(-1, 1)  # HKL201, HKL602\n"
            "ddp = torch.nn.parallel.DistributedDataParallel(Net())\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "from torch.nn.parallel import DistributedDataParallel\n"
            "model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\n"
            "ddp = DistributedDataParallel(model)\n"
            "def scale(module, grad_input, grad_output):\n"
            "    for p in module.parameters():\n"
            "        p.grad = p.grad * 0.5  # HKL201, HKL602\n"
            "for layer in ddp.module:\n"
            "    layer.register_full_backward_hook(scale)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        hooks = registrations_by_hook(ctx, MODULE_BACKWARD_KINDS)
        if not hooks:
            return
        wraps = wraps_of(ctx)
        if wraps is None or "ddp" not in wraps.engines():
            return
        first_ddp = next(w for w in wraps.all if w.engine == "ddp")
        for func, regs in hooks.items():
            writes = [a for a in parameter_grads(ctx, func) if writes_through(a)]
            if not writes:
                continue
            wrap = None
            for reg in regs:
                if reg.is_global:
                    wrap = first_ddp
                else:
                    wrap = wraps.covering(module_target_path(wraps, reg), "ddp")
                if wrap is not None:
                    break
            if wrap is None:
                continue
            write = writes[0]
            yield self.finding(
                ctx, write,
                f"`{hook_label(regs[0])}` ({describe_registrations(regs)}) writes `{src(write)}` on a module that "
                f"`{call_text(wrap.call)}` at line {wrap.call.lineno} wraps: DDP copies each gradient into its bucket "
                f"for the all-reduce as soon as it is accumulated, before a module backward hook runs, and writes "
                f"the reduced bucket back into `.grad` at the end of backward, so the edit is overwritten",
                help=_HELP,
                related=[Related(f"`{wrap.api}` wraps the module here", ctx.display_path, ctx.span(wrap.call)[0])],
            )
