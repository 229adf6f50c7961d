"""HKL326: a hook on every module adds the module's parameter count once per call."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_arguments import on_every_module
from hooklint.static.hooks import HookKind
from hooklint.static.per_call_records import per_call_parameter_records


class HookCountsModulePerCall(Rule):
    """
    ## What it does
    Reports a forward hook (or pre-hook) put on every module of a caller's
    model whose body reads the module's parameters' sizes and adds a new
    record on every call (appends to a list, or stores under a key made from
    `len(records)` or a counter), with no test of the module's identity.

    ## Why is this bad?
    A hook runs once per *call* of its module, and a module can be called
    several times in one forward: a layer shared by two branches, an
    activation module a block reuses (`self.relu` in torchvision's
    `BasicBlock`), a block applied twice.  `model.modules()` yields such a
    module once, but its hook fires once per call: the summary gets one row
    per call and the module's parameters are added to the totals once per
    call, so the reported parameter count is inflated, with no error.

    ## Known problems
    Whether the caller's model calls a module twice cannot be seen from the
    library's code; the rule reports the hook that would count it twice.
    Per-call records of per-call facts (output shapes, FLOPs) are right and
    are not reported: only the module's parameters are.

    ## Example
    ```python
    def summary(model, x):
        rows = []

        def hook(module, inputs, output):
            rows.append((type(module).__name__, sum(p.numel() for p in module.parameters())))

        handles = [m.register_forward_hook(hook) for m in model.modules()]
        model(x)
        for h in handles:
            h.remove()
        return rows
    ```

    ## Use instead
    ```python
    def summary(model, x):
        rows = []
        seen = set()

        def hook(module, inputs, output):
            if id(module) in seen:
                return
            seen.add(id(module))
            rows.append((type(module).__name__, sum(p.numel() for p in module.parameters())))

        handles = [m.register_forward_hook(hook) for m in model.modules()]
        model(x)
        for h in handles:
            h.remove()
        return rows
    ```

    ## Fix safety
    There is no automatic fix; skip a module already recorded (a set of
    `id(module)`), or key the records by the module.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [`Module.modules`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.modules)
    """

    code = "HKL326"
    name = "hook-counts-module-per-call"
    summary = "A hook on every module adds the module's parameter count once per call: a reused module is counted twice"
    severity = Severity.WARNING
    triggers = ("register_forward_hook", "register_forward_pre_hook")
    VALID: ClassVar[tuple[str, ...]] = (
        # guarded on the module's identity
        "def summary(model, x):\n"
        "    rows, seen = [], set()\n"
        "    def hook(module, inputs, output):\n"
        "        if id(module) in seen:\n"
        "            return\n"
        "        seen.add(id(module))\n"
        "        rows.append(sum(p.numel() for p in module.parameters()))\n"
        "    hs = [m.register_forward_hook(hook) for m in model.modules()]\n"
        "    model(x)\n"
        "    for h in hs:\n"
        "        h.remove()\n"
        "    return rows\n",
        # keyed by the module: a second call overwrites the same entry
        "def count(model, x):\n"
        "    params = {}\n"
        "    def hook(module, inputs, output):\n"
        "        params[module] = sum(p.numel() for p in module.parameters())\n"
        "    hs = [m.register_forward_hook(hook) for m in model.modules()]\n"
        "    model(x)\n"
        "    for h in hs:\n"
        "        h.remove()\n"
        "    return params\n",
        # a per-call fact (the output's shape) is right once per call
        "def shapes(model, x):\n"
        "    rows = []\n"
        "    def hook(module, inputs, output):\n"
        "        rows.append(tuple(output.shape))\n"
        "    hs = [m.register_forward_hook(hook) for m in model.modules()]\n"
        "    model(x)\n"
        "    for h in hs:\n"
        "        h.remove()\n"
        "    return rows\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "from collections import OrderedDict\n"
            "import torch\n"
            "def summary(model, x):\n"
            "    table = OrderedDict()\n"
            "    def register(module):\n"
            "        def hook(module, input, output):\n"
            "            idx = len(table)\n"
            "            key = '%s-%i' % (type(module).__name__, idx + 1)\n"
            "            params = 0\n"
            "            if hasattr(module, 'weight'):\n"
            "                params += torch.prod(torch.LongTensor(list(module.weight.size())))\n"
            "            table[key] = params  # HKL326\n"
            "        handles.append(module.register_forward_hook(hook))\n"
            "    handles = []\n"
            "    model.apply(register)\n"
            "    model(x)\n"
            "    for h in handles:\n"
            "        h.remove()\n"
            "    return table\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.instances_by_kind(HookKind.FORWARD, HookKind.FORWARD_PRE):
            hook = reg.hook
            if hook is None or reg.is_global or id(hook.node) in seen:
                continue
            found = per_call_parameter_records(hook.node, reg.param("module"))
            if found is None:
                continue
            where = on_every_module(ctx, reg)
            if where is None:
                continue
            seen.add(id(hook.node))
            yield self.finding(
                ctx, found.record,
                message=f"hook `{hook.name}` runs on {where}, reads the module's parameters and {found.how} on "
                "every call, with no test of the module's identity: a module the model calls more than once "
                "in a forward (a shared layer, a reused activation, a block applied twice) is recorded once "
                "per call and its parameters are counted each time",
                help="Skip a module already recorded (`if id(module) in seen: return`, then `seen.add(id(module))`), "
                "or key the records by the module.",
            )
