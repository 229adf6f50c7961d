"""HKL204: a parameter's tensor hook reads or edits that parameter's `.grad`
(hook-semantics.md, section 2; the same timing as HKL201, on the parameter itself)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.describe import hook_label
from hooklint.static.grads import is_parameter, writes_through
from hooklint.static.hooked_tensor import hooked_tensor_uses
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.values import TensorValue, src

_HELP = ("Change the gradient the hook is given and return it (`def hook(grad): return grad + noise`); "
         "or, to work on the accumulated `.grad`, register `p.register_post_accumulate_grad_hook(fn)` "
         "(torch >= 2.1), which runs after `.grad` holds this step's gradient and receives the parameter.")


def _is_parameter_value(ctx: FileContext, value, expr) -> bool:
    return (isinstance(value, TensorValue) and value.parameter) or (expr is not None and is_parameter(ctx, expr))


def _parameter_target(ctx: FileContext, reg: Registration) -> str | None:
    """How the message names the hooked parameter, when the file shows it is one: the
    receiver as written, or through a helper's call site that passes a parameter."""
    if reg.receiver is None:
        return None
    if _is_parameter_value(ctx, reg.receiver_value, reg.receiver):
        return f"`{src(reg.receiver)}`"
    for instance in ctx.hooks.instances_of(reg.call):
        if instance.traveled and _is_parameter_value(ctx, instance.receiver_value, instance.receiver_origin):
            return instance.describe_target()
    return None


class GradEditInTensorHook(Rule):
    """
    ## What it does
    Reports a tensor hook registered on a parameter (`p.register_hook(fn)`,
    where `p` comes from `.parameters()` / `.named_parameters()`, is a layer's
    `weight` or `bias`, or an `nn.Parameter`) whose body reads or writes `.grad`
    of that same parameter: reached through a default argument
    (`def noise(grad, p=p)`), a closure over the registration's variable, a
    lambda, `functools.partial(fn, p=p)`, a factory's argument
    (`p.register_hook(make_hook(p))`) or the `self` of a bound method.

    ## Why is this bad?
    A parameter's tensor hook runs *before* its gradient is accumulated into
    `.grad` (it is a pre-hook of the parameter's `AccumulateGrad` node).  At
    that moment `.grad` holds the previous state, not this step's gradient:
    `None` after `optimizer.zero_grad()` (which sets gradients to None by
    default since torch 2.0), so a guarded edit
    (`if p.grad is not None: p.grad.add_(noise)`) silently never runs, and an
    unguarded one raises `AttributeError`; or, when gradients are kept
    (`zero_grad(set_to_none=False)`, gradient accumulation), zeros or the
    gradient accumulated so far, which the hook edits before this step's
    gradient is added on top: a scaling, clamping or zeroing edit acts on the
    old value only and this step's gradient goes in unchanged (an additive
    edit on gradients zeroed in place happens to end up in the sum).  Either
    way the edit never applies to this step's gradient.  A hook that reads
    `.grad` (to log a norm, to decide) reads the old value.

    A loop that registers a closure over its loop variable
    (`for p in ...: p.register_hook(lambda g: p.grad ...)`) adds a second
    bug: every hook sees the loop's last parameter when it runs.

    ## Known problems
    Only the parameter the hook is registered on is followed, and only where
    the file shows that the name in the hook body is that parameter: a hook
    that reads `.grad` of some other tensor, or that reaches its parameter
    through a helper's arguments, is not reported.  A hook that deliberately
    reads the gradient accumulated by earlier micro-batches is reported too.

    ## Example
    ```python
    import torch

    def add_gradient_noise(model, std):
        for p in model.parameters():
            def noise(grad, p=p):
                if p.grad is not None:
                    p.grad.add_(torch.randn_like(p.grad) * std)
            p.register_hook(noise)
    ```

    ## Use instead
    ```python
    import torch

    def add_gradient_noise(model, std):
        for p in model.parameters():
            p.register_hook(lambda grad: grad + torch.randn_like(grad) * std)

    # or, on the accumulated gradient (torch >= 2.1); the hook must return None
    def add_gradient_noise_after(model, std):
        def noise(p):
            p.grad.add_(torch.randn_like(p.grad) * std)
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(noise)
    ```

    ## Fix safety
    There is no fix: how the body should use its `grad` argument instead (and
    whether it should return a new gradient or move to a
    post-accumulate-grad hook) depends on what the body does.

    ## References
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - [Autograd mechanics: backward hooks execution](https://pytorch.org/docs/stable/notes/autograd.html#backward-hooks-execution)
    """

    code = "HKL204"
    origins = (Origin.STATIC,)
    name = "grad-edit-in-tensor-hook"
    summary = ("A parameter's tensor hook reads or writes that parameter's `.grad`, which does not yet hold "
               "this step's gradient")
    severity = Severity.ERROR
    triggers = ("register_hook",)
    VALID: ClassVar[tuple[str, ...]] = (
        # the hook changes the gradient it is given
        "import torch.nn as nn\n"
        "model = nn.Linear(2, 2)\n"
        "for p in model.parameters():\n"
        "    p.register_hook(lambda grad: grad * 0.5)\n",
        # after accumulation: HKL203's territory
        "import torch.nn as nn\n"
        "model = nn.Linear(2, 2)\n"
        "for p in model.parameters():\n"
        "    p.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(0.5))\n",
        # `.grad` of another tensor, which the file does not show is the hooked one
        "import torch.nn as nn\n"
        "model = nn.Linear(2, 2)\n"
        "def log(grad, other=None):\n"
        "    print(other.grad)\n"
        "model.weight.register_hook(log)\n",
        # a hook on an activation (non-leaf): its `.grad` is never accumulated by this hook
        "import torch\n"
        "x = torch.randn(3, requires_grad=True)\n"
        "y = x * 2\n"
        "y.register_hook(lambda g: print(y.grad))\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "def add_gradient_noise(model, std):\n"
            "    for p in model.parameters():\n"
            "        def noise(grad, p=p):\n"
            "            if p.grad is not None:  # HKL204\n"
            "                p.grad.add_(torch.randn_like(p.grad) * std)\n"
            "        p.register_hook(noise)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "layer = nn.Linear(2, 2)\n"
            "layer.weight.register_hook(lambda g: layer.weight.grad.clamp_(-1, 1))  # HKL204\n"
        ),
        Invalid(
            "import functools\n"
            "import torch.nn as nn\n"
            "def scale(p, grad):\n"
            "    p.grad.mul_(0.5)  # HKL204\n"
            "model = nn.Linear(2, 2)\n"
            "for name, param in model.named_parameters():\n"
            "    param.register_hook(functools.partial(scale, param))\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        reported: set[int] = set()
        for reg in ctx.hooks.registrations:
            if reg.kind is not HookKind.TENSOR or reg.hook is None or reg.receiver is None:
                continue
            if id(reg.hook.node) in reported:
                continue
            target = _parameter_target(ctx, reg)
            if target is None:
                continue
            grads = [u for u in hooked_tensor_uses(ctx.model, reg.receiver, reg.hook_expr, reg.hook.node,
                                                   reg.hook.via)
                     if _is_grad_of(u.node)]
            if not grads:
                continue
            reported.add(id(reg.hook.node))
            first = grads[0]
            grad_node = first.node._hl_parent  # type: ignore[attr-defined]
            late = (f"; moreover `{src(first.node)}` is the loop variable, read when the hook runs, so every "
                    f"hook sees the loop's last parameter" if first.late_bound else "")
            writes = any(writes_through(u.node._hl_parent) for u in grads)  # type: ignore[attr-defined]
            consequence = ("the edit never applies to this step's gradient" if writes else
                           "what it reads is never this step's gradient")
            message = (
                f"`{hook_label(reg)}` (tensor hook at line {reg.call.lineno} on the parameter {target}) "
                f"{'writes to' if writes else 'reads'} `{src(grad_node)}`, the `.grad` of the parameter "
                f"it is hooked on (reached through a {first.how}), but a parameter's tensor hook runs "
                f"before this step's gradient is accumulated into `.grad`: there `.grad` is None after "
                f"`zero_grad()` (a `.grad is not None` guard then skips the hook's work every step) or holds "
                f"the previous steps' gradient, which this step's gradient is added to afterwards; "
                f"{consequence}{late}"
            )
            yield self.finding(
                ctx, grad_node, message, help=_HELP,
                related=[Related(f"registered as a tensor hook on `{src(reg.receiver)}`", ctx.display_path,
                                 ctx.span(reg.call)[0])],
            )


def _is_grad_of(node: ast.AST) -> bool:
    parent = getattr(node, "_hl_parent", None)
    return isinstance(parent, ast.Attribute) and parent.value is node and parent.attr == "grad"
