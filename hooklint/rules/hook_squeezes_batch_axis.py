"""HKL423: an activation hook squeezes axis 0 away, then indexes axis 0 as if it were the position axis."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.batch_axis import squeezed_axis_uses
from hooklint.static.context import FileContext


class HookSqueezesBatchAxis(Rule):
    """
    ## What it does
    Reports a hook that receives a batched activation (a forward hook's
    `output`; the activation a TransformerLens-style hook `fn(activation,
    hook)` gets, where the function is handed to the hook API as a
    `(name, fn)` pair, through `functools.partial`, or to `add_hook` /
    `run_with_hooks`), keeps `activation...squeeze(0)` in a variable and
    then indexes or assigns along axis 0 of it (`acts[positions] = 0`,
    `acts[idx]`), without looking at the batch size anywhere in the hook.

    ## Why is this bad?
    `squeeze(0)` removes axis 0 only when its size is 1.  With one prompt
    the squeezed activation is `(pos, d)` and `acts[positions]` picks token
    positions; with a batch of several prompts nothing is squeezed, the
    activation stays `(batch, pos, d)`, and the same index picks (or
    zeroes) whole prompts.  The batched run silently disagrees with
    per-prompt runs, with no error.

    ## Known problems
    A hook only ever run with a batch of one is reported too; the severity
    is *warning*.  A hook that tests `x.shape[0]`, `x.size(0)` or `len(x)`
    is not reported.

    ## Example
    ```python
    from functools import partial

    def caching_hooks(encoder, zero_positions, n_layers):
        cache = [None] * n_layers

        def cache_acts(acts, hook, layer):
            feats = encoder(acts, layer).detach().squeeze(0)
            feats[zero_positions] = 0
            cache[layer] = feats

        return cache, [(f"blocks.{i}.hook_resid_mid", partial(cache_acts, layer=i)) for i in range(n_layers)]

    def get_activations(model, tokens, encoder, zero_positions):
        cache, hooks = caching_hooks(encoder, zero_positions, model.cfg.n_layers)
        with model.hooks(hooks):
            model(tokens)
        return cache
    ```

    ## Use instead
    ```python
    from functools import partial

    def caching_hooks(encoder, zero_positions, n_layers):
        cache = [None] * n_layers

        def cache_acts(acts, hook, layer):
            feats = encoder(acts, layer).detach()
            feats[:, zero_positions] = 0  # (batch, pos, d): positions are axis 1
            cache[layer] = feats

        return cache, [(f"blocks.{i}.hook_resid_mid", partial(cache_acts, layer=i)) for i in range(n_layers)]

    def get_activations(model, tokens, encoder, zero_positions):
        cache, hooks = caching_hooks(encoder, zero_positions, model.cfg.n_layers)
        with model.hooks(hooks):
            model(tokens)
        return cache
    ```

    ## Fix safety
    There is no automatic fix: which axis is meant is for the author to say.

    ## References
    - [`torch.squeeze`](https://pytorch.org/docs/stable/generated/torch.squeeze.html) ("a dimension of size 1 ... is removed", otherwise the tensor is unchanged)
    - circuit-tracer PR 105 (the caching hook's zeroing hit whole prompts in batched runs)
    """

    code = "HKL423"
    name = "hook-squeezes-batch-axis"
    summary = "An activation hook squeezes axis 0, then indexes axis 0, whose meaning depends on the batch size"
    severity = Severity.WARNING
    # a hook API word, and the squeeze (alone, `squeeze(0)` would admit a fifth of all model code)
    triggers = ("register_forward_hook", "add_hook", "fwd_hooks", "run_with_hooks", ".hooks(")
    trigger_pattern = r"squeeze\((?:dim=)?0\)"

    VALID: ClassVar[tuple[str, ...]] = (
        # the position axis is indexed explicitly
        "def zero_hook(acts, hook, positions):\n"
        "    acts = acts.clone()\n"
        "    acts[:, positions] = 0\n"
        "    return acts\n"
        "hooks = [('blocks.0.hook_resid_pre', zero_hook)]\n",
        # the hook checks the batch size
        "def cache_hook(acts, hook, store, positions):\n"
        "    assert acts.shape[0] == 1, 'one prompt at a time'\n"
        "    single = acts.squeeze(0)\n"
        "    single[positions] = 0\n"
        "    store.append(single)\n"
        "hooks = [('blocks.0.hook_resid_pre', cache_hook)]\n",
        # a function with a `hook` parameter that is not handed to a hook API
        "def summarize(acts, hook):\n"
        "    flat = acts.squeeze(0)\n"
        "    return flat[0]\n"
        "print(summarize)\n",
        # a full slice on axis 0 keeps every row
        "def keep(module, inputs, output):\n"
        "    out = output.squeeze(0)\n"
        "    return out[:, :4]\n"
        "import torch.nn as nn\n"
        "nn.Linear(4, 8).register_forward_hook(keep)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "from functools import partial\n"
            "def caching_hooks(encoder, zero_positions, n_layers):\n"
            "    cache = [None] * n_layers\n"
            "    def cache_acts(acts, hook, layer):\n"
            "        feats = encoder(acts, layer).detach().squeeze(0)\n"
            "        feats[zero_positions] = 0  # HKL423\n"
            "        cache[layer] = feats\n"
            "    return cache, [(f'blocks.{i}.mlp.hook_in', partial(cache_acts, layer=i)) for i in range(n_layers)]\n"
            "def run(model, tokens, encoder, positions):\n"
            "    cache, hooks = caching_hooks(encoder, positions, model.cfg.n_layers)\n"
            "    with model.hooks(hooks):\n"
            "        model(tokens)\n"
            "    return cache\n"
        ),
        # a forward hook, reading rather than writing
        Invalid(
            "import torch.nn as nn\n"
            "last_tokens = []\n"
            "def take_last(module, inputs, output):\n"
            "    hidden = output.squeeze(dim=0)\n"
            "    last_tokens.append(hidden[-1])  # HKL423\n"
            "block = nn.Linear(8, 8)\n"
            "block.register_forward_hook(take_last)\n"
        ),
        # a method handed to add_hook
        Invalid(
            "class Ablator:\n"
            "    def __init__(self, model, name, heads):\n"
            "        self.heads = heads\n"
            "        model.add_hook(name, self.ablate)\n"
            "    def ablate(self, z, hook):\n"
            "        per_head = z.squeeze(0)\n"
            "        per_head[self.heads] = 0.0  # HKL423\n"
            "        return per_head\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in squeezed_axis_uses(ctx):
            hook_name = getattr(found.hook, "name", "<hook>")
            line = ctx.span(found.squeeze)[0]
            yield self.finding(
                ctx, found.use,
                f"`{hook_name}`, {found.api}, squeezes axis 0 of its activation `{found.activation}` into "
                f"`{found.name}` (line {line.row}) and then indexes `{ast.unparse(found.use)}` along axis 0: "
                f"`squeeze(0)` removes axis 0 only when the batch has one element, so this picks token positions "
                f"for one prompt but whole batch items for several, and batched results silently disagree with "
                f"per-prompt runs",
                help="Index the position axis explicitly (`x[:, positions]` on the batched activation), or check "
                     "`x.shape[0] == 1` before squeezing.",
                related=[Related("the squeeze", ctx.display_path, line)],
            )
