"""HKL902: a module makes its own lazy parameter but nothing materializes it when a state dict is loaded."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.state_dict import handles_lazy_loading, lazy_modules


class LazyTensorWithoutLoadHook(Rule):
    """
    ## What it does
    Reports an `nn.Module` class that creates an `UninitializedParameter` or
    `UninitializedBuffer` itself (outside torch's `LazyModuleMixin`) and
    neither registers a load-state-dict pre-hook nor overrides
    `_load_from_state_dict` / `load_state_dict` to materialize it.

    ## Why is this bad?
    A lazy tensor gets its shape from the first forward (usually through a
    forward pre-hook that calls `materialize`).  `load_state_dict` on a module
    that has not run yet cannot copy a checkpoint into it: torch skips the
    shape check for lazy tensors and the copy fails ("While copying the
    parameter named ..."), so a trained model cannot be rebuilt and loaded
    without a dummy forward first; the initialising forward pre-hook also
    stays registered.  `LazyModuleMixin` does this with a load-state-dict
    pre-hook that materializes each lazy tensor to the checkpoint's shape;
    a module that makes its own lazy tensors must do the same.

    ## Known problems
    A base class in another file may handle the loading; the rule stays
    quiet when a base class cannot be seen.

    ## Example
    ```python
    import torch.nn as nn

    class Linear(nn.Module):
        def __init__(self, out_features):
            super().__init__()
            self.out_features = out_features
            self.weight = nn.parameter.UninitializedParameter()
            self._hook = self.register_forward_pre_hook(self._init)

        def _init(self, module, inputs):
            self.weight.materialize((self.out_features, inputs[0].shape[-1]))
            self._hook.remove()

        def forward(self, x):
            return x @ self.weight.t()
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Linear(nn.Module):
        def __init__(self, out_features):
            super().__init__()
            self.out_features = out_features
            self.weight = nn.parameter.UninitializedParameter()
            self._hook = self.register_forward_pre_hook(self._init)

        def _init(self, module, inputs):
            self.weight.materialize((self.out_features, inputs[0].shape[-1]))
            self._hook.remove()

        def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
            weight = state_dict.get(prefix + "weight")
            if weight is not None and isinstance(self.weight, nn.parameter.UninitializedParameter):
                self.weight.materialize(weight.shape)
                self._hook.remove()
            super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

        def forward(self, x):
            return x @ self.weight.t()
    ```

    ## Fix safety
    There is no automatic fix; materialize the lazy tensors to the
    checkpoint's shapes before the copy (a load-state-dict pre-hook or an
    `_load_from_state_dict` override), or derive from `LazyModuleMixin`.

    ## References
    - [`torch.nn.parameter.UninitializedParameter`](https://pytorch.org/docs/stable/generated/torch.nn.parameter.UninitializedParameter.html)
    - [`torch.nn.modules.lazy.LazyModuleMixin`](https://pytorch.org/docs/stable/generated/torch.nn.modules.lazy.LazyModuleMixin.html)
    - [`Module.register_load_state_dict_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_load_state_dict_pre_hook)
    """

    code = "HKL902"
    name = "lazy-tensor-without-load-hook"
    summary = "A module creates its own lazy parameter or buffer but nothing materializes it before load_state_dict copies into it"
    severity = Severity.WARNING
    triggers = ("UninitializedParameter", "UninitializedBuffer")
    VALID: ClassVar[tuple[str, ...]] = (
        # torch's mixin registers the load hook
        "import torch.nn as nn\n"
        "from torch.nn.modules.lazy import LazyModuleMixin\n"
        "class LazyScale(LazyModuleMixin, nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.scale = nn.UninitializedParameter()\n"
        "    def initialize_parameters(self, x):\n"
        "        self.scale.materialize(x.shape[-1:])\n",
        # a load pre-hook registered by a local base class
        "import torch, torch.nn as nn\n"
        "from torch.nn.parameter import UninitializedBuffer\n"
        "class LoadsLazily(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_load_state_dict_pre_hook(LoadsLazily._materialize)\n"
        "    @staticmethod\n"
        "    def _materialize(module, state_dict, prefix, *args):\n"
        "        for name, buf in module._buffers.items():\n"
        "            if isinstance(buf, UninitializedBuffer) and prefix + name in state_dict:\n"
        "                buf.materialize(state_dict[prefix + name].shape)\n"
        "class Stats(LoadsLazily):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('mean', UninitializedBuffer())\n",
        # the base class is in another file: it may handle loading
        "import torch\n"
        "from .base import Conv\n"
        "class Spline(Conv):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.weight = torch.nn.parameter.UninitializedParameter()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "from torch.nn import Parameter\n"
            "class Linear(torch.nn.Module):\n"
            "    def __init__(self, in_channels, out_channels):\n"
            "        super().__init__()\n"
            "        self.out_channels = out_channels\n"
            "        if in_channels > 0:\n"
            "            self.weight = Parameter(torch.empty(out_channels, in_channels))\n"
            "        else:\n"
            "            self.weight = torch.nn.parameter.UninitializedParameter()  # HKL902\n"
            "            self._hook = self.register_forward_pre_hook(self.initialize_parameters)\n"
            "    def initialize_parameters(self, module, input):\n"
            "        self.weight.materialize((self.out_channels, input[0].size(-1)))\n"
            "        self._hook.remove()\n"
        ),
        Invalid(
            "import torch.nn as tnn\n"
            "from torch.nn.parameter import UninitializedBuffer as Lazy\n"
            "class RunningStats(tnn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.register_buffer('mean', Lazy())  # HKL902\n"
            "    def forward(self, x):\n"
            "        if isinstance(self.mean, Lazy):\n"
            "            self.mean.materialize(x.shape[1:])\n"
            "        return x - self.mean\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for info, calls in lazy_modules(ctx.model):
            if handles_lazy_loading(ctx.model, info) is not False:
                continue
            for call in calls:
                yield self.finding(
                    ctx, call,
                    message=f"`{info.name}` makes a lazy tensor here but registers no load-state-dict pre-hook "
                    "and does not override `_load_from_state_dict`: `load_state_dict` on a module that has not "
                    "run its first forward cannot copy the checkpoint into the uninitialized tensor and fails, "
                    "and the initialising forward pre-hook, if any, stays registered",
                    help="Materialize the lazy tensor to the checkpoint's shape before the copy (an "
                    "`_load_from_state_dict` override or `_register_load_state_dict_pre_hook`, as torch's "
                    "LazyModuleMixin does), or derive from `torch.nn.modules.lazy.LazyModuleMixin`.",
                )
