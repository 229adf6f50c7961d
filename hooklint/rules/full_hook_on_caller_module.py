"""HKL405: a full backward hook on a module the caller supplies (hook-semantics.md, section 5)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.bodies import name_uses
from hooklint.static.context import FileContext
from hooklint.static.handles import callers_code_run_after
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind, Registration
from hooklint.static.inplace import FULL_HOOK_INPLACE_ERROR
from hooklint.static.outside import built_in_file, outside_root
from hooklint.static.runs_after import callers_model_run_after
from hooklint.static.travel import EMPTY
from hooklint.static.tree_walk import walk_tree
from hooklint.static.values import src


class FullHookOnCallerModule(Rule):
    """
    ## What it does
    Reports a full backward hook (`register_full_backward_hook`,
    `register_full_backward_pre_hook`) that a function or class registers on
    a module its caller supplies (a parameter such as `target_layer`, an
    argument stored by `__init__`, each submodule of the caller's model,
    also when a comprehension picks them first: `layers = {m: name for
    name, m in model.named_modules() if ...}; for m in layers:`),
    when no call in the same file shows which module that is.

    ## Why is this bad?
    A full backward hook wraps the module's inputs and outputs in an autograd
    Function (`BackwardHookFunction`) that returns views.  If the caller's
    model modifies that output in place, which torchvision's VGG, AlexNet and
    ResNets do (`nn.ReLU(inplace=True)` after a convolution, `out +=
    identity`), the forward pass fails as soon as the hook is registered:

    ```text
    RuntimeError: Output 0 of BackwardHookFunction is a view and is being
    modified inplace. This view was created inside a custom Function ...
    ```

    The in-place op is in the user's model, not in the library, so the
    library's own tests (on models without in-place ops) pass.  Attribution
    libraries that take a `target_layer` meet this first.

    A forward hook that registers a tensor hook on the output works whatever
    the model does after the module: the tensor hook receives the gradient
    with respect to the module's output (before any in-place op), which is
    the `grad_output[0]` a full backward hook would receive.

    ## Known problems
    The rule cannot know whether the caller's models modify the output in
    place; it reports the risk, at `info` severity.  When the function that
    registers the hook then runs the caller's model (or forward function)
    itself (`def explain(model, layer, x): layer.register_full_backward_
    hook(h); out = model(x)`), the message says so: that forward is the one
    that fails, inside the library, on its first call with such a model.
    That case stays `info` too: its one instance in the code hooklint is
    measured on (`bench/trial_scripts/proj_explain_ctx`) is judged a false
    positive, the caller's model having no in-place op.  When a call in the same
    file shows the module (`GradCAM(model, model.features[28])`), HKL403
    reports the real problem instead, at that call.  When the graph layer
    links the registration to the models another checked file builds
    (`explainer = GradCAM(net, net.layer4[-1])` in `main.py`, docs/graph.md),
    HKL403 reports an in-place op after a module it lands on, and this rule
    stays quiet when every call in the checked files is linked and no
    module any of them hooks is followed by one.  Not reported when the
    file switches in-place modules off itself (`module.inplace = False`), when
    the hook needs `grad_input` (the forward-hook pattern does not give the
    gradient of the module's input as simply; BackPACK documents that models
    with in-place ops are unsupported) unless the code then runs the caller's
    model itself with the hook in place, directly or through a method of its
    object (shap's `DeepExplainer.shap_values` hooks every leaf and calls
    `self.gradient(...)`, which runs `self.model`: its own forward is the one
    that fails), or when the function runs the hooked module itself.  A library that supports only models without
    in-place ops can `ignore` the rule.

    Measured on 19 hook-heavy packages (5,360 files) and the releases of
    `bench/real_bugs.py` (60 published hook bugs): no finding in the
    packages; in the releases, the published bugs of grad-cam 1.3.1
    (`target_layer`), captum 0.5.0 (`_register_backward_hook`), wandb
    0.10.29 (`watch`) and singd 0.0.1 (its optimizer's hooks on the layers
    a dict comprehension picks from the caller's model), each gone in the
    release that fixed it, and captum's `sample_gradient.py` (judged true),
    all `info` (the model runs in another method or file).

    ## Example
    ```python
    class GradCAM:
        def __init__(self, model, target_layer):
            self.model = model
            self.gradients = None
            target_layer.register_full_backward_hook(self.save_gradient)

        def save_gradient(self, module, grad_input, grad_output):
            self.gradients = grad_output[0]
    ```

    ## Use instead
    ```python
    class GradCAM:
        def __init__(self, model, target_layer):
            self.model = model
            self.gradients = None
            target_layer.register_forward_hook(self.save_output)

        def save_output(self, module, inputs, output):
            output.register_hook(self.save_gradient)

        def save_gradient(self, grad):
            self.gradients = grad
    ```

    ## Fix safety
    There is no automatic fix: the hook's body changes shape (one gradient
    instead of tuples).

    ## References
    - [`Module.register_full_backward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_full_backward_hook)
    - [`Tensor.register_hook`](https://pytorch.org/docs/stable/generated/torch.Tensor.register_hook.html)
    - pytorch-grad-cam's `ActivationsAndGradients` uses the forward-hook pattern for this reason
    """

    code = "HKL405"
    name = "full-hook-on-caller-module"
    summary = "A full backward hook on a caller's module fails if the caller's model modifies its output in place"
    severity = Severity.INFO
    triggers = ("register_full_backward_hook", "register_full_backward_pre_hook") + DYNAMIC_NAME_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # the forward-hook pattern
        "def attach(target_layer, store):\n"
        "    def fwd(module, inputs, output):\n"
        "        output.register_hook(store.append)\n"
        "    return target_layer.register_forward_hook(fwd)\n",
        # the module is the class's own
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(2, 2)\n"
        "        self.fc.register_full_backward_hook(self.log)\n"
        "    def log(self, module, grad_input, grad_output):\n"
        "        print(grad_output[0])\n",
        # the hook needs grad_input: the forward-hook pattern is no replacement
        "def attach(layer, store):\n"
        "    def hook(module, grad_input, grad_output):\n"
        "        store.append(grad_input[0])\n"
        "    return layer.register_full_backward_hook(hook)\n",
        # a call in the file shows the module, built by the file's own factory function
        "import torch.nn as nn\n"
        "class CAM:\n"
        "    def __init__(self, model, target_layer):\n"
        "        target_layer.register_full_backward_hook(self.save)\n"
        "    def save(self, module, grad_input, grad_output):\n"
        "        self.grad = grad_output[0]\n"
        "def build_model():\n"
        "    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())\n"
        "model = build_model().eval()\n"
        "cam = CAM(model, target_layer=model[0])\n",
        # the library switches in-place modules off
        "def extend(model, hook):\n"
        "    for m in model.modules():\n"
        "        if hasattr(m, 'inplace'):\n"
        "            m.inplace = False\n"
        "        m.register_full_backward_hook(hook)\n",
        # the function recurses into the children: more registrations, no forward run
        # (torchexplorer's `_add_io_grad_histogram_hooks`, handed a `should_log_callable`)
        "def add_hooks(module, should_log_callable, store):\n"
        "    def hook(mod, grad_input, grad_output):\n"
        "        if should_log_callable():\n"
        "            store.append(grad_input[0])\n"
        "    module.register_full_backward_hook(hook)\n"
        "    for child in module.children():\n"
        "        add_hooks(child, should_log_callable, store)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "class Saliency:\n"
            "    def __init__(self, model, target_layer):\n"
            "        self.model = model\n"
            "        target_layer.register_full_backward_hook(self.save)  # HKL405\n"
            "    def save(self, module, grad_input, grad_output):\n"
            "        self.grad = grad_output[0]\n"
        ),
        Invalid(
            "def explain(model, layer, x):\n"
            "    grads = []\n"
            "    layer.register_full_backward_hook(lambda m, gi, go: grads.append(go[0]))  # HKL405\n"
            "    model(x).sum().backward()\n"
            "    return grads\n"
        ),
        Invalid(
            "def watch(model, log):\n"
            "    for name, m in model.named_modules():\n"
            "        m.register_full_backward_hook(log)  # HKL405\n"
        ),
        # the caller's layers picked into a comprehension first (singd 0.0.1)
        Invalid(
            "import torch.nn as nn\n"
            "def install(model, log):\n"
            "    names = {m: n for n, m in model.named_modules() if isinstance(m, nn.Linear)}\n"
            "    return [m.register_full_backward_hook(log) for m in names]  # HKL405\n"
        ),
        # the hook needs grad_input, but the object then runs the caller's model itself, one method further
        Invalid(
            "def rescale(module, grad_input, grad_output):\n"
            "    return tuple(g * 0.5 if g is not None else None for g in grad_input)\n"
            "class Explainer:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "    def _hook_leaves(self, module):\n"
            "        children = list(module.children())\n"
            "        if not children:\n"
            "            return [module.register_full_backward_hook(rescale)]  # HKL405\n"
            "        return [h for c in children for h in self._hook_leaves(c)]\n"
            "    def _grads(self, x):\n"
            "        x.requires_grad_()\n"
            "        self.model(x).sum().backward()\n"
            "        return x.grad\n"
            "    def explain(self, x):\n"
            "        handles = self._hook_leaves(self.model)\n"
            "        try:\n"
            "            return self._grads(x)\n"
            "        finally:\n"
            "            for h in handles:\n"
            "                h.remove()\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        switches_inplace_off: bool | None = None
        resolver = ctx.hooks.resolver
        instances = ctx.hooks.instances_by_kind(HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE)
        # a registration whose hook (through any call) needs grad_input: the pattern is no replacement
        needs_grad_input = {id(r.call) for r in instances if _needs_grad_input(r)}
        for reg in instances:
            if id(reg.call) in seen or reg.is_global or reg.receiver is None:
                continue
            runner = None
            if id(reg.call) in needs_grad_input:
                # no easy replacement, and the caller may keep its models free of in-place ops (BackPACK
                # documents it); unless this code runs the caller's model itself with the hook in place
                runner = callers_model_run_after(ctx, reg)
                if runner is None:
                    continue
            found = outside_root(ctx.model, ctx.inference, reg.receiver)
            if found is None:
                continue
            origin, root = found
            # what the caller passed, followed to the outermost call this file shows
            envs = resolver.envs_at(reg.call, [root])
            if any(env is not EMPTY and built_in_file(ctx.model, ctx.inference, resolver.origin(root, env)) for env in envs):
                continue  # a call in this file chooses the module: HKL403 judges it there
            if _runs_forward_itself(ctx, reg):
                continue  # `out = net(x)` here: the hooked module is the model this code runs
            if switches_inplace_off is None:
                switches_inplace_off = _sets_inplace_false(ctx.tree)
            if switches_inplace_off:
                return
            if _judged_by_graph(ctx, reg):
                continue
            seen.add(id(reg.call))
            kind = "full backward pre-hook" if reg.kind is HookKind.FULL_BACKWARD_PRE else "full backward hook"
            hook = f" `{reg.hook.name}`" if reg.hook is not None and reg.hook.name != "<lambda>" else ""
            runner = runner or _runs_callers_model(ctx, reg)
            if runner is not None:
                function = ctx.model.enclosing_function(runner)
                name = f"`{function.name}`" if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    else "the function"
                consequence = (f"; {name} then runs the caller's model itself (`{src(runner)}`, line "
                               f"{runner.lineno}): if that model modifies the module's output in place "
                               f"(`nn.ReLU(inplace=True)` after it, `out += identity`, as torchvision's ResNets "
                               f"and VGGs do), that very forward fails with \"RuntimeError: "
                               f"{FULL_HOOK_INPLACE_ERROR}\"")
                related = [Related("the caller's model runs here, with the hook in place", ctx.display_path,
                                   ctx.span(runner)[0])]
            else:
                consequence = (": if the caller's model modifies that module's output in place "
                               "(`nn.ReLU(inplace=True)` after it, `out += identity`), its forward fails with "
                               f"\"RuntimeError: {FULL_HOOK_INPLACE_ERROR}\"")
                related = []
            yield self.finding(
                ctx, reg.name_node, name_only=True,
                message=f"{kind}{hook} on `{src(reg.receiver)}` ({origin}){consequence}",
                help="If the hook needs the gradient of the module's output, register a forward hook that calls "
                     "`output.register_hook(fn)`: `fn` receives that gradient whatever the model does after the "
                     "module.",
                related=related,
            )


def _judged_by_graph(ctx: FileContext, reg: Registration) -> bool:
    """Another checked file builds the caller's model and the graph links it
    here: an in-place op after a module this registration certainly hooks is
    HKL403's (reported there, with the op); no in-place op after any module
    the project can hook here (every call linked) proves the risk absent."""
    if ctx.graph is None:  # no links without graph facts (and the graph layer is not imported)
        return False
    from hooklint.graph.linked import all_pairs, full_hook_breaker, hooked_pairs, links_for

    links = links_for(ctx, reg.call)
    if not links:
        return False
    if any(full_hook_breaker(module) is not None for _, module in hooked_pairs(links)):
        return True
    every = all_pairs(links)
    return every is not None and bool(every) and all(
        model.autograd and full_hook_breaker(module) is None for model, module in every)


def _runs_forward_itself(ctx: FileContext, reg: Registration) -> bool:
    """The function that registers the hook also calls the hooked module."""
    func = ctx.model.enclosing_function(reg.call)
    receiver = reg.receiver
    if func is None or not isinstance(receiver, ast.Name):
        return False
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == receiver.id
               for node in ast.walk(func))


def _runs_callers_model(ctx: FileContext, reg: Registration) -> ast.Call | None:
    """The call that runs the caller's model (or forward function) after the
    registration, in the function that registers the hook or in one of the
    functions that led there (``explain(model, layer, x)``: ``out = model(x)``)."""
    for call in (reg.call, *reg.via):
        found = callers_code_run_after(ctx.model, call)
        if found is not None:
            return found
    return None


def _needs_grad_input(reg: Registration) -> bool:
    if reg.hook is None:
        return False
    gi = reg.param("grad_input")
    return gi is not None and bool(name_uses(reg.hook.node, gi))


def _sets_inplace_false(tree: ast.AST) -> bool:
    for node in walk_tree(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is False \
                and any(isinstance(t, ast.Attribute) and t.attr == "inplace" for t in node.targets):
            return True
    return False
