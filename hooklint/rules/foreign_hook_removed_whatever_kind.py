"""HKL333: a module's third-party hook is tested for its kind, then removed whatever the test said."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.foreign_hooks import REMOVERS, removals_ignoring_kind


class ForeignHookRemovedWhateverKind(Rule):
    """
    ## What it does
    Reports `remove_hook_from_module(module)` (accelerate's removal of the
    forward-wrapping hook a module holds in `module._hf_hook`) in a
    function that tests that hook's kind (`isinstance(module._hf_hook,
    CpuOffload)`, through `getattr`, a part of it such as `.hooks[0]`, or a
    local holding it) when the removal does not depend on the test: it is
    not inside an `if` whose test holds one, or a flag assigned from one,
    and the function puts no hook back on the module.

    ## Why is this bad?
    A module carries one accelerate hook, and anyone can have attached it:
    the user, accelerate's `dispatch_model` / `cpu_offload`, another
    library (quantizers, adapters, tracers).  `remove_hook_from_module`
    takes off whatever is there and restores the original forward.  Code
    that tests the hook's kind knows which kinds it can deal with (the
    offload hooks it will re-apply after its work); removing the hook when
    the test matched none of them drops a hook the code knows nothing of,
    and nothing puts it back: the module silently runs without it from
    then on (diffusers 0.33's `load_lora_weights` and
    `load_textual_inversion` removed every component's hook and re-applied
    only model or sequential CPU offload).

    ## Known problems
    Only accelerate's removal functions, called on a module whose hook the
    same function tests, are recognised; a removal in a helper of another
    function is not followed.  The severity is *warning*: whether another
    kind of hook is present depends on how the user prepared the model.

    ## Example
    ```python
    from accelerate.hooks import AlignDevicesHook, CpuOffload, remove_hook_from_module

    def disable_offloading(components):
        model_offload = sequential_offload = False
        for component in components:
            if hasattr(component, "_hf_hook"):
                model_offload = model_offload or isinstance(component._hf_hook, CpuOffload)
                sequential_offload = sequential_offload or isinstance(component._hf_hook, AlignDevicesHook)
                remove_hook_from_module(component, recurse=sequential_offload)
        return model_offload, sequential_offload
    ```

    ## Use instead
    ```python
    from accelerate.hooks import AlignDevicesHook, CpuOffload, remove_hook_from_module

    def disable_offloading(components):
        model_offload = sequential_offload = False
        for component in components:
            if hasattr(component, "_hf_hook"):
                model_offload = model_offload or isinstance(component._hf_hook, CpuOffload)
                sequential_offload = sequential_offload or isinstance(component._hf_hook, AlignDevicesHook)
                if model_offload or sequential_offload:  # only the kinds re-applied afterwards
                    remove_hook_from_module(component, recurse=sequential_offload)
        return model_offload, sequential_offload
    ```

    ## Fix safety
    There is no automatic fix: remove the hook only when its kind is one the
    code puts back, or save it (`old = module._hf_hook`) and re-attach it
    with `add_hook_to_module(module, old)` afterwards.

    ## References
    - [accelerate `remove_hook_from_module`](https://huggingface.co/docs/accelerate/package_reference/big_modeling#accelerate.hooks.remove_hook_from_module):
      "Removes any hook attached to a module via `add_hook_to_module`"
    - diffusers pull request 11768 (LoRA loading removed accelerate hooks it did not re-apply)
    """

    code = "HKL333"
    name = "foreign-hook-removed-whatever-kind"
    summary = "A module's accelerate hook is tested for its kind, then removed whatever the test said"
    severity = Severity.WARNING
    triggers = tuple(sorted(REMOVERS))
    trigger_pattern = r"isinstance\("
    VALID: ClassVar[tuple[str, ...]] = (
        # the removal depends on the kind test, through flags
        "from accelerate.hooks import CpuOffload, remove_hook_from_module\n"
        "def disable(components):\n"
        "    for component in components:\n"
        "        offload = isinstance(getattr(component, '_hf_hook', None), CpuOffload)\n"
        "        if offload:\n"
        "            remove_hook_from_module(component)\n",
        # the kind test guards the removal directly
        "import accelerate\n"
        "from accelerate.hooks import AlignDevicesHook\n"
        "def strip(model):\n"
        "    if isinstance(model._hf_hook, AlignDevicesHook):\n"
        "        accelerate.hooks.remove_hook_from_module(model, recurse=True)\n",
        # the hook is saved and put back
        "from accelerate.hooks import AlignDevicesHook, add_hook_to_module, remove_hook_from_module\n"
        "def replace(module, make):\n"
        "    old = module._hf_hook\n"
        "    if isinstance(old, AlignDevicesHook):\n"
        "        old.offload = False\n"
        "    remove_hook_from_module(module)\n"
        "    add_hook_to_module(module, make(old))\n",
        # no kind test: removing every hook is the function's stated job
        "from accelerate.hooks import remove_hook_from_module\n"
        "def remove_all_hooks(components):\n"
        "    for model in components:\n"
        "        if hasattr(model, '_hf_hook'):\n"
        "            remove_hook_from_module(model, recurse=True)\n",
        # a project function of the same name is not accelerate's
        "def remove_hook_from_module(module):\n"
        "    module.hook = None\n"
        "def reset(module, Kind):\n"
        "    if isinstance(module._hf_hook, Kind):\n"
        "        pass\n"
        "    remove_hook_from_module(module)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "from accelerate.hooks import AlignDevicesHook, CpuOffload, remove_hook_from_module\n"
            "def disable(pipeline):\n"
            "    model_offload = sequential = False\n"
            "    for _, component in pipeline.components.items():\n"
            "        if hasattr(component, '_hf_hook'):\n"
            "            model_offload = isinstance(component._hf_hook, CpuOffload)\n"
            "            sequential = isinstance(component._hf_hook, AlignDevicesHook)\n"
            "            remove_hook_from_module(component, recurse=sequential)  # HKL333\n"
            "    return model_offload, sequential\n"
        ),
        Invalid(
            "import accelerate.hooks as hooks\n"
            "class Loader:\n"
            "    def unload(self, module):\n"
            "        hook = getattr(module, '_hf_hook', None)\n"
            "        self.was_offloaded = isinstance(hook, hooks.CpuOffload)\n"
            "        hooks.remove_hook_from_module(module)  # HKL333\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in removals_ignoring_kind(ctx):
            first = min(found.checks, key=lambda check: (check.lineno, check.col_offset))
            kinds = sorted({_kind_text(check) for check in found.checks})
            yield self.finding(
                ctx, found.call,
                message=(f"this removes whatever accelerate hook `{found.module}` holds, though the function "
                         f"tests the hook's kind ({', '.join(kinds)} at line {first.lineno}) and the removal "
                         f"does not depend on the result: a hook of any other kind (attached by the user or "
                         f"another library) is taken off and nothing here puts it back, so the module runs "
                         f"without it from then on"),
                help=("Remove the hook only when the test matched a kind the code re-applies afterwards, or keep "
                      f"it (`old = {found.module}._hf_hook`) and re-attach it with `add_hook_to_module`."),
                related=[Related("the kind test", ctx.display_path, ctx.span(check)[0]) for check in found.checks],
            )


def _kind_text(check) -> str:
    import ast

    return f"`{ast.unparse(check.args[1])}`"
