"""HKL603: a tensor hook on a parameter that FSDP2 manages never runs."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.describe import hook_label
from hooklint.static.distributed import call_text, wraps_of
from hooklint.static.grads import is_parameter
from hooklint.static.hooks import HookKind
from hooklint.static.values import src

_HELP = ("Register `param.register_post_accumulate_grad_hook(fn)` on the sharded parameter, after `fully_shard` "
         "(`for p in model.parameters(): p.register_post_accumulate_grad_hook(fn)`): it runs once `p.grad` holds "
         "this rank's shard of the reduced gradient, a DTensor; edit `p.grad.to_local()`, or multiply `p.grad` by a "
         "mask distributed the same way (`distribute_tensor(mask, p.grad.device_mesh, p.grad.placements)`).")


class ParamHookUnderFsdp(Rule):
    """
    ## What it does
    Reports a tensor hook (`param.register_hook(fn)`) on a parameter of a module
    that FSDP2 (`torch.distributed.fsdp.fully_shard`) shards, registered before
    or after `fully_shard`.  Statically, where the file shows both the hook and
    the `fully_shard` of its module (or of a module containing it); at run time
    (`hooklint run`, `hooklint run --nproc N`, the pytest helpers), after a
    backward in which FSDP computed that parameter's gradient and the hook did
    not run, which also catches a `register_post_accumulate_grad_hook`
    registered before `fully_shard`.

    ## Why is this bad?
    The hook never runs, silently.  `fully_shard` replaces every parameter of the
    module by a new, sharded DTensor parameter: a hook registered before stays
    on the old tensor, which no backward reaches.  A hook registered on the
    sharded parameter afterwards does not run either: in each forward FSDP
    gathers an unsharded parameter, autograd sends the gradient there, and FSDP
    reduce-scatters it into `.grad` of the sharded parameter, never through it.
    On two ranks (gloo, torch 2.13) a counter in the hook stays at 0 on both,
    and a pruning mask applied that way leaves the masked row with its gradient
    (tests/distributed/test_behaviour.py).

    The hook that does run under FSDP2 is a post-accumulate-grad hook
    registered on the sharded parameter: it is called with the sharded
    parameter once its `.grad` (a DTensor, this rank's shard) is set.

    ## Known problems
    Statically, the parameter must be reached from the same variable (in the
    same function) or the same class as the module given to `fully_shard`:
    `model.fc.weight` and `fully_shard(model)`, `self.fc.weight` in a method of
    `Net` and `fully_shard(net)` with `net = Net()`, `p` from
    `model.parameters()` and `fully_shard(layer)` for `layer in model.layers`.
    A hook registered in one function on a model sharded in another is seen at
    run time only.  A post-accumulate-grad hook registered before `fully_shard`
    is reported at run time only (statically, the order of the two calls is
    not always what the text shows).

    ## Example
    ```python
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    mask = (model[0].weight.abs() > 0.1).float()
    model[0].weight.register_hook(lambda grad: grad * mask)  # never runs
    fully_shard(model[0])
    fully_shard(model)
    ```

    ## Use instead
    ```python
    import torch.nn as nn
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    mask = (model[0].weight.abs() > 0.1).float()
    fully_shard(model[0])
    fully_shard(model)

    def prune(param):
        param.grad.mul_(distribute_tensor(mask, param.grad.device_mesh, param.grad.placements))

    model[0].weight.register_post_accumulate_grad_hook(prune)  # after fully_shard
    ```

    ## Fix safety
    There is no automatic fix: the hook's code changes (it receives the
    parameter, whose `.grad` is a shard), and so does where it is registered.

    ## References
    - [FSDP2 `fully_shard`](https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html)
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - [hooklint: hooks under DDP and FSDP2](https://github.com/hooklint/hooklint/blob/main/docs/distributed.md)
    """

    code = "HKL603"
    name = "param-hook-under-fsdp"
    summary = "A tensor hook on a parameter that FSDP2 shards never runs (registered before or after `fully_shard`)"
    severity = Severity.ERROR
    origins = (Origin.STATIC, Origin.RUNTIME)
    triggers = ("fully_shard",)
    trigger_pattern = r"register_hook"
    VALID: ClassVar[tuple[str, ...]] = (
        # the fix: a post-accumulate-grad hook on the sharded parameter
        "import torch.nn as nn\n"
        "from torch.distributed.fsdp import fully_shard\n"
        "model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\n"
        "fully_shard(model)\n"
        "for p in model.parameters():\n"
        "    p.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(0.5))\n",
        # a hook on an activation, not a parameter: activations are ordinary tensors under FSDP
        "import torch\n"
        "import torch.nn as nn\n"
        "from torch.distributed.fsdp import fully_shard\n"
        "model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\n"
        "fully_shard(model)\n"
        "out = model(torch.rand(2, 4))\n"
        "out.register_hook(lambda g: g * 2)\n",
        # a parameter of a module FSDP does not shard (only the encoder is wrapped)
        "import torch.nn as nn\n"
        "from torch.distributed.fsdp import fully_shard\n"
        "encoder = nn.Linear(4, 4)\n"
        "head = nn.Linear(4, 2)\n"
        "fully_shard(encoder)\n"
        "head.weight.register_hook(lambda g: g * 0.5)\n",
        # a hook on a model of another function: nothing the file shows links them
        "import torch.nn as nn\n"
        "from torch.distributed.fsdp import fully_shard\n"
        "def add_hooks(model):\n"
        "    model.fc.weight.register_hook(lambda g: g * 0.5)\n"
        "def shard(model):\n"
        "    fully_shard(model)\n",
        # a method of another class named fully_shard
        "import torch.nn as nn\n"
        "class Planner:\n"
        "    def fully_shard(self, module):\n"
        "        return module\n"
        "model = nn.Linear(4, 4)\n"
        "Planner().fully_shard(model)\n"
        "model.weight.register_hook(lambda g: g * 0.5)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "from torch.distributed.fsdp import fully_shard\n"
            "model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\n"
            "model[0].weight.register_hook(lambda g: g * 0.5)  # HKL603\n"
            "fully_shard(model)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "from torch.distributed.fsdp import fully_shard\n"
            "model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\n"
            "for layer in model:\n"
            "    fully_shard(layer)\n"
            "fully_shard(model)\n"
            "for name, param in model.named_parameters():\n"
            "    param.register_hook(lambda g: g.clamp(-1, 1))  # HKL603\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "from torch.distributed._composable.fsdp import fully_shard\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(4, 2)\n"
            "        self.fc.weight.register_hook(self.scale)  # HKL603\n"
            "    def scale(self, grad):\n"
            "        return grad * 0.5\n"
            "net = Net()\n"
            "fully_shard(net)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        registrations = ctx.hooks.by_kind(HookKind.TENSOR)
        if not registrations:
            return
        wraps = wraps_of(ctx)
        if wraps is None or "fsdp2" not in wraps.engines():
            return
        for reg in registrations:
            if reg.receiver is None or not is_parameter(ctx, reg.receiver):
                continue
            wrap = wraps.covering(wraps.parameter_module_path(reg.receiver), "fsdp2")
            if wrap is None:
                continue
            order = ""
            if ctx.model.enclosing_function(reg.call) is ctx.model.enclosing_function(wrap.call):
                before = (reg.call.lineno, reg.call.col_offset) < (wrap.call.lineno, wrap.call.col_offset)
                order = f" (registered {'before' if before else 'after'} `fully_shard` here)"
            yield self.finding(
                ctx, reg.call.func,
                f"tensor hook `{hook_label(reg)}` on the parameter `{src(reg.receiver)}` never runs: "
                f"`{call_text(wrap.call)}` at line {wrap.call.lineno} shards its module, and FSDP2 replaces each "
                f"parameter by a sharded DTensor; the gradient flows to the unsharded parameter FSDP gathers for each forward "
                f"and is reduce-scattered into `.grad` of the sharded one, so a tensor hook on either never runs"
                f"{order}",
                help=_HELP,
                related=[Related(f"`{wrap.api}` shards the module here", ctx.display_path, ctx.span(wrap.call)[0])],
                name_only=True,
            )
