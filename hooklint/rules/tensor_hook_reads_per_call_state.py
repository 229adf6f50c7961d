"""HKL351: a tensor hook registered per call reads, at backward time, owner state the next call overwrites."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.per_call_hook_state import per_call_state_reads


class TensorHookReadsPerCallState(Rule):
    """
    ## What it does
    Reports a tensor hook (`t.register_hook(fn)`) registered by a method on
    a tensor that call computes, whose callable reads attributes of the
    method's object when it runs (`partial(fn, owner=self)` with `fn`
    reading `owner.cache`, a bound method or a closure reading
    `self.cache`), while the same method, or a method of the class it
    calls, assigns those attributes afresh on every call.

    ## Why is this bad?
    The hook belongs to one call's graph but runs only when `backward`
    reaches its tensor.  Call the method twice before one backward (two
    losses summed, a shared encoder run on two inputs, a loss computed for
    several batches before stepping) and the second call rebinds the
    attributes: the first call's hook then reads the second call's values
    and produces wrong gradients, with no error.

    ## Known problems
    A method that runs the backward itself after registering (`backward()`,
    `torch.autograd.grad`) is not reported; one whose caller always runs
    the backward before calling it again never shows the problem either,
    and is reported: the severity is *warning*.  Attributes
    the method only sets to a literal (a flag) are not reported.

    ## Example
    ```python
    from functools import partial

    import torch.nn as nn

    def _replay(grad, loss_obj):
        for chunk, g in zip(loss_obj.chunks, loss_obj.cache):
            (loss_obj.encoder(chunk) * g).sum().backward()

    class CachedLoss(nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, batch):
            self.chunks = batch.split(8)
            reps = [self.encoder(c).detach().requires_grad_() for c in self.chunks]
            loss = sum(r.pow(2).sum() for r in reps)
            loss.backward(inputs=reps)
            self.cache = [r.grad for r in reps]
            loss = loss.detach().requires_grad_()
            loss.register_hook(partial(_replay, loss_obj=self))
            return loss
    ```

    ## Use instead
    ```python
    from functools import partial

    import torch.nn as nn

    def _replay(grad, encoder, chunks, cache):
        for chunk, g in zip(chunks, cache):
            (encoder(chunk) * g).sum().backward()

    class CachedLoss(nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, batch):
            chunks = batch.split(8)
            reps = [self.encoder(c).detach().requires_grad_() for c in chunks]
            loss = sum(r.pow(2).sum() for r in reps)
            loss.backward(inputs=reps)
            cache = [r.grad for r in reps]
            loss = loss.detach().requires_grad_()
            loss.register_hook(partial(_replay, encoder=self.encoder, chunks=chunks, cache=cache))
            return loss
    ```

    ## Fix safety
    There is no automatic fix: hand the hook the call's own values
    (`partial(fn, cache=self.cache)` or a closure over locals).

    ## References
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - sentence-transformers PR 3862 (the cached losses' hook replayed another forward's mini-batches)
    """

    code = "HKL351"
    name = "tensor-hook-reads-per-call-state"
    summary = "A tensor hook registered per call reads owner state that the next call overwrites"
    severity = Severity.WARNING
    triggers = ("register_hook",)
    trigger_pattern = r"\bself\b"

    VALID: ClassVar[tuple[str, ...]] = (
        # the hook is handed the call's own values
        "from functools import partial\n"
        "import torch.nn as nn\n"
        "def replay(grad, cache):\n"
        "    return grad * cache\n"
        "class Scaled(nn.Module):\n"
        "    def forward(self, x):\n"
        "        self.scale = x.std()\n"
        "        y = x * 2\n"
        "        y.register_hook(partial(replay, cache=self.scale))\n"
        "        return y\n",
        # the hook writes the owner's state (a gradient collector), it does not read the call's state
        "import torch.nn as nn\n"
        "class Saliency(nn.Module):\n"
        "    def __init__(self, net):\n"
        "        super().__init__()\n"
        "        self.net = net\n"
        "        self.grads = []\n"
        "    def save(self, grad):\n"
        "        self.grads.append(grad)\n"
        "    def forward(self, x):\n"
        "        self.acts = self.net(x)\n"
        "        out = self.acts * 1\n"
        "        out.register_hook(self.save)\n"
        "        return out\n",
        # set once per object: the hook is the object's, not a call's
        "import torch.nn as nn\n"
        "class Masked(nn.Module):\n"
        "    def __init__(self, layer, mask):\n"
        "        super().__init__()\n"
        "        self.mask = mask\n"
        "        w = layer.weight\n"
        "        w.register_hook(lambda g: g * self.mask)\n",
        # the method runs the backward itself: the hook fires before the next call
        "import torch\n"
        "class Attribution:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "    def _scale(self, grad):\n"
        "        return grad * self.baseline\n"
        "    def attribute(self, x, baseline):\n"
        "        self.baseline = baseline\n"
        "        out = self.model(x)\n"
        "        out.register_hook(self._scale)\n"
        "        return torch.autograd.grad(out.sum(), x)[0]\n",
        # a flag set to a literal is the same on every call
        "import torch.nn as nn\n"
        "class Tracer(nn.Module):\n"
        "    def forward(self, x):\n"
        "        self.armed = True\n"
        "        y = x + 1\n"
        "        y.register_hook(lambda g: g if self.armed else None)\n"
        "        return y\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "from functools import partial\n"
            "import torch.nn as nn\n"
            "def _replay(grad, loss_obj):\n"
            "    for chunk, g in zip(loss_obj.chunks, loss_obj.cache):\n"
            "        (loss_obj.encoder(chunk) * g).sum().backward()\n"
            "class CachedLoss(nn.Module):\n"
            "    def __init__(self, encoder):\n"
            "        super().__init__()\n"
            "        self.encoder = encoder\n"
            "    def _cache(self, reps):\n"
            "        self.cache = [r.grad for r in reps]\n"
            "    def forward(self, batch):\n"
            "        self.chunks = []\n"
            "        for c in batch.split(8):\n"
            "            self.chunks.append(c)\n"
            "        reps = [self.encoder(c).detach().requires_grad_() for c in self.chunks]\n"
            "        loss = sum(r.pow(2).sum() for r in reps)\n"
            "        loss.backward(inputs=reps)\n"
            "        self._cache(reps)\n"
            "        loss = loss.detach().requires_grad_()\n"
            "        loss.register_hook(partial(_replay, loss_obj=self))  # HKL351\n"
            "        return loss\n"
        ),
        # a bound method reading a mask the forward draws per call
        Invalid(
            "import torch\n"
            "class GradDropout(torch.nn.Module):\n"
            "    def _drop(self, grad):\n"
            "        return grad * self.keep\n"
            "    def forward(self, x):\n"
            "        self.keep = (torch.rand_like(x) > 0.1).to(x.dtype)\n"
            "        y = x.clone()\n"
            "        y.register_hook(self._drop)  # HKL351\n"
            "        return y\n"
        ),
        # a closure of a plain method (not forward) reading `self`
        Invalid(
            "class Recorder:\n"
            "    def score(self, model, batch):\n"
            "        self.weights = batch['weights']\n"
            "        logits = model(batch['x'])\n"
            "        logits.register_hook(lambda g: g * self.weights[:, None])  # HKL351\n"
            "        return logits.logsumexp(-1).mean()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in per_call_state_reads(ctx):
            names = ", ".join(f"`{name}`" for name in found.attributes)
            hook_name = getattr(found.hook, "name", "<lambda>")
            read_line = ctx.span(found.first_read)[0]
            related = [Related("read at backward time", ctx.display_path, read_line)]
            related += [Related("written per call", ctx.display_path, ctx.span(stmt)[0]) for stmt in found.writes]
            yield self.finding(
                ctx, found.registration.call,
                f"the tensor hook `{hook_name}` registered by `{found.cls.name}.{found.method.name}` reads {names} of "
                f"the object when backward reaches it, and every call of `{found.method.name}` assigns "
                f"{'it' if len(found.attributes) == 1 else 'them'} afresh: after two calls before one backward (two "
                f"losses summed, a shared module run twice) the first call's hook reads the second call's values "
                f"and computes wrong gradients, without an error",
                help="Hand the hook this call's own values (`partial(fn, cache=self.cache)`, or a closure over "
                     "locals) instead of the object.",
                related=related,
            )
