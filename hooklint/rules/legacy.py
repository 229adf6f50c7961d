"""HKL1xx: the legacy ``register_backward_hook`` API (hook-semantics.md, section 1)."""

from __future__ import annotations

import ast
import enum
import os
from typing import TYPE_CHECKING, ClassVar, Iterable

from hooklint.findings import Applicability, Edit, Finding, Fix, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import name_uses, returns_nothing
from hooklint.static.context import FileContext
from hooklint.static.forward import (
    LEGACY_SAFE_BUILTINS,
    SAFE,
    UNKNOWN,
    ForwardAnalysis,
    LegacyVerdict,
    inplace_modules,
)
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind, Registration
from hooklint.static.inplace import inplace_after_call
from hooklint.static.output_grad_hook import helper_source
from hooklint.static.values import ModuleValue, src

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.graph.facts import ModelFacts, ModuleFacts

LEGACY_TRIGGERS = ("register_backward_hook", "register_module_backward_hook") + DYNAMIC_NAME_TRIGGERS


def legacy_registrations(ctx: FileContext) -> list[Registration]:
    return ctx.hooks.by_kind(HookKind.BACKWARD_LEGACY)


class LegacyBackwardHook(Rule):
    """
    ## What it does
    Reports every use of the legacy module backward hook API:
    `Module.register_backward_hook` and the global
    `torch.nn.modules.module.register_module_backward_hook`.

    ## Why is this bad?
    A legacy backward hook is attached to the `grad_fn` of the module's output,
    that is to the *last* autograd op its `forward` ran, not to the module.  Its
    `grad_input` holds the gradients of that one op's inputs: for `nn.Linear`
    that is `(grad of bias, grad of input, grad of weight.T)`; for a module that
    ends in `x / 4` it is the gradient of `x / 4`'s input, whatever ran before.
    Reordering two lines of `forward` silently changes what the hook receives.
    PyTorch deprecated the API and only warns at run time, after the forward ran,
    without saying which op the hook is bound to.

    `register_full_backward_hook` (PyTorch >= 1.8) receives the gradients of the
    module's real inputs and outputs.

    ## Known problems
    When a full backward hook is registered on a module whose output is then
    modified in place (`nn.ReLU(inplace=True)` right after it), PyTorch raises at
    run time; that is reported as HKL403 by the graph analysis.

    Registrations are found through the calls of the same file (a helper's
    parameters, a wrapper's own `register_backward_hook` forwarding to its
    module, `getattr(m, "register_backward_hook")`, a name chosen in a loop);
    the finding is at the call of torch's API.  Compatibility fallbacks that
    only run on torch < 1.8 are not reported: the `else` of `if hasattr(m,
    "register_full_backward_hook")`, an `except AttributeError:` around
    `register_full_backward_hook`, and the old side of a version gate
    (`torch.__version__ < "1.8"`, `version.parse(...)`, `TORCH_VERSION >= (1, 8)`).
    A legacy hook in the branch that runs on newer torch is reported.

    ## Example
    ```python
    import torch.nn as nn

    def log_grad(module, grad_input, grad_output):
        print(grad_output[0].norm())

    layer = nn.Linear(4, 2)
    layer.register_backward_hook(log_grad)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def log_grad(module, grad_input, grad_output):
        print(grad_output[0].norm())

    layer = nn.Linear(4, 2)
    layer.register_full_backward_hook(log_grad)
    ```

    ## Fix safety
    Which fix, if any, depends on what the hook uses and on what the model
    graph shows after the hooked module (`hooklint check` without
    `--static-only` runs it).  A full backward hook wraps the module's output in
    a view, so an in-place op after the module (`nn.ReLU(inplace=True)`, as in
    VGG and torchvision's ResNets, `out += identity`) then makes the forward
    fail (HKL403).

    - **Rename** to `register_full_backward_hook`
      (`register_module_full_backward_hook`): **safe** only when the graph
      analysis ran the model and shows no in-place op on the hooked module's
      output (nor on its input inside it), and the hook uses only
      `grad_output` and returns None.  **Unsafe** when the hook reads
      `grad_input` or returns a value (they then mean the module's real input
      gradients, so the body needs review), or when there are no graph facts.
    - **Output tensor hook**, for hooks that use only `grad_output` and return
      None: `layer.register_forward_hook(output_grad_hook(hook))`, with a small
      function `output_grad_hook` written once after the file's imports.  In
      each forward it hooks the module's output tensor and calls
      `hook(module, None, (grad,))` with its gradient: the same `grad_output`
      as before, and in-place ops after the module keep working.  **Safe** when
      the graph shows an in-place op after the module; **unsafe** without graph
      facts (a static run, a receiver hooklint cannot link to a built model,
      the model itself, whose output the script receives, a global hook).  The
      returned handle is the forward hook's: `handle.remove()` stops the hook
      as before (a graph already built still calls it, as with module backward
      hooks).
    - **No fix** when an in-place op follows the module and the hook reads
      `grad_input` or returns a value: a full hook would break the forward,
      and a tensor hook cannot pass or replace `grad_input`.

    `hooklint check --fix --verify` proves each of these fixes on the model
    the graph analysis builds before applying it: the fixed code must run a
    forward and backward, and the hook must receive the module's real
    gradients.

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [`Module.register_backward_hook` (deprecated)](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_backward_hook)
    - PyTorch issue 12331, "register_backward_hook only gets called for the last operation"
    """

    code = "HKL101"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "legacy-backward-hook"
    summary = "Legacy `register_backward_hook` binds to the module's last autograd op; use a full backward hook"
    severity = Severity.WARNING
    triggers = LEGACY_TRIGGERS
    fix_applicability = ("safe when the graph shows whether an in-place op follows the module and the hook uses "
                         "only grad_output and returns None; unsafe otherwise; none when an in-place op follows "
                         "and the hook reads grad_input or returns a value")
    VALID: ClassVar[tuple[str, ...]] = (
        # the full API
        "import torch.nn as nn\nm = nn.Linear(2, 2)\nm.register_full_backward_hook(lambda mod, gi, go: None)\n",
        # a class's own method of the same name is not torch's
        "class Recorder:\n"
        "    def register_backward_hook(self, fn):\n"
        "        self.fn = fn\n"
        "r = Recorder()\n"
        "r.register_backward_hook(print)\n",
        # inside that class, `self.register_backward_hook` is its own method too
        "class Recorder:\n"
        "    def register_backward_hook(self, fn):\n"
        "        self.fn = fn\n"
        "    def setup(self):\n"
        "        self.register_backward_hook(print)\n",
        # a fallback that only runs on torch < 1.8
        "def attach(module, hook):\n"
        "    if hasattr(module, 'register_full_backward_hook'):\n"
        "        return module.register_full_backward_hook(hook)\n"
        "    return module.register_backward_hook(hook)\n",
        "def attach(module, hook):\n"
        "    try:\n"
        "        return module.register_full_backward_hook(hook)\n"
        "    except AttributeError:\n"
        "        return module.register_backward_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        # without graph facts: the output tensor hook, unsafe
        Invalid(
            "import torch.nn as nn\n"
            "def log(module, grad_input, grad_output):\n"
            "    print(grad_output[0].shape)\n"
            "m = nn.Conv2d(3, 1, 3)\n"
            "m.register_backward_hook(log)  # HKL101\n",
            fixed="import torch.nn as nn\n\n\n"
            + helper_source() + "\n\n"
            "def log(module, grad_input, grad_output):\n"
            "    print(grad_output[0].shape)\n"
            "m = nn.Conv2d(3, 1, 3)\n"
            "m.register_forward_hook(output_grad_hook(log))  # HKL101\n",
        ),
        Invalid(
            "import torch\n"
            "torch.nn.modules.module.register_module_backward_hook(lambda m, gi, go: None)  # HKL101\n",
            fixed="import torch\n\n\n"
            + helper_source() + "\n\n"
            "torch.nn.modules.module.register_module_forward_hook(output_grad_hook(lambda m, gi, go: None))  # HKL101\n",
        ),
        # a hook that reads grad_input: the rename, unsafe
        Invalid(
            "import torch.nn as nn\n"
            "def log(module, grad_input, grad_output):\n"
            "    print(grad_input[0].norm())\n"
            "m = nn.Conv2d(3, 1, 3)\n"
            "m.register_backward_hook(log)  # HKL101\n",
            fixed="import torch.nn as nn\n"
            "def log(module, grad_input, grad_output):\n"
            "    print(grad_input[0].norm())\n"
            "m = nn.Conv2d(3, 1, 3)\n"
            "m.register_full_backward_hook(log)  # HKL101\n",
        ),
        # torch's API one call deep: a wrapper's own method forwarding to its module
        Invalid(
            "class Hooked:\n"
            "    def __init__(self, module):\n"
            "        self.module = module\n"
            "    def register_backward_hook(self, fn):\n"
            "        return self.module.register_backward_hook(fn)  # HKL101\n"
        ),
        # the API named by a string
        Invalid(
            "def attach(module, hook, full=False):\n"
            "    kind = 'full_backward' if full else 'backward'\n"
            "    return getattr(module, f'register_{kind}_hook')(hook)  # HKL101\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for group in legacy_groups(ctx):
            reg = group[0]
            target = reg.describe_target() if len(group) == 1 else _helper_target(group)
            message = (f"`{reg.method_name}` on {target} is the legacy backward hook: it binds to the last autograd "
                       f"op of the module's forward, not to the module")
            fix = _least_safe([self.rename_fix(ctx, r) for r in group])
            yield self.finding(
                ctx,
                reg.name_node,
                name_only=True,
                message=message,
                help=_legacy_help(fix),
                fix=fix,
                related=site_notes(ctx, group),
            )

    @staticmethod
    def rename_fix(ctx: FileContext, reg: Registration) -> Fix | None:
        """The full-hook rename where it keeps the code running, the output
        tensor-hook pattern where an in-place op may follow the module.

        ===========================  ======================  ===============
        the hook                     after the module        fix
        ===========================  ======================  ===============
        uses only grad_output,       graph: no in-place op   rename, safe
        returns None                 graph: an in-place op   pattern, safe
        (same)                       source: in-place op,    pattern, unsafe
                                     or nothing known
        reads grad_input, returns a  graph: no in-place op   rename, unsafe
        value, or is not visible     in-place (graph/source) none
                                     nothing known           rename, unsafe
        ===========================  ======================  ===============
        """
        func = reg.call.func
        if not isinstance(func, ast.Attribute):
            return None  # a bare imported name: the import would need renaming too
        output_only = reg.hook is not None and not reg.hook.has_varargs
        if output_only:
            gi = reg.param("grad_input")
            output_only = gi is not None and not name_uses(reg.hook.node, gi) and returns_nothing(reg.hook.node)
        inplace = _inplace_after(ctx, reg)
        if output_only and inplace is not _Inplace.NONE_IN_GRAPH:
            return _output_hook_fix(ctx, reg, func, safe=inplace is _Inplace.IN_GRAPH)
        if inplace in (_Inplace.IN_GRAPH, _Inplace.IN_SOURCE):
            return None  # a full hook would break the forward; the pattern cannot carry grad_input or a return
        new_name = "register_full_backward_hook" if reg.method_name == "register_backward_hook" \
            else "register_module_full_backward_hook"
        name_start, end = ctx.name_span(func)
        return Fix(
            message=f"Replace `{reg.method_name}` with `{new_name}`",
            edits=(Edit(new_name, name_start, end),),
            applicability=Applicability.SAFE if output_only and inplace is _Inplace.NONE_IN_GRAPH
            else Applicability.UNSAFE,
        )


_FULL_HOOK_HELP = ("Use `register_full_backward_hook` (same signature); its grad_input/grad_output are the "
                   "module's real input and output gradients.")
_INPLACE_HELP = (" If an in-place op (`ReLU(inplace=True)`, `+=`) modifies the module's output, a full hook makes "
                 "the forward fail: hook the output tensor from a forward hook instead "
                 "(`output.register_hook(...)`), which sees the same grad_output.")


def _legacy_help(fix: Fix | None) -> str:
    """The help matches the fix offered: the full hook where it keeps the
    code running, the output tensor hook where an in-place op may follow."""
    if fix is not None and fix.message.startswith("Replace"):
        return _FULL_HOOK_HELP
    if fix is not None:
        return ("Register the hook through a forward hook that calls `output.register_hook(...)`: it gets the "
                "same grad_output, and unlike a full backward hook it keeps working when an in-place op "
                "modifies the module's output.")
    return _FULL_HOOK_HELP + _INPLACE_HELP


class _Inplace(enum.Enum):
    IN_GRAPH = "the graph shows an in-place op on the module's output (or its input, inside it)"
    NONE_IN_GRAPH = "every model the receiver can be was run, and none has such an op"
    IN_SOURCE = "no graph facts, but the source shows such an op (HKL403's static patterns)"
    UNKNOWN = "nothing shows either"


def _inplace_after(ctx: FileContext, reg: Registration) -> _Inplace:
    """Whether an in-place op can modify the hooked module's output.  The
    graph cannot say for a receiver it cannot link, fx-only facts, the model
    itself (the user's code receives its output) or a global hook."""
    if reg.is_global or reg.receiver is None:
        return _Inplace.UNKNOWN
    from hooklint.graph.link import modules_for  # on first use: most runs never get here

    pairs = [(model, module) for model, module in modules_for(ctx, reg.receiver) if module.calls]
    if not pairs:
        return _Inplace.IN_SOURCE if _inplace_in_source(ctx, reg) else _Inplace.UNKNOWN
    if any(module.output_inplace is not None or module.input_inplace is not None for _, module in pairs):
        return _Inplace.IN_GRAPH
    if all(model.autograd and module.path for model, module in pairs):
        return _Inplace.NONE_IN_GRAPH
    return _Inplace.UNKNOWN


def _inplace_in_source(ctx: FileContext, reg: Registration) -> bool:
    """The plainest patterns HKL403 reads from the source: the hooked layer is
    built with `inplace=True`, or the owner's `forward` modifies its output in
    place (`self.relu(self.conv(x))` with an in-place ReLU, `out += x`)."""
    module = reg.receiver_module
    if module is not None and module.torch_class and inplace_modules(module.call):
        return True
    receiver = reg.receiver
    if not isinstance(receiver, ast.Attribute):
        return False
    owner = ctx.inference.infer(receiver.value)
    if not isinstance(owner, ModuleValue) or owner.local_class is None:
        return False
    return inplace_after_call(ctx, owner.local_class, receiver.attr) is not None


def _output_hook_fix(ctx: FileContext, reg: Registration, func: ast.Attribute, *, safe: bool) -> Fix | None:
    from hooklint.static import output_grad_hook as helper

    hook = reg.hook_expr
    if hook is None or hook not in reg.call.args and not any(k.value is hook for k in reg.call.keywords):
        return None
    name, insertion = helper.for_file(ctx, legacy_registrations(ctx)[0].call)
    if name is None:
        return None
    edits = [insertion] if insertion is not None else []
    new_method = "register_forward_hook" if reg.method_name == "register_backward_hook" \
        else "register_module_forward_hook"
    name_start, name_end = ctx.name_span(func)
    hook_start, hook_end = ctx.span(hook)
    edits += [Edit(new_method, name_start, name_end), Edit(f"{name}(", hook_start, hook_start),
              Edit(")", hook_end, hook_end)]
    text = ctx.segment(hook)
    hook_text = f"`{text}`" if "\n" not in text and len(text) <= 60 else "the hook"
    why = ("the graph shows an in-place op after the module, which makes a full backward hook fail the forward"
           if safe else "a full backward hook would make the forward fail if an in-place op modifies the "
           "module's output, which hooklint cannot rule out here")
    return Fix(
        message=f"Register {hook_text} through a forward hook that hooks the module's output tensor "
        f"(`{reg.method_name}(...)` -> `{new_method}({name}(...))`): the hook gets the same grad_output; {why}",
        edits=tuple(edits),
        applicability=Applicability.SAFE if safe else Applicability.UNSAFE,
    )


class LegacyHookGradInput(Rule):
    """
    ## What it does
    Reports a legacy backward hook (`register_backward_hook`) that reads,
    unpacks or returns its `grad_input` argument, when the hooked module is not
    known to run a single autograd op whose first inputs are the module's own
    inputs.

    ## Why is this bad?
    The legacy hook's `grad_input` is the gradient with respect to the inputs
    of the *last* autograd op of the module's `forward`, not of the module.
    For a module `MyNet` whose forward ends in `self.f2(self.f1(x))` with `f2`
    computing `x / 4`, `grad_input` is the single gradient of `x / 4` w.r.t. its
    input, not the `(4,)` gradient of `MyNet`'s input.  For `nn.Linear` it is
    `(grad of bias, grad of input, grad of weight.T)`, so `grad_input[0]` is the
    *bias* gradient.  Code that scales, logs or unpacks `grad_input` works on the
    wrong tensors, and a returned replacement rewrites the wrong gradients.

    When the graph analysis runs (`hooklint check` without `--static-only`), the
    message names the exact autograd op the hook binds to, its source line, the
    module path and the ops the hook skips; and a legacy hook on a module the
    graph shows to be a single op on its input (so that `grad_input` starts
    with the gradient of the module's input, as for `nn.Conv2d` or a module
    computing `x / 4`) is not reported: it is deprecated (HKL101), not wrong.

    ## Known problems
    Statically, the rule says the gradient is wrong (an error) only where the
    source shows it: a built-in layer whose legacy `grad_input` is verified
    against torch (`nn.Linear`, `nn.Sequential`, `nn.Dropout`, ...), a class
    of the same file whose `forward` ends in another op, or a module an
    `isinstance`/`type` test narrowed to classes that include such a layer.
    On a hooked module whose class the file cannot show (a parameter such as
    `target_layer`, each module of a caller's model, an attribute of an object
    from another file), it is reported as a **warning** that says what is
    known: the hook reads `grad_input`, which is the module's input gradient
    only if the module is a single op taking its input first.  Built-in
    layers that are such an op (activations, convolutions, normalisation,
    pooling: each checked against torch), modules narrowed to them (`if
    isinstance(m, nn.ReLU)`, in the loop or in the hook itself) and `class
    MyConv(nn.Conv2d)` without its own forward are not reported.  An
    `isinstance` test also admits subclasses, whose forward may run more ops.

    The module and the hook are followed through the calls of the same file:
    a helper's parameters (`add_hook(net.fc, save_grad)`, several calls
    deep), a wrapper's own `register_backward_hook` that forwards to its
    module, a dict of handlers, and `getattr(m, "register_backward_hook")`.
    The finding is at the legacy registration (the API to change); the calls
    that chose the module and the hook are listed with it.  Registrations in
    fallbacks that only run on torch < 1.8 (`if hasattr(m,
    "register_full_backward_hook"): ... else: ...`, `except AttributeError:`,
    version gates) are not reported.

    ## Example
    ```python
    import torch.nn as nn

    def double_input_grad(module, grad_input, grad_output):
        return (grad_input[0] * 2,) + grad_input[1:]

    layer = nn.Linear(4, 2)
    layer.register_backward_hook(double_input_grad)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def double_input_grad(module, grad_input, grad_output):
        return (grad_input[0] * 2,)

    layer = nn.Linear(4, 2)
    layer.register_full_backward_hook(double_input_grad)
    ```

    ## Fix safety
    There is no automatic fix: with a full backward hook `grad_input` has one
    entry per module input, so the hook body must be rewritten for it (HKL101's
    rename is offered as an unsafe fix).

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - PyTorch issue 12331, "register_backward_hook only gets called for the last operation"
    """

    code = "HKL102"
    name = "legacy-hook-grad-input"
    summary = "A legacy backward hook uses `grad_input`, which belongs to the last op, not the module"
    severity = Severity.ERROR
    origins = (Origin.STATIC, Origin.GRAPH, Origin.RUNTIME)
    triggers = LEGACY_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # only grad_output: deprecated (HKL101) but not wrong
        "import torch.nn as nn\n"
        "def log(module, grad_input, grad_output):\n"
        "    print(grad_output[0].norm())\n"
        "nn.Linear(4, 2).register_backward_hook(log)\n",
        # a single-op layer whose grad_input[0] is the input gradient
        "import torch.nn as nn\n"
        "def clip(module, grad_input, grad_output):\n"
        "    return (grad_input[0].clamp(-1, 1),)\n"
        "nn.ReLU().register_backward_hook(clip)\n",
        # full hooks have the module's real grad_input
        "import torch.nn as nn\n"
        "def scale(module, grad_input, grad_output):\n"
        "    return (grad_input[0] * 2,)\n"
        "nn.Linear(4, 2).register_full_backward_hook(scale)\n",
        # guided backprop: an isinstance test narrowed the module to nn.ReLU, a single op
        "import torch\n"
        "import torch.nn as nn\n"
        "def guided(module, grad_input, grad_output):\n"
        "    return (torch.clamp(grad_input[0], min=0.0),)\n"
        "def prepare(model):\n"
        "    for m in model.modules():\n"
        "        if isinstance(m, nn.ReLU):\n"
        "            m.register_backward_hook(guided)\n",
        # the hook reads grad_input only where it has narrowed its module to a single op
        "import torch.nn as nn\n"
        "def clip(module, grad_input, grad_output):\n"
        "    if isinstance(module, nn.ReLU):\n"
        "        return (grad_input[0].clamp(min=0),)\n"
        "def prepare(model):\n"
        "    for m in model.modules():\n"
        "        m.register_backward_hook(clip)\n",
        # grad_input handed unchanged to callbacks registered at run time (autograd-lib), or returned as it came
        "CALLBACKS = []\n"
        "def dispatch(module, grad_input, grad_output):\n"
        "    for callback in CALLBACKS:\n"
        "        callback(module, grad_input, grad_output)\n"
        "    return grad_input\n"
        "def register(model):\n"
        "    for m in model.modules():\n"
        "        m.register_backward_hook(dispatch)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "class MyMean(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x / 4\n"
            "class MyNet(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.f1 = nn.Linear(4, 1)\n"
            "        self.f2 = MyMean()\n"
            "    def forward(self, x):\n"
            "        return self.f2(self.f1(x))\n"
            "def hook(module, grad_input, grad_output):\n"
            "    print(grad_input)\n"
            "net = MyNet()\n"
            "net.register_backward_hook(hook)  # HKL101, HKL102\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.layer1 = nn.Linear(4, 3)\n"
            "def backward_hook(module, gin, gout):\n"
            "    gin0, gin1, gin2 = gin\n"
            "    return gin0, gin1 * 2, gin2 * 3\n"
            "net = Net()\n"
            "hook = net.layer1.register_backward_hook(backward_hook)  # HKL101, HKL102\n"
        ),
        # a module whose class the file cannot show: a warning that says so
        Invalid(
            "def log(module, grad_input, grad_output):\n"
            "    print(grad_input[0].norm())\n"
            "def watch(target_layer):\n"
            "    target_layer.register_backward_hook(log)  # HKL101, HKL102\n"
        ),
        # the hook and the module reach the registration through a helper's parameters
        Invalid(
            "import torch.nn as nn\n"
            "def save_grad(module, grad_input, grad_output):\n"
            "    print(grad_input[0].norm())\n"
            "def add_hook(module, fn):\n"
            "    return module.register_backward_hook(fn)  # HKL101, HKL102\n"
            "add_hook(nn.Linear(4, 2), save_grad)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        forward = ForwardAnalysis(ctx.model, ctx.inference)
        reported: set[tuple[int, int]] = set()
        for group in legacy_groups(ctx):
            for reg in group:
                if reg.hook is None or (id(reg.call), id(reg.hook.node)) in reported:
                    continue
                finding = self._check_instance(ctx, reg, group, forward)
                if finding is not None:
                    reported.add((id(reg.call), id(reg.hook.node)))
                    yield finding

    def _check_instance(self, ctx: FileContext, reg: Registration, group: list[Registration],
                        forward: ForwardAnalysis) -> Finding | None:
        gi = reg.param("grad_input")
        if gi is None:
            return None
        uses = grad_input_uses(ctx, reg, gi)
        if not uses or all(_passes_on_unchanged(ctx, use) for use in uses):
            return None
        first = uses[0]
        what = _use_kind(first)
        from hooklint.graph.link import modules_for  # on first use: most runs never get here

        receiver = reg.receiver_origin if reg.receiver_origin is not None else reg.receiver
        pairs = [(model, m) for model, m in modules_for(ctx, receiver) if m.calls and m.bound is not None]
        unsafe = [(model, m) for model, m in pairs if not m.legacy_safe]
        if pairs and not unsafe:
            return None  # the graph shows grad_input starts with the module's input gradients
        module = reg.receiver_module
        severity = None
        if unsafe:
            message = _graph_message(reg, gi, what, *unsafe[0], ctx.path)
            origin = Origin.GRAPH
        else:
            verdict = forward.legacy_verdict(module)
            if verdict.verdict == SAFE:
                return None  # a single op whose first input is the module's: deprecated (HKL101), not wrong
            if verdict.verdict == UNKNOWN:
                # what can be proven, at the severity that matches
                message = self._unseen_message(reg, gi, what)
                severity = Severity.WARNING
            else:
                message = self._message(reg, gi, what, module, verdict)
            origin = Origin.STATIC
        related = [Related(f"`{gi}` {what} here", ctx.display_path, ctx.span(first)[0])]
        related += site_notes(ctx, [r for r in group if r.hook is not None and r.hook.node is reg.hook.node])
        finding = self.finding(
            ctx,
            reg.name_node,
            message,
            name_only=True,
            help="Register it with `register_full_backward_hook`, whose grad_input has one entry per module "
            "input; or hook the tensor you mean with `tensor.register_hook`.",
            related=related,
            origin=origin,
        )
        return finding.with_changes(severity=severity) if severity is not None else finding

    @staticmethod
    def _unseen_message(reg: Registration, gi: str, what: str) -> str:
        hook_name = reg.hook.name if reg.hook else "the hook"
        return (f"legacy backward hook `{hook_name}` {what} `{gi}` on {reg.describe_target()}, whose forward "
                f"hooklint cannot see: unless that module is a single autograd op taking its input first (a "
                f"convolution, an activation), `{gi}` holds the input gradients of the last op its forward runs, "
                f"not the module's")

    @staticmethod
    def _message(reg: Registration, gi: str, what: str, module: ModuleValue | None,
                 verdict: LegacyVerdict) -> str:
        hook_name = reg.hook.name if reg.hook else "the hook"
        head = f"legacy backward hook `{hook_name}` {what} `{gi}`"
        target = reg.describe_target()
        narrowing = module.narrowing if module is not None and module.torch_class is None \
            and module.local_class is None else None
        if narrowing is not None:
            head += (f", and `{reg.receiver_text}` can be an nn.{verdict.class_name} (`{src(narrowing.test)}` at "
                     f"line {narrowing.test.lineno} admits {' or '.join(narrowing.names)})")
            target = f"an nn.{verdict.class_name}"
        op = verdict.op
        if op is not None and op.grad_input:
            return (f"{head}, but on {target} it is bound to {op.description}: `{gi}` is {op.grad_input}, "
                    f"not the gradient of the module's input")
        if op is not None:
            where = f" ({op.where()})" if op.node is not None else ""
            return (f"{head}, but on {target} it is bound to the last autograd op, {op.description}{where}: "
                    f"`{gi}` holds that op's input gradients, not the module's")
        return (f"{head}, but {target} is not a single autograd op: `{gi}` holds the input gradients of the "
                f"last op its forward runs, not the module's")


def legacy_groups(ctx: FileContext) -> list[list[Registration]]:
    """Legacy registrations by registering call: each call's instances (one per
    call site of the helper it is in, per handler a loop gives it...)."""
    groups: dict[int, list[Registration]] = {}
    for reg in ctx.hooks.instances_by_kind(HookKind.BACKWARD_LEGACY):
        groups.setdefault(id(reg.call), []).append(reg)
    return list(groups.values())


def grad_input_uses(ctx: FileContext, reg: Registration, gi: str) -> list[ast.Name]:
    """Reads of ``grad_input`` in the hook, except under a test that narrows the
    hook's module to single-op layers (``if isinstance(module, nn.ReLU):``)."""
    assert reg.hook is not None
    uses = name_uses(reg.hook.node, gi)
    module_param = reg.param("module")
    if not uses or module_param is None:
        return uses
    identity = ctx.inference.identity
    kept = []
    for use in uses:
        narrowing = identity.narrowing_of(use, module_param)
        if narrowing is not None and not narrowing.local and \
                all(n in LEGACY_SAFE_BUILTINS for n in narrowing.names):
            continue
        kept.append(use)
    return kept


def _passes_on_unchanged(ctx: FileContext, use: ast.Name) -> bool:
    """``return grad_input`` as it came (the legacy hook then changes
    nothing), or ``grad_input`` handed as it is to callbacks taken from a
    container at run time (``for hook in hooks: hook(m, grad_input, grad_output)``):
    what they do with it is theirs, and the code is not in sight."""
    parent = getattr(use, "_hl_parent", None)
    if isinstance(parent, ast.Return):
        return True
    if isinstance(parent, ast.keyword):
        parent = getattr(parent, "_hl_parent", None)
    if not (isinstance(parent, ast.Call) and (use in parent.args or any(k.value is use for k in parent.keywords))):
        return False
    callee = parent.func
    if not isinstance(callee, ast.Name):
        return False
    bindings = ctx.model.bindings_at(callee)
    return bool(bindings) and all(b.kind == "for" for b in bindings)


def site_notes(ctx: FileContext, group: list[Registration], limit: int = 4) -> list[Related]:
    """Where the calls that chose the hook or the module are."""
    notes: list[Related] = []
    seen: set[int] = set()
    for reg in group:
        site = reg.site_call
        if site is None or id(site) in seen:
            continue
        seen.add(id(site))
        parts = []
        if reg.receiver_origin is not None:
            module = reg.receiver_module
            label = f" ({module.class_name})" if module is not None and module.class_name else ""
            parts.append(f"the module `{src(reg.receiver_origin)}`{label}")
        if reg.hook_origin is not None and reg.hook is not None:
            parts.append(f"the hook `{reg.hook.name}`")
        what = " and ".join(parts) or "the registration's arguments"
        notes.append(Related(f"`{src(site.func)}(...)` passes {what}", ctx.display_path, ctx.span(site)[0]))
        if len(notes) >= limit:
            break
    return notes


def _helper_target(group: list[Registration]) -> str:
    """The receiver of a registration made once per call site."""
    reg = group[0]
    text = src(reg.receiver) if reg.receiver is not None else "every module (global hook)"
    sites = {id(r.site_call) for r in group if r.site_call is not None}
    if sites:
        return f"`{text}` (from {len(sites)} call{'s' if len(sites) > 1 else ''} in this file)"
    return f"`{text}`"


_SAFETY_ORDER = {Applicability.DISPLAY_ONLY: 0, Applicability.UNSAFE: 1, Applicability.SAFE: 2}


def _least_safe(fixes: list[Fix | None]) -> Fix | None:
    """One fix for a call reached several ways: as safe as its least safe way."""
    if not fixes or any(f is None for f in fixes):
        return None
    return min(fixes, key=lambda f: _SAFETY_ORDER.get(f.applicability, 0))  # type: ignore[union-attr]


def _graph_message(reg: Registration, gi: str, what: str, model: ModelFacts, module: ModuleFacts,
                   path: str) -> str:
    """What the model graph says the hook receives: the op, where it is, what it skips."""
    hook_name = reg.hook.name if reg.hook else "the hook"
    where = f"`{reg.receiver_text}` ({module.class_name}" + (
        f", module `{module.path}` of {model.class_name})" if module.path else ")")
    bound = module.bound
    assert bound is not None
    site = bound.where(relative_to=os.path.realpath(path))
    code = f"`{bound.code}`, " if bound.code else ""
    op = f"{bound.name} ({code}{site})" if site else bound.name
    if not bound.autograd:
        op = f"the last op of its forward, {op}"
    head = f"legacy backward hook `{hook_name}` {what} `{gi}`, but on {where} it binds to {op}"
    if not module.bound_is_own:
        head += ", an op before the module (its forward returns its input as is)"
    shapes = ""
    if bound.grad_input is not None and model.inputs:
        from hooklint.graph.facts import format_shape

        each = [format_shape(s) for s in bound.grad_input]
        of = f"of shape {each[0]}" if len(each) == 1 else f"of shapes {', '.join(each)}"
        shapes = f" ({of} for an input {', '.join(str(i) for i in model.inputs)})"
    body = f": `{gi}` holds that op's input gradients{shapes}, not the gradient of {module.class_name}'s input"
    skipped = _skipped(model, module)
    return head + body + (f"; it skips {skipped}" if skipped else "")


def _skipped(model: ModelFacts, module: ModuleFacts, limit: int = 4) -> str:
    """The module's other ops, by submodule path: "`f1` (Linear), `y = x * 2` (Mul)"."""
    parts: list[str] = []
    prefix = module.path + "." if module.path else ""
    bound = module.bound

    def child_of(op_module: str) -> str | None:
        if op_module == module.path or not op_module.startswith(prefix):
            return None
        return prefix + op_module[len(prefix):].split(".")[0]

    bound_child = child_of(bound.module) if bound is not None else None
    for op in module.ops:
        if op == bound:
            continue
        child = child_of(op.module)
        if child is not None and child == bound_child:
            continue  # the submodule the hook lands in is not skipped
        if child is not None:
            sub = model.module(child)
            label = f"`{child}` ({sub.class_name})" if sub else f"`{child}`"
        elif op.code and bound is not None and (op.file, op.line) != (bound.file, bound.line):
            label = f"`{op.code}` ({op.short})"
        else:  # on the bound op's line (inside a built-in layer): its name says more
            label = op.name
        if label not in parts:
            parts.append(label)
    if len(parts) > limit:
        return ", ".join(parts[:limit]) + f" and {len(parts) - limit} more"
    return ", ".join(parts)


def _use_kind(name: ast.Name) -> str:
    parent = getattr(name, "_hl_parent", None)
    if isinstance(parent, ast.Assign) and parent.value is name and any(
        isinstance(t, (ast.Tuple, ast.List)) for t in parent.targets
    ):
        return "unpacks"
    if isinstance(parent, ast.Return) or isinstance(parent, ast.Lambda):
        return "returns"
    return "reads"
