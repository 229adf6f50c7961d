"""HKL101: the legacy `register_backward_hook` (hook-semantics.md, section 1)."""

from __future__ import annotations

import ast
import enum
from typing import ClassVar, Iterable

from hooklint.findings import Applicability, Edit, Finding, Fix, Origin, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import name_uses, returns_nothing
from hooklint.static.context import FileContext
from hooklint.static.forward import inplace_modules
from hooklint.static.hooks import HookKind, Registration
from hooklint.static.inplace import inplace_after_call
from hooklint.static.legacy import LEGACY_TRIGGERS, legacy_groups, site_notes
from hooklint.static.output_grad_hook import helper_source
from hooklint.static.values import ModuleValue, src


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
    (`torch.__version__ < "1.8"`, `version.parse(...)`, `TORCH_VERSION >= (1, 8)`,
    helpers named for it: `is_torch_version(">=", "1.8")`, `pytorch_after(1, 8)`).
    A legacy hook in the branch that runs on newer torch is reported.  A call
    whose arguments torch's method does not take (`pipeline.register_backward_
    hook(site, work)`, a method of the same name defined elsewhere) is not a
    registration.

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

    `hooklint check --fix --verify` proves each of these fixes before
    applying it: the program that reaches the file (its `__main__` block, a
    project script or test that imports it, `verify-entry`) must still run
    with the fix and the hook receive the same gradients, and on the model
    the graph analysis builds the fixed code must run a forward and backward
    and the hook receive the module's real gradients.  A rename that fails
    there is replaced by the output tensor hook when that one passes.

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
        # the legacy hook only on torch < 1.8, behind a project's version helper (monai's `pytorch_after`)
        "import torch.nn as nn\n"
        "from monai.utils import pytorch_after\n"
        "def attach(mod, hook):\n"
        "    if pytorch_after(1, 8):\n"
        "        mod.register_full_backward_hook(hook)\n"
        "    else:\n"
        "        mod.register_backward_hook(hook)\n",
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
        # a method of the same name from another file, called with arguments torch's does not take
        # (torchrec's TrainPipeline.register_backward_hook(site, work))
        "from .pipelines import TrainPipelineBase\n"
        "class Pipeline(TrainPipelineBase):\n"
        "    def setup(self, work):\n"
        "        self.register_backward_hook(self.site, work)\n",
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
                       f"op of the module's forward, not to the module") + _graph_note(ctx, group)
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
    if ctx.graph is None:  # no graph facts: the graph layer is not even imported
        return _Inplace.IN_SOURCE if _inplace_in_source(ctx, reg) else _Inplace.UNKNOWN
    from hooklint.graph.link import modules_for

    pairs = [(model, module) for model, module in modules_for(ctx, reg.receiver) if module.calls]
    if not pairs and reg.receiver_origin is None:
        # the caller's model, built by another checked file
        from hooklint.graph.linked import all_pairs, hooked_pairs, links_for

        links = links_for(ctx, reg.call)
        if any(m.output_inplace is not None or m.input_inplace is not None for _, m in hooked_pairs(links)):
            return _Inplace.IN_GRAPH
        every = all_pairs(links)
        if every and all(model.autograd and module.path and module.output_inplace is None
                         and module.input_inplace is None for model, module in every):
            return _Inplace.NONE_IN_GRAPH
    if not pairs:
        return _Inplace.IN_SOURCE if _inplace_in_source(ctx, reg) else _Inplace.UNKNOWN
    if any(module.output_inplace is not None or module.input_inplace is not None for _, module in pairs):
        return _Inplace.IN_GRAPH
    if all(model.autograd and module.path for model, module in pairs):
        return _Inplace.NONE_IN_GRAPH
    return _Inplace.UNKNOWN


def _graph_note(ctx: FileContext, group: list[Registration]) -> str:
    """What the model graph says about the modules the hook lands on: all of
    them single ops whose grad_input starts with the module's input gradient
    (legacy-safe: deprecated, not wrong), or an in-place op after one (a full
    backward hook there would fail the forward)."""
    if ctx.graph is None:  # nothing to say without graph facts (and the graph layer is not imported)
        return ""
    from hooklint.graph.link import modules_for
    from hooklint.graph.linked import all_pairs, hooked_pairs, links_for, via_text

    reg = group[0]
    if reg.is_global or reg.receiver is None or len(group) > 1:
        return ""
    pairs = [(model, module) for model, module in modules_for(ctx, reg.receiver) if module.calls]
    links = [] if reg.receiver_origin is not None else links_for(ctx, reg.call)
    every = pairs or all_pairs(links) or []
    hooked = pairs or hooked_pairs(links)
    note = ""
    if every and all(m.bound is not None and m.legacy_safe for _, m in every):
        places = sorted({(model.class_name, m.path, m.class_name) for model, m in every})
        shown = ", ".join(f"`{path}` ({cls}) of {owner}" if path else f"{owner}" for owner, path, cls in places[:3])
        more = f" and {len(places) - 3} more" if len(places) > 3 else ""
        note = (f"; legacy-safe here: on every module it is registered on ({shown}{more}) it binds to one op "
                f"whose grad_input starts with the module's input gradient")
    for model, module in hooked:
        op = module.output_inplace or module.input_inplace
        if op is None:
            continue
        where = f" ({op.where()})" if op.where() else ""
        place = f"`{module.path}` ({module.class_name}, in {model.class_name})" if module.path else model.class_name
        what = (f"{op.name}{where} modifies its output in place" if module.output_inplace is not None else
                f"it modifies its input in place ({op.name}{where})")
        return note + f"; a full backward hook would make the forward fail on {place}: {what}" + via_text(links, model)
    return note


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
