"""HKL345: a hook holds its owner's container itself, and a method later rebinds
the attribute: the hook fills the old object, the owner reads the new one."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.captured_state import captures, stale_rebinds
from hooklint.static.context import FileContext
from hooklint.static.describe import describe_registrations, hook_label

_HELP = ("Empty the container in place (`self.feats.clear()`, `del self.feats[:]`) so the hook and the class keep "
         "sharing one object; or have the hook look the attribute up when it runs (`self.feats.append(...)`).")


class HookCapturedContainerRebound(Rule):
    """
    ## What it does
    Reports a method that rebinds an attribute to a new container
    (`self.feats = []`) while a hook registered by the same class holds the
    attribute's previous object itself: a closure over a local alias
    (`store = self.feats`), a default argument (`store=self.feats`) or a
    `functools.partial(fn, self.feats)`.

    ## Why is this bad?
    A hook that writes `self.feats.append(out)` looks the attribute up each
    time it runs.  A hook handed the list itself keeps that object for as
    long as it stays registered.  After `self.feats = []`, the hook fills
    the old list and the class reads the new one, which stays empty (or
    holds only what other code put there): the recorded activations or
    gradients silently vanish, and the old list keeps growing.
    (`tests/behaviour/test_captured_hook_container.py` runs both.)

    ## Known problems
    Not reported when the rebinding method registers hooks again (it hands
    the new container to new hooks), nor for a rebind in `__init__`.
    Whether the hook is still registered when the method runs is not
    followed: a class that removes its hooks before rebinding, in another
    method, is reported.

    ## Example
    ```python
    import torch
    from torch import nn

    class Recorder:
        def __init__(self, model: nn.Module):
            self.outputs = []
            store = self.outputs
            for layer in model.children():
                layer.register_forward_hook(lambda m, args, out: store.append(out))

        def reset(self):
            self.outputs = []
    ```

    ## Use instead
    ```python
    import torch
    from torch import nn

    class Recorder:
        def __init__(self, model: nn.Module):
            self.outputs = []
            store = self.outputs
            for layer in model.children():
                layer.register_forward_hook(lambda m, args, out: store.append(out))

        def reset(self):
            self.outputs.clear()
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [`functools.partial`](https://docs.python.org/3/library/functools.html#functools.partial)
    """

    code = "HKL345"
    name = "hook-captured-container-rebound"
    summary = ("A hook holds its owner's container itself and a method rebinds the attribute: the hook fills the old "
               "object, the owner reads the new one")
    severity = Severity.WARNING
    triggers = ("register_forward_hook", "register_forward_pre_hook", "backward_hook", "backward_pre_hook",
                "register_hook", "post_accumulate_grad_hook")
    # an attribute rebound to a new container, and a hook handed an attribute's object
    # (`partial(...)`, a default `sink=self.x`, an alias `store = self.x`)
    trigger_pattern = (r"\A(?=[\s\S]*?(?<![\w.])self\.\w+[ \t]*=[ \t]*(?:\[\]|\{\}|"
                       r"(?:dict|list|set|defaultdict|OrderedDict)\())"
                       r"[\s\S]*?(?:partial\(|=[ \t]*self\.\w+[ \t]*[,)\r\n])")
    VALID: ClassVar[tuple[str, ...]] = (
        # the hook looks the attribute up when it runs
        "import torch\n"
        "class R:\n"
        "    def __init__(self, model):\n"
        "        self.outputs = []\n"
        "        model.register_forward_hook(lambda m, a, out: self.outputs.append(out))\n"
        "    def reset(self):\n"
        "        self.outputs = []\n",
        # the container is emptied in place
        "import torch\n"
        "class R:\n"
        "    def __init__(self, model):\n"
        "        self.outputs = []\n"
        "        store = self.outputs\n"
        "        model.register_forward_hook(lambda m, a, out: store.append(out))\n"
        "    def reset(self):\n"
        "        self.outputs.clear()\n",
        # the rebinding method registers new hooks that hold the new container
        "import torch\n"
        "class R:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "        self.attach()\n"
        "    def attach(self):\n"
        "        self.outputs = []\n"
        "        store = self.outputs\n"
        "        self.handle = self.model.register_forward_hook(lambda m, a, out: store.append(out))\n"
        "    def restart(self):\n"
        "        self.handle.remove()\n"
        "        self.outputs = []\n"
        "        self.attach()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class R:\n"
            "    def __init__(self, model):\n"
            "        self.outputs = []\n"
            "        store = self.outputs\n"
            "        def keep(m, a, out):\n"
            "            store.append(out.detach())\n"
            "        model.register_forward_hook(keep)\n"
            "    def reset(self):\n"
            "        self.outputs = []  # HKL345\n"
        ),
        Invalid(
            "import functools\n"
            "import torch\n"
            "def save_grad(bucket, module, grad_input, grad_output):\n"
            "    bucket.append(grad_output[0])\n"
            "class G:\n"
            "    def __init__(self, layer):\n"
            "        self.grads = []\n"
            "        layer.register_full_backward_hook(functools.partial(save_grad, self.grads))\n"
            "    def __call__(self, x):\n"
            "        self.grads = list()  # HKL345\n"
            "        return self.grads\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        reported: set[int] = set()
        for reg in ctx.hooks.instances:
            if reg.hook is None:
                continue
            owner = ctx.model.enclosing_class(reg.call)
            method = ctx.model.enclosing_function(reg.call)
            if owner is None or method is None or not any(m is method for m in owner.methods.values()):
                continue
            for capture in captures(ctx.model, reg.hook.node, reg.hook_expr, method):
                for rebind in stale_rebinds(owner, capture, method.name):  # type: ignore[attr-defined]
                    if id(rebind.node) in reported:
                        continue
                    reported.add(id(rebind.node))
                    yield self.finding(
                        ctx, rebind.node,
                        f"`{owner.name}.{rebind.method}` rebinds `self.{capture.attr}` to a new container, but "
                        f"`{hook_label(reg)}` ({describe_registrations([reg])}) holds the previous object through "
                        f"{capture.how}: while it stays registered it fills the old container and "
                        f"`self.{capture.attr}` stays empty",
                        help=_HELP,
                        related=[Related("the hook writes here", ctx.display_path, ctx.span(capture.write)[0]),
                                 Related("registered here", ctx.display_path, ctx.span(reg.call)[0])],
                    )
