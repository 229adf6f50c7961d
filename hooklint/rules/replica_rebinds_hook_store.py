"""HKL344: a method rebinds the per-device container a bound hook stores into,
which detaches a DataParallel replica from the hook's writes."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.describe import describe_registrations, hook_label
from hooklint.static.replica_state import device_stores, hook_object_names, rebinds

_HELP = ("Empty the container in place (`self.hidden.clear()`) so the replicas and the hook keep sharing one "
         "object; or have the hook return its value through the module's output instead of an attribute.")


class ReplicaRebindsHookStore(Rule):
    """
    ## What it does
    Reports a method that rebinds an attribute to a new container
    (`self.hidden = {}`) while a hook bound to the same object (a method of
    the class, or a closure over `self`) stores into that attribute under a
    key naming a device or a thread (`self.hidden[x.device] = out`).

    ## Why is this bad?
    A store keyed by device is written for replicas: `nn.DataParallel` runs
    one copy of the module per device, in threads.  Its `replicate` copies
    every module with `Module._replicate_for_data_parallel`, a shallow copy
    of the instance dict: the replicas share the hook dicts and the
    attribute values, so the hook still runs, bound to the *original*
    object, and writes into the original's container.  When the replica's
    method first rebinds `self.hidden = {}`, it rebinds the replica's own
    attribute: the hook keeps writing into the old dict and the replica
    reads its new empty one (a `KeyError`, or a result that silently stays
    empty).  Without replicas the two names are one object and all works,
    which is why the bug shows only on several GPUs
    (`tests/behaviour/test_replica_hook_state.py` replicates a module with
    torch's own per-module copy and shows the lookup fail, and the
    `clear()` twin work).

    ## Known problems
    The device (or thread) key is taken as the evidence that the object is
    meant to run replicated; a class that keys by device for another reason
    and is never replicated is reported too, and the message says so.
    Only stores made by the hook's own body are followed.

    ## Example
    ```python
    import torch
    from torch import nn

    class Wrapper(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.hidden = {}
            net[0].register_forward_hook(self._hook)

        def _hook(self, module, args, output):
            self.hidden[output.device] = output

        def forward(self, x):
            self.hidden = {}
            self.net(x)
            return self.hidden[x.device]
    ```

    ## Use instead
    ```python
    import torch
    from torch import nn

    class Wrapper(nn.Module):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.hidden = {}
            net[0].register_forward_hook(self._hook)

        def _hook(self, module, args, output):
            self.hidden[output.device] = output

        def forward(self, x):
            self.hidden.clear()
            self.net(x)
            return self.hidden[x.device]
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`nn.DataParallel`](https://pytorch.org/docs/stable/generated/torch.nn.DataParallel.html)
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    """

    code = "HKL344"
    name = "replica-rebinds-hook-store"
    summary = ("A method rebinds the per-device container a bound hook stores into: a DataParallel replica reads a "
               "new container the hook never writes")
    severity = Severity.WARNING
    triggers = ("register_forward_hook", "register_forward_pre_hook", "backward_hook", "backward_pre_hook",
                "register_hook", "post_accumulate_grad_hook")
    # a store keyed by a device or thread, and a rebinding of an attribute to a new container
    trigger_pattern = (r"\A(?=[\s\S]*?(?:(?:device|get_device\(\)|current_device\(\)|get_ident\(\))\)?\]"
                       r"|\.setdefault\([^,\n]{0,80}?(?:device|get_ident)))"
                       r"[\s\S]*?(?<![\w.])self\.\w+[ \t]*=[ \t]*(?:\[\]|\{\}|(?:dict|list|set|defaultdict|OrderedDict)\()")
    VALID: ClassVar[tuple[str, ...]] = (
        # the container is emptied in place: hook and replicas share one object
        "import torch\n"
        "class W(torch.nn.Module):\n"
        "    def __init__(self, net):\n"
        "        super().__init__()\n"
        "        self.net = net\n"
        "        self.hidden = {}\n"
        "        net.register_forward_hook(self._hook)\n"
        "    def _hook(self, m, args, out):\n"
        "        self.hidden[out.device] = out\n"
        "    def forward(self, x):\n"
        "        self.hidden.clear()\n"
        "        self.net(x)\n"
        "        return self.hidden[x.device]\n",
        # a store under a name key, not a device: nothing says it is meant for replicas
        "import torch\n"
        "class W(torch.nn.Module):\n"
        "    def __init__(self, net):\n"
        "        super().__init__()\n"
        "        self.net = net\n"
        "        self.acts = {}\n"
        "        net.register_forward_hook(self._hook)\n"
        "    def _hook(self, m, args, out):\n"
        "        self.acts['out'] = out\n"
        "    def forward(self, x):\n"
        "        self.acts = {}\n"
        "        self.net(x)\n"
        "        return self.acts['out']\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch\n"
            "class W(torch.nn.Module):\n"
            "    def __init__(self, net):\n"
            "        super().__init__()\n"
            "        self.net = net\n"
            "        self.hidden = {}\n"
            "        net.register_forward_hook(self._hook)\n"
            "    def _hook(self, m, args, out):\n"
            "        device = args[0].device\n"
            "        self.hidden[device] = out\n"
            "    def embed(self, x):\n"
            "        self.hidden = {}  # HKL344\n"
            "        self.net(x)\n"
            "        return self.hidden[x.device]\n"
        ),
        # a closure over self, keyed by the thread, rebound with dict()
        Invalid(
            "import threading\n"
            "import torch\n"
            "class Tap(torch.nn.Module):\n"
            "    def __init__(self, net):\n"
            "        super().__init__()\n"
            "        self.net = net\n"
            "        self.seen = {}\n"
            "        def record(module, args, output):\n"
            "            self.seen.setdefault(threading.get_ident(), []).append(output)\n"
            "        net.register_forward_hook(record)\n"
            "    def forward(self, x):\n"
            "        self.seen = dict()  # HKL344\n"
            "        y = self.net(x)\n"
            "        return y, self.seen[threading.get_ident()]\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        reported: set[int] = set()
        for reg in ctx.hooks.instances:
            if reg.hook is None:
                continue
            located = hook_object_names(ctx.model, reg.hook.node)
            if located is None:
                continue
            owner, names = located
            for store in device_stores(reg.hook.node, names):
                for rebind in rebinds(owner, store.attr):
                    if id(rebind.node) in reported:
                        continue
                    reported.add(id(rebind.node))
                    yield self.finding(
                        ctx, rebind.node,
                        f"`{owner.name}.{rebind.method}` rebinds `self.{store.attr}` to a new container, while "
                        f"`{hook_label(reg)}` ({describe_registrations([reg])}) stores into it by `{store.key}` "
                        f"(line {store.node.lineno}), a per-device store meant for replicas: under "
                        f"`nn.DataParallel` each replica rebinds its own copy of the attribute, but the hook, "
                        f"bound to the original object, keeps writing into the original's container, so the "
                        f"replica reads a container the hook never fills (if this class never runs replicated, "
                        f"this is harmless)",
                        help=_HELP,
                        related=[Related("the hook stores here", ctx.display_path, ctx.span(store.node)[0]),
                                 Related("registered here", ctx.display_path, ctx.span(reg.call)[0])],
                    )
