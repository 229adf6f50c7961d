"""HKL406: a forward hook on every module of a caller's model that treats output / input[0] as a tensor (hook-semantics.md, section 6)."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_arguments import dispatches_on_module_type, on_every_module, tensor_assumptions
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind
from hooklint.static.values import CallableValue


class HookAssumesTensorOutput(Rule):
    """
    ## What it does
    Reports a forward hook (or forward pre-hook) registered on every module
    of a model its caller supplies (`model.modules()`, `named_modules()`,
    `children()`, `model.apply(fn)`, a recursive walk over
    `named_children()`) whose body reads tensor attributes of `output`
    (`output.shape`, `.size()`, `.dtype`, `.numel()`, `.detach()`...) or of
    `input[0]`, without ever testing what they are (`isinstance`,
    `torch.is_tensor`, `hasattr`, `len`, `is None`).  A body whose only
    test is `isinstance(output, (tuple, list))` is reported where it reads
    `output[0].size()` in that branch without testing the element, or
    `output.size()` in the other branch (a dict, `ModelOutput` or None gets
    there).  A test whose branch only prints or logs and goes on (`if not
    isinstance(output, torch.Tensor): print(...)`) protects nothing and
    does not count.  The model may come from a base class of another file
    that stores the constructor's `model` argument under its name
    (`super().__init__(model)`, then `self.model.modules()`).

    ## Why is this bad?
    A hook on every module is called with every module's real output: a
    tuple from `nn.LSTM`, `nn.GRU` and `nn.MultiheadAttention`, a dict or a
    `ModelOutput` dataclass from a transformer block, `None` from a module
    that only updates state.  Its `input` is an empty tuple for a module
    called with keyword arguments only (`model(input_ids=...)`, most
    blocks of Hugging Face models).  The summary, profiler or extractor
    then fails inside the hook with `AttributeError: 'tuple' object has no
    attribute 'shape'` or `IndexError: tuple index out of range` on the
    first model that has such a module, though it worked on the CNNs it
    was tested with.

    ## Known problems
    Hooks chosen per module type (a table of handlers keyed by `type(m)`,
    an `isinstance` filter around the registration, or an early
    `if not isinstance(m, kinds): return` before it) know their modules and
    are not reported; neither are hooks on one module the caller names
    (`target_layer`), whose caller chooses a suitable layer.  Uses inside
    helpers the hook calls are not followed.  The severity is *warning*:
    the file cannot show the caller's model.

    ## Example
    ```python
    def summarize(model, x):
        shapes = {}

        def record(module, inputs, output):
            shapes[module.__class__.__name__] = tuple(output.shape)

        handles = [m.register_forward_hook(record) for m in model.modules()]
        model(x)
        for h in handles:
            h.remove()
        return shapes
    ```

    ## Use instead
    ```python
    import torch

    def summarize(model, x):
        shapes = {}

        def record(module, inputs, output):
            if isinstance(output, torch.Tensor):
                shapes[module.__class__.__name__] = tuple(output.shape)
            elif isinstance(output, (tuple, list)):
                shapes[module.__class__.__name__] = [tuple(o.shape) for o in output if torch.is_tensor(o)]

        handles = [m.register_forward_hook(record) for m in model.modules()]
        model(x)
        for h in handles:
            h.remove()
        return shapes
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - torch-scan issue 80 (`crawl_module` failed on modules returning several tensors; fixed in 0.2.0)
    """

    code = "HKL406"
    name = "hook-assumes-tensor-output"
    summary = "A forward hook on every module of a caller's model treats output or input[0] as a tensor"
    severity = Severity.WARNING
    triggers = ("register_forward_hook", "register_forward_pre_hook") + DYNAMIC_NAME_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # tests the output first
        "import torch\n"
        "def watch(model, store):\n"
        "    def hook(module, inputs, output):\n"
        "        if torch.is_tensor(output):\n"
        "            store.append(output.shape)\n"
        "    for m in model.modules():\n"
        "        m.register_forward_hook(hook)\n",
        # filtered by type
        "import torch.nn as nn\n"
        "def watch(model, store):\n"
        "    def hook(module, inputs, output):\n"
        "        store.append(output.shape)\n"
        "    for m in model.modules():\n"
        "        if isinstance(m, nn.Conv2d):\n"
        "            m.register_forward_hook(hook)\n",
        # an early exit leaves only the types it knows
        "import torch.nn as nn\n"
        "def attach(module, store):\n"
        "    if not isinstance(module, (nn.ReLU, nn.Sigmoid)):\n"
        "        return\n"
        "    module.register_forward_hook(lambda m, i, o: store.append(o.shape))\n"
        "def watch(model, store):\n"
        "    model.apply(lambda m: attach(m, store))\n",
        # the element's failure is handled
        "def watch(model, store):\n"
        "    def hook(module, inputs, output):\n"
        "        if isinstance(output, (tuple, list)):\n"
        "            try:\n"
        "                store.append(output[0].size())\n"
        "            except AttributeError:\n"
        "                store.append(output[0].data.size())\n"
        "    for m in model.modules():\n"
        "        m.register_forward_hook(hook)\n",
        # one layer the caller names
        "def watch(target_layer, store):\n"
        "    def hook(module, inputs, output):\n"
        "        store.append(output.shape)\n"
        "    return target_layer.register_forward_hook(hook)\n",
        # the file's own model
        "import torch.nn as nn\n"
        "net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
        "for m in net.modules():\n"
        "    m.register_forward_hook(lambda mod, i, o: print(o.shape))\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def watch(model, store):\n"
            "    def hook(module, inputs, output):\n"
            "        store.append(output.shape)  # HKL406\n"
            "    for name, m in model.named_modules():\n"
            "        m.register_forward_hook(hook)\n"
        ),
        Invalid(
            "def watch(model, store):\n"
            "    def pre(module, inputs):\n"
            "        store.append(inputs[0].dtype)  # HKL406\n"
            "    model.apply(lambda m: m.register_forward_pre_hook(pre))\n"
        ),
        Invalid(
            "def watch(model, store):\n"
            "    def hook(module, inputs, output):\n"
            "        if isinstance(output, (tuple, list)):\n"
            "            store.append(output[0].size())  # HKL406\n"
            "        else:\n"
            "            store.append(output.size())  # HKL406\n"
            "    for m in model.modules():\n"
            "        if not m._modules:\n"
            "            m.register_forward_hook(hook)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.instances_by_kind(HookKind.FORWARD, HookKind.FORWARD_PRE):
            hook = reg.hook
            if hook is None or reg.is_global or hook.has_varargs or id(hook.node) in seen:
                continue
            if reg.traveled or not isinstance(ctx.inference.infer(reg.hook_expr), CallableValue):
                continue  # a hook chosen per call site or per module type knows its modules
            if dispatches_on_module_type(hook.node, reg.param("module")):
                continue
            where = on_every_module(ctx, reg)
            if where is None:
                continue
            output = reg.param("output") if reg.kind is HookKind.FORWARD else None
            inputs = reg.param("args") if reg.with_kwargs else reg.param("input")
            for found in tensor_assumptions(hook.node, output, inputs):
                seen.add(id(hook.node))
                if found.role == "output-element":
                    what = (f"reads {found.text} of an element of a tuple output without testing it, but the "
                            f"elements need not be tensors (a `PackedSequence` from an RNN fed packed input, "
                            f"a nested tuple, None)")
                    error = "AttributeError: ... object has no attribute ..."
                elif found.role == "output-past-sequence-test":
                    what = (f"reads {found.text} where the output is not a tuple or list, but a module's output "
                            f"can also be a dict or `ModelOutput`, or None")
                    error = "AttributeError: ... object has no attribute ..."
                elif found.role == "output":
                    what = (f"reads {found.text} of the module's output, but a module's output can be a tuple "
                            f"(`nn.LSTM`, `nn.MultiheadAttention`), a dict or `ModelOutput`, or None")
                    error = "AttributeError: 'tuple' object has no attribute ..."
                else:
                    what = (f"reads {found.text}, but a module called with keyword arguments only gets an empty "
                            f"`input` tuple, and its first argument need not be a tensor")
                    error = "IndexError: tuple index out of range"
                yield self.finding(
                    ctx, found.node,
                    message=(f"hook `{hook.name}` runs on {where} and {what}: on the first such module the "
                             f"hook raises {error}"),
                    help="Test the value first (`isinstance(output, torch.Tensor)`, `torch.is_tensor`), and handle "
                         "tuples, dicts and None, or flatten the structure (`torch.utils._pytree.tree_leaves`).",
                )
