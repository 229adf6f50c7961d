"""HKL328: a module of the model swapped for a wrapper that captures its inputs, instead of a pre-hook."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.module_swaps import SWAP_TRIGGER_PATTERN, SWAP_TRIGGERS, capture_swaps


class CaptureWrapperReplacesModule(Rule):
    """
    ## What it does
    Reports a module of a model replaced in its slot by a wrapper around
    it (`layers[0] = Catcher(layers[0])`, or `setattr(parent, name,
    Catcher(getattr(parent, name)))`) when the wrapper is an `nn.Module`
    class of the file whose `forward` ends in a `raise` (it records the
    inputs and stops the model) and which forwards no attribute lookups to the module
    it wraps (no `__getattr__`).

    ## Why is this bad?
    While the wrapper is in the slot, the model holds another module there.
    Model code that reads the layer before or while running it (Llama's
    forward reads `self.layers[0].self_attn` since transformers 4.39; layers
    read `attention_type` or `layer_idx` of their siblings), `isinstance`
    dispatch on the layer, and hooks or accelerate device hooks put on the
    layer all see the wrapper, not the layer: quantization or calibration
    dies with `AttributeError` on a model it worked with before.  A forward
    pre-hook registered with `with_kwargs=True` on the layer itself sees
    the same positional and keyword arguments and can raise the same way,
    without changing what the model holds.  AutoGPTQ's `LayerHijacker`
    broke on Llama this way (AutoGPTQ issue 604).

    ## Known problems
    Whether the model reads an attribute of that layer is not checked: a
    model that never does works with the wrapper.

    ## Example
    ```python
    import torch.nn as nn

    def capture_first_layer_inputs(model, layers, batches):
        cached = []

        class Catcher(nn.Module):
            def __init__(self, module):
                super().__init__()
                self.module = module

            def forward(self, hidden_states, **kwargs):
                cached.append((hidden_states, kwargs))
                raise ValueError

        layers[0] = Catcher(layers[0])
        for batch in batches:
            try:
                model(batch)
            except ValueError:
                pass
        layers[0] = layers[0].module
        return cached
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class StopForward(Exception):
        pass

    def capture_first_layer_inputs(model, layers, batches):
        cached = []

        def catch(module, args, kwargs):
            cached.append((args, kwargs))
            raise StopForward

        handle = layers[0].register_forward_pre_hook(catch, with_kwargs=True)
        try:
            for batch in batches:
                try:
                    model(batch)
                except StopForward:
                    pass
        finally:
            handle.remove()
        return cached
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`Module.register_forward_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_pre_hook)
    - [AutoGPTQ issue 604](https://github.com/AutoGPTQ/AutoGPTQ/issues/604)
    """

    code = "HKL328"
    name = "capture-wrapper-replaces-module"
    summary = "A model's module swapped for a wrapper that captures its inputs and raises, instead of a forward pre-hook"
    severity = Severity.WARNING
    triggers = SWAP_TRIGGERS
    trigger_pattern = SWAP_TRIGGER_PATTERN
    VALID: ClassVar[tuple[str, ...]] = (
        # a wrapper that forwards attribute lookups to the layer
        "import torch.nn as nn\n"
        "class Catcher(nn.Module):\n"
        "    def __init__(self, module):\n"
        "        super().__init__()\n"
        "        self.module = module\n"
        "    def __getattr__(self, name):\n"
        "        try:\n"
        "            return super().__getattr__(name)\n"
        "        except AttributeError:\n"
        "            return getattr(self.module, name)\n"
        "    def forward(self, *args, **kwargs):\n"
        "        raise ValueError\n"
        "def run(layers):\n"
        "    layers[0] = Catcher(layers[0])\n",
        # a wrapper that runs the layer (a lasting replacement, not a capture)
        "import torch.nn as nn\n"
        "class Scaled(nn.Module):\n"
        "    def __init__(self, module):\n"
        "        super().__init__()\n"
        "        self.module = module\n"
        "    def forward(self, x):\n"
        "        return self.module(x) * 2\n"
        "def run(model):\n"
        "    model.fc = Scaled(model.fc)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def quantize(model, examples):\n"
            "    inputs = []\n"
            "    class LayerHijacker(nn.Module):\n"
            "        def __init__(self, m, device):\n"
            "            super().__init__()\n"
            "            self.module = m\n"
            "        def forward(self, inp=None, **kwargs):\n"
            "            inputs.append((inp, kwargs))\n"
            "            raise ValueError\n"
            "    layers = model.model.layers\n"
            "    layers[0] = LayerHijacker(layers[0], 'cpu')  # HKL328\n"
            "    for example in examples:\n"
            "        try:\n"
            "            model(**example)\n"
            "        except ValueError:\n"
            "            pass\n"
            "    layers[0] = layers[0].module\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Stop(Exception):\n"
            "    pass\n"
            "class Recorder(nn.Module):\n"
            "    def __init__(self, inner, store):\n"
            "        super().__init__()\n"
            "        self.inner, self.store = inner, store\n"
            "    def forward(self, *args, **kwargs):\n"
            "        self.store.append(args)\n"
            "        raise Stop()\n"
            "def first_block_inputs(model, name, batch):\n"
            "    store = []\n"
            "    setattr(model, name, Recorder(getattr(model, name), store))  # HKL328\n"
            "    try:\n"
            "        model(batch)\n"
            "    except Stop:\n"
            "        pass\n"
            "    return store\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for swap in capture_swaps(ctx.model, ctx.tree):
            name = swap.wrapper.name
            yield self.finding(
                ctx, swap.assign,
                f"`{swap.slot}` is replaced by `{name}`, a wrapper whose `forward` records its inputs and raises "
                f"(line {swap.raise_line}) and which forwards no attribute lookups to the module it wraps: while it "
                f"sits there the model holds another module in that slot, so model code that reads the layer's "
                f"attributes (`self_attn`, `attention_type`, `layer_idx`...), `isinstance` dispatch on it and hooks "
                f"put on the layer no longer find it (an AttributeError on newer model code, if the model does read "
                f"them)",
                help="Capture the inputs with a forward pre-hook on the layer itself "
                     "(`register_forward_pre_hook(fn, with_kwargs=True)`, raising to stop the model), and remove it "
                     "in a `finally`.",
                related=[Related(f"`{name}` is defined here", ctx.display_path, ctx.span(swap.wrapper.node)[0])],
            )
