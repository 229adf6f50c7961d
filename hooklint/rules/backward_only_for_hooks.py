"""HKL208: backward() run only to make a library's hooks fire also writes the caller's .grad (gradient-hooks.md)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_backward import hook_only_backwards
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS


class BackwardOnlyForHooks(Rule):
    """
    ## What it does
    Reports a `loss.backward()` (or `torch.autograd.backward(...)`) that a
    function runs while gradient-side hooks it registered on modules it did
    not build are in place (module backward hooks, or forward hooks that
    register a tensor hook on the output), when that code never reads a
    `.grad` and never steps an optimizer: the backward pass is there only
    to make the hooks fire.

    ## Why is this bad?
    `backward()` accumulates into `.grad` of every parameter the graph
    reaches, which are the caller's parameters.  Computing a curvature
    approximation, an attribution or gradient statistics in the middle of a
    training step (between the caller's `backward()` and `optimizer.step()`,
    or during gradient accumulation) silently adds the library's own
    gradients to the caller's, and a `model.zero_grad()` the library does to
    clean up afterwards throws the caller's gradients away.

    `torch.autograd.grad(loss, inputs)` runs the same hooks (they are on
    the path from `loss` to `inputs`) and returns the gradients instead of
    accumulating them: no `.grad` changes.

    ## Known problems
    The hooks must be registered in the same function, or the function
    must call (through `self`) the method that runs `backward()`.  Code
    that reads `.grad` or calls `.step()` there is taken to train, and is
    not reported.  The severity is *warning*: a caller who never calls the
    library inside a training step is not affected.

    ## Example
    ```python
    def output_gradient_norms(model, layers, loss_fn, x, y):
        norms, handles = [], []

        def capture(module, inputs, output):
            output.register_hook(lambda g: norms.append(g.norm()))

        for layer in layers:
            handles.append(layer.register_forward_hook(capture))
        try:
            loss_fn(model(x), y).backward()
        finally:
            for h in handles:
                h.remove()
        return norms
    ```

    ## Use instead
    ```python
    import torch

    def output_gradient_norms(model, layers, loss_fn, x, y):
        norms, handles = [], []

        def capture(module, inputs, output):
            output.register_hook(lambda g: norms.append(g.norm()))

        for layer in layers:
            handles.append(layer.register_forward_hook(capture))
        try:
            params = [p for p in model.parameters() if p.requires_grad]
            torch.autograd.grad(loss_fn(model(x), y), params, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
        return norms
    ```

    ## Fix safety
    There is no automatic fix: `autograd.grad` needs the inputs to
    differentiate with respect to (the parameters, or the hooked outputs).

    ## References
    - [`torch.autograd.grad`](https://pytorch.org/docs/stable/generated/torch.autograd.grad.html)
    - curvlinops pull request 104 (`KFACLinearOperator` called `backward()`; 2.0.0 uses `autograd.grad`)
    """

    code = "HKL208"
    name = "backward-only-for-hooks"
    summary = "backward() run only to make the library's hooks fire also accumulates into the caller's .grad"
    severity = Severity.WARNING
    triggers = ("register_full_backward_hook", "register_full_backward_pre_hook", "register_backward_hook",
                "register_hook") + DYNAMIC_NAME_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # autograd.grad
        "import torch\n"
        "def norms(model, layer, x):\n"
        "    out = []\n"
        "    h = layer.register_full_backward_hook(lambda m, gi, go: out.append(go[0].norm()))\n"
        "    torch.autograd.grad(model(x).sum(), list(model.parameters()))\n"
        "    h.remove()\n"
        "    return out\n",
        # a training step: the gradients are used
        "def train_step(model, layer, optimizer, x, log):\n"
        "    h = layer.register_full_backward_hook(lambda m, gi, go: log.append(go[0].norm()))\n"
        "    model(x).sum().backward()\n"
        "    optimizer.step()\n"
        "    h.remove()\n",
        # only forward hooks: the backward is not run for them
        "def activations(model, layer, x, store):\n"
        "    h = layer.register_forward_hook(lambda m, i, o: store.append(o))\n"
        "    model(x).sum().backward()\n"
        "    h.remove()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def norms(model, layer, x):\n"
            "    out = []\n"
            "    h = layer.register_full_backward_hook(lambda m, gi, go: out.append(go[0].norm()))\n"
            "    model(x).sum().backward()  # HKL208\n"
            "    h.remove()\n"
            "    return out\n"
        ),
        Invalid(
            "class Curvature:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "    def compute(self, x):\n"
            "        handles = [m.register_forward_hook(self.capture) for m in self.model.modules()]\n"
            "        self._backward(self.model(x))\n"
            "        self.model.zero_grad()\n"
            "        for h in handles:\n"
            "            h.remove()\n"
            "    def capture(self, module, inputs, output):\n"
            "        output.register_hook(print)\n"
            "    def _backward(self, out):\n"
            "        out.sum().backward()  # HKL208\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in hook_only_backwards(ctx):
            reg = found.registrations[0]
            func = getattr(found.function, "name", "?")
            clears = ""
            if found.clears is not None:
                clears = (f"; the `zero_grad()` at line {found.clears.lineno} then also throws away the gradients the "
                          f"caller had accumulated")
            yield self.finding(
                ctx, found.call,
                message=(f"this `backward()` runs only to make the hooks `{func}` registers on `{reg.receiver_text}` "
                         f"fire (nothing here reads `.grad` or steps an optimizer), but it also accumulates into "
                         f"`.grad` of every parameter of the caller's model: called inside a training step, it "
                         f"corrupts the gradients the optimizer is about to use{clears}"),
                help="Use `torch.autograd.grad(loss, inputs)` (the parameters, or the hooked outputs): it fires the "
                     "same hooks and touches no `.grad`.",
                related=[Related("hook registered here", ctx.display_path, ctx.span(r.call)[0])
                         for r in found.registrations[:2]],
            )
