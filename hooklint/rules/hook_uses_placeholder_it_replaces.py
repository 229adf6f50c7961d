"""HKL427: a hook uses a closure variable's placeholder before its own code replaces it."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.placeholder_reads import placeholder_uses


class HookUsesPlaceholderItReplaces(Rule):
    """
    ## What it does
    Reports a hook defined inside a function that keeps state in that
    function's variable (`nonlocal v`), where the enclosing function only
    binds `v` to a placeholder (`None`, or a 0-dim tensor such as
    `torch.empty([])`) and the hook itself gives it its real value, but
    *uses* it (or a variable the enclosing function sets from it, such as
    `mask = ... if cond else v` before running the model) earlier in its
    body in a way the placeholder cannot support: an attribute, item or
    arithmetic on `None`; a dimension a 0-dim tensor does not have
    (`flatten(0, 1)`, `size(0)`, `shape[1]`, `transpose(0, 1)`).

    ## Why is this bad?
    The hook's first call runs the use before the assignment: it sees the
    placeholder and raises (`TypeError` / `AttributeError` for `None`,
    `IndexError: Dimension out of range` for a 0-dim tensor).  The very
    first forward of the training loop fails, and only in the
    configuration that takes the placeholder's branch.

    ## Known problems
    Only closure variables are followed (state kept on `self` is not), and
    only uses in the hook's top-level statements, which run on every call.
    A use guarded by any test of the variable is not reported.

    ## Example
    ```python
    import torch

    def train(model, loader, exclude=None):
        keep_all = torch.empty([], dtype=torch.bool)

        def hook(module, inputs, output):
            nonlocal keep_all
            flat = mask.flatten(0, 1)
            module.kept = output.flatten(0, 1)[flat]
            keep_all = torch.ones(output.shape[:2], dtype=torch.bool)

        handle = model.register_forward_hook(hook)
        for batch in loader:
            mask = batch != exclude if exclude is not None else keep_all
            model(batch)
        handle.remove()
    ```

    ## Use instead
    ```python
    import torch

    def train(model, loader, exclude=None):
        def hook(module, inputs, output):
            flat = mask.flatten(0, 1)
            module.kept = output.flatten(0, 1)[flat]

        handle = model.register_forward_hook(hook)
        for batch in loader:
            mask = batch != exclude if exclude is not None else torch.ones_like(batch, dtype=torch.bool)
            model(batch)
        handle.remove()
    ```

    ## Fix safety
    There is no automatic fix: build the real value before the first call,
    or test for the placeholder in the hook.

    ## References
    - [`nonlocal`](https://docs.python.org/3/reference/simple_stmts.html#the-nonlocal-statement)
    - [`torch.empty`](https://pytorch.org/docs/stable/generated/torch.empty.html) (`torch.empty([])` is a 0-dim tensor)
    - EleutherAI sparsify issue 120 (the SAE trainer's hook flattened its 0-dim identity mask on the first step)
    """

    code = "HKL427"
    name = "hook-uses-placeholder-it-replaces"
    summary = "A hook uses a closure variable's placeholder before its own code gives it a real value"
    severity = Severity.WARNING
    triggers = ("nonlocal",)
    trigger_pattern = r"register_(?:forward_(?:pre_)?hook|full_backward_(?:pre_)?hook|hook)\b"

    VALID: ClassVar[tuple[str, ...]] = (
        # the hook tests the placeholder
        "def watch(layer):\n"
        "    previous = None\n"
        "    def hook(module, inputs, output):\n"
        "        nonlocal previous\n"
        "        if previous is not None:\n"
        "            module.drift = (output - previous).norm()\n"
        "        previous = output.detach()\n"
        "    return layer.register_forward_hook(hook)\n",
        # the real value is written before it is used
        "import torch\n"
        "def watch(layer):\n"
        "    mask = torch.empty([])\n"
        "    def hook(module, inputs, output):\n"
        "        nonlocal mask\n"
        "        mask = torch.ones(output.shape[:2], dtype=torch.bool)\n"
        "        module.kept = output.flatten(0, 1)[mask.flatten(0, 1)]\n"
        "    return layer.register_forward_hook(hook)\n",
        # a dimension a 0-dim tensor has
        "import torch\n"
        "def watch(layer):\n"
        "    total = torch.zeros([])\n"
        "    def hook(module, inputs, output):\n"
        "        nonlocal total\n"
        "        step = total.sum(0) + output.sum()\n"
        "        total = step.detach()\n"
        "    return layer.register_forward_hook(hook)\n",
        # another function sets the variable first
        "def watch(layer):\n"
        "    previous = None\n"
        "    def prime(x):\n"
        "        nonlocal previous\n"
        "        previous = x\n"
        "    def hook(module, inputs, output):\n"
        "        nonlocal previous\n"
        "        module.drift = (output - previous).norm()\n"
        "        previous = output.detach()\n"
        "    layer.register_forward_hook(hook)\n"
        "    return prime\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def watch(layer):\n"
            "    previous = None\n"
            "    def hook(module, inputs, output):\n"
            "        nonlocal previous\n"
            "        module.drift = (output - previous).norm()  # HKL427\n"
            "        previous = output.detach()\n"
            "    return layer.register_forward_hook(hook)\n"
        ),
        # the enclosing loop hands the placeholder to the hook through another variable (sparsify)
        Invalid(
            "import torch\n"
            "def fit(model, loader, exclude=None):\n"
            "    identity = torch.empty([], dtype=torch.bool)\n"
            "    def hook(module, inputs, outputs):\n"
            "        mask = tokens_mask\n"
            "        flat = mask.flatten(0, 1)  # HKL427\n"
            "        module.kept = outputs.flatten(0, 1)[flat]\n"
            "        nonlocal identity\n"
            "        identity = torch.ones_like(outputs[..., 0], dtype=torch.bool)\n"
            "    handles = [m.register_forward_hook(hook) for m in model.children()]\n"
            "    for batch in loader:\n"
            "        tokens_mask = torch.isin(batch, exclude, invert=True) if exclude is not None else identity\n"
            "        model(batch)\n"
            "    for h in handles:\n"
            "        h.remove()\n"
        ),
        # a tensor hook, the shape read on a 0-dim scale
        Invalid(
            "import torch\n"
            "def clip_grads(param):\n"
            "    scale = torch.zeros(size=())\n"
            "    def hook(grad):\n"
            "        nonlocal scale\n"
            "        rows = scale.shape[0]  # HKL427\n"
            "        scale = grad.abs().amax(dim=1, keepdim=True)\n"
            "        return grad / scale.clamp_min(1e-6)[:rows]\n"
            "    return param.register_hook(hook)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in placeholder_uses(ctx):
            hook_name = getattr(found.hook, "name", "<hook>")
            placeholder_line = ctx.span(found.placeholder)[0]
            write_line = ctx.span(found.write)[0]
            through = f"`{found.local_name}`"
            if found.local_name != found.read_name:
                through += f" (a copy of `{found.read_name}`)"
            if found.read_name != found.variable:
                through += (f", which the enclosing function sets from `{found.variable}` "
                            f"(`{found.read_name} = {ast.unparse(found.alias_from)}`)")
            failure = ("raises (`None` has no attributes, items or arithmetic)" if found.placeholder_kind == "None"
                       else "raises `IndexError` (a 0-dim tensor has no such dimension)")
            yield self.finding(
                ctx, found.use,
                f"hook `{hook_name}` uses {through}, in `{ast.unparse(found.use)}`, before its own code gives "
                f"`{found.variable}` a real value (line {write_line.row}): on the first call it still holds the "
                f"placeholder `{ast.unparse(found.placeholder)}` (line {placeholder_line.row}), a "
                f"{found.placeholder_kind}, and this {failure}",
                help="Build the real value before the hook first runs, or test for the placeholder in the hook.",
                related=[Related("the placeholder", ctx.display_path, placeholder_line),
                         Related("the hook's replacement", ctx.display_path, write_line)],
            )
