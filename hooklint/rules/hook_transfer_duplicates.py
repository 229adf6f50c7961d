"""HKL348: hooks read from one module's hook dict registered again on another, which may hold them already."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_transfer import unguarded_transfers
from hooklint.static.semantic import short_source


class HookTransferDuplicates(Rule):
    """
    ## What it does
    Reports a registration whose hook is read out of another object's hook
    dict (`for fn in old._forward_hooks.values(): new.register_forward_hook(fn)`,
    also through `.items()`, `getattr(old, "_forward_hooks", None)`, a local
    name for the dict, or the dict's ids and `d[k]`) in a function that never
    makes sure the destination does not hold those hooks already: no identity
    or equality test between the two modules or the two dicts (`old is not
    new`, `old._forward_hooks is not new._forward_hooks`), no test of the hook
    against the destination's hooks (`fn in new._forward_hooks.values()`), no
    emptying of either dict, and a destination the function does not build
    itself (a constructor or factory call other than a copy).

    ## Why is this bad?
    `register_forward_hook` (and every other `register_*hook`) adds an entry
    under a new id: it never checks whether the callable is there already.
    Carrying hooks over is right for a module built afresh, but the
    destination holds them already when it is the same object (one submodule
    reached from the old and the new model), when it shares the dict
    (`copy.copy(module)` and any shallow copy of a model share
    `_forward_hooks`, and share the submodules themselves), and after
    `copy.deepcopy` (the copy's dicts hold the same functions).  Each transfer
    then adds every hook again: a user's forward hook runs twice, then four
    times across repeated transfers, a hook that replaces the output is
    applied twice, and the user's handle removes only one of the copies
    (torch 2.13: after `new = copy.copy(old)` and the transfer, `old`'s hook
    runs 2 times per call, 1 after the user's `handle.remove()`).

    ## Known problems
    The severity is *warning*: whether the two modules can share their dicts
    depends on where the destination comes from (a caller, a copy made
    elsewhere), which the function often does not show.  A guard anywhere in
    the function that compares the destination with the source module or
    dict, or looks the hook up among the destination's hooks, silences it.

    ## Example
    ```python
    def carry_hooks(old_model, new_model):
        new_modules = dict(new_model.named_modules())
        for name, old in old_model.named_modules():
            new = new_modules[name]
            for hook in list(old._forward_hooks.values()):
                new.register_forward_hook(hook)
    ```

    ## Use instead
    ```python
    def carry_hooks(old_model, new_model):
        new_modules = dict(new_model.named_modules())
        for name, old in old_model.named_modules():
            new = new_modules[name]
            if old._forward_hooks is new._forward_hooks:
                continue
            for hook in list(old._forward_hooks.values()):
                new.register_forward_hook(hook)
    ```

    ## Fix safety
    There is no automatic fix: skipping shared dicts, moving the hooks
    (emptying the old dict) or copying onto a fresh module are different
    designs.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [`copy.copy`](https://docs.python.org/3/library/copy.html) (a shallow copy shares the instance's dicts)
    - flextensor issue 3 (hooks carried to a shallow-copied model on each phase change ran 1, 2, 4 times)
    """

    code = "HKL348"
    name = "hook-transfer-duplicates"
    summary = "Hooks read from one module's hook dict are registered on another that may hold them already"
    severity = Severity.WARNING
    # a hook dict's name (`_forward_hooks` is inside `_forward_hooks_with_kwargs`, `_global_forward_hooks`) and
    # a register call
    triggers = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
                "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_p")
    trigger_pattern = r"\.register_\w{0,40}hook\("
    VALID: ClassVar[tuple[str, ...]] = (
        # the dicts compared first
        "def carry(old, new):\n"
        "    if old._forward_hooks is new._forward_hooks:\n"
        "        return\n"
        "    for fn in old._forward_hooks.values():\n"
        "        new.register_forward_hook(fn)\n",
        # the modules compared
        "def carry(old, new):\n"
        "    for fn in list(old._forward_pre_hooks.values()):\n"
        "        if new is not old:\n"
        "            new.register_forward_pre_hook(fn)\n",
        # each hook looked up among the destination's
        "def carry(old, new):\n"
        "    for fn in old._forward_hooks.values():\n"
        "        if fn not in new._forward_hooks.values():\n"
        "            new.register_forward_hook(fn)\n",
        # moved: the old dict is emptied
        "def move(old, new):\n"
        "    for fn in old._forward_hooks.values():\n"
        "        new.register_forward_hook(fn)\n"
        "    old._forward_hooks.clear()\n",
        # a module the function builds itself
        "def swap(mod, sparse_cls):\n"
        "    new_mod = sparse_cls.from_dense(mod)\n"
        "    for fn in mod._forward_hooks.values():\n"
        "        new_mod.register_forward_hook(fn)\n"
        "    return new_mod\n",
        # hooks replayed by hand, not registered again
        "def replay(mod, args, out):\n"
        "    for fn in mod._forward_hooks.values():\n"
        "        fn(mod, args, out)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def transfer(old_model, new_model):\n"
            "    new_modules = dict(new_model.named_modules())\n"
            "    for name, old in old_model.named_modules():\n"
            "        for _, hook in list(old._forward_hooks.items()):\n"
            "            new_modules[name].register_forward_hook(hook)  # HKL348\n"
        ),
        Invalid(
            "import copy\n"
            "def clone_with_hooks(module):\n"
            "    twin = copy.deepcopy(module)\n"
            "    hooks = getattr(module, '_forward_pre_hooks', {})\n"
            "    for key in hooks:\n"
            "        twin.register_forward_pre_hook(hooks[key])  # HKL348\n"
            "    return twin\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in unguarded_transfers(ctx.tree):
            source = short_source(found.source, width=50)
            destination = short_source(found.destination, width=30)
            owner = short_source(found.source_owner, width=30)
            if found.same_object:
                why = (f"`{destination}` is the module whose `{found.dict_name}` the hook comes from, so it holds "
                       f"the hook already: this adds it a second time")
            else:
                why = (f"nothing here makes sure `{destination}` does not hold it already: when it is `{owner}` "
                       f"itself, a shallow copy of it (which shares `{found.dict_name}`) or a deep copy (which "
                       f"carries the hooks), this adds each hook again, so it runs twice (more on each repeat) and "
                       f"the user's handle removes only one copy")
            yield self.finding(
                ctx, found.call,
                message=f"`{short_source(found.call, width=60)}` registers a hook read from `{source}` again; {why}",
                help=(f"Skip the transfer when the two share their hooks (`if {owner}.{found.dict_name} is "
                      f"{destination}.{found.dict_name}: continue`), or only register hooks not already in "
                      f"`{destination}.{found.dict_name}.values()`."),
            )
