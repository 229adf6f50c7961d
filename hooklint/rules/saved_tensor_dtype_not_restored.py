"""HKL802: a saved-tensor pack hook casts the tensor to another dtype and its unpack hook does not cast it back."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.saved_tensor_dtypes import dtype_not_restored
from hooklint.static.saved_tensors import TRIGGERS


class SavedTensorDtypeNotRestored(Rule):
    """
    ## What it does
    Reports a pack hook of `torch.autograd.graph.saved_tensors_hooks` (or
    of a subclass, or of torch's default-hooks stack) that returns the
    saved tensor cast to another dtype (`t.half()`, `t.to(torch.bfloat16)`,
    `t.detach().to(torch.float8_e4m3fn).cpu()`, alone or in a tuple) when
    its unpack hook hands the tensor back without any dtype conversion
    (it returns it, or only moves it to a device).

    ## Why is this bad?
    The unpack hook must return a tensor with the content of the one the op
    saved, dtype included: backward formulas combine it with the incoming
    gradient and the op's other saved tensors, in the dtype of the forward.
    With a compressed dtype handed back, matrix products fail in backward
    (`RuntimeError: expected m1 and m2 to have the same dtype`), and
    element-wise formulas silently promote and compute the gradient from
    the rounded values.  Activation compression and offloading are meant to
    store a smaller copy and restore the original dtype on unpack.

    ## Known problems
    When every tensor saved under the hooks already has the target dtype (a
    model run entirely in bfloat16 cast to bfloat16), the cast changes
    nothing; the message says so.

    ## Example
    ```python
    import torch

    def pack(t):
        return t.device, t.detach().to(torch.bfloat16).cpu()

    def unpack(packed):
        device, t = packed
        return t.to(device, non_blocking=True)

    def train_step(model, x):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = model(x).sum()
        loss.backward()
    ```

    ## Use instead
    ```python
    import torch

    def pack(t):
        return t.device, t.dtype, t.detach().to(torch.bfloat16).cpu()

    def unpack(packed):
        device, dtype, t = packed
        return t.to(device, dtype, non_blocking=True)

    def train_step(model, x):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = model(x).sum()
        loss.backward()
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [Hooks for saved tensors](https://pytorch.org/docs/stable/notes/autograd.html#hooks-for-saved-tensors)
    - [`torch.autograd.graph.saved_tensors_hooks`](https://pytorch.org/docs/stable/autograd.html#torch.autograd.graph.saved_tensors_hooks)
    """

    code = "HKL802"
    name = "saved-tensor-dtype-not-restored"
    summary = "A saved-tensor pack hook casts the tensor to another dtype and its unpack hook does not cast it back"
    severity = Severity.WARNING
    triggers = TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # the dtype recorded and restored
        "import torch\n"
        "def pack(t):\n"
        "    return t.dtype, t.half()\n"
        "def unpack(packed):\n"
        "    dtype, t = packed\n"
        "    return t.to(dtype)\n"
        "ctx = torch.autograd.graph.saved_tensors_hooks(pack, unpack)\n",
        # restored by a method of its own
        "import torch\n"
        "class Compress(torch.autograd.graph.saved_tensors_hooks):\n"
        "    def __init__(self):\n"
        "        super().__init__(self.pack, self.unpack)\n"
        "    def pack(self, t):\n"
        "        return t.to(torch.float16)\n"
        "    def unpack(self, t):\n"
        "        return self.decompress(t)\n"
        "    def decompress(self, t):\n"
        "        return t.float()\n",
        # a move to the host and back, no cast
        "import torch\n"
        "def pack(t):\n"
        "    return t.device, t.detach().cpu()\n"
        "def unpack(packed):\n"
        "    device, t = packed\n"
        "    return t.to(device)\n"
        "ctx = torch.autograd.graph.saved_tensors_hooks(pack, unpack)\n",
        # the cast only feeds a statistic; the tensor goes back whole
        "import torch\n"
        "stats = []\n"
        "def pack(t):\n"
        "    stats.append(t.double().abs().max())\n"
        "    return t\n"
        "ctx = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "def compress(t):\n"
            "    return t.device, t.detach().to(torch.bfloat16).cpu()  # HKL802\n"
            "def decompress(packed):\n"
            "    device, t = packed\n"
            "    return t.to(device, non_blocking=True)\n"
            "def step(model, x):\n"
            "    with torch.autograd.graph.saved_tensors_hooks(compress, decompress):\n"
            "        return model(x)\n"
        ),
        Invalid(
            "from torch.autograd.graph import saved_tensors_hooks\n"
            "hooks = saved_tensors_hooks(lambda t: t.half(), lambda t: t)  # HKL802\n"
        ),
        Invalid(
            "import torch\n"
            "class HalfActivations(torch.autograd.graph.saved_tensors_hooks):\n"
            "    def __init__(self, device):\n"
            "        self.device = device\n"
            "        super().__init__(self._pack, self._unpack)\n"
            "    def _pack(self, tensor):\n"
            "        small = tensor.detach().half()  # HKL802\n"
            "        return small.to('cpu')\n"
            "    def _unpack(self, small):\n"
            "        return small.to(self.device)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        ctx.model  # noqa: B018 - building the model links every node to its parent, which the facts climb
        for fact in dtype_not_restored(ctx.tree):
            pack_name = getattr(fact.pack, "name", "the pack lambda")
            unpack_name = getattr(fact.unpack, "name", "the unpack lambda")
            yield self.finding(
                ctx, fact.cast,
                f"`{pack_name}` (a saved-tensor pack hook) keeps the saved tensor as `{fact.dtype}` and "
                f"`{unpack_name}` hands it back without converting its dtype: backward gets a tensor of another "
                f"dtype than the op saved, so matrix products fail (`expected m1 and m2 to have the same dtype`) "
                f"and element-wise formulas compute the gradient from the rounded values (unless every tensor "
                f"saved under these hooks already has that dtype)",
                help="Keep the original dtype in what the pack hook returns (`t.dtype`) and convert back in the "
                     "unpack hook (`t.to(device, dtype)`).",
                related=[Related("unpack hook", ctx.display_path, ctx.span(fact.unpack)[0])],
            )
