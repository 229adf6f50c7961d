"""HKL901: a load-state-dict hook re-registers a parameter or buffer with the checkpoint's tensor."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.state_dict import TRIGGERS, checkpoint_replacements, load_hooks


class LoadHookReplacesTensor(Rule):
    """
    ## What it does
    Reports a load-state-dict pre-hook (`_register_load_state_dict_pre_hook`,
    `register_load_state_dict_pre_hook`) or an override of
    `_load_from_state_dict` that puts the checkpoint's own tensor into the
    module: `register_parameter(name, nn.Parameter(state_dict[key]))`,
    `register_buffer(name, state_dict[key])`, `self.weight =
    nn.Parameter(state_dict[prefix + "weight"])`, `setattr(...)` or a store
    into `_parameters` / `_buffers`.

    ## Why is this bad?
    `load_state_dict` copies the checkpoint *into* the module's existing
    tensors: every Parameter and buffer object stays the same, which is what
    an optimizer built before the load, hooks on the parameters
    (`p.register_hook`, DDP / FSDP reducers) and tied weights rely on.  A hook
    that swaps in a new object breaks all of them silently: the optimizer
    keeps updating the old parameters (which no longer take part in the
    forward), the module's tensors alias the loaded state dict (editing one
    edits the other) and land on the checkpoint's device instead of the
    module's.  torch's own lazy modules materialize the existing parameter in
    place (`param.materialize(shape)`) and let the copy happen.

    ## Known problems
    `load_state_dict(..., assign=True)` replaces tensors on purpose; a hook
    written only for that mode is reported too.  Only replacements by the
    checkpoint's tensor itself (or a `Parameter` / copy of it) are reported; a
    hook that resizes a parameter to a new empty tensor before the copy is
    not, nor a tensor registered under a constant name the class gives no
    tensor elsewhere (a staging buffer for a later quantization is new, not
    a replacement).

    ## Example
    ```python
    import torch.nn as nn

    class Lazy(nn.Linear):
        def __init__(self):
            super().__init__(4, 4)
            self._register_load_state_dict_pre_hook(self._load_hook)

        def _load_hook(self, state_dict, prefix, *args):
            self.register_parameter("weight", nn.Parameter(state_dict[prefix + "weight"]))
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Lazy(nn.Linear):
        def __init__(self):
            super().__init__(4, 4)
            self._register_load_state_dict_pre_hook(self._load_hook)

        def _load_hook(self, state_dict, prefix, *args):
            if self.weight.shape != state_dict[prefix + "weight"].shape:
                raise RuntimeError("checkpoint of another shape")
            # nothing to replace: load_state_dict copies into self.weight
    ```

    ## Fix safety
    There is no automatic fix: materialize or check the existing tensor in
    the hook and let `load_state_dict` copy the values.

    ## References
    - [`Module.load_state_dict`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.load_state_dict)
    - [`Module.register_load_state_dict_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_load_state_dict_pre_hook)
    - [`torch.nn.modules.lazy.LazyModuleMixin`](https://pytorch.org/docs/stable/generated/torch.nn.modules.lazy.LazyModuleMixin.html)
    """

    code = "HKL901"
    name = "load-hook-replaces-tensor"
    summary = "A load-state-dict hook replaces a parameter or buffer with the checkpoint's tensor instead of copying into it"
    severity = Severity.WARNING
    triggers = TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # materialized in place: the copy goes into the same object
        "import torch.nn as nn\n"
        "class Lazy(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.weight = nn.parameter.UninitializedParameter()\n"
        "        self._register_load_state_dict_pre_hook(self._hook)\n"
        "    def _hook(self, state_dict, prefix, *args):\n"
        "        self.weight.materialize(state_dict[prefix + 'weight'].shape)\n",
        # a buffer registered as None has no tensor to copy into: setting it is how it loads (diffsynth's FP8 scale)
        "import torch.nn as nn\n"
        "class ScaledLinear(nn.Linear):\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        super().__init__(*args, **kwargs)\n"
        "        self.register_buffer('input_scale', None)\n"
        "    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):\n"
        "        scale = state_dict.pop(prefix + 'input_scale', None)\n"
        "        if scale is not None:\n"
        "            self.input_scale = scale\n"
        "        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)\n",
        # the hook edits the state dict, not the module
        "import torch.nn as nn\n"
        "def rename(module, state_dict, prefix, *args):\n"
        "    if prefix + 'w' in state_dict:\n"
        "        state_dict[prefix + 'weight'] = state_dict.pop(prefix + 'w')\n"
        "layer = nn.Linear(2, 2)\n"
        "layer.register_load_state_dict_pre_hook(rename)\n",
        # a new empty tensor of the checkpoint's shape: resized, then copied into
        "import torch, torch.nn as nn\n"
        "class Grow(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_buffer('table', torch.zeros(0))\n"
        "        self._register_load_state_dict_pre_hook(self._resize)\n"
        "    def _resize(self, state_dict, prefix, *args):\n"
        "        self.register_buffer('table', torch.empty(state_dict[prefix + 'table'].shape))\n",
        # a new staging buffer, not one of the module's tensors
        "import torch.nn as nn\n"
        "class Experts(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self._gate_up_pending = None\n"
        "    def _load_from_state_dict(self, state_dict, prefix, *args):\n"
        "        key = prefix + 'gate_up_proj'\n"
        "        if key in state_dict:\n"
        "            self.register_buffer('_gate_up_pending', state_dict.pop(key))\n"
        "        else:\n"
        "            super()._load_from_state_dict(state_dict, prefix, *args)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class Mixin:\n"
            "    names = ('weight',)\n"
            "    def __init__(self, *a, **k):\n"
            "        super().__init__(*a, **k)\n"
            "        self._register_load_state_dict_pre_hook(self._lazy_load)\n"
            "    def _lazy_load(self, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):\n"
            "        for name in self.names:\n"
            "            key = prefix + name\n"
            "            if key in state_dict:\n"
            "                self.register_parameter(name, torch.nn.Parameter(state_dict[key]))  # HKL901\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def take(module, state_dict, prefix, *rest):\n"
            "    table = state_dict.get(prefix + 'table')\n"
            "    if table is not None:\n"
            "        module.weight = table.to('cpu')  # HKL901\n"
            "emb = nn.Module()\n"
            "emb.register_load_state_dict_pre_hook(take)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Swap(nn.Linear):\n"
            "    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):\n"
            "        for key, value in state_dict.items():\n"
            "            if key == prefix + 'bias':\n"
            "                self._parameters['bias'] = nn.Parameter(value)  # HKL901\n"
            "        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for hook in load_hooks(ctx.model, ctx.inference):
            for rep in checkpoint_replacements(ctx.model, hook):
                if id(rep.node) in seen:
                    continue
                seen.add(id(rep.node))
                yield self.finding(
                    ctx, rep.node,
                    message=f"this {hook.how} replaces a tensor of the module with the checkpoint's own tensor "
                    f"(`{rep.target}`) instead of letting `load_state_dict` copy into the existing one: "
                    "an optimizer built before the load keeps updating the old parameter, hooks and tied "
                    "weights on it are lost, and the module's tensor now aliases the loaded state dict",
                    help="Keep the module's tensor and let the load copy into it: materialize or check it in "
                    "the hook (`param.materialize(shape)`, raise on a mismatch), or resize a buffer in place "
                    "(`buf.resize_(shape)`).",
                )
