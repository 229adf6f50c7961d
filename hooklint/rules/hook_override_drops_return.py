"""HKL410: an override of a hook protocol's pass-through method that can return None."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.protocol_returns import dropped_returns
from hooklint.static.semantic import short_source


class HookOverrideDropsReturn(Rule):
    """
    ## What it does
    Reports a method of a hook class that overrides a base method which
    hands back its own argument on every path (`return module`, `return
    output`, `return args, kwargs`), when the override can end without
    returning a value and code in the file uses the method's value
    (`module = hook.detach_hook(module)`, `return hook.post_forward(module,
    output)`).  A class or method counts as a hook protocol when its name
    says `hook`.

    ## Why is this bad?
    Hook frameworks on top of `nn.Module` (a `ModelHook` with
    `init_hook`, `pre_forward`, `post_forward`, `detach_hook`, chained by a
    `SequentialHook`) thread one value through every hook: the module being
    attached or detached, the output of the forward.  The base method
    returns what it gets so that a subclass that does nothing passes it
    on.  An override that forgets the `return` hands `None` to the next hook
    or to the model: `AttributeError: 'NoneType' object has no attribute
    ...` when hooks are removed, or a forward that returns `None`.

    ## Known problems
    The base class must be in the same file, and a call of the method whose
    value is used must be in the file too.  Whether the override is ever
    chained is not known from the code, so the severity is *warning*.

    ## Example
    ```python
    class ModelHook:
        def detach_hook(self, module):
            return module

    class SequentialHook(ModelHook):
        def __init__(self, *hooks):
            self.hooks = hooks

        def detach_hook(self, module):
            for hook in self.hooks:
                module = hook.detach_hook(module)
            return module

    class OffloadHook(ModelHook):
        def detach_hook(self, module):
            module.to("cpu")
    ```

    ## Use instead
    ```python
    class ModelHook:
        def detach_hook(self, module):
            return module

    class SequentialHook(ModelHook):
        def __init__(self, *hooks):
            self.hooks = hooks

        def detach_hook(self, module):
            for hook in self.hooks:
                module = hook.detach_hook(module)
            return module

    class OffloadHook(ModelHook):
        def detach_hook(self, module):
            module.to("cpu")
            return module
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - accelerate pull request 1880 (`AlignDevicesHook.detach_hook` returned None inside a `SequentialHook`)
    """

    code = "HKL410"
    name = "hook-override-drops-return"
    summary = "A hook class's override of a pass-through method can return None where a chain threads the value"
    severity = Severity.WARNING
    triggers = ("hook", "Hook")
    trigger_pattern = r"def \w*[Hh]ook\w*\(|class \w*Hook\w*[(:]"
    VALID: ClassVar[tuple[str, ...]] = (
        "class ModelHook:\n"
        "    def post_forward(self, module, output):\n"
        "        return output\n"
        "class Scale(ModelHook):\n"
        "    def post_forward(self, module, output):\n"
        "        return output * 2\n"
        "def run(hook, module, output):\n"
        "    return hook.post_forward(module, output)\n",
        # nothing uses the value
        "class ModelHook:\n"
        "    def detach_hook(self, module):\n"
        "        return module\n"
        "class Quiet(ModelHook):\n"
        "    def detach_hook(self, module):\n"
        "        module.eval()\n"
        "def remove(hook, module):\n"
        "    hook.detach_hook(module)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class ModelHook:\n"
            "    def detach_hook(self, module):\n"
            "        return module\n"
            "class SequentialHook(ModelHook):\n"
            "    def __init__(self, *hooks):\n"
            "        self.hooks = hooks\n"
            "    def detach_hook(self, module):\n"
            "        for hook in self.hooks:\n"
            "            module = hook.detach_hook(module)\n"
            "        return module\n"
            "class OffloadHook(ModelHook):\n"
            "    def detach_hook(self, module):  # HKL410\n"
            "        module.to('cpu')\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in dropped_returns(ctx.tree):
            where = f"{found.cls.name}.{found.override.name}"
            yield self.finding(
                ctx, found.override,
                message=(f"`{where}` can return None ({found.how}), but `{found.base.name}.{found.override.name}`, "
                         f"which it overrides, hands back {found.returned} on every path, and the value is used "
                         f"(`{short_source(found.user, width=50)}`, line {found.user.lineno}): wherever this "
                         f"hook is chained or its value is used, the next hook or the caller gets None instead "
                         f"of {found.returned}"),
                help=f"End every path of `{where}` with `return {found.returned.strip('`')}` (or the new value).",
                related=[Related(f"`{found.base.name}.{found.override.name}` returns {found.returned}",
                                 ctx.display_path, ctx.span(found.base_method)[0])],
                name_only=True,
            )
