"""HKL519: `torch.autograd.grad` is asked for every parameter of a module, frozen ones included."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.grad_inputs import frozen_param_grads


class GradWrtFrozenParams(Rule):
    """
    ## What it does
    Reports `<module>.parameters()`, for a module the caller hands in (a
    parameter of the function, not `self`, unless every call in the file
    passes a module it has just built), when the tensors it yields reach the
    `inputs` of `torch.autograd.grad` with no filter on `requires_grad`:
    directly (`torch.autograd.grad(loss, model.parameters())`), through
    names, tuples and `+`, or through a custom `autograd.Function` that
    takes the parameters as `*args`, saves them with `save_for_backward`
    and differentiates with respect to them in its `backward`.

    ## Why is this bad?
    `torch.autograd.grad` raises `RuntimeError: One of the differentiated
    Tensors does not require grad` when any tensor of `inputs` has
    `requires_grad=False`; `allow_unused=True` does not change that.
    `parameters()` yields frozen parameters too, so the code works on a
    fully trainable model and fails as soon as part of it is frozen
    (fine-tuning, a frozen embedding, a pretrained encoder).  Through a
    custom Function the failure comes out of `backward`, far from the
    call that chose the parameters.

    ## Known problems
    The rule cannot know whether a model with frozen parameters is ever
    passed; it looks for a `requires_grad` test on the way, nothing else.
    The severity is *warning*.

    ## Example
    ```python
    import torch

    def parameter_grads(model, loss):
        params = tuple(model.parameters())
        return torch.autograd.grad(loss, params, allow_unused=True)
    ```

    ## Use instead
    ```python
    import torch

    def parameter_grads(model, loss):
        params = tuple(p for p in model.parameters() if p.requires_grad)
        return torch.autograd.grad(loss, params, allow_unused=True)
    ```

    ## Fix safety
    There is no automatic fix: the caller may expect one gradient per
    parameter, frozen ones included (as zeros or None).

    ## References
    - [`torch.autograd.grad`](https://pytorch.org/docs/stable/generated/torch.autograd.grad.html)
    - [`Module.parameters`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.parameters)
    """

    code = "HKL519"
    name = "grad-wrt-frozen-params"
    summary = "torch.autograd.grad is asked for every parameter of a module, frozen ones included"
    severity = Severity.WARNING
    # the source (`.parameters()`) and the call (`autograd.grad(`, or `grad` imported by name) must both be there
    triggers = (".parameters()",)
    trigger_pattern = r"autograd\.grad\(|import[ \t]+grad\b"

    VALID: ClassVar[tuple[str, ...]] = (
        # filtered on requires_grad
        "import torch\n"
        "def grads(model, loss):\n"
        "    params = [p for p in model.parameters() if p.requires_grad]\n"
        "    return torch.autograd.grad(loss, params)\n",
        # every parameter made trainable first
        "import torch\n"
        "def grads(model, loss):\n"
        "    params = list(model.parameters())\n"
        "    for p in params:\n"
        "        p.requires_grad_(True)\n"
        "    return torch.autograd.grad(loss, params)\n",
        # a module the code builds itself is as trainable as it made it
        "import torch\n"
        "def check_double_backward(make_module, x):\n"
        "    module = make_module()\n"
        "    out = module(x)\n"
        "    return torch.autograd.grad(out.sum(), (x,) + tuple(module.parameters()), create_graph=True)\n",
        # every caller in the file hands over a model it just loaded, untouched
        "import torch\n"
        "import transformers\n"
        "def fisher_trace(model, loss_fn, batch):\n"
        "    grads = torch.autograd.grad(loss_fn(model(batch)), model.parameters())\n"
        "    return sum((g * g).sum() for g in grads)\n"
        "def main(path, batch, loss_fn):\n"
        "    model = transformers.AutoModelForCausalLM.from_pretrained(path)\n"
        "    model = model.to('cpu')\n"
        "    print(fisher_trace(model, loss_fn, batch))\n",
        # gradients with respect to inputs
        "import torch\n"
        "def saliency(model, x):\n"
        "    x = x.detach().requires_grad_(True)\n"
        "    return torch.autograd.grad(model(x).sum(), x)[0]\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "def inner_step(model, loss, lr):\n"
            "    grads = torch.autograd.grad(loss, model.parameters(), create_graph=True)  # HKL519\n"
            "    return [p - lr * g for p, g in zip(model.parameters(), grads)]\n"
        ),
        Invalid(
            "from torch.autograd import grad\n"
            "def penalty(net, loss):\n"
            "    weights = list(net.parameters())  # HKL519\n"
            "    gs = grad(loss, weights, create_graph=True)\n"
            "    return sum((g ** 2).sum() for g in gs)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for hit in frozen_param_grads(ctx):
            grad_line = ctx.span(hit.grad_call)[0]
            through = (f", passed through `{hit.through}.apply` and saved for its `backward`," if hit.through else "")
            yield self.finding(
                ctx, hit.source,
                f"every tensor of `{ast.unparse(hit.source)}`"
                f"{through} reaches the inputs of `torch.autograd.grad` (line {grad_line.row}) with no "
                f"`requires_grad` filter: if any parameter is frozen, that call raises 'One of the differentiated "
                f"Tensors does not require grad' (allow_unused=True does not prevent it)",
                help="Keep only the parameters that require grad (`[p for p in m.parameters() if p.requires_grad]`) "
                     "and map the gradients back if the caller needs one per parameter.",
                related=[Related("the gradient call", ctx.display_path, grad_line)],
            )
