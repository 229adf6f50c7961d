"""HKL906: a state-dict hook spells the state dict's keys as fixed strings and never uses its prefix."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.state_dict_keys import KEY_HOOK_TRIGGERS, fixed_key_uses
from hooklint.static.values import src


class StateDictHookIgnoresPrefix(Rule):
    """
    ## What it does
    Reports a `state_dict` post-hook (`register_state_dict_post_hook`,
    `_register_state_dict_hook`) or a `load_state_dict` pre-hook
    (`register_load_state_dict_pre_hook`, `_register_load_state_dict_pre_hook`)
    that reads, writes, deletes or tests keys of the state dict spelled as
    fixed strings (`state_dict["decoder.weight"]`,
    `state_dict.pop(f"tok_embeddings.{n}")`,
    `key.startswith("decoder.tok_embeddings")`) and never uses the `prefix`
    argument torch passes it (a named parameter it never reads, or one
    swallowed by `*args`).

    ## Why is this bad?
    torch gives these hooks the state dict of the whole `state_dict()` or
    `load_state_dict()` call, with the keys of every module in it, and
    `prefix`, the hooked module's own path in it (`"model.fusion."`).  The
    hooked module's keys are `prefix + name`: fixed strings name them only
    while the module is the root of the call.  Nested in another model, or
    wrapped (DDP's `module.`, a PEFT or FSDP wrapper, a Lightning module),
    the hook looks up keys that do not exist (`KeyError` on `del`), writes
    entries at the top level of the parent's dict, or never matches the
    keys it should rename, so loading reports missing and unexpected keys
    or, with `strict=False`, silently skips the weights.

    ## Known problems
    A hook on a module that is never nested computes the right keys; the
    file cannot show how its users compose it, so the finding is a
    *warning*.  Keys tested with `endswith` or `in key` work at any depth
    and are not reported.

    ## Example
    ```python
    import torch.nn as nn

    class Fusion(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.register_state_dict_post_hook(self._rename)

        @staticmethod
        def _rename(module, state_dict, *args):
            state_dict["decoder.proj.weight"] = state_dict.pop("proj.weight")
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Fusion(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.register_state_dict_post_hook(self._rename)

        @staticmethod
        def _rename(module, state_dict, prefix, local_metadata):
            state_dict[prefix + "decoder.proj.weight"] = state_dict.pop(prefix + "proj.weight")
    ```

    ## Fix safety
    There is no automatic fix: where the prefix goes in each key is the
    author's to decide.

    ## References
    - [`Module.register_state_dict_post_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_state_dict_post_hook)
    - [`Module.register_load_state_dict_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_load_state_dict_pre_hook)
    """

    code = "HKL906"
    name = "state-dict-hook-ignores-prefix"
    summary = "A state_dict or load_state_dict hook spells the state dict's keys as fixed strings and ignores its prefix"
    severity = Severity.WARNING
    triggers = KEY_HOOK_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # the keys start with the prefix torch passes
        "import torch.nn as nn\n"
        "class Fusion(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(4, 4)\n"
        "        self.register_state_dict_post_hook(self._rename)\n"
        "    @staticmethod\n"
        "    def _rename(module, state_dict, prefix, local_metadata):\n"
        "        state_dict[prefix + 'decoder.proj.weight'] = state_dict.pop(prefix + 'proj.weight')\n",
        # keys matched by their end work at any depth
        "import torch.nn as nn\n"
        "class Legacy(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_load_state_dict_pre_hook(self._upgrade)\n"
        "    @staticmethod\n"
        "    def _upgrade(module, state_dict, *args):\n"
        "        for key in list(state_dict):\n"
        "            if key.endswith('.gamma'):\n"
        "                state_dict[key[:-6] + '.weight'] = state_dict.pop(key)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class Fusion(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.proj = nn.Linear(4, 4)\n"
            "        self.register_state_dict_post_hook(self._rename)\n"
            "    @staticmethod\n"
            "    def _rename(module, state_dict, *args):\n"
            "        state_dict['decoder.proj.weight'] = state_dict.pop('proj.weight')  # HKL906\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for use in fixed_key_uses(ctx.model, ctx.inference):
            yield self.finding(
                ctx, use.node,
                message=(f"{use.kind} `{use.hook_name}` (registered at line {use.registration.lineno}) spells a "
                         f"key as a fixed string, `{src(use.node)}`, and never uses the `prefix` torch passes it: "
                         f"the state dict holds the keys of the whole model `state_dict()`/`load_state_dict()` "
                         f"was called on, so once this module is a submodule (or wrapped: DDP, PEFT, FSDP) its "
                         f"keys start with the parent's prefix and the hook misses them"),
                help="Build the keys from `prefix` (`state_dict[prefix + 'name']`, `key.startswith(prefix + ...)`).",
            )
