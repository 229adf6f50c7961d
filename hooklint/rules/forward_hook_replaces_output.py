"""HKL407: a forward hook returning a value that replaces the module's output (hook-semantics.md, section 6)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_arguments import non_output_returns
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind


class ForwardHookReplacesOutput(Rule):
    """
    ## What it does
    Reports a forward hook (or forward pre-hook) that returns, on some
    path, a value that cannot be meant as the module's new output (or
    input): a Python number, string or bool, a size (`len(x)`,
    `t.numel()`, `t.shape`), or, in a hook that returns nothing on its
    other paths, the value of a bookkeeping function of the same file
    (`return zero_ops()` in a FLOP counter).  At run time (`hooklint run`,
    `hooklint.instrument()`), a forward hook that replaces a tensor output
    with a non-tensor or with a one-element tensor is reported wherever
    the hook is defined.

    ## Why is this bad?
    PyTorch treats any value a forward hook returns other than `None` as the
    module's new output (and a forward pre-hook's as its new input).  A
    counter that `return`s its count on an early path silently replaces, say,
    an upsampling layer's feature map with a one-element tensor while it
    profiles the model: the rest of the forward fails with a shape error, or
    computes garbage without any error.

    ## Known problems
    A hook that returns a value derived from its arguments (`return
    output * mask`, `return (x,)`) is taken as a deliberate replacement.
    The static check sees the functions of the same file; a hook picked
    from a table in another file (thop's `register_hooks`) is found at run
    time only.

    ## Example
    ```python
    import torch.nn as nn

    def count_upsample(module, inputs, output):
        if module.mode == "nearest":
            return 0
        module.total_ops += output.numel()

    upsample = nn.Upsample(scale_factor=2)
    upsample.total_ops = 0
    upsample.register_forward_hook(count_upsample)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def count_upsample(module, inputs, output):
        if module.mode == "nearest":
            return
        module.total_ops += output.numel()

    upsample = nn.Upsample(scale_factor=2)
    upsample.total_ops = 0
    upsample.register_forward_hook(count_upsample)
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - pytorch-OpCounter (thop) issue 169 (`count_upsample` returned the zero-op counter)
    """

    code = "HKL407"
    name = "forward-hook-replaces-output"
    summary = "A forward hook returns a value (a count, a flag) that replaces the module's output"
    severity = Severity.ERROR
    origins = (Origin.STATIC, Origin.RUNTIME)
    triggers = ("register_forward_hook", "register_forward_pre_hook", "register_module_forward") \
        + DYNAMIC_NAME_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # a deliberate replacement
        "import torch.nn as nn\n"
        "nn.Linear(2, 2).register_forward_hook(lambda m, i, o: o * 0.5)\n",
        # a bare return
        "import torch.nn as nn\n"
        "def hook(module, inputs, output):\n"
        "    if module.training:\n"
        "        return\n"
        "    module.calls += 1\n"
        "nn.Linear(2, 2).register_forward_hook(hook)\n",
        # a pre-hook returning new inputs
        "import torch.nn as nn\n"
        "def pre(module, inputs):\n"
        "    return (inputs[0].float(),)\n"
        "nn.Linear(2, 2).register_forward_pre_hook(pre)\n",
        # an unknown call's value: it may be None
        "import torch.nn as nn\n"
        "def hook(module, inputs, output):\n"
        "    return log(module)\n"
        "nn.Linear(2, 2).register_forward_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def count(module, inputs, output):\n"
            "    if module.mode == 'nearest':\n"
            "        return 0  # HKL407\n"
            "    module.total_ops += output.numel()\n"
            "nn.Upsample(scale_factor=2).register_forward_hook(count)\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "def zero_ops():\n"
            "    return torch.zeros(1)\n"
            "def count(module, inputs, output):\n"
            "    if module.mode not in ('nearest', 'bilinear'):\n"
            "        return zero_ops()  # HKL407\n"
            "    module.total_ops += output.numel()\n"
            "nn.Upsample(scale_factor=2).register_forward_hook(count)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "nn.Linear(2, 2).register_forward_hook(lambda m, i, o: o.numel())  # HKL407\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.instances_by_kind(HookKind.FORWARD, HookKind.FORWARD_PRE):
            hook = reg.hook
            if hook is None or id(hook.node) in seen:
                continue
            seen.add(id(hook.node))
            params = list(hook.params)
            for found in non_output_returns(ctx.model, hook.node, params):
                replaced = "output" if reg.kind is HookKind.FORWARD else "input"
                kind = "forward hook" if reg.kind is HookKind.FORWARD else "forward pre-hook"
                yield self.finding(
                    ctx, found.node,
                    message=(f"{kind} `{hook.name}` returns {found.what} here: PyTorch takes any value a {kind} "
                             f"returns other than None as the module's new {replaced}, so this replaces the "
                             f"{replaced} of `{reg.receiver_text}` while the hook is registered"),
                    help="Return nothing (`return`) on bookkeeping paths; keep the value elsewhere "
                         "(`module.total_ops += ...`).",
                )
