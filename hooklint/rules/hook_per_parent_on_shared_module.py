"""HKL315: a hand-written recursion over children() registers a hook once per parent of a shared module (hook-semantics.md, section 3)."""

from __future__ import annotations

import ast
import re
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_effects import accumulating_effects, changes_output, same_when_repeated
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, REGISTRATION_TRIGGERS, HookKind, Registration
from hooklint.static.semantic import positional_params
from hooklint.static.values import src
from hooklint.static.walks import (
    APPLY_WALKER_WORDS,
    aliased_submodules,
    forward_patches,
    recursive_walks,
    registrations,
    remembers_modules,
)

_KIND_WORDS = {
    "forward": "forward hook", "forward-pre": "forward pre-hook", "backward-legacy": "backward hook",
    "full-backward": "full backward hook", "full-backward-pre": "full backward pre-hook",
}


class HookPerParentOnSharedModule(Rule):
    """
    ## What it does
    Reports a module hook registered from a hand-written recursion over a
    module's children (a function that loops over `module.children()`,
    `named_children()` or `module._modules` and calls itself on each
    child), on the module it visits or on each child, directly, through a
    helper, or through a callback the walk is handed (`walk(model,
    add_hooks)`), when neither the walk nor the registering function nor
    the hook keeps track of the modules already visited.  Also reports an
    `nn.Module` class that stores a module taken from inside another of its
    submodules under a second attribute (`self.layer =
    dict(self.model.named_modules())[name]`, a helper that returns one of
    `self.model.named_modules()`), which makes it a second child, when the
    class walks itself with `Module.apply` to hook modules (`self.apply(fn)`
    with `fn` registering a module hook, or captum's `DeepLift(self)`,
    `GuidedBackprop(self)`, which hook through `model.apply`).

    A forward patch that plays a hook's part is reported the same way: the
    visited module's class swapped for one built from its current class
    (`m.__class__ = patched(m)`, a subclass of `type(m)` whose `forward`
    reports and calls the original), or its `forward` replaced by a wrapper
    of the current one (`m.forward = wrap(m.forward)`), with no record of the
    modules already patched and no test of the module that can end the visit
    before the patch (`if hasattr(m, "orig_type"): return`).

    ## Why is this bad?
    A module can have several parents: a layer reused in two blocks, an
    activation module shared by a whole network, weights tied by sharing a
    sub-block.  `model.modules()` and `named_modules()` keep a memo and
    yield such a module once; a recursion over `children()` has none and
    reaches it once per parent.  The hook is then registered once per
    parent, and every call of the shared module runs it that many times:
    a FLOP counter or a model summary counts the module twice, an
    activation recorder stores every output twice, a hook that changes the
    output applies itself twice.  Nothing fails: the figures are just
    wrong, and only for models that share modules.  A forward patch applied
    twice wraps the first patch: the module reports twice per call, or, when
    the wrapper finds the forward it wraps through the object's class
    (`ty.forward(self)` with `ty` the class swapped in first, whose `forward`
    calls `self._original_forward`, now the second class's), it recurses
    without end.  `Module.apply` recurses
    over `children()` too: a submodule stored again as an attribute of an
    ancestor has two parents and is visited, and hooked, twice.

    ## Known problems
    Only walks that recurse by calling themselves with the child are
    recognised, and a callback is followed when the walk's call site in the
    same file hands it a function of the file.  A walk counts as
    remembering when it, the registering function or the hook tests a
    record keyed by the module (`m in seen`, `id(m) not in done`,
    `seen.add(m)`, `if done.get(id(m))`) or looks at the hooks the module
    already holds (`module._forward_hooks`).  `nn.Module.apply(fn)` also
    visits a shared module once per parent; it is reported only for the
    alias an `nn.Module` class makes itself and walks itself (keep such a
    layer out of the module tree: a plain holder object, or its name).  The
    severity is *warning*: only models that share a module are affected.
    A hook whose change gives the same result applied twice (`clamp(g,
    min=0)`, `relu`, `abs` with constant bounds) or that hands the value to a
    submodule of the hooked module (an observer: `module.activation_post_process(output)`,
    whose second pass the hook does not show) is not reported.

    ## Example
    ```python
    def count_calls(model):
        calls = []

        def count(module, inputs, output):
            calls.append(type(module).__name__)

        def add_hooks(module):
            if not list(module.children()):
                module.register_forward_hook(count)
            for child in module.children():
                add_hooks(child)

        add_hooks(model)
        return calls
    ```

    ## Use instead
    ```python
    def count_calls(model):
        calls = []

        def count(module, inputs, output):
            calls.append(type(module).__name__)

        for module in model.modules():  # each module once, however many parents it has
            if not list(module.children()):
                module.register_forward_hook(count)
        return calls
    ```

    ## Fix safety
    There is no automatic fix: walk `model.modules()` / `named_modules()`
    instead, or keep a set of the modules already hooked.

    ## References
    - [`Module.named_modules`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.named_modules) (its `memo`)
    - torch-scan pull request 24 (a module used in several places was hooked and reported once per place)
    """

    code = "HKL315"
    name = "hook-per-parent-on-shared-module"
    summary = ("A recursion over children() registers a hook once per parent: a shared module gets it several "
               "times")
    severity = Severity.WARNING
    triggers = ("children", "_modules", "get_submodule", *APPLY_WALKER_WORDS)
    # what it reports is a registration the file makes (`ctx.hooks.registrations`): the file spells a registration
    # API, or a name built from one (`f"register_{kind}_hook"`), as the hook index requires; or it hands a module
    # holding an alias of its own submodule to `apply` or to a captum attribution class that hooks every module
    trigger_pattern = "|".join([re.escape(word) for word in REGISTRATION_TRIGGERS + DYNAMIC_NAME_TRIGGERS]
                               + [r"DeepLift|GuidedBackprop|Deconvolution|\.apply\(",
                                  # a forward patch standing in for a hook: `m.__class__ = ...`, `m.forward = ...`
                                  r"\.(?:__class__|forward)[ \t]*=[^=]"])
    VALID: ClassVar[tuple[str, ...]] = (
        # modules() yields each module once
        "def add_hooks(model, log):\n"
        "    for m in model.modules():\n"
        "        m.register_forward_hook(lambda mod, i, o: log.append(o))\n",
        # a visited set
        "def add_hooks(module, log, seen):\n"
        "    if module in seen:\n"
        "        return\n"
        "    seen.add(module)\n"
        "    module.register_forward_hook(lambda mod, i, o: log.append(o))\n"
        "    for child in module.children():\n"
        "        add_hooks(child, log, seen)\n",
        # no recursion: only the direct children
        "def add_hooks(module, log):\n"
        "    for child in module.children():\n"
        "        child.register_forward_hook(lambda mod, i, o: log.append(o))\n",
        # an observer that overwrites: a second run changes nothing
        "def add_hooks(module, last, prefix=''):\n"
        "    for name, child in module.named_children():\n"
        "        def keep(mod, i, o, key=prefix + name):\n"
        "            last[key] = o\n"
        "        child.register_forward_hook(keep)\n"
        "        add_hooks(child, last, prefix + name + '.')\n",
        # the hook counts the hooks the module holds and acts once
        "def walk(module, fn):\n"
        "    fn(module)\n"
        "    for child in module.children():\n"
        "        walk(child, fn)\n"
        "def crawl(model, log):\n"
        "    def hook(module, inputs, output):\n"
        "        if len(module._forward_hooks) == 1:\n"
        "            log.append(module)\n"
        "    def register(module):\n"
        "        module.register_forward_hook(hook)\n"
        "    walk(model, register)\n",
        # clamping the gradient at 0 twice is clamping it once
        "import torch\n"
        "def relu_hook(module, grad_in, grad_out):\n"
        "    return (torch.clamp(grad_in[0], min=0.0),)\n"
        "def add_hooks(module):\n"
        "    for child in module.children():\n"
        "        if list(child.children()):\n"
        "            add_hooks(child)\n"
        "        else:\n"
        "            child.register_full_backward_hook(relu_hook)\n",
        # a forward patch that skips modules already patched
        "def patched_class(module, log):\n"
        "    base = type(module)\n"
        "    class Patched(base):\n"
        "        orig_type = base\n"
        "        def forward(self, *args):\n"
        "            log.append(1)\n"
        "            return base.forward(self, *args)\n"
        "    return Patched\n"
        "def patch(model, log):\n"
        "    if hasattr(model, 'orig_type'):\n"
        "        return model\n"
        "    if not list(model.children()):\n"
        "        model.__class__ = patched_class(model, log)\n"
        "    for child in model.children():\n"
        "        patch(child, log)\n"
        "    return model\n",
        # the alias is a plain holder, not a registered child
        "import torch\n"
        "from captum.attr import DeepLift\n"
        "class Holder:\n"
        "    def __init__(self, module):\n"
        "        self.module = module\n"
        "class Explainer(torch.nn.Module):\n"
        "    def __init__(self, model, layer_name):\n"
        "        super().__init__()\n"
        "        self.model = model\n"
        "        self.layer = Holder(dict(self.model.named_modules())[layer_name])\n"
        "    def forward(self, x):\n"
        "        return self.model(x)\n"
        "    def attribute(self, x):\n"
        "        return DeepLift(self).attribute(x)\n",
        # a keyword-only partial of the current forward: a second application replaces the keyword
        # (functools.partial flattens), so a module reached twice still runs its forward once
        "from functools import partial\n"
        "def set_defaults(module, params):\n"
        "    for name, child in module.named_children():\n"
        "        if name in params:\n"
        "            child.forward = partial(child.forward, arch_param=params[name])\n"
        "        set_defaults(child, params)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def add_hooks(module, log):\n"
            "    if not list(module.children()):\n"
            "        module.register_forward_hook(lambda mod, i, o: log.append(o.shape))  # HKL315\n"
            "    for child in module.children():\n"
            "        add_hooks(child, log)\n"
        ),
        Invalid(
            "def walk(module, fn, depth=0):\n"
            "    fn(module, depth)\n"
            "    for name, child in module.named_children():\n"
            "        walk(child, fn, depth + 1)\n"
            "def summarize(model, log):\n"
            "    def register(module, depth):\n"
            "        def pre(m, inputs):\n"
            "            log.append(depth)\n"
            "        module.register_forward_pre_hook(pre)  # HKL315\n"
            "    walk(model, register)\n"
        ),
        Invalid(
            "import torch\n"
            "from captum.attr import DeepLift\n"
            "class Explainer(torch.nn.Module):\n"
            "    def __init__(self, model, layer_name):\n"
            "        super().__init__()\n"
            "        self.model = model\n"
            "        self.layer = dict(self.model.named_modules())[layer_name]  # HKL315\n"
            "    def forward(self, x):\n"
            "        return self.model(x)\n"
            "    def attribute(self, x):\n"
            "        return DeepLift(self).attribute(x)\n"
        ),
        Invalid(
            "def patched_class(module, log):\n"
            "    base = type(module)\n"
            "    class Patched(base):\n"
            "        def forward(self, *args):\n"
            "            log.append(1)\n"
            "            return base.forward(self, *args)\n"
            "    return Patched\n"
            "def patch(model, log):\n"
            "    if not list(model.children()):\n"
            "        model.__class__ = patched_class(model, log)  # HKL315\n"
            "    for child in model.children():\n"
            "        patch(child, log)\n"
            "    return model\n"
        ),
        Invalid(
            "import functools\n"
            "def timed(forward, log):\n"
            "    @functools.wraps(forward)\n"
            "    def run(*args):\n"
            "        log.append(1)\n"
            "        return forward(*args)\n"
            "    return run\n"
            "def instrument(module, log):\n"
            "    for name, child in module.named_children():\n"
            "        child.forward = timed(child.forward, log)  # HKL315\n"
            "        instrument(child, log)\n"
        ),
        Invalid(
            "class Scaler:\n"
            "    def attach(self, module):\n"
            "        for child in module._modules.values():\n"
            "            child.register_forward_hook(self.scale)  # HKL315\n"
            "            self.attach(child)\n"
            "    def scale(self, module, inputs, output):\n"
            "        return output * 0.5\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        reported: set[int] = set()
        for walk in recursive_walks(ctx.model, ctx.core):
            if remembers_modules(walk.func, {walk.param, walk.child}) is not None:
                continue
            for found in registrations(ctx.model, ctx.core, walk):
                if id(found.call) in reported:
                    continue
                if found.callback is not None:
                    params = positional_params(found.callback)
                    if remembers_modules(found.callback, set(params)) is not None:
                        continue
                owner = ctx.core.places.owner(found.call)
                if ctx.core.once_guarded(found.call, owner):
                    continue  # `if not hasattr(m, "_hooked"): m._hooked = True; ...`
                registration = self._registration(ctx, found.call)
                hook = getattr(getattr(registration, "hook", None), "node", None)
                if registration is None or not isinstance(hook, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    continue  # the hook's body is not seen: what a second run does cannot be told
                if remembers_modules(hook, set(positional_params(hook)[:2])) is not None:
                    continue
                effect = self._effect_of_running_twice(registration, hook)
                if effect is None:
                    continue  # an observer that overwrites what it keeps: running twice changes nothing
                reported.add(id(found.call))
                where = ast.unparse(walk.recursion.func)
                through = ""
                related = [Related(f"the recursion: `{where}(...)` on each child from `{walk.iterator}`",
                                   ctx.display_path, ctx.span(walk.recursion)[0])]
                if found.via is not None:
                    through = f" (handed as a callback at line {found.via.lineno})"
                    related.append(Related("the walk is handed the registering function here", ctx.display_path,
                                           ctx.span(found.via)[0]))
                kind = _KIND_WORDS.get(found.kind, "hook")
                yield self.finding(
                    ctx, found.call,
                    message=(f"this {kind} is registered on every module that `{walk.func.name}` reaches by "
                             f"recursing over `{walk.iterator}`{through}, with no record of the modules already "
                             f"visited: a module shared by several parents (a layer reused in two blocks, tied "
                             f"sub-blocks) is reached once per parent and hooked that many times, so on such a "
                             f"model the hook runs several times per call and {effect} happens that many times"),
                    help="Walk `model.modules()` / `named_modules()`, which yield each module once, or keep a set "
                         "of the modules already hooked (`if m in seen: return`).",
                    related=related,
                )

            for patch in forward_patches(ctx.model, walk):
                if ctx.core.once_guarded(patch.assign, walk.func):
                    continue
                where = ast.unparse(walk.recursion.func)
                patched = "class is swapped for one derived from its current class" \
                    if patch.what == "__class__" else "forward is replaced by a wrapper of its current forward"
                yield self.finding(
                    ctx, patch.assign,
                    message=(f"the visited module's {patched} on every module that `{walk.func.name}` reaches by "
                             f"recursing over `{walk.iterator}`, with no record of the modules already patched: "
                             f"a module shared by several parents is reached once per parent and patched that "
                             f"many times, the second patch wrapping the first, so each call runs the patch "
                             f"twice (or recurses without end, when the wrapper finds the forward it wraps "
                             f"through the object's class)"),
                    help="Walk `model.modules()` / `named_modules()`, which yield each module once, or skip "
                         "modules already patched (a set of the visited ones, or a marker the patch leaves).",
                    related=[Related(f"the recursion: `{where}(...)` on each child from `{walk.iterator}`",
                                     ctx.display_path, ctx.span(walk.recursion)[0])],
                )

        for alias in aliased_submodules(ctx.model, ctx.core, ctx.inference):
            yield self.finding(
                ctx, alias.assign,
                message=(f"`self.{alias.attr}` stores a module from inside `self.{alias.owner}` as a second "
                         f"attribute, so it becomes a second child of this module, and `{alias.walker_text}` "
                         f"(line {alias.walker.lineno}) walks this module with `Module.apply`, which recurses "
                         f"over `children()` and visits it once through `self.{alias.owner}` and once through "
                         f"`self.{alias.attr}`: its hooks are registered twice, so each call of it runs them "
                         f"twice (attributions and counts are wrong, or the hook fails)"),
                help=(f"Keep the module out of the module tree: store its name and look it up, or hold it in a "
                      f"plain (non-Module) object, so that `self.{alias.attr}` is not registered as a child."),
                related=[Related("the walk that hooks every module", ctx.display_path, ctx.span(alias.walker)[0])],
            )

    @staticmethod
    def _registration(ctx: FileContext, call: ast.Call) -> Registration | None:
        for reg in ctx.hooks.registrations:
            if reg.call is call:
                return reg
        return None

    @staticmethod
    def _effect_of_running_twice(reg: Registration, hook: ast.AST) -> str | None:
        """What a second run of the hook adds: state it accumulates (an
        append, a count), or a change of the output or gradient it makes
        again on the changed value."""
        effects = accumulating_effects(hook)
        if effects:
            return effects[0].text
        role = {HookKind.FORWARD: "output", HookKind.FORWARD_PRE: "input"}.get(reg.kind, "grad_input")
        changed = reg.param("args") if reg.kind is HookKind.FORWARD_PRE and reg.with_kwargs else reg.param(role)
        change = changes_output(hook, changed)
        params = positional_params(hook)
        module_param = params[1] if params and params[0] == "self" and len(params) > 1 else params[0] if params else None
        if change is not None and same_when_repeated(change, changed, module_param):
            return None  # `clamp(grad, min=0)` twice is `clamp` once; a submodule of the hooked module: unseen
        if change is not None:
            what = "output" if reg.kind is HookKind.FORWARD else "input" if reg.kind is HookKind.FORWARD_PRE \
                else "gradient"
            return f"the change of the {what} (`{src(change)}`)"
        return None
