"""HKL202: a module backward hook that does nothing when `.grad is None`."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import body_nodes
from hooklint.static.context import FileContext
from hooklint.static.describe import (
    MODULE_BACKWARD_KINDS,
    MODULE_BACKWARD_TRIGGERS,
    describe_registrations,
    hook_label,
    registration_notes,
    registrations_by_hook,
)
from hooklint.static.grads import is_parameter
from hooklint.static.values import src


def _none_test(ctx: FileContext, test: ast.expr) -> tuple[str, ast.Attribute] | None:
    """("is", grad) for ``<param>.grad is None``, ("is not", grad) for ``is not None``,
    also as one operand of ``or`` / ``and`` respectively."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.comparators[0], ast.Constant) \
            and test.comparators[0].value is None and isinstance(test.left, ast.Attribute) \
            and test.left.attr == "grad" and is_parameter(ctx, test.left.value):
        if isinstance(test.ops[0], ast.Is):
            return "is", test.left
        if isinstance(test.ops[0], ast.IsNot):
            return "is not", test.left
        return None
    if isinstance(test, ast.BoolOp):
        wanted = "is" if isinstance(test.op, ast.Or) else "is not"
        for value in test.values:
            found = _none_test(ctx, value)
            if found is not None and found[0] == wanted:
                return found
    return None


def _only_exits(body: list[ast.stmt]) -> bool:
    return all(isinstance(s, (ast.Return, ast.Continue, ast.Pass)) or
               (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in body) \
        and any(isinstance(s, (ast.Return, ast.Continue)) for s in body)


class GradNoneGuard(Rule):
    """
    ## What it does
    Reports a module backward hook that returns (or skips a parameter) when a
    parameter's `.grad is None`, or that acts only under
    `if p.grad is not None:`.

    ## Why is this bad?
    The guard looks like a "safety measure for the last layer", but in a module
    backward hook `.grad` is None exactly when the hook runs before the
    parameter's gradient is accumulated: on every layer whose inputs need no
    grad (the first layer fed plain data), on the first step, and at *every*
    step when `optimizer.zero_grad()` resets gradients to None (its default).
    There the hook silently does nothing, forever; where gradients are kept
    instead, it edits the previous step's gradient (see HKL201).

    ## Example
    ```python
    import torch.nn as nn

    def grad_mod(module, grad_inputs, grad_outputs):
        if module.weight.grad is None:  # safety measure for last layer
            return None
        module.weight.grad.clamp_(-1, 1)

    nn.Linear(1, 2).register_full_backward_hook(grad_mod)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def grad_mod(param):
        param.grad.clamp_(-1, 1)  # .grad is set when this runs

    nn.Linear(1, 2).weight.register_post_accumulate_grad_hook(grad_mod)
    ```

    ## Fix safety
    There is no automatic fix: the edit must move to a hook on the parameter
    (HKL201 shows the equivalent post-accumulate-grad hook where it can).

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [`Optimizer.zero_grad(set_to_none=True)`](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html)
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    """

    code = "HKL202"
    name = "grad-none-guard"
    summary = "A module backward hook skips its work when `.grad is None`, which makes it a silent no-op"
    severity = Severity.ERROR
    triggers = MODULE_BACKWARD_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # post-accumulate hooks run after `.grad` is set; a guard there is harmless
        "import torch.nn as nn\n"
        "def clip(param):\n"
        "    if param.grad is None:\n"
        "        return\n"
        "    param.grad.clamp_(-1, 1)\n"
        "nn.Linear(2, 2).weight.register_post_accumulate_grad_hook(clip)\n",
        # a guard on the hook's own argument, not on a parameter's .grad
        "import torch.nn as nn\n"
        "def scale(module, grad_input, grad_output):\n"
        "    if grad_input[0] is None:\n"
        "        return None\n"
        "    return (grad_input[0] * 2,)\n"
        "nn.Linear(2, 2).register_full_backward_hook(scale)\n",
        # the guard in an ordinary training step
        "def clip_all(model):\n"
        "    for p in model.parameters():\n"
        "        if p.grad is not None:\n"
        "            p.grad.clamp_(-1, 1)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def grad_mod(module, grad_inputs, grad_outputs):\n"
            "    if module.weight.grad is None:  # HKL201, HKL202\n"
            "        return None\n"
            "    module.weight.grad.clamp_(-1, 1)\n"
            "nn.Linear(1, 2).register_full_backward_hook(grad_mod)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def clip(module, grad_input, grad_output):\n"
            "    for p in module.parameters():\n"
            "        if p.grad is not None:  # HKL201, HKL202\n"
            "            p.grad.clamp_(-1, 1)\n"
            "def attach(m):\n"
            "    m.register_full_backward_hook(clip)\n"
            "net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
            "net.apply(attach)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for func, regs in registrations_by_hook(ctx, MODULE_BACKWARD_KINDS).items():
            hook_name = hook_label(regs[0])
            for node in body_nodes(func):
                if not isinstance(node, ast.If):
                    continue
                found = _none_test(ctx, node.test)
                if found is None:
                    continue
                op, grad = found
                if op == "is" and _only_exits(node.body):
                    exits = "returns" if any(isinstance(s, ast.Return) for s in node.body) else "skips"
                    what = f"{exits} when `{src(grad)} is None`"
                elif op == "is not" and not node.orelse:
                    what = f"acts only under `if {src(grad)} is not None`"
                else:
                    continue
                start = ctx.span(node)[0]
                end = ctx.span(node.test)[1]
                yield self.make(
                    path=ctx.display_path, location=start, end_location=end,
                    message=f"`{hook_name}` ({describe_registrations(regs)}) {what}; `.grad` is None there "
                    f"whenever the hook runs before the gradient is accumulated (on any layer whose inputs "
                    f"need no grad, at every step when zero_grad() resets grads to None, its default), so "
                    f"the hook silently does nothing there",
                    help="Move the edit to a hook on the parameter: "
                    "`param.register_post_accumulate_grad_hook(fn)` runs when `.grad` is set.",
                    related=registration_notes(ctx, regs),
                )
