"""HKL102: a legacy backward hook reading `grad_input` on a module that runs several ops."""

from __future__ import annotations

import ast
import os
from typing import TYPE_CHECKING, ClassVar, Iterable

from hooklint.findings import Finding, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import name_uses
from hooklint.static.context import FileContext
from hooklint.static.forward import LEGACY_SAFE_BUILTINS, SAFE, UNKNOWN, ForwardAnalysis, LegacyVerdict
from hooklint.static.hooks import Registration
from hooklint.static.legacy import LEGACY_TRIGGERS, input_grad_rebuilt, legacy_groups, site_notes
from hooklint.static.passthrough import passed_on_unchanged
from hooklint.static.values import ModuleValue, src

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.graph.facts import ModelFacts, ModuleFacts


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
    This holds across files too: a hook a library registers on a module its
    caller passes is judged on the models the project's scripts build
    (docs/graph.md, "Hooks on models other files build"), and dropped only
    when every call in the checked files is linked.

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

    A hook that only hands `grad_input` on is not reported: it returns it as
    it came, or gives it (detached or not, after type tests such as
    `isinstance`) to callbacks taken from a container at run time or to a
    callable its object was given by its caller (`self.hook_func`, assigned
    from a parameter of `__init__`, as fastai's `Hook` does, also when
    `__init__` stores its arguments in one call: fastcore's `store_attr`,
    `self.__dict__.update(...)`).  On the way the value may be moved or
    copied (`.cpu()`, `.clone()`, `.to(...)`), or go through a helper of
    another file that the hook applies alike to another of its arguments
    (`to_detach(input, cpu=c), to_detach(output, cpu=c)`).  What that code
    does with the value cannot be seen at the registration; the legacy
    registration is still reported by HKL101.

    Nor is a legacy hook whose module also gets, from the same function, a
    forward (pre-)hook that registers on the module's input tensor a tensor
    hook returning a value (captum's DeepLift): that tensor hook receives the
    gradient with respect to the real input and sets what flows on, so the
    library corrects the misbound `grad_input` where it matters.  Whether it
    corrects it for every module is not checked; a tensor hook that returns
    nothing corrects nothing and does not count.

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
        # grad_input detached and handed to the callable the caller gave the constructor (fastai's Hook)
        "class Hook:\n"
        "    def __init__(self, module, hook_func):\n"
        "        self.hook_func, self.stored = hook_func, None\n"
        "        self.handle = module.register_backward_hook(self.hook_fn)\n"
        "    def hook_fn(self, module, grad_input, grad_output):\n"
        "        grad_input = (g.detach() for g in grad_input) if isinstance(grad_input, tuple) "
        "else grad_input.detach()\n"
        "        self.stored = self.hook_func(module, grad_input, grad_output)\n",
        # fastai 2's Hook: store_attr sets hook_func, and one helper converts input and output alike
        "from fastcore.basics import store_attr\n"
        "from fastai.torch_core import to_detach\n"
        "class Hook:\n"
        "    def __init__(self, m, hook_func, detach=True, cpu=False):\n"
        "        store_attr('hook_func,detach,cpu')\n"
        "        self.hook = m.register_backward_hook(self.hook_fn)\n"
        "    def hook_fn(self, module, input, output):\n"
        "        if self.detach:\n"
        "            input, output = to_detach(input, cpu=self.cpu), to_detach(output, cpu=self.cpu)\n"
        "        self.stored = self.hook_func(module, input, output)\n",
        # the callable is set with the other arguments through __dict__, the values moved to the CPU
        "class Recorder:\n"
        "    def __init__(self, layer, callback):\n"
        "        self.__dict__.update(callback=callback)\n"
        "        self.handle = layer.register_backward_hook(self.on_grad)\n"
        "    def on_grad(self, module, grad_input, grad_output):\n"
        "        self.callback(module, [g.cpu() for g in grad_input], grad_output)\n",
        # one helper shared by the forward and backward hooks reads its input argument only when
        # called for the forward (fairseq's NanDetector): the backward call's constant rules that branch out
        "import torch\n"
        "import torch.nn as nn\n"
        "class Detector:\n"
        "    def __init__(self, model):\n"
        "        self.handles = [m.register_backward_hook(self.bhook) for m in model.modules()]\n"
        "    def _scan(self, module, inp, out, backward):\n"
        "        if isinstance(inp, tuple) and len(inp) > 0:\n"
        "            inp = inp[0]\n"
        "        if torch.is_tensor(out) and torch.isnan(out).any():\n"
        "            msg = 'nan'\n"
        "            if torch.is_tensor(inp) and not backward:\n"
        "                msg += f' input max {inp.max().item()}'\n"
        "            print(msg)\n"
        "    def bhook(self, module, grad_input, grad_output):\n"
        "        self._scan(module, grad_input, grad_output[0], backward=True)\n",
        # the module's input gradient is set at the input itself: a forward hook puts a tensor hook on
        # the input that returns the recomputed gradient (captum's DeepLift), whatever op the legacy hook binds to
        "saved = {}\n"
        "def rescale(module, grad_input, grad_output):\n"
        "    saved[module] = grad_input[0] * 0.5\n"
        "def watch_input(module, args, output):\n"
        "    first = args[0]\n"
        "    first.register_hook(lambda g: saved.pop(module, g))\n"
        "def attach(model):\n"
        "    for layer in model.modules():\n"
        "        layer.register_forward_hook(watch_input)\n"
        "        layer.register_backward_hook(rescale)\n",
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
        # the hook reads the values before handing them on to the caller's callable
        Invalid(
            "class Hook:\n"
            "    def __init__(self, module, hook_func):\n"
            "        self.hook_func = hook_func\n"
            "        self.handle = module.register_backward_hook(self.hook_fn)  # HKL101, HKL102\n"
            "    def hook_fn(self, module, grad_input, grad_output):\n"
            "        self.hook_func(module, grad_input[0].norm(), grad_output)\n"
        ),
        # a helper applied to grad_input alone reads it; store_attr only names where the callable is
        Invalid(
            "from fastcore.basics import store_attr\n"
            "from mylib import summarize\n"
            "class Hook:\n"
            "    def __init__(self, m, hook_func):\n"
            "        store_attr('hook_func')\n"
            "        self.hook = m.register_backward_hook(self.hook_fn)  # HKL101, HKL102\n"
            "    def hook_fn(self, module, input, output):\n"
            "        self.hook_func(module, summarize(input), output)\n"
        ),
        # a tensor hook on the module's input that only logs replaces nothing: grad_input is still misread
        Invalid(
            "def rescale(module, grad_input, grad_output):\n"
            "    return (grad_input[0] * 0.5,)\n"
            "def log_input_grad(g):\n"
            "    print(g.norm())\n"
            "def watch_input(module, inputs):\n"
            "    inputs[0].register_hook(log_input_grad)\n"
            "def attach(layer):\n"
            "    layer.register_forward_pre_hook(watch_input)\n"
            "    layer.register_backward_hook(rescale)  # HKL101, HKL102\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        forward = ForwardAnalysis(ctx.model, ctx.inference)
        reported: set[tuple[int, int]] = set()
        for group in legacy_groups(ctx, through_wrappers=True):
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
        if not uses or all(passed_on_unchanged(ctx.model, reg.hook.node, use) for use in uses):
            return None
        if input_grad_rebuilt(ctx, reg) is not None:
            return None  # a tensor hook on the module's input sets the gradient the input receives
        first = uses[0]
        what = _use_kind(first)
        pairs, links = [], []
        if ctx.graph is not None:  # the graph layer is imported only when it ran
            from hooklint.graph.link import modules_for

            receiver = reg.receiver_origin if reg.receiver_origin is not None else reg.receiver
            pairs = [(model, m) for model, m in modules_for(ctx, receiver) if m.calls and m.bound is not None]
        if ctx.graph is not None and reg.receiver_origin is None:
            from hooklint.graph.linked import links_for

            links = links_for(ctx, reg.call)
        if not pairs and links:
            # the caller's model, built by another checked file (an explainer, a K-FAC optimizer)
            from hooklint.graph.linked import all_pairs, hooked_pairs

            every = all_pairs(links)
            if every and all(m.bound is not None and m.legacy_safe for _, m in every):
                return None  # every module the project hooks here is a single op taking its input first
            pairs = [(model, m) for model, m in hooked_pairs(links) if m.bound is not None]
        unsafe = [(model, m) for model, m in pairs if not m.legacy_safe]
        if pairs and not unsafe and (not links or all_complete(links)):
            return None  # the graph shows grad_input starts with the module's input gradients
        module = reg.receiver_module
        severity = None
        if unsafe:
            message = _graph_message(reg, gi, what, *unsafe[0], ctx.path)
            if links:
                from hooklint.graph.linked import via_text

                message += via_text(links, unsafe[0][0])
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


def all_complete(links) -> bool:
    return all(link.complete for link in links)


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
