"""HKL323: a module's `forward` replaced by a closure over the module: a copy still runs the original."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.forward_binding import closure_forwards


class InstanceForwardClosure(Rule):
    """
    ## What it does
    Reports `module.forward = new_forward` where `new_forward` is a function
    defined on the spot (a nested `def` or a `lambda`) whose closure holds
    the module itself or the module's previous bound `forward`, the way
    forward-wrapping hooks are installed (device-placement and offloading
    hooks, profilers, adapters); `setattr(module, "forward", ...)` and a
    decorator applied on the spot (`functools.wraps(old)(new_forward)`)
    count too.  Not reported: a forward put back later in the same
    function, or by the function that calls the installer in this file (a
    context manager restoring it after its `yield`); a wrapper that puts
    the previous forward back when it runs and does not install itself
    again (a one-shot redirection, as Lightning's); `cls.forward = ...`
    (a class attribute, bound to each object afresh).

    ## Why is this bad?
    `module.forward = ...` makes an instance attribute, which
    `nn.Module.__call__` runs instead of the class's `forward`.
    `copy.deepcopy` copies the module's `__dict__`, but a function is copied
    by reference, with the closure it was made with: the copy's `forward`
    still runs the wrapper bound to the **original** module and the
    original's saved forward, with the original's weights and device
    placement.  The copy computes the original's output, silently
    (accelerate 0.23's `add_hook_to_module`; a model prepared with
    `dispatch_model` / `cpu_offload` and then deep-copied, as an EMA or a
    teacher copy is made).  Pickling the module fails on the local
    function too.  A bound method (`types.MethodType(fn, module)`,
    `fn.__get__(module)`) or `functools.partial(fn, module)` is re-bound to
    the copy by `copy.deepcopy`.

    ## Known problems
    The severity is *warning*: the module may never be copied.  Only a
    module named by a variable is followed (`layer.forward = ...`, not
    `self.blocks[0].forward = ...`).

    ## Example
    ```python
    import torch.nn as nn

    def add_timer(module: nn.Module):
        old_forward = module.forward

        def new_forward(*args, **kwargs):
            return old_forward(*args, **kwargs)

        module.forward = new_forward
        return module
    ```

    ## Use instead
    ```python
    import functools
    import torch.nn as nn

    def _timed_forward(module, *args, **kwargs):
        return module._old_forward(*args, **kwargs)

    def add_timer(module: nn.Module):
        module._old_forward = module.forward
        module.forward = functools.partial(_timed_forward, module)
        return module
    ```

    ## Fix safety
    No fix is offered: the wrapper's body must be rewritten to take the
    module as an argument and look up the saved forward through it.

    ## References
    - [`copy` module](https://docs.python.org/3/library/copy.html): "[deepcopy] does not copy types like module,
      method, stack trace, stack frame, file, socket, window, or any similar types" (functions are copied by reference)
    - [accelerate #1971](https://github.com/huggingface/accelerate/pull/1971)
    """

    code = "HKL323"
    name = "instance-forward-closure"
    summary = "`module.forward` replaced by a closure over the module: a deep copy still runs the original"
    severity = Severity.WARNING
    triggers = ("forward",)
    trigger_pattern = r"\.forward[ \t]*=[^=]|setattr\(.{0,80}?[\"']forward[\"']"
    VALID: ClassVar[tuple[str, ...]] = (
        # functools.partial: deepcopy re-binds the module to the copy
        "import functools\n"
        "import torch.nn as nn\n"
        "def _wrapped(module, *args):\n"
        "    return module._old_forward(*args)\n"
        "def add_hook(module: nn.Module):\n"
        "    module._old_forward = module.forward\n"
        "    module.forward = functools.partial(_wrapped, module)\n",
        # a bound method of the module: re-bound by deepcopy
        "import types\n"
        "import torch.nn as nn\n"
        "def fast(self, x):\n"
        "    return x\n"
        "def patch(layer: nn.Module):\n"
        "    layer.forward = types.MethodType(fast, layer)\n",
        # a patch for the length of one call, put back
        "import torch.nn as nn\n"
        "def export(model: nn.Module, x):\n"
        "    original = model.forward\n"
        "    def flat(*args):\n"
        "        return original(*args)\n"
        "    model.forward = flat\n"
        "    try:\n"
        "        return model(x)\n"
        "    finally:\n"
        "        model.forward = original\n",
        # a closure that holds neither the module nor its forward
        "import torch.nn as nn\n"
        "def zero(layer: nn.Module, size):\n"
        "    def forward(x):\n"
        "        return x.new_zeros(size)\n"
        "    layer.forward = forward\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def add_hook_to_module(module: nn.Module, hook):\n"
            "    old_forward = module.forward\n"
            "    def new_forward(*args, **kwargs):\n"
            "        args = hook.pre_forward(module, *args)\n"
            "        return hook.post_forward(module, old_forward(*args, **kwargs))\n"
            "    module.forward = new_forward  # HKL323\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def trace_all(model):\n"
            "    for m in model.modules():\n"
            "        m.forward = lambda *a, m=m: print(type(m)) or type(m).forward(m, *a)\n"
            "    model.forward = lambda *a: print(model) or type(model).forward(model, *a)  # HKL323\n"
            "    model.register_forward_hook(print)\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Offloaded(nn.Linear):\n"
            "    def __init__(self, *args):\n"
            "        super().__init__(*args)\n"
            "        inner = self.forward\n"
            "        def onload(x):\n"
            "            return inner(x.to(self.weight.device))\n"
            "        self.forward = onload  # HKL323\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for stmt, module_name, captured, _func in closure_forwards(ctx):
            yield self.finding(
                ctx, stmt,
                f"`{module_name}.forward` is replaced by a function whose closure holds {captured}: the instance "
                f"attribute is what `{module_name}(...)` runs, and `copy.deepcopy` copies a function by reference, "
                f"so a copy of this module (or of a model holding it) still runs the wrapper and forward of the "
                f"original module, with the original's weights (and the module cannot be pickled)",
                help="Bind the wrapper to the module so that a copy re-binds it: "
                     "`functools.partial(wrapper, module)` or `types.MethodType(wrapper, module)`, and have it "
                     "look up the saved forward through the module (`module._old_forward`) at call time.",
            )
