"""HKL337: a hook reads per-element state from a dict keyed by another collection than the hooked one."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_state_keys import uncovered_key_reads
from hooklint.static.hooks import REGISTRATION_TRIGGERS
from hooklint.static.values import src


class HookStateKeysMissHooked(Rule):
    """
    ## What it does
    Reports a hook registered once per element of a collection (each
    parameter of the optimizer's groups, each layer of a model) that looks
    its element up in a dict of the object (`self._delay[p]`, `self._names[p]`)
    when every key of that dict comes from *another* collection (an optional
    constructor argument, a list of names the caller passed), and nothing
    guards the lookup (`d.get(p)`, `if p in d`, `except KeyError`) or filters
    the registrations by the dict's keys.

    ## Why is this bad?
    The hooks are placed on every element of the first collection, but the
    dict knows only the elements of the second.  When the two differ (the
    optional argument was left out, the caller named a subset), the first
    hook whose element has no key raises `KeyError`, inside autograd's
    backward (or the module's forward), far from the constructor that built
    the dict.  horovod 0.16.2's `DistributedOptimizer` hooked every parameter
    of the optimizer's groups and counted down `self._allreduce_delay[p]`,
    built from the `named_parameters` argument only: without that argument
    (its documented default), the first backward raised `KeyError`.

    ## Known problems
    The rule compares the collections as the code names them: two different
    names can hold the same elements (an optimizer built from
    `model.parameters()` and a dict keyed by `model.parameters()`), which the
    rule cannot see, so it is a *warning*, and says what must hold.  It is
    quiet when the dict's keys may be built from the hooked collection on
    some path (`names = [... for group in self.param_groups ...]` as a
    default), when the dict is filled in ways it cannot follow (`update`,
    `setdefault`, a `defaultdict`), and when the hook is not bound to the
    loop's element (a factory call, `functools.partial`, a closure or a
    lambda default).

    ## Example
    ```python
    import torch


    class Accumulating(torch.optim.SGD):
        def __init__(self, params, named_parameters=None, steps=2):
            super().__init__(params, lr=0.1)
            named_parameters = list(named_parameters or [])
            self._left = {p: steps for _, p in named_parameters}
            for group in self.param_groups:
                for p in group["params"]:
                    p.register_post_accumulate_grad_hook(self._make_hook(p))

        def _make_hook(self, p):
            def hook(param):
                self._left[p] -= 1
            return hook
    ```

    ## Use instead
    ```python
    import torch


    class Accumulating(torch.optim.SGD):
        def __init__(self, params, named_parameters=None, steps=2):
            super().__init__(params, lr=0.1)
            self._left = {p: steps for group in self.param_groups for p in group["params"]}
            for group in self.param_groups:
                for p in group["params"]:
                    p.register_post_accumulate_grad_hook(self._make_hook(p))

        def _make_hook(self, p):
            def hook(param):
                self._left[p] -= 1
            return hook
    ```

    ## Fix safety
    There is no automatic fix: build the dict from the collection the hooks
    are placed on (or place the hooks on the dict's keys), or refuse, in the
    constructor, an element that has no key.

    ## References
    - [`Tensor.register_post_accumulate_grad_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_post_accumulate_grad_hook.html)
    - horovod 0.16.2 / 0.16.3 (`_allreduce_delay` built from `named_parameters` only; horovod#1110)
    """

    code = "HKL337"
    name = "hook-state-keys-miss-hooked"
    summary = "A per-element hook indexes a dict keyed by another collection: an element without a key raises KeyError"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS
    trigger_pattern = r"\bself\.\w+\s*\["
    VALID: ClassVar[tuple[str, ...]] = (
        # keyed by the hooked collection itself
        "class Counter:\n"
        "    def __init__(self, model):\n"
        "        self.calls = {m: 0 for m in model.modules()}\n"
        "        for m in model.modules():\n"
        "            m.register_forward_hook(self._hook_for(m))\n"
        "    def _hook_for(self, m):\n"
        "        def hook(module, args, output):\n"
        "            self.calls[m] += 1\n"
        "        return hook\n",
        # the lookup is guarded
        "class Stats:\n"
        "    def __init__(self, model, names):\n"
        "        self.names = {m: n for n, m in names}\n"
        "        for m in model.modules():\n"
        "            m.register_forward_hook(self._hook_for(m))\n"
        "    def _hook_for(self, m):\n"
        "        def hook(module, args, output):\n"
        "            print(self.names.get(m, '?'))\n"
        "        return hook\n",
        # the registrations are filtered by the dict's keys
        "class Stats:\n"
        "    def __init__(self, model, wanted):\n"
        "        self.seen = {m: [] for m in wanted}\n"
        "        for m in model.modules():\n"
        "            if m in self.seen:\n"
        "                m.register_forward_hook(self._hook_for(m))\n"
        "    def _hook_for(self, m):\n"
        "        def hook(module, args, output):\n"
        "            self.seen[m].append(output)\n"
        "        return hook\n",
        # horovod 0.16.3: the names default to every parameter of the groups
        "class Opt:\n"
        "    def __init__(self, params, named_parameters=None):\n"
        "        self.param_groups = [{'params': list(params)}]\n"
        "        if named_parameters is not None:\n"
        "            named_parameters = list(named_parameters)\n"
        "        else:\n"
        "            named_parameters = [(str(i), v) for g in self.param_groups for i, v in enumerate(g['params'])]\n"
        "        self._delay = {v: 1 for _, v in sorted(named_parameters)}\n"
        "        for group in self.param_groups:\n"
        "            for p in group['params']:\n"
        "                p.register_hook(self._make_hook(p))\n"
        "    def _make_hook(self, p):\n"
        "        def hook(grad):\n"
        "            self._delay[p] -= 1\n"
        "        return hook\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class Opt:\n"
            "    def __init__(self, params, named_parameters=None):\n"
            "        self.param_groups = [{'params': list(params)}]\n"
            "        named_parameters = list(named_parameters) if named_parameters is not None else []\n"
            "        self._delay = {v: 1 for _, v in sorted(named_parameters)}\n"
            "        for group in self.param_groups:\n"
            "            for p in group['params']:\n"
            "                p.register_hook(self._make_hook(p))\n"
            "    def _make_hook(self, p):\n"
            "        def hook(grad):\n"
            "            self._delay[p] -= 1  # HKL337\n"
            "        return hook\n"
        ),
        # a layer's label looked up from the names the caller listed, a partial, a dict filled in a loop
        Invalid(
            "from functools import partial\n"
            "class Recorder:\n"
            "    def __init__(self, model, layer_names):\n"
            "        self.labels = {}\n"
            "        for name in layer_names:\n"
            "            self.labels[name] = name.upper()\n"
            "        for name, module in model.named_modules():\n"
            "            module.register_forward_hook(partial(self._record, name))\n"
            "    def _record(self, name, module, args, output):\n"
            "        print(self.labels[name], output.shape)  # HKL337\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for hit in uncovered_key_reads(ctx):
            message = (f"this hook is registered for each element of `{hit.hooked_from}` (line "
                       f"{hit.loop.lineno}) and reads `{src(hit.read)}`, but the keys of `self.{hit.dict_attr}` "
                       f"come from {hit.keyed_from} (line {hit.keyed_at.lineno}), another collection: unless "
                       f"every element hooked has a key there, the hook raises KeyError for the first one that "
                       f"has none, inside the pass that runs it")
            yield self.finding(
                ctx, hit.read, message,
                help=f"Build `self.{hit.dict_attr}` from the collection the hooks are placed on, place the hooks "
                     f"only on its keys, or reject elements without a key when the object is built.",
                related=[Related("the hooks are placed in this loop", ctx.display_path, ctx.span(hit.loop.iter)[0]),
                         Related("the keys are set here", ctx.display_path, ctx.span(hit.keyed_at)[0])],
            )
