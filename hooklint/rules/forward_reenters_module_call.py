"""HKL341: a module's forward stand-in (or forward hook) calls the same module again: its hooks run twice."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.forward_reentry import forward_reentries


class ForwardReentersModuleCall(Rule):
    """
    ## What it does
    Reports a function installed as a module's `forward` (`module.forward =
    wrapper`, `setattr(module, "forward", ...)`, `partial(fn, module)`), or a
    forward hook / pre-hook registered on a module, whose body runs that same
    module through `Module.__call__`: `module(...)`, `module.__call__(...)`,
    `nn.Module.__call__(module, ...)`, `module._call_impl(...)`, or
    `torch.func.functional_call(module, ...)` /
    `torch.nn.utils.stateless.functional_call(module, ...)`.  Not reported:
    calls of the saved forward (`old_forward(...)`,
    `type(module).forward(module, ...)`), calls under an `if` of the
    function's own (a re-entrancy flag), a wrapper module put in the
    module's slot (another module), hooks that remove a handle.

    ## Why is this bad?
    `Module.__call__` runs the forward pre-hooks, then `self.forward` (the
    instance attribute when one is set), then the forward hooks.  A stand-in
    that calls the module through `__call__` enters it a second time: when it
    puts the original forward back first, every pre-hook and forward hook of
    the module runs twice per call (a collector records two entries, a
    hook that edits the input or output applies twice); when it does not,
    the call recurses until `RecursionError`.  `functional_call` is no way
    around it: it calls the module under the substituted tensors (vLLM's CPU
    offloading wrapper, without UVA).

    ## Example
    ```python
    import torch
    from torch.func import functional_call

    def offload(module, device):
        original_forward = module.forward

        def forward(*args, **kwargs):
            module.forward = original_forward
            state = {k: v.to(device) for k, v in module.state_dict().items()}
            out = functional_call(module, state, args, kwargs)
            module.forward = forward
            return out

        module.forward = forward
    ```

    ## Use instead
    ```python
    import torch
    from torch.nn.utils.stateless import _reparametrize_module

    def offload(module, device):
        original_forward = module.forward

        def forward(*args, **kwargs):
            state = {k: v.to(device) for k, v in module.state_dict().items()}
            with _reparametrize_module(module, state):
                return original_forward(*args, **kwargs)

        module.forward = forward
    ```

    ## Fix safety
    No fix is offered: the stand-in must call the saved forward (under the
    substituted tensors when it swaps them) instead of the module.

    ## References
    - [`torch.func.functional_call`](https://pytorch.org/docs/stable/generated/torch.func.functional_call.html)
    - [`torch.nn.Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [vLLM #46690](https://github.com/vllm-project/vllm/pull/46690)
    """

    code = "HKL341"
    name = "forward-reenters-module-call"
    summary = "A module's forward stand-in or forward hook calls the same module again: its hooks run twice"
    severity = Severity.WARNING
    triggers = ("forward",)
    trigger_pattern = r"\.forward[ \t]*=[^=]|setattr\(.{0,80}?[\"']forward[\"']|register_forward_hook|" \
                      r"register_forward_pre_hook"
    VALID: ClassVar[tuple[str, ...]] = (
        # the saved forward is called: one pass through __call__
        "import torch.nn as nn\n"
        "def wrap(module: nn.Module):\n"
        "    old = module.forward\n"
        "    def forward(*args, **kwargs):\n"
        "        return old(*args, **kwargs)\n"
        "    module.forward = forward\n",
        # a wrapper module in the slot calls the module it wraps: another module
        "import torch.nn as nn\n"
        "class Wrap(nn.Module):\n"
        "    def __init__(self, inner):\n"
        "        super().__init__()\n"
        "        self.inner = inner\n"
        "    def forward(self, x):\n"
        "        return self.inner(x)\n"
        "def wrap(model):\n"
        "    model.fc = Wrap(model.fc)\n",
        # a hook that calls another module
        "import torch.nn as nn\n"
        "def attach(model: nn.Module, probe: nn.Module):\n"
        "    model.register_forward_hook(lambda m, i, o: probe(o))\n",
        # a re-entrancy flag: the second pass is deliberate
        "import torch.nn as nn\n"
        "def attach(model: nn.Module):\n"
        "    def hook(module, args):\n"
        "        if not getattr(module, '_inner', False):\n"
        "            module._inner = True\n"
        "            module(*args)\n"
        "            module._inner = False\n"
        "    model.register_forward_pre_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "from torch.func import functional_call\n"
            "def offload(module, device):\n"
            "    original_forward = module.forward\n"
            "    def forward(*args, **kwargs):\n"
            "        module.forward = original_forward\n"
            "        state = {k: v.to(device) for k, v in module.state_dict().items()}\n"
            "        out = functional_call(module, state, args, kwargs)  # HKL341\n"
            "        module.forward = forward\n"
            "        return out\n"
            "    module.forward = forward\n",
        ),
        Invalid(
            "import functools\n"
            "def _timed(layer, *args):\n"
            "    layer.forward = layer._orig\n"
            "    out = layer.__call__(*args)  # HKL341\n"
            "    layer.forward = functools.partial(_timed, layer)\n"
            "    return out\n"
            "def install(layer):\n"
            "    layer._orig = layer.forward\n"
            "    layer.forward = functools.partial(_timed, layer)\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def smooth(model: nn.Module):\n"
            "    def hook(mod, inputs, output):\n"
            "        return (output + mod(*inputs)) / 2  # HKL341\n"
            "    model.register_forward_hook(hook)\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in forward_reentries(ctx):
            yield self.finding(
                ctx, found.call,
                f"{found.stand_in}, and {found.how} calls the same module through `Module.__call__` again: every "
                f"forward pre-hook and forward hook of `{found.module}` runs "
                f"a second time per call (or, when nothing takes the stand-in off first, the call recurses until "
                f"`RecursionError`)",
                help="Call the saved forward (`old_forward(*args)`, under `torch.nn.utils.stateless."
                     "_reparametrize_module` to substitute tensors) instead of the module itself.",
                related=[Related("installed here", ctx.display_path, ctx.span(found.site)[0])],
            )
