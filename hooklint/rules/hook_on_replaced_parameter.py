"""HKL340: a tensor hook registered on a parameter the module then replaces: it never fires again."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.replaced_targets import params_replaced_after_helper, replaced_after_registration


class HookOnReplacedParameter(Rule):
    """
    ## What it does
    Reports a tensor hook (`register_hook`) or post-accumulate-grad hook
    registered on a module's parameter (`layer.weight`, `getattr(m, "bias")`,
    a name bound to one) when a statement that can run afterwards, in the
    same function, puts another Parameter object in that slot:
    `layer.weight = nn.Parameter(...)`, `setattr(layer, "weight",
    Parameter(...))`, `layer.register_parameter("weight", ...)`,
    `layer._parameters["weight"] = ...`, accelerate's
    `set_module_tensor_to_device(layer, "weight", ...)`, or
    `model.load_state_dict(..., assign=True)` on the module or one holding it.
    A hook registered by a function of the project for its caller (a helper
    hooking every parameter of the model it is given, a module whose
    constructor hooks its own weights: `net = Net()`) is matched the same way,
    at the call, when the caller then replaces those parameters.
    Not reported: the replacement made before the registration; the owner's
    name rebound in between (another loop iteration's module); the hook's
    handle removed in between; `module.to(...)`, `module.to_empty(...)`,
    `load_state_dict` without `assign`, `param.data = ...` (they keep the
    Parameter object).

    ## Why is this bad?
    A tensor hook belongs to the tensor object it was registered on, not to
    the module attribute that named it.  Once the module's slot holds a new
    Parameter, forward reads the new one; the old tensor takes no part in the
    graph, and its hook never runs.  No error, no warning: a gradient
    all-reduce, clipping or masking hook silently stops working (the
    fms-acceleration LoRA plugin registered its all-reduce hooks, then moved
    the adapters to the GPU with `set_module_tensor_to_device`, and the ranks
    trained apart).

    ## Known problems
    Only replacements in the function that registers the hook are seen.  A
    `set_module_tensor_to_device` call replaces the Parameter only when the
    device or the value changes (the rule cannot see whether it does, and
    says so); a function of that name from another library is assumed to
    behave like accelerate's.

    ## Example
    ```python
    import torch.nn as nn

    def add_clipping(layer: nn.Linear, device):
        layer.weight.register_hook(lambda g: g.clamp(-1, 1))
        layer.weight = nn.Parameter(layer.weight.detach().to(device))
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def add_clipping(layer: nn.Linear, device):
        layer.weight = nn.Parameter(layer.weight.detach().to(device))
        layer.weight.register_hook(lambda g: g.clamp(-1, 1))
    ```

    ## Fix safety
    No fix is offered: the registration must move after every statement that
    replaces the parameter, which may be in another branch.

    ## References
    - [`torch.Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - [`torch.nn.Module.load_state_dict`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.load_state_dict) (`assign`)
    - [fms-acceleration #96](https://github.com/foundation-model-stack/fms-acceleration/pull/96)
    """

    code = "HKL340"
    name = "hook-on-replaced-parameter"
    summary = "Tensor hook registered on a parameter that is replaced afterwards: the hook never fires"
    severity = Severity.WARNING
    triggers = ("register_hook", "register_post_accumulate_grad_hook")
    trigger_pattern = r"Parameter\(|Params\(|register_parameter\(|_parameters\[|set_module_tensor_to_device\(|assign=True"
    VALID: ClassVar[tuple[str, ...]] = (
        # the replacement first, then the hook: the hook is on the Parameter forward uses
        "import torch.nn as nn\n"
        "def prepare(layer: nn.Linear):\n"
        "    layer.weight = nn.Parameter(layer.weight.detach().half())\n"
        "    layer.weight.register_hook(lambda g: g * 2)\n",
        # `.data =` and `.to()` keep the Parameter object (and its hook)
        "import torch.nn as nn\n"
        "def prepare(layer: nn.Linear, w):\n"
        "    layer.weight.register_hook(lambda g: g * 2)\n"
        "    layer.weight.data = w\n"
        "    layer.to('cpu')\n"
        "    layer.load_state_dict({'weight': w}, strict=False)\n",
        # a new module each iteration: the replacement is of the next one, before its hook
        "import torch.nn as nn\n"
        "from accelerate.utils import set_module_tensor_to_device\n"
        "def prepare(mods):\n"
        "    for m in mods:\n"
        "        lin = m.proj\n"
        "        set_module_tensor_to_device(lin, 'weight', 'cuda')\n"
        "        lin.weight.register_hook(lambda g: g)\n",
        # the hook taken off before the parameter is replaced
        "import torch.nn as nn\n"
        "def prepare(layer: nn.Linear):\n"
        "    h = layer.weight.register_post_accumulate_grad_hook(print)\n"
        "    h.remove()\n"
        "    layer.register_parameter('weight', nn.Parameter(layer.weight.detach()))\n",
        # the checkpoint loaded first, then the helper hooks the parameters forward uses
        "import torch.nn as nn\n"
        "def hook_all(model, fn):\n"
        "    for p in model.parameters():\n"
        "        p.register_hook(fn)\n"
        "def load(model, state, fn):\n"
        "    model.load_state_dict(state, assign=True)\n"
        "    hook_all(model, fn)\n",
        # another parameter replaced
        "import torch.nn as nn\n"
        "def prepare(layer: nn.Linear):\n"
        "    layer.weight.register_hook(print)\n"
        "    layer.bias = nn.Parameter(layer.bias.detach())\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.distributed as dist\n"
            "from accelerate.utils import set_module_tensor_to_device\n"
            "def _reduce(grad):\n"
            "    dist.all_reduce(grad)\n"
            "    return grad\n"
            "def switch_ddp(modules):\n"
            "    for mod in modules:\n"
            "        A = mod.lora_A.default\n"
            "        A.weight.register_hook(_reduce)  # HKL340\n"
            "        if not A.weight.is_cuda:\n"
            "            set_module_tensor_to_device(A, 'weight', 'cuda')\n",
        ),
        Invalid(
            "import torch\n"
            "class Freezer:\n"
            "    def attach(self, model, state):\n"
            "        p = getattr(model.encoder, 'weight')\n"
            "        p.register_post_accumulate_grad_hook(self.zero)  # HKL340\n"
            "        model.load_state_dict(state, assign=True)\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Masked(nn.Module):\n"
            "    def __init__(self, mask):\n"
            "        super().__init__()\n"
            "        self.proj = nn.Linear(4, 4)\n"
            "        self.proj.weight.register_hook(lambda g: g * mask)\n"
            "def from_checkpoint(state, mask):\n"
            "    net = Masked(mask)  # HKL340\n"
            "    net.load_state_dict(state, assign=True)\n"
            "    return net\n",
        ),
        Invalid(
            "import torch\n"
            "def quantize(layer, mask):\n"
            "    layer.weight.register_hook(lambda g: g * mask)  # HKL340\n"
            "    setattr(layer, 'weight', torch.nn.Parameter(layer.weight.detach().half()))\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in replaced_after_registration(ctx, tensor=True):
            yield self.finding(
                ctx, found.registration,
                f"the hook is registered on the tensor object `{found.hooked}`, and {found.how} (line "
                f"{found.stmt.lineno}) can run afterwards and put another Parameter in that slot: forward then "
                f"uses the new Parameter, and this hook, left on the old tensor, never fires again (silently)",
                help="Register the hook after every statement that replaces the parameter (or register it again "
                     "on the new Parameter).",
                related=[Related("the parameter is replaced here", ctx.display_path, ctx.span(found.stmt)[0])],
            )
        for found in params_replaced_after_helper(ctx):
            yield self.finding(
                ctx, found.site,
                f"`{found.helper}` (run by this call) registers a tensor hook on parameters of what it is given or "
                f"builds, and {found.how} (line {found.stmt.lineno}) can run afterwards and put new Parameter objects "
                f"in their slots: forward then uses the new ones, and the hooks, left on the old tensors, never fire "
                f"again (silently; a parameter the replacement does not touch keeps its hook)",
                help="Register the hooks after the parameters are replaced (load the weights first), or register "
                     "them again on the new Parameters.",
                related=[Related("the parameters are replaced here", ctx.display_path, ctx.span(found.stmt)[0])],
            )
