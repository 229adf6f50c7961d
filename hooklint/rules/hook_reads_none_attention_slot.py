"""HKL424: a forward hook reads the attention-weights slot a fast attention path returns as None."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.attention_slots import none_slot_reads
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind


class HookReadsNoneAttentionSlot(Rule):
    """
    ## What it does
    Reports a forward hook that reads an element of its module's output
    (`output[1]`, `output[-1]`, `_, weights = output`) that the module
    returns as None on some path, when the hook tests nothing against None:

    - openai-whisper's attention blocks (`.attn` / `.cross_attn` of
      `model.encoder.blocks` or `model.decoder.blocks`, in a file that
      imports `whisper` or whose model is annotated `Whisper`), when a
      call that runs the model follows the registration in the same
      function outside a `with` block that switches SDPA off
      (`whisper.model.disable_sdpa()`);
    - a class of the file whose `forward` returns None in that slot on some
      path (the branch that calls `F.scaled_dot_product_attention`, which
      never computes the weights, is the usual one);
    - `nn.MultiheadAttention` called with `need_weights=False`, which
      torch's `nn.TransformerEncoderLayer` and `nn.TransformerDecoderLayer`
      always do for their `self_attn` / `multihead_attn` (unless the file
      calls or patches that attention itself).

    ## Why is this bad?
    A forward hook receives exactly what `forward` returned.  Attention
    modules with a fused path return `(out, None)` when that path runs:
    openai-whisper's `MultiHeadAttention` does while its class attribute
    `use_sdpa` is True, the default since release 20240930.  A hook written
    to collect attention maps from the second element then stores None, or
    raises on `None.shape` / `None.cpu()`, and word timestamps or attention
    plots built on the maps fail, often far from the hook.

    ## Known problems
    For openai-whisper the module's class is not in the file: it is known
    from the attribute path and the import, and only calls in the
    registering function are looked at (a model run by the caller is not
    seen).  The severity is *warning*.

    ## Example
    ```python
    import torch
    import whisper

    def cross_attention_maps(model, mel, tokens):
        maps = [None] * len(model.decoder.blocks)
        handles = [
            block.cross_attn.register_forward_hook(
                lambda module, inputs, outputs, i=i: maps.__setitem__(i, outputs[-1]))
            for i, block in enumerate(model.decoder.blocks)
        ]
        with torch.no_grad():
            model(mel, tokens)
        for handle in handles:
            handle.remove()
        return maps
    ```

    ## Use instead
    ```python
    import torch
    import whisper
    from whisper.model import disable_sdpa

    def cross_attention_maps(model, mel, tokens):
        maps = [None] * len(model.decoder.blocks)
        handles = [
            block.cross_attn.register_forward_hook(
                lambda module, inputs, outputs, i=i: maps.__setitem__(i, outputs[-1]))
            for i, block in enumerate(model.decoder.blocks)
        ]
        with torch.no_grad(), disable_sdpa():
            model(mel, tokens)
        for handle in handles:
            handle.remove()
        return maps
    ```

    ## Fix safety
    There is no automatic fix: switching the fused path off costs speed,
    and where (around which call) is the author's choice.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [`F.scaled_dot_product_attention`](https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html)
    - [`nn.MultiheadAttention`](https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html)
    """

    code = "HKL424"
    name = "hook-reads-none-attention-slot"
    summary = "A forward hook reads an output slot its attention module returns as None on the fast path"
    severity = Severity.WARNING
    triggers = ("register_forward_hook",)

    VALID: ClassVar[tuple[str, ...]] = (
        # the model runs with SDPA switched off
        "import whisper\n"
        "from whisper.model import disable_sdpa\n"
        "def maps(model, audio):\n"
        "    qks = []\n"
        "    hooks = [b.cross_attn.register_forward_hook(lambda m, i, o: qks.append(o[-1]))\n"
        "             for b in model.decoder.blocks]\n"
        "    with disable_sdpa():\n"
        "        model.transcribe(audio)\n"
        "    for h in hooks:\n"
        "        h.remove()\n"
        "    return qks\n",
        # the hook tests the slot
        "import whisper\n"
        "def maps(model, audio):\n"
        "    qks = []\n"
        "    def keep(module, inputs, outputs):\n"
        "        if outputs[1] is not None:\n"
        "            qks.append(outputs[1])\n"
        "    for block in model.decoder.blocks:\n"
        "        block.cross_attn.register_forward_hook(keep)\n"
        "    model.transcribe(audio)\n"
        "    return qks\n",
        # a class of the file that always returns its weights
        "import torch\n"
        "import torch.nn as nn\n"
        "class Attention(nn.Module):\n"
        "    def forward(self, q, k, v):\n"
        "        w = (q @ k.transpose(-1, -2)).softmax(-1)\n"
        "        return w @ v, w\n"
        "attn = Attention()\n"
        "maps = []\n"
        "attn.register_forward_hook(lambda m, i, o: maps.append(o[1]))\n",
        # nn.MultiheadAttention asked for its weights
        "import torch.nn as nn\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.attn = nn.MultiheadAttention(8, 2)\n"
        "        self.maps = []\n"
        "        self.attn.register_forward_hook(lambda m, i, o: self.maps.append(o[1]))\n"
        "    def forward(self, x):\n"
        "        return self.attn(x, x, x, need_weights=True)[0]\n",
        # the torch layer's attention is patched to return its weights
        "import functools\n"
        "import torch.nn as nn\n"
        "layer = nn.TransformerEncoderLayer(8, 2)\n"
        "layer.self_attn.forward = functools.partial(layer.self_attn.forward, need_weights=True)\n"
        "maps = []\n"
        "layer.self_attn.register_forward_hook(lambda m, i, o: maps.append(o[1]))\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        # torch's Transformer layers call their attention with need_weights=False
        Invalid(
            "import torch.nn as nn\n"
            "encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), num_layers=3)\n"
            "maps = []\n"
            "for layer in encoder.layers:\n"
            "    layer.self_attn.register_forward_hook(lambda m, i, o: maps.append(o[1].detach()))  # HKL424\n"
        ),
        Invalid(
            "import whisper\n"
            "def maps(model, audio):\n"
            "    qks = []\n"
            "    def keep(module, inputs, outputs):\n"
            "        w = outputs[-1]  # HKL424\n"
            "        qks.append(w.cpu())\n"
            "    for block in model.decoder.blocks:\n"
            "        block.cross_attn.register_forward_hook(keep)\n"
            "    model.transcribe(audio)\n"
            "    return qks\n"
        ),
        # a class of the file with a fused branch
        Invalid(
            "import torch.nn as nn\n"
            "import torch.nn.functional as F\n"
            "class Attention(nn.Module):\n"
            "    fused = True\n"
            "    def forward(self, q, k, v):\n"
            "        if self.fused:\n"
            "            return F.scaled_dot_product_attention(q, k, v), None\n"
            "        w = (q @ k.transpose(-1, -2)).softmax(-1)\n"
            "        return w @ v, w\n"
            "attn = Attention()\n"
            "maps = []\n"
            "def keep(module, inputs, output):\n"
            "    out, weights = output  # HKL424\n"
            "    maps.append(weights.detach())\n"
            "attn.register_forward_hook(keep)\n"
        ),
        # nn.MultiheadAttention called without its weights
        Invalid(
            "import torch.nn as nn\n"
            "class Block(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.attn = nn.MultiheadAttention(8, 2)\n"
            "        self.maps = []\n"
            "        self.attn.register_forward_hook(lambda m, i, o: self.maps.append(o[1].mean(0)))  # HKL424\n"
            "    def forward(self, x):\n"
            "        return self.attn(x, x, x, need_weights=False)[0]\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.instances_by_kind(HookKind.FORWARD):
            if reg.is_global:
                continue
            for read in none_slot_reads(ctx, reg):
                if id(read.node) in seen:
                    continue
                seen.add(id(read.node))
                hook = reg.hook.name if reg.hook is not None else "the hook"
                receiver = ast.unparse(reg.receiver) if reg.receiver is not None else "the module"
                related = []
                when = ""
                if read.unguarded_run is not None:
                    run_line = ctx.span(read.unguarded_run)[0]
                    related.append(Related("the model runs with SDPA on", ctx.display_path, run_line))
                    when = (f" `{ast.unparse(read.unguarded_run.func)}(...)` (line {run_line.row}) runs the hooked "
                            f"modules outside `disable_sdpa()`, so")
                yield self.finding(
                    ctx, read.node,
                    f"forward hook `{hook}` on `{receiver}` reads `{ast.unparse(read.node)}` as attention weights, but "
                    f"the module is {read.module}:{when} the hook gets None there and stores it or fails on it "
                    f"(a forward hook sees exactly what `forward` returned)",
                    help="Run the hooked forward with the fused path off (`with disable_sdpa():`, "
                         "`need_weights=True`), or compute the weights in the hook from its inputs; "
                         "test for None if both can happen.",
                    related=related,
                )
