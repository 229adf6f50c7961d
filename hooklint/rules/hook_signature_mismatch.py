"""HKL420: a hook whose parameters cannot take the arguments its registration API calls it with."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_signatures import event_of, signature_mismatches


class HookSignatureMismatch(Rule):
    """
    ## What it does
    Reports a hook registered with a torch API whose parameters cannot bind
    the argument list that API always calls it with: module forward hooks
    `(module, args, output)` (`(module, args, kwargs, output)` with
    `with_kwargs=True`), forward pre-hooks `(module, args)`, backward hooks
    `(module, grad_input, grad_output)`, backward pre-hooks `(module,
    grad_output)`, tensor hooks `(grad)`, post-accumulate-grad hooks
    `(param)`, autograd Node hooks `(grad_inputs, grad_outputs)` and
    pre-hooks `(grad_outputs)`, a module's `state_dict` pre-hooks `(module,
    prefix, keep_vars)` and post-hooks `(module, state_dict, prefix,
    local_metadata)`, `load_state_dict` pre-hooks (eight arguments, seven
    without the module) and post-hooks `(module, incompatible_keys)`, an
    optimizer's step pre/post-hooks `(optimizer, args, kwargs)` and
    state-dict hooks, `saved_tensors_hooks`' pack `(tensor)` and unpack
    `(packed)`, and the global module and optimizer hooks.  A bound method
    loses `self`, `functools.partial` the arguments it binds; defaults,
    `*args` and keyword-only parameters count as Python counts them.

    ## Why is this bad?
    torch calls every hook with positional arguments, all of them.  A hook
    that takes fewer, or requires more, raises `TypeError` the first time
    the event happens: the first `load_state_dict()`, the first
    `optimizer.step()`, the first backward.  That is often far from the
    registration and in a code path the author never ran (a resume from a
    checkpoint), so the error reaches users first.

    ## Known problems
    Only a hook whose `def` or `lambda` the file shows is judged; a hook
    decorated with anything but a decorator known to keep the signature
    (`staticmethod`, `torch.no_grad()`...) is skipped.  When a method name
    has several meanings (`register_state_dict_pre_hook` of a module
    passes three arguments, of an optimizer one) and the receiver is not
    known, the hook is reported only when it fits none of them.

    ## Example
    ```python
    import torch.nn as nn

    class Adapter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_load_state_dict_post_hook(self.after_load)

        def after_load(self):
            self.ready = True
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Adapter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_load_state_dict_post_hook(self.after_load)

        def after_load(self, module, incompatible_keys):
            self.ready = True
    ```

    ## Fix safety
    There is no automatic fix: give the hook the parameters torch passes
    (or `*args`) and check that its body does what it meant with them.

    ## References
    - [`Module.register_load_state_dict_post_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_load_state_dict_post_hook)
    - [`Optimizer.register_step_pre_hook`](https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.register_step_pre_hook.html)
    - [`torch.autograd.graph.saved_tensors_hooks`](https://pytorch.org/docs/stable/autograd.html#hooks-for-saved-tensors)
    - LyCORIS commit d219bdb (a load_state_dict post hook taking only `self`)
    """

    code = "HKL420"
    name = "hook-signature-mismatch"
    summary = "A hook's parameters cannot take the arguments its registration API calls it with"
    severity = Severity.WARNING
    triggers = ("register_forward_hook", "register_forward_pre_hook", "register_backward_hook",
                "register_full_backward_hook", "register_full_backward_pre_hook", "register_hook",
                "register_post_accumulate_grad_hook", "register_module_", "register_prehook",
                "state_dict_pre_hook", "state_dict_post_hook", "_register_state_dict_hook",
                "register_step_pre_hook", "register_step_post_hook", "register_optimizer_step_",
                "register_multi_grad_hook", "saved_tensors_hooks")
    VALID: ClassVar[tuple[str, ...]] = (
        # the arguments torch passes, in every spelling
        "import torch.nn as nn\n"
        "class Adapter(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_load_state_dict_post_hook(self.after_load)\n"
        "    def after_load(self, *args, **kwargs):\n"
        "        pass\n",
        "import functools\n"
        "import torch\n"
        "def scale(factor, grad):\n"
        "    return grad * factor\n"
        "x = torch.ones(2, requires_grad=True)\n"
        "x.register_hook(functools.partial(scale, 2.0))\n",
        "import torch\n"
        "def log(module, args, kwargs, output, tag=None):\n"
        "    print(tag)\n"
        "m = torch.nn.Linear(2, 2)\n"
        "m.register_forward_hook(log, with_kwargs=True)\n",
        # an optimizer's state-dict pre-hook takes the optimizer only
        "import torch\n"
        "def before_save(optimizer):\n"
        "    pass\n"
        "def attach(opt):\n"
        "    opt.register_state_dict_pre_hook(before_save)\n",
        # a callable object
        "import torch\n"
        "class Recorder:\n"
        "    def __call__(self, module, args, output):\n"
        "        pass\n"
        "torch.nn.Linear(2, 2).register_forward_hook(Recorder())\n",
        # another framework's method of the same name
        "class Runner:\n"
        "    def register_step_pre_hook(self, hook):\n"
        "        self.hooks = [hook]\n"
        "def on_step():\n"
        "    pass\n"
        "Runner().register_step_pre_hook(on_step)\n",
        # `register_hook` of an autograd Node it cannot tell from a tensor: (grad_inputs, grad_outputs) fits one
        "def install(nodes):\n"
        "    for node in nodes:\n"
        "        node.register_hook(lambda grad_inputs, grad_outputs: None)\n",
        # an unknown decorator may change the signature
        "import torch\n"
        "from mylib import inject\n"
        "@inject\n"
        "def hook(grad):\n"
        "    return grad\n"
        "torch.ones(1, requires_grad=True).register_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class Adapter(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.register_load_state_dict_post_hook(self.after_load)  # HKL420\n"
            "    def after_load(self):\n"
            "        self.ready = True\n"
        ),
        Invalid(
            "import torch\n"
            "def clip(optimizer, args):\n"
            "    pass\n"
            "def attach(model):\n"
            "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "    opt.register_step_pre_hook(clip)  # HKL420\n"
            "    return opt\n"
        ),
        Invalid(
            "import torch\n"
            "m = torch.nn.Linear(2, 2)\n"
            "m.register_forward_hook(lambda mod, out: print(out))  # HKL420\n"
        ),
        Invalid(
            "import torch\n"
            "def pack(tensor, device):\n"
            "    return tensor.to(device)\n"
            "with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):  # HKL420\n"
            "    pass\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for found in signature_mismatches(ctx):
            hook = found.hook
            name = hook.name
            if hook.via == "__call__" and hook.owner is not None:
                name = f"{hook.owner.node.name}.__call__"
            bound = ""
            if hook.via in ("method", "__call__") and hook.bound:
                bound = " (`self` excluded)"
            elif hook.via == "partial" and hook.bound:
                bound = f" (after the {hook.bound} `partial` binds)"
            passed = ", ".join(found.passed)
            count = len(found.passed)
            yield self.finding(
                ctx, found.call,
                message=(f"hook `{name}` is registered with {found.api}, which torch calls as "
                         f"`hook({passed})` ({count} positional argument{'s' * (count != 1)}); `{name}`{bound} "
                         f"{found.problem}: {event_of(found.api)} raises `TypeError`"),
                help=f"Give `{name}` the parameters `({passed})` (or `*args`), or register it where that "
                     "argument list is what it expects.",
                related=[Related("hook defined here", ctx.display_path, ctx.span(hook.node)[0])],
            )
