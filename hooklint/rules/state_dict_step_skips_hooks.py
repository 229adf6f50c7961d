"""HKL904: a module's private `_load_from_state_dict` / `_save_to_state_dict` called directly skips state-dict hooks."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.state_dict_walks import PRIVATE_STEPS, STATE_DICT_TRIGGERS, hook_skipping_calls


class StateDictStepSkipsHooks(Rule):
    """
    ## What it does
    Reports a direct call of a module's private `_load_from_state_dict`
    or `_save_to_state_dict`, made outside an override of that same method
    (where `super()._load_from_state_dict(...)` is the way to extend it), in
    code that never runs the hooks the public method would run: it reads
    neither `_load_state_dict_post_hooks` (for loading) nor
    `_state_dict_pre_hooks` / `_state_dict_hooks` (for saving).

    ## Why is this bad?
    `nn.Module.load_state_dict` walks the modules, calls each one's
    `_load_from_state_dict` and then runs the hooks registered with
    `register_load_state_dict_post_hook` (the place models tie or fix up
    weights after loading, and where libraries such as PEFT or quantizers
    adjust their state).  `nn.Module.state_dict` runs the hooks of
    `register_state_dict_pre_hook` and `register_state_dict_post_hook`
    around `_save_to_state_dict`.  A loader that walks the tree itself and
    calls the private step loads the tensors, but those hooks never run: no
    error, the model silently misses what they do.  mmengine's
    `load_state_dict` (the runner's checkpoint loader) skipped the load post
    hooks this way until 0.7.3.

    ## Known problems
    A loader that runs the hooks through a helper in another file, or whose
    models are known to register none, is reported too.

    ## Example
    ```python
    def load_checkpoint(model, state_dict):
        missing, unexpected, errors = [], [], []

        def load(module, prefix=""):
            module._load_from_state_dict(state_dict, prefix, {}, True, missing, unexpected, errors)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")

        load(model)
        return missing, unexpected
    ```

    ## Use instead
    ```python
    def load_checkpoint(model, state_dict):
        result = model.load_state_dict(state_dict, strict=False)
        return result.missing_keys, result.unexpected_keys
    ```

    Or run `module._load_state_dict_post_hooks` yourself after the walk, as
    `nn.Module.load_state_dict` does.

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`Module.register_load_state_dict_post_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_load_state_dict_post_hook)
    - [`Module.register_state_dict_post_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_state_dict_post_hook)
    """

    code = "HKL904"
    name = "state-dict-step-skips-hooks"
    summary = ("A module's private `_load_from_state_dict` / `_save_to_state_dict` called directly: the "
               "state-dict hooks `load_state_dict()` / `state_dict()` run are skipped")
    severity = Severity.WARNING
    triggers = STATE_DICT_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # extending the step in an override
        "import torch.nn as nn\n"
        "class Renamed(nn.Linear):\n"
        "    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):\n"
        "        if prefix + 'w' in state_dict:\n"
        "            state_dict[prefix + 'weight'] = state_dict.pop(prefix + 'w')\n"
        "        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)\n",
        # a walk that runs the post hooks itself
        "def load(module, sd, missing, unexpected, errors, prefix=''):\n"
        "    module._load_from_state_dict(sd, prefix, {}, True, missing, unexpected, errors)\n"
        "    for name, child in module._modules.items():\n"
        "        load(child, sd, missing, unexpected, errors, prefix + name + '.')\n"
        "    for hook in module._load_state_dict_post_hooks.values():\n"
        "        hook(module, None)\n",
        # the public method
        "def load(model, sd):\n"
        "    return model.load_state_dict(sd, strict=False)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def load_state_dict(module, state_dict, strict=False):\n"
            "    missing, unexpected, errors = [], [], []\n"
            "    def load(module, prefix=''):\n"
            "        module._load_from_state_dict(state_dict, prefix, {}, True, missing, unexpected, errors)  # HKL904\n"
            "        for name, child in module._modules.items():\n"
            "            if child is not None:\n"
            "                load(child, prefix + name + '.')\n"
            "    load(module)\n"
            "    return missing, unexpected\n"
        ),
        Invalid(
            "from collections import OrderedDict\n"
            "class Exporter:\n"
            "    def export(self, model):\n"
            "        out = OrderedDict()\n"
            "        for name, sub in model.named_modules():\n"
            "            sub._save_to_state_dict(out, name + '.' if name else '', True)  # HKL904\n"
            "        return out\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for site in hook_skipping_calls(ctx.model):
            public, dicts, registers = PRIVATE_STEPS[site.step]
            hooks = " / ".join(f"`{r}`" for r in registers)
            yield self.finding(
                ctx, site.call,
                f"`{site.step}` is called directly, not through `{public}()`: the hooks that `{public}()` runs "
                f"around it (registered with {hooks}) never run for these modules, and nothing here runs them "
                f"({' / '.join(f'`{d}`' for d in dicts)} is never read), so a model that relies on one (to tie, "
                f"fix up or convert weights) silently misses it",
                help=f"Call `{public}()` on the module, or run the module's {' / '.join(f'`{d}`' for d in dicts)} "
                     f"yourself where `nn.Module.{public}` does.",
            )
