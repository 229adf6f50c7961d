"""HKL409: forward hooks read from a module's hook dicts and called by hand, ignoring `with_kwargs`."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_replay import HOOK_DICTS, dict_name, replayed_hooks
from hooklint.static.semantic import short_source


class HookReplayedWithoutKwargs(Rule):
    """
    ## What it does
    Reports a call of a forward hook or forward pre-hook that the code took
    out of a module's hook dict (`module._forward_hooks`,
    `module._forward_pre_hooks`, directly or through lists, tuples of
    `(module, hook)` and attributes) and calls itself, when nothing in the
    enclosing function or class consults `_forward_hooks_with_kwargs` /
    `_forward_pre_hooks_with_kwargs`, the sets in which PyTorch records
    the hooks registered with `with_kwargs=True`.

    ## Why is this bad?
    `nn.Module.__call__` calls a forward pre-hook as `hook(module, args)`,
    or as `hook(module, args, kwargs)` when it was registered with
    `with_kwargs=True`; a forward hook as `hook(module, args, output)` or
    `hook(module, args, kwargs, output)`.  `args` is always a tuple.  Code
    that replays the hooks itself (a fused implementation that runs its
    submodules' hooks, a wrapper that bypasses `__call__`) and calls every
    hook the same way hands a `with_kwargs` hook too few arguments
    (`TypeError: missing 1 required positional argument`) or, worse, puts
    the output where the hook reads `kwargs`.  FSDP-style unshard hooks and
    many instrumentation hooks are registered with `with_kwargs=True`.

    ## Known problems
    Calls whose hook the code tests first (`assert inspect.getmodule(hook)
    is ddp`, `if hook in known: ...`) are taken as chosen on purpose and not
    reported.  Whether a `with_kwargs` hook is ever registered on the
    replayed modules is not known from the code, so the severity is
    *warning*.

    ## Example
    ```python
    def run_submodule_pre_hooks(model):
        for submodule in model.modules():
            for hook in submodule._forward_pre_hooks.values():
                hook(submodule, ())
    ```

    ## Use instead
    ```python
    def run_submodule_pre_hooks(model):
        for submodule in model.modules():
            for hook_id, hook in submodule._forward_pre_hooks.items():
                if hook_id in submodule._forward_pre_hooks_with_kwargs:
                    hook(submodule, (), {})
                else:
                    hook(submodule, ())
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [`Module.register_forward_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_pre_hook) (`with_kwargs`)
    - Megatron-LM pull request 4000 (`TEFusedMLP` replayed its submodules' hooks without their keyword arguments)
    """

    code = "HKL409"
    name = "hook-replayed-without-kwargs"
    summary = "Forward hooks taken from a module's hook dict and called by hand, ignoring `with_kwargs`"
    severity = Severity.WARNING
    triggers = ("_forward_pre_hooks", "_forward_hooks")  # `_global_forward_hooks` contains the second
    VALID: ClassVar[tuple[str, ...]] = (
        # consults the with_kwargs set, as nn.Module does
        "def replay(module, args, kwargs):\n"
        "    for hook_id, hook in module._forward_pre_hooks.items():\n"
        "        if hook_id in module._forward_pre_hooks_with_kwargs:\n"
        "            hook(module, args, kwargs)\n"
        "        else:\n"
        "            hook(module, args)\n",
        # only hooks it knows, checked first
        "import inspect\n"
        "def replay(module, ddp):\n"
        "    for hook in module._forward_pre_hooks.values():\n"
        "        assert inspect.getmodule(hook) is ddp\n"
        "        hook(module)\n",
        # reads the dict without calling its hooks
        "def count(model):\n"
        "    return sum(len(m._forward_hooks) for m in model.modules())\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def run_submodule_pre_hooks(model):\n"
            "    for submodule in model.modules():\n"
            "        for hook in submodule._forward_pre_hooks.values():\n"
            "            hook(submodule, ())  # HKL409\n"
        ),
        Invalid(
            "class Fused:\n"
            "    def __init__(self, block):\n"
            "        self.post = [(m, h) for m in block.modules() for h in m._forward_hooks.values()]\n"
            "    def after(self, args, out):\n"
            "        for m, h in self.post:\n"
            "            h(m, args, out)  # HKL409\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in replayed_hooks(ctx.tree):
            _, _, arity, arity_kwargs = HOOK_DICTS[dict_name(found.source)]
            extra = ""
            if found.non_tuple_args is not None:
                extra = (f"; and it passes `{found.non_tuple_args}` where PyTorch always passes the positional "
                         f"arguments as a tuple")
            call, source = short_source(found.call, width=50), short_source(found.source, width=50)
            output = ", output" if arity == 3 else ""
            yield self.finding(
                ctx, found.call,
                message=(f"`{call}` calls a {found.kind} read from `{source}` by hand, the same way for every "
                         f"hook, and nothing here "
                         f"consults `{found.with_kwargs_set}`: PyTorch calls a {found.kind} registered with "
                         f"`with_kwargs=True` with {arity_kwargs} arguments (`kwargs` after `args`) instead of "
                         f"{arity}, so such a hook gets the wrong arguments or fails{extra}"),
                help=(f"Call the hooks as `nn.Module.__call__` does: `hook(module, args, kwargs{output})` when the "
                      f"hook's id is in `module.{found.with_kwargs_set}`, else `hook(module, args{output})`, with "
                      f"`args` a tuple."),
            )
