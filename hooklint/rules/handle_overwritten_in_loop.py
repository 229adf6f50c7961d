"""HKL339: a loop overwrites the hook handles it keeps; earlier iterations' hooks can never be removed."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.handle_overwrite import overwritten_handles
from hooklint.static.hooks import REGISTRATION_TRIGGERS


class HandleOverwrittenInLoop(Rule):
    """
    ## What it does
    Reports an assignment inside a loop that binds the handle of a hook
    registration, or the handles a helper returns, to a name or attribute
    (`handles = add_hooks(block)`, `self.h = m.register_forward_hook(fn)`)
    when nothing in the loop reads the previous value first, and the value is
    kept after the loop (read after it, or stored on an attribute).  What
    returns handles is known from hooklint's function summaries: a torch
    registration, or a function of the project, in this file or another,
    that returns a handle or a list of them.

    ## Why is this bad?
    Each iteration registers hooks and replaces the handles of the previous
    one, so after the loop only the last iteration's handles are left.  A
    `RemovableHandle` is the only way to take its hook off again: the hooks
    of every other iteration stay registered for the life of the module, and
    the cleanup that later removes "the" handles removes only the last
    ones.  The other hooks keep running on every forward and backward
    (composer 0.32.0 wrapped each block in FSDP in a loop and kept only the
    last block's OOM-sync hook handles: the sync all-reduce kept running on
    every other block after the trainer "removed" the hooks).

    ## Example
    ```python
    def add_hooks(block, fn):
        return [block.register_forward_pre_hook(fn), block.register_forward_hook(fn)]

    def wrap(model, fn):
        handles = []
        for block in model.children():
            handles = add_hooks(block, fn)
        return handles
    ```

    ## Use instead
    ```python
    def add_hooks(block, fn):
        return [block.register_forward_pre_hook(fn), block.register_forward_hook(fn)]

    def wrap(model, fn):
        handles = []
        for block in model.children():
            handles.extend(add_hooks(block, fn))
        return handles
    ```

    ## Fix safety
    There is no automatic fix: `extend` (or `append` for one handle) is the
    usual fix, but whether the loop meant to keep only one registration is
    for the author to say.

    ## References
    - [`RemovableHandle`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    """

    code = "HKL339"
    name = "handle-overwritten-in-loop"
    summary = "A loop overwrites the hook handles it keeps: earlier iterations' hooks can never be removed"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS + ("hooks(", "hook(")
    # a handle (or a helper's list of them) bound by assignment: `h = m.register_forward_hook(...)`,
    # `handles = add_oom_hooks(model)`
    trigger_pattern = r"=[ \t]*[\w.]*hooks?\("

    VALID: ClassVar[tuple[str, ...]] = (
        # collected with extend / append
        "def add_hooks(block, fn):\n"
        "    return [block.register_forward_pre_hook(fn), block.register_forward_hook(fn)]\n"
        "def wrap(model, fn):\n"
        "    handles = []\n"
        "    for block in model.children():\n"
        "        handles.extend(add_hooks(block, fn))\n"
        "    return handles\n",
        # the previous handle is removed before it is replaced
        "def watch(model, fn):\n"
        "    h = None\n"
        "    for block in model.children():\n"
        "        if h is not None:\n"
        "            h.remove()\n"
        "        h = block.register_forward_hook(fn)\n"
        "    return h\n",
        # the loop stops after the first registration
        "def first(model, fn):\n"
        "    for block in model.children():\n"
        "        h = block.register_forward_hook(fn)\n"
        "        break\n"
        "    return h\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def add_hooks(block, fn):\n"
            "    return [block.register_forward_pre_hook(fn), block.register_forward_hook(fn)]\n"
            "def wrap(model, fn):\n"
            "    handles = []\n"
            "    for block in model.children():\n"
            "        handles = add_hooks(block, fn)  # HKL339\n"
            "    return handles\n"
        ),
        Invalid(
            "class Probe:\n"
            "    def attach(self, model, fn):\n"
            "        for layer in model.modules():\n"
            "            self.handle = layer.register_forward_hook(fn)  # HKL339\n"
            "    def detach(self):\n"
            "        self.handle.remove()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for hit in overwritten_handles(ctx):
            loop_line = hit.loop.lineno
            yield self.finding(
                ctx, hit.assign,
                f"`{hit.target}` is assigned the hook handle(s) from `{hit.callee}` on every pass of the loop at line "
                f"{loop_line}, and nothing reads the previous value first: only the last pass's hooks can be "
                f"removed through it, the others stay registered for the life of their modules",
                help=f"Collect them (`{hit.target}.extend(...)` for a list, `.append(...)` for one handle), or "
                     "remove the previous ones before registering again.",
            )
