"""HKL318: code that walks a module's hook dict treats every hook in it as one of its own."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_dicts import ALL_HOOK_DICTS, unchecked_hook_uses
from hooklint.static.values import src


class ForeignHooksAssumedOwn(Rule):
    """
    ## What it does
    Reports a read of an attribute (or a method call) on each hook of a
    module's hook dict (`_forward_hooks`, `_forward_pre_hooks`,
    `_backward_hooks`, ... walked with `.values()`, `.items()` or by key)
    when nothing checks first that the hook is one of the code's own
    (`isinstance(hook, MyHook)`, `hook is self`, `hasattr(hook, ...)`, a
    `try` catching `AttributeError`).

    ## Why is this bad?
    A module's hook dicts hold every hook registered on it: the user's own
    functions, other libraries' hooks (profilers, offloading, adapters,
    pruning), torch's own (`weight_norm`, `spectral_norm`, lazy modules).
    Code that registers its own hook objects and then walks the dict as if
    each entry were one of them fails as soon as anyone else hooked the
    module: a plain function has no `_init` or `reset`, so the call raises
    `AttributeError`, or, worse, another library's hook object has a
    method of that name and is changed behind its owner's back.

    ## Known problems
    Only attribute reads on the hook are reported, not calls of the hook
    itself (every hook is callable) nor the attributes every function has
    (`__name__`, `__module__`).  A dict that only the code's own class ever
    fills cannot be told from the module's: the attribute must be one of
    torch's hook dicts.  The severity is *warning*: whether another hook is
    present depends on what the user does with the module.

    ## Example
    ```python
    import torch.nn as nn

    class Selector:
        def __init__(self, keys):
            self.keys = keys
        def bind(self, module):
            self.module = module
        def __call__(self, module, inputs, output):
            return output

    def select(module: nn.Module, keys):
        module.register_forward_hook(Selector(keys))
        for hook in module._forward_hooks.values():
            hook.bind(module)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Selector:
        def __init__(self, keys):
            self.keys = keys
        def bind(self, module):
            self.module = module
        def __call__(self, module, inputs, output):
            return output

    def select(module: nn.Module, keys):
        module.register_forward_hook(Selector(keys))
        for hook in module._forward_hooks.values():
            if isinstance(hook, Selector):
                hook.bind(module)
    ```

    ## Fix safety
    There is no automatic fix: filter the entries by type (or keep your own
    hooks in a list of your own instead of reading them back from the
    module's dict).

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook):
      hooks of every registrant share the module's dicts
    - tensordict 0.3.1 (`select_out_keys` initialises only its own `_OutKeysSelect` hooks)
    """

    code = "HKL318"
    name = "foreign-hooks-assumed-own"
    summary = "Each hook of a module's hook dict is used as one of the code's own, with no check of its type"
    severity = Severity.WARNING
    triggers = tuple(sorted(ALL_HOOK_DICTS))
    VALID: ClassVar[tuple[str, ...]] = (
        # filtered by type
        "def reset(module):\n"
        "    for hook in module._forward_hooks.values():\n"
        "        if isinstance(hook, Mine):\n"
        "            hook.reset()\n",
        # `continue` past the others
        "def reset(module):\n"
        "    for key, hook in list(module._forward_pre_hooks.items()):\n"
        "        if not isinstance(hook, Mine):\n"
        "            continue\n"
        "        hook.reset()\n",
        # only called: every hook is callable
        "def replay(module, args):\n"
        "    for hook in module._forward_pre_hooks.values():\n"
        "        args = hook(module, args) or args\n"
        "    return args\n",
        # identity, and names every function has
        "def mine(module, me):\n"
        "    names = [h.__name__ for h in module._forward_hooks.values() if callable(h)]\n"
        "    return [k for k, h in module._forward_hooks.items() if h is me], names\n",
        # a comprehension with a type filter
        "def states(module):\n"
        "    return [h.state for h in module._forward_hooks.values() if isinstance(h, Mine)]\n",
        # AttributeError caught
        "def close_all(module):\n"
        "    for hook in module._backward_hooks.values():\n"
        "        try:\n"
        "            hook.close()\n"
        "        except AttributeError:\n"
        "            pass\n",
        # hasattr
        "def close_all(module):\n"
        "    for hook in module._forward_hooks.values():\n"
        "        if hasattr(hook, 'close'):\n"
        "            hook.close()\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class Base:\n"
            "    def select_out_keys(self, *keys):\n"
            "        self.register_forward_hook(OutKeys(keys))\n"
            "        for hook in self._forward_hooks.values():\n"
            "            hook._init(self)  # HKL318\n"
            "        return self\n"
        ),
        Invalid(
            "def reset_all(model):\n"
            "    for layer in model.modules():\n"
            "        for key, hook in list(layer._forward_pre_hooks.items()):\n"
            "            hook.reset_counter()  # HKL318\n"
        ),
        Invalid(
            "def totals(module):\n"
            "    hooks = module._forward_hooks\n"
            "    return sum(h.total for h in hooks.values())  # HKL318\n"
        ),
        Invalid(
            "def detach_all(module):\n"
            "    for key in module._backward_hooks:\n"
            "        hook = module._backward_hooks[key]\n"
            "        hook.detach()  # HKL318\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        ctx.model  # noqa: B018 - the semantic model links each node to its parent, which the checks walk
        for use in sorted(unchecked_hook_uses(ctx.tree), key=lambda u: (u.use.lineno, u.use.col_offset)):
            if id(use.use) in seen:
                continue
            seen.add(id(use.use))
            dict_text = src(use.source)
            message = (f"`{use.name}.{use.use.attr}` is read from every hook in `{dict_text}`, with no check that "
                       f"the hook is one of this code's own: that dict holds every hook registered on the module "
                       f"(the user's functions, other libraries' hooks, torch's own), so a hook without "
                       f"`{use.use.attr}` makes this raise AttributeError, and another library's hook that has it "
                       f"is changed behind its owner's back")
            yield self.finding(
                ctx, use.use, message,
                help=f"Filter the entries (`if isinstance({use.name}, YourHook):`), or keep your own hooks (or "
                     f"their handles) in a collection of your own instead of reading them back from `{dict_text}`.",
            )
