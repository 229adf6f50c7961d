"""HKL905: a state-dict hook uses as a tensor an attribute the constructor may set to a Python number."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.state_dict import TRIGGERS
from hooklint.static.state_dict_numbers import number_as_tensor

_EVENTS = {
    "register_load_state_dict_post_hook": "`load_state_dict()`",
    "register_load_state_dict_pre_hook": "`load_state_dict()`",
    "_register_load_state_dict_pre_hook": "`load_state_dict()`",
    "register_state_dict_pre_hook": "`state_dict()`",
    "register_state_dict_post_hook": "`state_dict()`",
    "_register_state_dict_hook": "`state_dict()`",
}


class StateDictHookNumberAsTensor(Rule):
    """
    ## What it does
    Reports a state-dict or load-state-dict hook a module registers on
    itself whose body uses one of the module's attributes as a tensor
    (`torch.ones_like(self.scale)`, `nn.Parameter(self.scale)`,
    `self.scale.data`, `self.scale.copy_(...)`) with no test around it,
    when the constructor can set that attribute to a Python number
    (`self.scale = 1.0` on one branch, a `Parameter` on the other) and no
    other method assigns it.

    ## Why is this bad?
    A number has no tensor API: `torch.ones_like(1.0)` raises `TypeError`,
    `(1.0).data` raises `AttributeError`.  The forward usually copes with
    both (`x * self.scale`), so training works, and the hook fails only
    when the checkpoint is saved or loaded, for every module built with the
    option that stores the number: a resume that was never tested.

    ## Known problems
    A subclass in another file, or code outside the class, may set the
    attribute to a tensor before the hook runs; the message says it rests
    on the class as written.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    class Adapter(nn.Module):
        def __init__(self, learn_scale=False):
            super().__init__()
            if learn_scale:
                self.scale = nn.Parameter(torch.tensor(0.0))
            else:
                self.scale = 1.0
            self.register_load_state_dict_post_hook(self.after_load)

        def after_load(self, module, incompatible_keys):
            self.scale = nn.Parameter(torch.ones_like(self.scale))
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    class Adapter(nn.Module):
        def __init__(self, learn_scale=False):
            super().__init__()
            if learn_scale:
                self.scale = nn.Parameter(torch.tensor(0.0))
            else:
                self.register_buffer("scale", torch.tensor(1.0))
            self.register_load_state_dict_post_hook(self.after_load)

        def after_load(self, module, incompatible_keys):
            self.scale = nn.Parameter(torch.ones_like(self.scale))
    ```

    ## Fix safety
    There is no automatic fix: store the default as a tensor (a buffer),
    or test `isinstance(self.scale, torch.Tensor)` in the hook.

    ## References
    - [`Module.register_load_state_dict_post_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_load_state_dict_post_hook)
    - LyCORIS commit 893b2fd (`torch.ones_like(self.scalar)` on the float default)
    """

    code = "HKL905"
    name = "state-dict-hook-number-as-tensor"
    summary = "A state-dict hook uses as a tensor an attribute the constructor may set to a Python number"
    severity = Severity.WARNING
    triggers = tuple(t for t in TRIGGERS if t != "_load_from_state_dict")
    VALID: ClassVar[tuple[str, ...]] = (
        # a test around the use
        "import torch\n"
        "import torch.nn as nn\n"
        "class Adapter(nn.Module):\n"
        "    def __init__(self, learn=False):\n"
        "        super().__init__()\n"
        "        self.scale = nn.Parameter(torch.tensor(0.0)) if learn else 1.0\n"
        "        self.register_load_state_dict_post_hook(self.after_load)\n"
        "    def after_load(self, module, keys):\n"
        "        if isinstance(self.scale, torch.Tensor):\n"
        "            self.scale = nn.Parameter(torch.ones_like(self.scale))\n",
        # another method makes it a tensor: not judged
        "import torch\n"
        "import torch.nn as nn\n"
        "class Adapter(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.scale = 1.0\n"
        "        self.register_state_dict_pre_hook(self.before_save)\n"
        "    def build(self):\n"
        "        self.scale = nn.Parameter(torch.ones(1))\n"
        "    def before_save(self, module, prefix, keep_vars):\n"
        "        self.scale.data.clamp_(0, 1)\n",
        # the number is used as a number
        "import torch.nn as nn\n"
        "class Adapter(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.scale = 1.0\n"
        "        self.register_state_dict_post_hook(self.save_scale)\n"
        "    def save_scale(self, module, state_dict, prefix, local_metadata):\n"
        "        state_dict[prefix + 'scale'] = float(self.scale)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "import torch.nn as nn\n"
            "class Adapter(nn.Module):\n"
            "    def __init__(self, learn=False):\n"
            "        super().__init__()\n"
            "        if learn:\n"
            "            self.scale = nn.Parameter(torch.tensor(0.0))\n"
            "        else:\n"
            "            self.scale = 1.0\n"
            "        self.register_load_state_dict_post_hook(self.after_load)\n"
            "    def after_load(self, *args):\n"
            "        self.scale = nn.Parameter(torch.ones_like(self.scale))  # HKL905\n"
        ),
        Invalid(
            "import torch\n"
            "import torch.nn as nn\n"
            "class Gate(nn.Module):\n"
            "    def __init__(self, init=None):\n"
            "        super().__init__()\n"
            "        self.gate = init if init is not None else 0\n"
            "        def keep_gate(module, state_dict, prefix, local_metadata):\n"
            "            state_dict[prefix + 'gate'] = module.gate.detach()  # HKL905\n"
            "        self._register_state_dict_hook(keep_gate)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in number_as_tensor(ctx.model, ctx.inference):
            value = found.number.value
            event = _EVENTS.get(found.api, "the hook's event")
            yield self.finding(
                ctx, found.use,
                message=(f"state-dict hook `{getattr(found.hook, 'name', '<hook>')}` (`{found.api}`) uses "
                         f"`{found.attr}` as a tensor ({found.how}), but the constructor can set "
                         f"`self.{found.attr} = {value!r}` (line {found.number.lineno}), a Python number, and "
                         f"no other method of the class assigns it: for every module built that way, "
                         f"{event} raises (`TypeError` or `AttributeError`), unless code outside the class "
                         f"makes it a tensor first"),
                help=f"Store the default of `{found.attr}` as a tensor (`register_buffer`), or test "
                     f"`isinstance(self.{found.attr}, torch.Tensor)` in the hook.",
                related=[Related("the number is set here", ctx.display_path, ctx.span(found.number)[0]),
                         Related("hook registered here", ctx.display_path, ctx.span(found.registration)[0])],
            )
