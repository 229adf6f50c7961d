"""HKL342: a module hook registered on a submodule that is then replaced in its parent: it never fires."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.replaced_targets import replaced_after_registration


class ModuleHookOnReplacedModule(Rule):
    """
    ## What it does
    Reports a forward, forward pre- or backward hook registered on a
    submodule reached through its parent (`model.fc`, `model.layers[0]`,
    `getattr(model, name)`, a name bound to one) when a statement that can
    run afterwards, in the same function, puts a newly built module in that
    slot: `model.fc = nn.Linear(...)`, `setattr(model, "fc", New(...))`,
    `model.layers[0] = Block(...)`, `model.add_module("fc", ...)`,
    `model._modules["fc"] = ...`; and a hook on the module itself followed by
    `gm = torch.fx.symbolic_trace(module)` (or `fx.GraphModule(module,
    graph)`) whose result is kept.  Not reported: a wrapper built around the
    hooked module (`model.fc = Wrapper(model.fc)`: it still calls the old
    module); a replacement made before the registration; the parent's name
    (or the index) rebound in between; the handle removed in between.

    ## Why is this bad?
    A module hook is stored on the module object (`_forward_hooks` and its
    siblings).  After the parent's slot holds another module, the parent's
    forward calls the new one, whose hook dicts are empty: the hook never
    fires, with no error and no warning.  Feature extraction records nothing,
    a pruning mask is not applied, a gradient monitor stays silent.  An fx
    `GraphModule` built from a module shares its submodules (their hooks keep
    firing) but is a new root object: the traced module's own hooks are not
    on it.

    ## Known problems
    Only replacements in the function that registers the hook are seen.  After
    `symbolic_trace` the original module still carries its hook; the finding
    assumes the traced module is what runs from then on.

    ## Example
    ```python
    import torch.nn as nn

    def build(model: nn.Module, n_classes, features):
        model.fc.register_forward_hook(lambda m, i, o: features.append(o))
        model.fc = nn.Linear(model.fc.in_features, n_classes)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def build(model: nn.Module, n_classes, features):
        model.fc = nn.Linear(model.fc.in_features, n_classes)
        model.fc.register_forward_hook(lambda m, i, o: features.append(o))
    ```

    ## Fix safety
    No fix is offered: the registration must move after every replacement.

    ## References
    - [`torch.nn.Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    """

    code = "HKL342"
    name = "module-hook-on-replaced-module"
    summary = "Module hook registered on a submodule that is replaced afterwards: the hook never fires"
    severity = Severity.WARNING
    triggers = ("register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
                "register_full_backward_pre_hook", "register_backward_hook")
    VALID: ClassVar[tuple[str, ...]] = (
        # the replacement first, then the hook
        "import torch.nn as nn\n"
        "def build(model, feats):\n"
        "    model.fc = nn.Linear(4, 2)\n"
        "    model.fc.register_forward_hook(lambda m, i, o: feats.append(o))\n",
        # a wrapper around the hooked module still calls it
        "import torch.nn as nn\n"
        "class Logged(nn.Module):\n"
        "    def __init__(self, inner):\n"
        "        super().__init__()\n"
        "        self.inner = inner\n"
        "    def forward(self, x):\n"
        "        return self.inner(x)\n"
        "def build(model, feats):\n"
        "    model.fc.register_forward_hook(lambda m, i, o: feats.append(o))\n"
        "    model.fc = Logged(model.fc)\n",
        # each index hooked after its own replacement
        "import torch.nn as nn\n"
        "def build(model, feats):\n"
        "    for i in range(len(model.layers)):\n"
        "        model.layers[i] = nn.Identity()\n"
        "        model.layers[i].register_forward_hook(lambda m, i, o: feats.append(o))\n",
        # a submodule's hook: the GraphModule shares the submodule
        "import torch.fx\n"
        "def prepare(model, feats):\n"
        "    model.fc.register_forward_hook(lambda m, i, o: feats.append(o))\n"
        "    return torch.fx.symbolic_trace(model)\n",
        # the hook taken off first
        "import torch.nn as nn\n"
        "def build(model, feats):\n"
        "    h = model.fc.register_forward_hook(lambda m, i, o: feats.append(o))\n"
        "    h.remove()\n"
        "    model.fc = nn.Linear(4, 2)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def build(model, feats):\n"
            "    model.fc.register_forward_hook(lambda m, i, o: feats.append(o))  # HKL342\n"
            "    model.fc = nn.Linear(4, 2)\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Head(nn.Module):\n"
            "    pass\n"
            "def build(model, name, grads):\n"
            "    target = getattr(model, name)\n"
            "    target.register_full_backward_hook(lambda m, gi, go: grads.append(go))  # HKL342\n"
            "    setattr(model, name, Head())\n",
        ),
        Invalid(
            "import torch.fx\n"
            "def prepare(model, feats):\n"
            "    model.register_forward_hook(lambda m, i, o: feats.append(o))  # HKL342\n"
            "    traced = torch.fx.symbolic_trace(model)\n"
            "    return traced\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def prune(blocks, keep):\n"
            "    blocks[0].register_forward_pre_hook(keep)  # HKL342\n"
            "    blocks[0] = nn.Sequential(nn.Linear(2, 2))\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in replaced_after_registration(ctx, tensor=False):
            yield self.finding(
                ctx, found.registration,
                f"the hook is stored on the module object `{found.hooked}`, and {found.how} (line "
                f"{found.stmt.lineno}) can run afterwards and put a newly built module in its place: what is called "
                f"from then on is the new module, whose hook dicts are empty, and this hook never fires for it "
                f"(silently)",
                help="Register the hook after the module is replaced (on the module that stays), or wrap the "
                     "hooked module instead of replacing it.",
                related=[Related("the module is replaced here", ctx.display_path, ctx.span(found.stmt)[0])],
            )
