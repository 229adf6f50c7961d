"""HKL350: a module's forward registers a tensor hook or runs backward without checking the grad mode."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.grad_mode import grad_mode_needs


class ForwardNeedsGradMode(Rule):
    """
    ## What it does
    Reports a module's `forward` that, directly or through a method of its
    class, registers a tensor hook (`t.register_hook(fn)`) on a tensor it
    computes, or runs `t.backward()`, `torch.autograd.backward(t)` or
    `torch.autograd.grad(t, ...)` on one, while nothing in that code looks
    at the grad mode (`torch.is_grad_enabled()`, `t.requires_grad`,
    `self.training`, `torch.enable_grad()`, `set_grad_enabled`,
    `inference_mode`).

    ## Why is this bad?
    A module's forward also runs under `torch.no_grad()` and
    `torch.inference_mode()`: evaluation loops, metrics, inference
    servers.  There a computed tensor has no autograd graph, and torch
    raises: `register_hook` with "cannot register a hook on a tensor that
    doesn't require gradient", `backward` / `autograd.grad` with "element 0
    of tensors does not require grad and does not have a grad_fn".  The
    module trains but cannot be evaluated the usual way.

    ## Known problems
    A module that is never run under `no_grad` (its documentation forbids
    it) is reported too; the severity is *warning*.  Tensors made leaves
    that require grad (`requires_grad_()`, an `nn.Parameter`), the
    forward's own arguments and attributes of `self` are left alone, and so
    is a call under an `if` on a flag of the caller's (a parameter of the
    method, an attribute of the object: `if register_hook:`).  A forward
    that runs `backward()` is looked for only in files that also register a
    tensor hook or use `torch.autograd` (the text prefilter).

    ## Example
    ```python
    import torch.nn as nn

    class Attention(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * dim)
            self.attn_grad = None

        def save_grad(self, grad):
            self.attn_grad = grad

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
            attn.register_hook(self.save_grad)
            return attn @ v
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    class Attention(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.qkv = nn.Linear(dim, 3 * dim)
            self.attn_grad = None

        def save_grad(self, grad):
            self.attn_grad = grad

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
            if attn.requires_grad:
                attn.register_hook(self.save_grad)
            return attn @ v
    ```

    ## Fix safety
    There is no automatic fix: what the forward computes without gradients
    is the author's choice (skip the hook, or a plain loss without the
    gradient caching).

    ## References
    - [Locally disabling gradient computation](https://pytorch.org/docs/stable/notes/autograd.html#locally-disabling-gradient-computation)
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - sentence-transformers PR 2668 (the cached loss ran its caching backward and hook under `no_grad`)
    """

    code = "HKL350"
    name = "forward-needs-grad-mode"
    summary = "A module's forward registers a tensor hook or runs backward, which raise under no_grad"
    severity = Severity.WARNING
    # `.backward(` alone would admit every model file whose docstring shows a training step (37 more files of
    # torch and the corpus parsed, the prefilter's budget): a forward's backward is looked for in files that
    # also register a tensor hook or use torch.autograd, as gradient-caching losses do
    triggers = ("register_hook", "autograd.grad", "autograd.backward", "autograd import")
    trigger_pattern = r"def[ \t]+forward\("

    VALID: ClassVar[tuple[str, ...]] = (
        # the grad mode is checked (sentence-transformers' fix)
        "import torch, torch.nn as nn\n"
        "class CachedLoss(nn.Module):\n"
        "    def __init__(self, model):\n"
        "        super().__init__()\n"
        "        self.model = model\n"
        "    def cache_gradients(self, reps):\n"
        "        loss = self.model(reps).sum()\n"
        "        loss.backward()\n"
        "        return loss.detach().requires_grad_()\n"
        "    def forward(self, reps):\n"
        "        if torch.is_grad_enabled():\n"
        "            return self.cache_gradients(reps)\n"
        "        return self.model(reps).sum()\n",
        # the hooked tensor is a leaf made to require grad
        "import torch.nn as nn\n"
        "class Probe(nn.Module):\n"
        "    def forward(self, x):\n"
        "        x = x.detach().requires_grad_()\n"
        "        x.register_hook(print)\n"
        "        return x * 2\n",
        # the caller's tensor: whether it requires grad is the caller's business
        "import torch.nn as nn\n"
        "class Probe(nn.Module):\n"
        "    def forward(self, x):\n"
        "        x.register_hook(print)\n"
        "        return x * 2\n",
        # gradients enabled inside forward (force fields)
        "import torch, torch.nn as nn\n"
        "class ForceField(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.energy = nn.Linear(3, 1)\n"
        "    def forward(self, pos):\n"
        "        with torch.enable_grad():\n"
        "            pos = pos.detach().requires_grad_()\n"
        "            e = self.energy(pos).sum()\n"
        "            (forces,) = torch.autograd.grad(e, pos)\n"
        "        return -forces\n",
        # a hook registered in a nested function runs at another time
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x * 2\n"
        "        def later():\n"
        "            y.register_hook(print)\n"
        "        self.later = later\n"
        "        return y\n",
        # the caller opts in with a flag (ALBEF / BLIP's `register_hook=False`, a stashing switch)
        "import torch.nn as nn\n"
        "class Attention(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(4, 4)\n"
        "    def save(self, grad):\n"
        "        self.grad = grad\n"
        "    def forward(self, x, register_hook=False):\n"
        "        attn = self.proj(x).softmax(-1)\n"
        "        if register_hook:\n"
        "            attn.register_hook(self.save)\n"
        "        return attn\n",
        # not a module
        "class Trainer:\n"
        "    def forward(self, batch):\n"
        "        loss = self.model(batch).mean()\n"
        "        loss.backward()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class Attention(nn.Module):\n"
            "    def __init__(self, dim):\n"
            "        super().__init__()\n"
            "        self.qkv = nn.Linear(dim, 3 * dim)\n"
            "    def save_grad(self, grad):\n"
            "        self.attn_grad = grad\n"
            "    def forward(self, x):\n"
            "        q, k, v = self.qkv(x).chunk(3, dim=-1)\n"
            "        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)\n"
            "        attn.register_hook(self.save_grad)  # HKL350\n"
            "        return attn @ v\n"
        ),
        # the backward is in a method forward calls (GradCache-style losses)
        Invalid(
            "import torch\n"
            "from torch import nn\n"
            "class GradCacheLoss(nn.Module):\n"
            "    def __init__(self, scorer):\n"
            "        super().__init__()\n"
            "        self.scorer = scorer\n"
            "        self.ce = nn.CrossEntropyLoss()\n"
            "    def _cache(self, reps, labels):\n"
            "        part = self.ce(self.scorer(reps), labels) / 4\n"
            "        part.backward()\n"
            "        return [r.grad for r in reps]\n"
            "    def forward(self, reps, labels):\n"
            "        reps = [r.detach().requires_grad_() for r in reps]\n"
            "        cache = self._cache(reps, labels)  # HKL350\n"
            "        loss = self.ce(self.scorer(reps), labels).detach().requires_grad_()\n"
            "        loss.register_hook(lambda g: [r.backward(c * g) for r, c in zip(reps, cache)])\n"
            "        return loss\n"
        ),
        # autograd.grad imported under another name
        Invalid(
            "import torch.nn as nn\n"
            "from torch.autograd import grad as vjp\n"
            "class Potential(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.mlp = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))\n"
            "    def forward(self, pos):\n"
            "        energy = self.mlp(pos).sum()\n"
            "        return vjp(energy, pos, create_graph=True)[0]  # HKL350\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for need in grad_mode_needs(ctx):
            cls = need.cls.name
            if need.helper is None:
                where = f"`{cls}.forward` {need.what}"
                related = []
            else:
                line = ctx.span(need.inner)[0]
                where = f"`{cls}.forward` calls `{need.helper.name}`, which {need.what} (line {line.row})"
                related = [Related(f"`{need.helper.name}`'s call", ctx.display_path, line)]
            yield self.finding(
                ctx, need.site,
                f"{where} without looking at the grad mode: when the module runs under `torch.no_grad()` or "
                f"`inference_mode()` (evaluation, inference) the computed tensor has no autograd graph and torch "
                f"raises \"{need.failure}\"",
                help="Test `torch.is_grad_enabled()` (or the tensor's `requires_grad`) first and compute the plain "
                     "result without the hook or the backward otherwise.",
                related=related,
            )
