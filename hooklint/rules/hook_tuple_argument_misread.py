"""HKL419: a module hook treats its positional-argument tuple as None or as a tensor."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_tuple_args import tuple_misuses
from hooklint.static.hooks import REGISTRATION_TRIGGERS


class HookTupleArgumentMisread(Rule):
    """
    ## What it does
    Reports a module hook that tests its positional-argument parameter
    against `None`, or reads a tensor-only attribute of it (`.clone()`,
    `.detach()`, `.to(...)`, `.shape`...), directly or through a local bound
    to it (`saved = inputs if self.save_input else output`).  The parameter
    is `args` of a forward pre-hook or forward hook, `grad_input` /
    `grad_output` of a backward hook, `grad_output` of a backward pre-hook.

    ## Why is this bad?
    torch always passes these as tuples: `args` holds the positional
    arguments of the call (`()` when the module is called with keywords
    only, never None), and the gradients are tuples even for one tensor.
    An `args is None` test is never true, so its fallback never runs
    (optimum 2.0's GPTQ input capture fell back to `kwargs["hidden_states"]`
    only when `input is None`: a model passing `hidden_states=` by keyword
    was captured as an empty tuple).  A tensor method on the tuple raises
    `AttributeError: 'tuple' object has no attribute 'clone'` the first
    time the hook runs (vit-pytorch 0.35.2's Extractor with
    `layer_save_input=True`).

    ## Example
    ```python
    import torch

    def capture(store):
        def hook(module, args, kwargs):
            x = args if args is not None else (kwargs["hidden_states"],)
            store.append(x)
        return hook

    def record(module, inputs, output):
        module.saved = inputs.clone().detach()

    block = torch.nn.Linear(4, 4)
    block.register_forward_pre_hook(capture([]), with_kwargs=True)
    block.register_forward_hook(record)
    ```

    ## Use instead
    ```python
    import torch

    def capture(store):
        def hook(module, args, kwargs):
            x = args if args else (kwargs["hidden_states"],)
            store.append(x)
        return hook

    def record(module, inputs, output):
        module.saved = tuple(t.clone().detach() for t in inputs)

    block = torch.nn.Linear(4, 4)
    block.register_forward_pre_hook(capture([]), with_kwargs=True)
    block.register_forward_hook(record)
    ```

    ## Fix safety
    There is no automatic fix: test the tuple's length (or `kwargs`), or work
    on its elements.

    ## References
    - [`Module.register_forward_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_pre_hook)
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    """

    code = "HKL419"
    name = "hook-tuple-argument-misread"
    summary = "A module hook tests its argument tuple against None or calls a tensor method on it"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS

    VALID: ClassVar[tuple[str, ...]] = (
        "import torch\n"
        "def record(module, inputs, output):\n"
        "    module.saved = tuple(t.clone() for t in inputs)\n"
        "    module.out = output.clone() if output is not None else None\n"
        "torch.nn.Linear(2, 2).register_forward_hook(record)\n",
        # rebound before the test: a different value
        "import torch\n"
        "def pre(module, args):\n"
        "    args = args[0] if args else None\n"
        "    if args is None:\n"
        "        return None\n"
        "    return (args * 2,)\n"
        "torch.nn.Linear(2, 2).register_forward_pre_hook(pre)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "store = []\n"
            "def hook(module, args, kwargs):\n"
            "    if args is None:  # HKL419\n"
            "        args = (kwargs['hidden_states'],)\n"
            "    store.append(args)\n"
            "torch.nn.Linear(2, 2).register_forward_pre_hook(hook, with_kwargs=True)\n"
        ),
        Invalid(
            "import torch\n"
            "def record(module, inputs, output):\n"
            "    module.saved = inputs.clone()  # HKL419\n"
            "torch.nn.Linear(2, 2).register_forward_hook(record)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for hit in tuple_misuses(ctx):
            name = getattr(hit.registration.hook.node, "name", None)  # type: ignore[union-attr]
            hook = f"`{name}`" if name else "A lambda"
            kind = hit.registration.kind.value
            if hit.how == "none-test":
                yield self.finding(
                    ctx, hit.node,
                    f"{hook} ({kind} hook) tests `{hit.param}` against None, but torch always passes it a "
                    f"tuple (`()` when the module is called with keywords only): the test never holds and its "
                    f"branch never runs",
                    help=f"Test the tuple's length (`if not {hit.param}:`) or look in kwargs first.",
                )
            else:
                through = f" (through `{hit.alias}`, bound to it on one branch)" if hit.alias else ""
                yield self.finding(
                    ctx, hit.node,
                    f"{hook} ({kind} hook) reads `.{hit.attr}` of `{hit.param}`{through}, which torch always "
                    f"passes as a tuple: this raises AttributeError ('tuple' object has no attribute "
                    f"'{hit.attr}') when it runs",
                    help=f"Work on the elements (`tuple(t.{hit.attr}... for t in {hit.param})`) or take "
                         f"`{hit.param}[0]` when the module has one input.",
                )
