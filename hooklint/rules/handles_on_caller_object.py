"""HKL319: a class keeps its hook handles on the caller's model and removes them all from there."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.handle_owners import handles_on_caller_objects
from hooklint.static.hooks import REGISTRATION_TRIGGERS
from hooklint.static.values import src


class HandlesOnCallerObject(Rule):
    """
    ## What it does
    Reports the removal of hook handles that a class keeps in a container
    on an object its caller handed over (`self.model._handles`, where
    `self.model` is the constructor's argument; `model._hooks` of a
    method's `model` parameter) rather than on itself, when a method of the
    class removes every handle of that container.

    ## Why is this bad?
    The container belongs to the model, not to the object that registered
    the hooks.  Every instance built on the same model (a second feature
    extractor, an explainer next to a detector, the same tool run twice)
    appends its handles to the same list, and the first one that "removes
    its hooks" walks the list and removes the others' too.  The other
    instance keeps running without its hooks, with no error: it reads no
    features, or stale ones, and hooks that were meant for one instance
    (pre-hooks that rescale activations) act on the other's forwards while
    they are still registered.

    ## Known problems
    Only containers whose handles a method of the same class removes all at
    once are reported, and the object must be the caller's (an attribute of
    `self` set from an argument, or a parameter), as the function summaries
    of hooklint.static.core show it.  The severity is *warning*: a program
    that never builds two instances on one model is not affected.

    ## Example
    ```python
    class FeatureExtractor:
        def __init__(self, model, layer):
            self.model = model
            self.features = []
            if not hasattr(self.model, "_handles"):
                self.model._handles = []
            for handle in self.model._handles:
                handle.remove()
            self.model._handles.append(layer.register_forward_hook(self.save))

        def save(self, module, inputs, output):
            self.features.append(output)
    ```

    ## Use instead
    ```python
    class FeatureExtractor:
        def __init__(self, model, layer):
            self.model = model
            self.features = []
            self._handles = [layer.register_forward_hook(self.save)]

        def save(self, module, inputs, output):
            self.features.append(output)

        def close(self):
            for handle in self._handles:
                handle.remove()
            self._handles.clear()
    ```

    ## Fix safety
    There is no automatic fix: keep the handles on the object that
    registered the hooks, and remove only those.

    ## References
    - [`torch.utils.hooks.RemovableHandle`](https://github.com/pytorch/pytorch/blob/main/torch/utils/hooks.py):
      a handle removes the one hook it was returned for
    - oodeel 0.4.0 (`TorchFeatureExtractor` kept its handles in `model._ood_handles`)
    """

    code = "HKL319"
    name = "handles-kept-on-caller-object"
    summary = "Hook handles kept on the caller's model and removed all at once: one instance removes another's hooks"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS
    trigger_pattern = r"\.remove\(\)"
    VALID: ClassVar[tuple[str, ...]] = (
        # handles on the object itself
        "class Extractor:\n"
        "    def __init__(self, model, layer):\n"
        "        self.model = model\n"
        "        self.handles = [layer.register_forward_hook(self.save)]\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n"
        "    def close(self):\n"
        "        for h in self.handles:\n"
        "            h.remove()\n",
        # on a model the object builds itself
        "import torch.nn as nn\n"
        "class Probe:\n"
        "    def __init__(self):\n"
        "        self.model = nn.Sequential(nn.Linear(2, 2))\n"
        "        self.model.handles = [self.model[0].register_forward_hook(print)]\n"
        "    def close(self):\n"
        "        for h in self.model.handles:\n"
        "            h.remove()\n",
        # kept on the caller's model but never removed from there by the class
        "class Tagger:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "        self.model.tag_handles = [model.register_forward_hook(print)]\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class Extractor:\n"
            "    def __init__(self, model, layers):\n"
            "        self.model = model\n"
            "        self.prepare(layers)\n"
            "    def prepare(self, layers):\n"
            "        if not hasattr(self.model, '_ood_handles'):\n"
            "            setattr(self.model, '_ood_handles', [])\n"
            "        else:\n"
            "            for handle in self.model._ood_handles:\n"
            "                handle.remove()  # HKL319\n"
            "            self.model._ood_handles = []\n"
            "        for layer in layers:\n"
            "            self.model._ood_handles.append(layer.register_forward_hook(self.save))\n"
            "    def save(self, m, i, o):\n"
            "        self.out = o\n"
        ),
        Invalid(
            "class Pruner:\n"
            "    def attach(self, model):\n"
            "        model._prune_hooks = []\n"
            "        for m in model.modules():\n"
            "            model._prune_hooks.append(m.register_forward_pre_hook(self.mask))\n"
            "    def detach(self, model):\n"
            "        for h in model._prune_hooks:\n"
            "            h.remove()  # HKL319\n"
            "    def mask(self, m, args):\n"
            "        return args\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        core = ctx.core
        reported: set[int] = set()
        for cls in ctx.model.classes.values():
            for shared in handles_on_caller_objects(core, cls):
                holder = "self." + shared.container[2:] if shared.container.startswith("s.") else \
                    shared.container.split(":", 1)[-1]
                regs = [r for r in (core.registration_of(reg) for reg in shared.registrations) if r is not None]
                lines = ", ".join(str(r.call.lineno) for r in regs[:3])
                for method, call in shared.removals:
                    if id(call) in reported:
                        continue
                    reported.add(id(call))
                    message = (f"`{src(call)}` in `{cls.name}.{getattr(method, 'name', '?')}` removes every handle "
                               f"in `{holder}`, a container on the object the caller handed over, not on this "
                               f"`{cls.name}`; the hooks of this class go there (line{'s' if len(regs) > 1 else ''} "
                               f"{lines}), so every `{cls.name}` built on the same model shares it, and one "
                               f"instance's removal takes off the other instances' hooks too: they keep running "
                               f"without them, with no error")
                    yield self.finding(
                        ctx, call, message,
                        help="Keep the handles on the object that registers the hooks (`self._handles`) and "
                             "remove only those.",
                        related=[Related("a handle is put there", ctx.display_path, ctx.span(r.call)[0])
                                 for r in regs[:3]],
                    )
