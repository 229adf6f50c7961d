"""HKL421: a forward hook reads the tuple a module visibly returns as a tensor (hook-semantics.md, section 6)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind
from hooklint.static.tuple_outputs import tuple_output_reads


class HookReadsTupleOutputAsTensor(Rule):
    """
    ## What it does
    Reports a forward hook that calls a tensor method or attribute
    (`.detach()`, `.shape`, `.cpu()`, `.mean()`...) directly on its
    `output` argument when the hooked module is known to return a tuple:
    `nn.LSTM`, `nn.GRU`, `nn.RNN`, `nn.LSTMCell`, `nn.MultiheadAttention`,
    `nn.AdaptiveLogSoftmaxWithLoss`, a max-pooling layer built with
    `return_indices=True`, or a class of the file whose `forward` returns
    a tuple on every path.  The module is known from the registration (a
    constructor, an attribute set from one, an `isinstance` test around
    the registration) or from a branch of the hook body that tests the
    module argument (`if isinstance(module, nn.MultiheadAttention):`).  A
    hook that tests `output` itself, or rebinds it, is not reported.

    ## Why is this bad?
    A forward hook receives exactly what `forward` returned.
    `nn.MultiheadAttention` returns `(attn_output, attn_weights)` even with
    `need_weights=False` (the weights are then None), and the recurrent
    layers return `(output, h_n)`.  The hook raises `AttributeError:
    'tuple' object has no attribute ...` the first time it fires, and an
    activation or attention-map collector written against a tensor-valued
    layer breaks on these modules.

    ## Known problems
    A subclass of a built-in layer defined in another file that overrides
    `forward` to return a tensor is not seen; the severity is *warning*.

    ## Example
    ```python
    import torch.nn as nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(64, 4, batch_first=True)
            self.maps = []
            self.attn.register_forward_hook(self.keep_map)

        def keep_map(self, module, inputs, output):
            self.maps.append(output.detach())

        def forward(self, x):
            return self.attn(x, x, x)[0]
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(64, 4, batch_first=True)
            self.maps = []
            self.attn.register_forward_hook(self.keep_map)

        def keep_map(self, module, inputs, output):
            attn_output, attn_weights = output
            self.maps.append(attn_weights.detach())

        def forward(self, x):
            return self.attn(x, x, x)[0]
    ```

    ## Fix safety
    There is no automatic fix: which element the hook means is for the
    author to say.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [`nn.MultiheadAttention`](https://pytorch.org/docs/stable/generated/torch.nn.MultiheadAttention.html)
    - [`nn.LSTM`](https://pytorch.org/docs/stable/generated/torch.nn.LSTM.html)
    """

    code = "HKL421"
    name = "hook-reads-tuple-output-as-tensor"
    summary = "A forward hook reads a tensor attribute of the tuple its module visibly returns"
    severity = Severity.WARNING
    triggers = ("register_forward_hook",)

    VALID: ClassVar[tuple[str, ...]] = (
        # the hook unpacks the tuple
        "import torch.nn as nn\n"
        "rnn = nn.LSTM(4, 8)\n"
        "store = []\n"
        "def keep(module, inputs, output):\n"
        "    seq, (h, c) = output\n"
        "    store.append(h.detach())\n"
        "rnn.register_forward_hook(keep)\n",
        # the hook tests what it got
        "import torch\n"
        "import torch.nn as nn\n"
        "attn = nn.MultiheadAttention(8, 2)\n"
        "def keep(module, inputs, output):\n"
        "    if isinstance(output, tuple):\n"
        "        output = output[0]\n"
        "    print(output.shape)\n"
        "attn.register_forward_hook(keep)\n",
        # a module returning a tensor
        "import torch.nn as nn\n"
        "gru_cell = nn.GRUCell(4, 8)\n"
        "gru_cell.register_forward_hook(lambda m, i, o: print(o.shape))\n",
        # pooling without indices returns a tensor
        "import torch.nn as nn\n"
        "pool = nn.MaxPool2d(2)\n"
        "pool.register_forward_hook(lambda m, i, o: print(o.shape))\n",
        # a dispatching hook reads the tensor branch only
        "import torch.nn as nn\n"
        "def keep(module, inputs, output):\n"
        "    if isinstance(module, nn.LSTM):\n"
        "        print(output[0].shape)\n"
        "    elif isinstance(module, nn.Linear):\n"
        "        print(output.shape)\n"
        "def watch(model):\n"
        "    for m in model.modules():\n"
        "        m.register_forward_hook(keep)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class Encoder(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.attn = nn.MultiheadAttention(64, 4)\n"
            "        self.maps = []\n"
            "        self.attn.register_forward_hook(self.keep_map)\n"
            "    def keep_map(self, module, inputs, output):\n"
            "        self.maps.append(output.detach())  # HKL421\n"
        ),
        # the type test is around the registration
        Invalid(
            "import torch.nn as nn\n"
            "def watch(model, sizes):\n"
            "    def hook(module, inputs, out):\n"
            "        sizes.append(out.size())  # HKL421\n"
            "    for m in model.modules():\n"
            "        if isinstance(m, (nn.GRU, nn.LSTM)):\n"
            "            m.register_forward_hook(hook)\n"
        ),
        # the type test is in the hook body
        Invalid(
            "import torch.nn as nn\n"
            "def collect(model):\n"
            "    maps = {}\n"
            "    def hook(module, inputs, output, name=''):\n"
            "        if isinstance(module, nn.MultiheadAttention):\n"
            "            maps[name] = output.cpu()  # HKL421\n"
            "    for name, m in model.named_modules():\n"
            "        m.register_forward_hook(hook)\n"
            "    return maps\n"
        ),
        # a class of the file that returns a pair
        Invalid(
            "import torch\n"
            "import torch.nn as nn\n"
            "class Gate(nn.Module):\n"
            "    def forward(self, x):\n"
            "        weights = torch.sigmoid(x)\n"
            "        return x * weights, weights\n"
            "gate = Gate()\n"
            "gate.register_forward_hook(lambda m, i, o: print(o.mean()))  # HKL421\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.instances_by_kind(HookKind.FORWARD):
            if reg.is_global:
                continue
            for read in tuple_output_reads(ctx, reg):
                if id(read.node) in seen:
                    continue
                seen.add(id(read.node))
                yield self.finding(
                    ctx, read.node,
                    f"forward hook `{reg.hook.name}` ({read.where}) reads `{ast_text(read.node)}`, but the module is "
                    f"{read.module}: a forward hook gets `forward`'s return value as it is, so this raises "
                    f"AttributeError: 'tuple' object has no attribute '{read.node.attr}' the first time the hook fires",
                    help="Unpack the tuple first (`out, weights = output`) and use the element meant, or test "
                         "`isinstance(output, tuple)`.",
                )


def ast_text(node: ast.AST) -> str:
    return ast.unparse(node)
