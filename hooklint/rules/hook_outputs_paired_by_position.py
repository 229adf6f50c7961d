"""HKL413: one forward hook collects the outputs of several layers in firing order, and they are paired with the layers by position."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_io import position_paired_collectors


class HookOutputsPairedByPosition(Rule):
    """
    ## What it does
    Reports a forward hook that is one and the same callable registered on
    each layer of a sequence (a loop over layer names or modules), which
    appends each output it sees to one list, when code of the same class or
    function pairs that list with the sequence by position
    (`outputs[i] for i, name in enumerate(layers)`, `zip(layers, outputs)`).

    ## Why is this bad?
    Forward hooks fire when their module runs: in the order of the model's
    forward, and once per call.  The list therefore holds the outputs in
    execution order, not in the order the caller listed the layers: when
    the two differ (`["fc", "conv1"]`, a branchy model) or a layer runs
    twice (a shared block, a recurrent step), every feature after the first
    mismatch is stored under another layer's name, with no error.

    ## Known problems
    Whether the caller lists the layers in execution order is not known from
    the file, so the severity is *warning*.  Only a list the hook appends to
    and the pairing in the same class or function are followed.

    ## Example
    ```python
    class Collector:
        def __init__(self):
            self.outputs = []

        def __call__(self, module, inputs, output):
            self.outputs.append(output)


    def extract(model, layer_names, x):
        collector = Collector()
        modules = dict(model.named_modules())
        for name in layer_names:
            modules[name].register_forward_hook(collector)
        model(x)
        return {name: collector.outputs[i] for i, name in enumerate(layer_names)}
    ```

    ## Use instead
    ```python
    def extract(model, layer_names, x):
        features = {}
        modules = dict(model.named_modules())
        handles = []
        for name in layer_names:
            def keep(module, inputs, output, name=name):
                features[name] = output
            handles.append(modules[name].register_forward_hook(keep))
        try:
            model(x)
        finally:
            for h in handles:
                h.remove()
        return features
    ```

    ## Fix safety
    There is no automatic fix: give each layer a hook that stores its output
    under its own name (a closure or `functools.partial` carrying the name),
    or key the outputs by the module the hook receives.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
      ("called every time after forward() has computed an output")
    - bdpy pull request 102 (FeatureExtractor paired outputs with layer names by position)
    """

    code = "HKL413"
    name = "hook-outputs-paired-by-position"
    summary = ("One forward hook collects several layers' outputs in firing order, and they are paired with the "
               "layers by position")
    severity = Severity.WARNING
    triggers = ("register_forward_hook",)
    trigger_pattern = r"\benumerate\(|\bzip\("
    VALID: ClassVar[tuple[str, ...]] = (
        # one hook per layer, carrying its name
        "def extract(model, names, x):\n"
        "    feats = {}\n"
        "    mods = dict(model.named_modules())\n"
        "    for name in names:\n"
        "        mods[name].register_forward_hook(lambda m, i, o, name=name: feats.__setitem__(name, o))\n"
        "    model(x)\n"
        "    return feats\n",
        # keyed by the module the hook receives
        "def extract(model, names, x):\n"
        "    outs = {}\n"
        "    def keep(module, inputs, output):\n"
        "        outs[module] = output\n"
        "    mods = [model.get_submodule(n) for n in names]\n"
        "    for m in mods:\n"
        "        m.register_forward_hook(keep)\n"
        "    model(x)\n"
        "    return [outs[m] for m in mods]\n",
        # appended, but never paired with the layers by position
        "def extract(model, layers, x):\n"
        "    outs = []\n"
        "    def keep(module, inputs, output):\n"
        "        outs.append(output)\n"
        "    for m in layers:\n"
        "        m.register_forward_hook(keep)\n"
        "    model(x)\n"
        "    return outs\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def extract(model, layers, x):\n"
            "    outs = []\n"
            "    def keep(module, inputs, output):\n"
            "        outs.append(output)\n"
            "    for m in layers:\n"
            "        m.register_forward_hook(keep)\n"
            "    model(x)\n"
            "    return dict(zip(layers, outs))  # HKL413\n"
        ),
        Invalid(
            "class Grab:\n"
            "    def __init__(self):\n"
            "        self.outputs = []\n"
            "    def __call__(self, module, inp, out):\n"
            "        self.outputs.append(out)\n"
            "class Extractor:\n"
            "    def __init__(self, model, names):\n"
            "        self.model, self.names = model, names\n"
            "        self.grab = Grab()\n"
            "        for n in self.names:\n"
            "            model.get_submodule(n).register_forward_hook(self.grab)\n"
            "    def run(self, x):\n"
            "        self.grab.outputs = []\n"
            "        self.model(x)\n"
            "        return {n: self.grab.outputs[i] for i, n in enumerate(self.names)}  # HKL413\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for found in position_paired_collectors(ctx.model, ctx.hooks, ctx.tree):
            if id(found.pairing) in seen:
                continue
            seen.add(id(found.pairing))
            seq = ast.unparse(found.loop.iter)
            yield self.finding(
                ctx, found.pairing,
                message=(f"`{found.collector}` is filled by one forward hook, `{found.hook_name}`, registered on "
                         f"each layer of `{seq}`, and read here by the position of `{seq}`: forward hooks fire in "
                         f"the order the model runs its layers, once per call, so if that order differs from "
                         f"`{seq}` (or a layer runs twice) outputs are silently paired with the wrong layers"),
                help="Give each layer a hook that stores its output under its own name (a closure or "
                     "`functools.partial` carrying the name), or key the outputs by the module the hook receives.",
                related=[Related("registered here", ctx.display_path, ctx.span(found.registration)[0])],
            )
