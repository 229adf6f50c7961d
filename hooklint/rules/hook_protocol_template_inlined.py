"""HKL336: a hook dispatcher calls a hook's overridable template method on one path and runs its default steps itself on another."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.protocol_dispatch import inlined_templates


class HookProtocolTemplateInlined(Rule):
    """
    ## What it does
    Reports a dispatcher of a forward-wrapping hook protocol (a class of the
    file whose method, such as `new_forward`, runs other methods of the
    class, such as `pre_forward` and `post_forward`, around a wrapped
    module's forward) that returns `hook.new_forward(...)` on one path and,
    on a later path, calls the steps itself (`hook.pre_forward(...)`,
    `hook.post_forward(...)` around the original forward) without calling
    `new_forward`.

    ## Why is this bad?
    The template method is the protocol's extension point: a hook that
    overrides `new_forward` replaces the whole call (a cache that skips or
    reuses a block's computation, a hook that reroutes the forward).  A
    dispatcher that calls the template for one hook but inlines its default
    body when several hooks are registered runs such an override only while
    the hook is alone: as soon as another hook joins the module (CPU
    offloading next to a cache), the override is skipped, silently
    (vllm-omni 0.18: TeaCache stopped working when offloading was enabled).

    ## Known problems
    The protocol class and the dispatcher must be in the same file, and the
    template's call must be a `return` (the path that runs it ends there).
    The severity is *warning*: it matters only for hooks that override the
    template.

    ## Example
    ```python
    class ModelHook:
        def pre_forward(self, module, *args):
            return args
        def post_forward(self, module, output):
            return output
        def new_forward(self, module, *args):
            args = self.pre_forward(module, *args)
            return self.post_forward(module, module._original_forward(*args))

    class Registry:
        def __init__(self, module):
            self.module, self.hooks = module, []
        def dispatch(self, *args):
            if len(self.hooks) == 1:
                return self.hooks[0].new_forward(self.module, *args)
            for hook in self.hooks:
                args = hook.pre_forward(self.module, *args)
            output = self.module._original_forward(*args)
            for hook in reversed(self.hooks):
                output = hook.post_forward(self.module, output)
            return output
    ```

    ## Use instead
    ```python
    class ModelHook:
        def pre_forward(self, module, *args):
            return args
        def post_forward(self, module, output):
            return output
        def new_forward(self, module, *args):
            args = self.pre_forward(module, *args)
            return self.post_forward(module, module._original_forward(*args))

    class Registry:
        def __init__(self, module):
            self.module, self.hooks = module, []
        def dispatch(self, *args):
            run = self.module._original_forward
            for hook in reversed(self.hooks):  # each hook's new_forward wraps the next
                run = lambda *a, hook=hook, inner=run: hook.post_forward(
                    self.module, inner(*hook.pre_forward(self.module, *a))
                ) if type(hook).new_forward is ModelHook.new_forward else hook.new_forward(self.module, *a)
            return run(*args)
    ```

    ## Fix safety
    There is no automatic fix: call the template for every hook (composing
    them), or track the one hook that overrides it and run it between the
    others' steps, refusing a second one.

    ## References
    - vllm-omni pull request 2689 (the hook overriding `new_forward` tracked and run with several hooks)
    - accelerate's `ModelHook` / `SequentialHook` (the protocol's shape)
    """

    code = "HKL336"
    name = "hook-protocol-template-inlined"
    summary = "A hook dispatcher calls the hooks' template method on one path and inlines its default on another"
    severity = Severity.WARNING
    triggers = ("forward",)
    trigger_pattern = r"return[ \t]+[\w.\[\]()]+\.new_forward\(|pre_forward"
    VALID: ClassVar[tuple[str, ...]] = (
        # the template is called for every hook
        "class ModelHook:\n"
        "    def pre_forward(self, module, *args):\n"
        "        return args\n"
        "    def post_forward(self, module, output):\n"
        "        return output\n"
        "    def new_forward(self, module, *args):\n"
        "        args = self.pre_forward(module, *args)\n"
        "        return self.post_forward(module, module._original_forward(*args))\n"
        "class Registry:\n"
        "    def dispatch(self, module, hooks, *args):\n"
        "        if not hooks:\n"
        "            return module._original_forward(*args)\n"
        "        return hooks[0].new_forward(module, *args)\n",
        # steps called before the template on the same path (a hook's own pre-step, then the template)
        "class ModelHook:\n"
        "    def pre_forward(self, module, *args):\n"
        "        return args\n"
        "    def post_forward(self, module, output):\n"
        "        return output\n"
        "    def new_forward(self, module, *args):\n"
        "        args = self.pre_forward(module, *args)\n"
        "        return self.post_forward(module, module._original_forward(*args))\n"
        "def warm(hook, module, *args):\n"
        "    hook.pre_forward(module, *args)\n"
        "    hook.post_forward(module, None)\n"
        "    return hook.new_forward(module, *args)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class ModelHook:\n"
            "    def pre_forward(self, module, *args):\n"
            "        return args\n"
            "    def post_forward(self, module, output):\n"
            "        return output\n"
            "    def new_forward(self, module, *args):\n"
            "        args = self.pre_forward(module, *args)\n"
            "        return self.post_forward(module, module._original_forward(*args))\n"
            "class Registry:\n"
            "    def __init__(self, module):\n"
            "        self.module, self.hooks = module, {}\n"
            "    def dispatch(self, *args):\n"
            "        if len(self.hooks) == 1:\n"
            "            hook = next(iter(self.hooks.values()))\n"
            "            return hook.new_forward(self.module, *args)  # HKL336\n"
            "        for hook in self.hooks.values():\n"
            "            args = hook.pre_forward(self.module, *args)\n"
            "        output = self.module._original_forward(*args)\n"
            "        for hook in self.hooks.values():\n"
            "            output = hook.post_forward(self.module, output)\n"
            "        return output\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in inlined_templates(ctx):
            steps = " and ".join(f"`{step}`" for step in found.steps)
            yield self.finding(
                ctx, found.call,
                message=(f"`{found.method}` ({found.template}, which runs {steps} around the wrapped forward) is "
                         f"called here on one path, while a later path of `{getattr(found.function, 'name', '?')}` "
                         f"calls {steps} of the hooks itself (line {found.step_calls[0].lineno}): a hook that "
                         f"overrides `{found.method}` to replace the call runs only on this path, and is silently "
                         f"skipped on the other (when a second hook joins the module)"),
                help=(f"Call `{found.method}` on every path (compose the hooks), or find the hook that overrides it "
                      f"and run it between the others' steps."),
                related=[Related(f"`{step}` run by the dispatcher itself", ctx.display_path, ctx.span(call)[0])
                         for step, call in zip(found.steps, found.step_calls)],
            )
