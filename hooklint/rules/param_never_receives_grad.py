"""Rules only run-time instrumentation can report (hooklint.runtime)."""

from __future__ import annotations

from hooklint.findings import Origin, Severity
from hooklint.rules.base import Rule


class ParamNeverReceivesGrad(Rule):
    """
    ## What it does
    Reports, at run time (`hooklint run`, `hooklint.instrument()`, the pytest
    plugin), a parameter that requires grad and that the forward used (its
    `AccumulateGrad` node is in the backward graph), whose `.grad` is still
    None after `backward()`.

    ## Why is this bad?
    The parameter takes part in the computation but no gradient ever reaches
    it, so the optimizer never updates it; there is no error and no warning.
    The usual cause is a custom `torch.autograd.Function` whose `backward`
    returns None in that parameter's slot: a `ctx.needs_input_grad[i]` test on
    the wrong index, or gradients returned in the wrong order (seed 002: the
    bias gradient of `LinearCraft` is guarded by `needs_input_grad[2]`, which
    belongs to `location`, an argument that never requires grad, so the bias
    never trains).

    When the parameter is an input of a custom `autograd.Function`, the finding
    points at that function's `backward`.

    ## Known problems
    Only backward passes started through `Tensor.backward()` or
    `torch.autograd.backward()` without `inputs=` are checked;
    `torch.autograd.grad()` writes no `.grad`.  A parameter with a
    post-accumulate-grad hook is not reported, since such hooks may clear
    `.grad` on purpose (optimizer in backward).

    ## Example
    ```python
    import torch
    import torch.nn as nn

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            return x * weight + bias

        @staticmethod
        def backward(ctx, grad):
            x, weight = ctx.saved_tensors
            grad_bias = grad.sum(0) if ctx.needs_input_grad[1] else None
            return grad * weight, (grad * x).sum(0), None  # grad_bias computed, then dropped

    weight = nn.Parameter(torch.ones(3))
    bias = nn.Parameter(torch.zeros(3))
    Scale.apply(torch.rand(2, 3), weight, bias).sum().backward()
    assert bias.grad is None  # never trained
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight)
            return x * weight + bias

        @staticmethod
        def backward(ctx, grad):
            x, weight = ctx.saved_tensors
            grad_bias = grad.sum(0) if ctx.needs_input_grad[2] else None
            return grad * weight, (grad * x).sum(0), grad_bias

    weight = nn.Parameter(torch.ones(3))
    bias = nn.Parameter(torch.zeros(3))
    Scale.apply(torch.rand(2, 3), weight, bias).sum().backward()
    assert bias.grad is not None
    ```

    ## Fix safety
    There is no automatic fix: the gradient that should have been returned has
    to be written.

    ## References
    - [Extending `torch.autograd`](https://pytorch.org/docs/stable/notes/extending.html#extending-torch-autograd)
    - [`ctx.needs_input_grad`](https://pytorch.org/docs/stable/generated/torch.autograd.function.FunctionCtx.needs_input_grad.html)
    """

    code = "HKL503"
    name = "param-never-receives-grad"
    summary = "A parameter used in the forward still has `.grad` None after backward: it never trains"
    severity = Severity.ERROR
    origins = (Origin.RUNTIME,)
