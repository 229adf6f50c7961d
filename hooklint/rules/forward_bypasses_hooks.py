"""HKL303: `module.forward(x)` instead of `module(x)` skips every hook."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Applicability, Edit, Finding, Fix, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.callgraph import local_qualname
from hooklint.static.context import FileContext
from hooklint.static.forward_binding import fresh_unhooked_instance
from hooklint.static.hook_targets import hook_words, object_key, registrations_by_target
from hooklint.static.hooks import HookKind
from hooklint.static.inplace import inplace_of_name, inplace_use_of
from hooklint.static.module_classes import declared_class, private_unhooked_local
from hooklint.static.semantic import is_staticmethod, positional_params
from hooklint.static.values import ModuleValue, module_by_use, src


class ForwardBypassesHooks(Rule):
    """
    ## What it does
    Reports `module.forward(...)` called directly on an `nn.Module` instance,
    instead of calling the module itself, `module(...)`.

    ## Why is this bad?
    Hooks run from `nn.Module.__call__`, not from `forward`.  Calling
    `forward` directly skips every forward pre-hook, forward hook and module
    backward hook registered on that module, yours and torch's own: the
    deprecated `torch.nn.utils.weight_norm` and `spectral_norm`, and
    `torch.nn.utils.prune`, recompute the weight in a forward pre-hook, so
    `module.forward(x)` silently uses the weight computed by the previous call
    (stale after an optimizer step, or before pruning masks change).

    Calling the parent's implementation from an override
    (`super().forward(x)`, `Base.forward(self, x)`) is the normal way to
    extend `forward` and is not reported, nor is `self.forward(...)` inside
    one of the class's own methods (its `__call__` override, a recursive
    `forward`, or a helper such as `generate` or `input_to_embed` that runs
    the module's computation on purpose: the caller called that method, not
    the module; HKL322 reports the helpers whose module is also called as a
    module), nor `Cls(...).forward(x)` on an object made in the same
    expression, which no one can have hooked (unless its own constructor
    hooks it: then it is reported), nor `model = Cls(...)` followed by
    `model.forward(x)` when nothing before the call (or in a loop around it)
    hands `model` to other code, stores it or registers on it (a test's own
    reference model).  Modules whose class (here, or a base in another file)
    overrides `__call__` without ever reaching `nn.Module.__call__`
    (gpytorch's `Module` runs `self.forward(...)` itself) are not reported
    either: calling them runs no torch hook, so `.forward` skips nothing.

    A parameter annotated with a module class of another file of the
    project (`attention: Attention`), an attribute set from one, or built
    with its constructor, is a module: the project's files say whether the
    class derives from `nn.Module` (through a parametrized generic base too,
    `class Endomorph(Operator[Tensor, Tensor])`).  So is a local declared by
    an annotation (`f_sum: SeparableSum = ...` on one branch, `f_sum = f` on
    the other), read where it is bound or from a lambda or nested function.

    The receiver is followed to what it is: a layer the class builds, a
    constructor argument the class calls (`self.module.forward(x)` in a
    wrapper), each module of an `nn.Sequential` or `nn.ModuleList` (a
    subclass included: `for m in self: x = m.forward(x)`), an element or a
    `values()` item of an `nn.ModuleDict`, a child from `self._modules[name]`,
    `getattr(self, "fc")`, and `getattr(self, f"layer{i}")` when every
    attribute of the class that name can spell is a module.  An unannotated
    parameter is a module when the same function uses it as only modules
    are used (`model.modules()`, `model.named_parameters()`,
    `model.register_forward_hook(...)`).
    A class whose base this file cannot see (a star import) counts as a
    module when it calls, on `self`, a method only torch modules have
    (`self.register_parameter(...)`, `self.add_module(...)`).

    ## Known problems
    The severity is *warning*: the call is only wrong when some hook is (or
    later gets) registered on the module, which hooklint cannot always see.
    Modules from `torch.nn.utils.parametrizations` compute the weight when it
    is read, not in a hook, and are not affected.  Receivers whose type
    hooklint cannot tell (an unannotated parameter used for nothing else) are
    not reported.  In a file that imports MXNet, Paddle, MindSpore, OneFlow,
    Jittor or MegEngine, whose layers have `forward` and some of torch's
    method names too, a class or parameter is never taken for a torch
    module from its use alone.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    layer = nn.Linear(4, 2)
    layer.register_forward_hook(lambda module, inputs, output: print(output.shape))
    y = layer.forward(torch.rand(1, 4))
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    layer = nn.Linear(4, 2)
    layer.register_forward_hook(lambda module, inputs, output: print(output.shape))
    y = layer(torch.rand(1, 4))
    ```

    ## Fix safety
    The fix replaces `module.forward(...)` with `module(...)`.  It is
    **unsafe**: the hooks registered on the module then run, which can change
    the result (that is the point, but review it).  A full backward hook on
    the module then runs too, and if an in-place op modifies the module's
    output (`nn.ReLU(inplace=True)` after it) the forward fails (HKL403):
    when hooklint sees that (the result of `.forward(...)` passed to an
    in-place op or modified in place in the same function, or the graph's
    facts), no fix is offered.  `--fix --verify` does not apply this fix (no
    model run proves it).

    ## References
    - [`nn.Module.forward`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.forward):
      "one should call the Module instance afterwards instead of this since the
      former takes care of running the registered hooks while the latter
      silently ignores them"
    """

    code = "HKL303"
    name = "forward-bypasses-hooks"
    summary = "`module.forward(...)` skips the module's hooks; call `module(...)`"
    severity = Severity.WARNING
    triggers = ("forward",)
    # A call `<receiver>.forward(...)` (or `(<receiver>.forward)(...)`), with
    # what Python allows between the tokens; never after `super()`, whose
    # forward is the parent's (not reported).  It starts with the literal dot
    # so that the regex engine can skip from dot to dot.
    trigger_pattern = (r"\.(?<!super\(\)\.)(?:[ \t\f\r\n\\]|#[^\r\n]*[\r\n])*forward"
                       r"(?:[ \t\f\r\n\\)]|#[^\r\n]*[\r\n])*\(")
    fix_applicability = "unsafe (replaces `module.forward(...)` with `module(...)`)"
    VALID: ClassVar[tuple[str, ...]] = (
        # the parent's forward from an override
        "import torch.nn as nn\n"
        "class Wide(nn.Linear):\n"
        "    def forward(self, x):\n"
        "        return super().forward(x) * 2\n"
        "class Wider(nn.Linear):\n"
        "    def forward(self, x):\n"
        "        return nn.Linear.forward(self, x) * 2\n",
        # a class's own __call__ override calling its forward
        "import torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "    def __call__(self, x):\n"
        "        return self.forward(x)\n",
        # a recursive forward: the outer call ran the hooks
        "import torch.nn as nn\n"
        "class Tree(nn.Module):\n"
        "    def forward(self, x, depth=2):\n"
        "        return x if depth == 0 else self.forward(x * 2, depth - 1)\n",
        # a helper method of the module running its own forward (transformers' Gemma3n)
        "import torch.nn as nn\n"
        "class AltUp(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2\n"
        "    def scale_corrected_output(self, x):\n"
        "        return self.forward(x)\n",
        # unknown receiver: not known to be a module
        "def run(model, x):\n"
        "    return model.forward(x)\n",
        # calling the module
        "import torch, torch.nn as nn\n"
        "layer = nn.Linear(2, 2)\n"
        "y = layer(torch.rand(1, 2))\n",
        # a plain object's forward method is not a module's
        "class Step:\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "Step().forward(1)\n",
        # an object made in the same expression: no one can have hooked it (espnet's BeamSearch)
        "import torch.nn as nn\n"
        "class Search(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "def run(x):\n"
        "    return Search().forward(x)\n",
        # a test's own model, built here and handed to no one before `.forward`: nothing can have hooked it
        "import torch, torch.nn as nn\n"
        "class Net(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2\n"
        "def test_reference():\n"
        "    model = Net()\n"
        "    assert model.training\n"
        "    reference = model.forward(torch.ones(2))\n"
        "    return torch.jit.trace(model, (torch.ones(2),)), reference\n",
        # modules of a framework whose `__call__` never reaches nn.Module.__call__ (gpytorch's shape)
        "import torch.nn as nn\n"
        "class GPModule(nn.Module):\n"
        "    def __call__(self, *inputs):\n"
        "        return self.forward(*inputs)\n"
        "class Kernel(GPModule):\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "class Sum(GPModule):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.parts = nn.ModuleList([Kernel() for _ in range(2)])\n"
        "    def forward(self, x):\n"
        "        return self.parts[0].forward(x) + self.parts[1].forward(x)\n",
        # iterating an nn.ModuleDict gives its names, not its modules
        "import torch.nn as nn\n"
        "class Heads(nn.ModuleDict):\n"
        "    def forward(self, x):\n"
        "        return {name: self[name](x) for name in self}\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "layer = nn.utils.weight_norm(nn.Linear(4, 2))\n"
            "net = nn.Linear(4, 2)\n"
            "y = net.forward(torch.rand(1, 4))  # HKL303\n",
            fixed="import torch, torch.nn as nn\n"
            "layer = nn.utils.weight_norm(nn.Linear(4, 2))\n"
            "net = nn.Linear(4, 2)\n"
            "y = net(torch.rand(1, 4))  # HKL303\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Wrapper(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.inner = nn.Conv2d(3, 8, 3)\n"
            "    def forward(self, x):\n"
            "        return self.inner.forward(x)  # HKL303\n",
            fixed="import torch.nn as nn\n"
            "class Wrapper(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.inner = nn.Conv2d(3, 8, 3)\n"
            "    def forward(self, x):\n"
            "        return self.inner(x)  # HKL303\n",
        ),
        Invalid(
            "def profile(model, x):\n"
            "    counts = {}\n"
            "    for m in model.modules():\n"
            "        m.register_forward_pre_hook(lambda mod, inp: counts.update(n=1))\n"
            "    return model.forward(x)  # HKL303\n",
            fixed="def profile(model, x):\n"
            "    counts = {}\n"
            "    for m in model.modules():\n"
            "        m.register_forward_pre_hook(lambda mod, inp: counts.update(n=1))\n"
            "    return model(x)  # HKL303\n",
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x * 2\n"
            "def run(record):\n"
            "    model = Net()\n"
            "    record(model)\n"
            "    return model.forward(torch.ones(2))  # HKL303\n",
            fixed="import torch, torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x * 2\n"
            "def run(record):\n"
            "    model = Net()\n"
            "    record(model)\n"
            "    return model(torch.ones(2))  # HKL303\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Chain(nn.Sequential):\n"
            "    def forward(self, x):\n"
            "        for module in self:\n"
            "            x = module.forward(x)  # HKL303\n"
            "        return x\n",
            fixed="import torch.nn as nn\n"
            "class Chain(nn.Sequential):\n"
            "    def forward(self, x):\n"
            "        for module in self:\n"
            "            x = module(x)  # HKL303\n"
            "        return x\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        by_target = registrations_by_target(ctx, (r for r in ctx.hooks.registrations if r.kind.is_module))
        for call in ctx.model.calls_of_method("forward"):
            func = call.func
            assert isinstance(func, ast.Attribute)
            value = ctx.inference.infer(func.value)
            if value is None and module_by_use(ctx.model, func.value):
                value = ModuleValue(description=src(func.value))
            declared: str | None = None
            if not isinstance(value, ModuleValue):
                # a parameter or attribute declared as a class of another file (`attention: Attention`)
                declared = declared_class(ctx, func.value)
                if declared is not None and declared.split(".")[0] == "torch":
                    declared = None  # torch's classes are the tables' business (a fresh fx GraphModule has no hooks)
                answer = ctx.project.module_class(declared) if declared is not None else None
                if not answer or answer[0] is not True or answer[1]:
                    continue
                value = ModuleValue(description=src(func.value))
            cls = value.local_class
            if cls is not None and cls.method("__call__") is not None:
                continue  # a module with its own __call__: `module(...)` would not run torch's hooks either
            if _is_method_self(ctx, func.value):
                continue  # the module's own method: a recursive forward, or a helper run on purpose
            if fresh_unhooked_instance(ctx, func.value):
                continue  # `Cls(...).forward(x)`: an object no one can have hooked
            if private_unhooked_local(ctx, func.value, call, _fresh(declared)):
                continue  # `model = Cls(...)` here, never handed to anyone: no one can have hooked it
            if value.torch_class is None and _call_bypasses_torch(ctx, value, func.value, call):
                continue  # a framework whose modules' `__call__` never runs torch's hooks (gpytorch)
            hooked = [r for r in by_target.get(object_key(ctx, func.value), ()) if r.call.lineno < call.lineno]
            receiver = src(func.value)
            if hooked:
                first = hooked[0]
                what = (f"the {hook_words(first)} registered on it at line {first.call.lineno}"
                        + (f" and {len(hooked) - 1} more" if len(hooked) > 1 else ""))
            else:
                what = "any forward pre-hook, forward hook or backward hook registered on it (torch's own " \
                       "included: `nn.utils.weight_norm`, `spectral_norm` and pruning use forward pre-hooks)"
            message = (f"`{receiver}.forward(...)` calls the forward of `{receiver}` directly and skips {what}: "
                       f"hooks run from `{receiver}(...)`, not from `forward`")
            related = [Related("hook registered here", ctx.display_path, ctx.span(r.call)[0]) for r in hooked]
            yield self.finding(
                ctx, call, message,
                help=f"Call the module: `{receiver}(...)`.",
                fix=self._fix(ctx, func),
                related=related,
            )

    @staticmethod
    def _fix(ctx: FileContext, func: ast.Attribute) -> Fix | None:
        if _full_hook_breaks_call(ctx, func.value):
            return None
        _start, receiver_end = ctx.span(func.value)
        _fstart, func_end = ctx.span(func)
        return Fix(
            message="Call the module instead of its `forward`",
            edits=(Edit("", receiver_end, func_end),),
            applicability=Applicability.UNSAFE,
        )


def _full_hook_breaks_call(ctx: FileContext, receiver: ast.AST) -> bool:
    """Calling the module would run a full backward hook registered on it,
    and an in-place op modifies its output after it: the forward would then
    fail ("Output 0 of BackwardHookFunction is a view and is being modified
    inplace", HKL403) where `.forward(...)` ran."""
    full = ctx.hooks.by_kind(HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE)
    if not full:
        return False
    same = [r for r in full if r.is_global or _same_module(ctx, r.receiver, receiver)]
    if not same:
        return False
    call = getattr(getattr(receiver, "_hl_parent", None), "_hl_parent", None)
    return isinstance(call, ast.Call) and _result_modified_in_place(ctx, call, receiver)


def _same_module(ctx: FileContext, a: ast.AST | None, b: ast.AST) -> bool:
    if a is None:
        return False
    if object_key(ctx, a) == object_key(ctx, b):
        return True
    if isinstance(a, ast.Attribute) and isinstance(b, ast.Attribute) and a.attr == b.attr:
        owner_a, owner_b = ctx.inference.infer(a.value), ctx.inference.infer(b.value)
        if isinstance(owner_a, ModuleValue) and isinstance(owner_b, ModuleValue) \
                and owner_a.local_class is not None and owner_a.local_class is owner_b.local_class:
            return True  # `block.conv` and `self.conv` in Block's methods
    if ctx.graph is not None:
        from hooklint.graph.link import modules_for

        known = {(id(model), module.path) for model, module in modules_for(ctx, b)}
        return any((id(model), module.path) in known for model, module in modules_for(ctx, a))
    return False


def _result_modified_in_place(ctx: FileContext, call: ast.Call, receiver: ast.AST) -> bool:
    """``relu_(m.forward(x))``, ``y = m.forward(x); y += 1``..., or the graph's word for it."""
    if inplace_use_of(ctx, call) is not None:
        return True
    parent = getattr(call, "_hl_parent", None)
    function = ctx.model.enclosing_function(call)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name) \
            and function is not None and inplace_of_name(ctx, function, parent.targets[0].id, parent) is not None:
        return True
    if ctx.graph is not None:
        from hooklint.graph.link import modules_for

        return any(module.output_inplace is not None for _model, module in modules_for(ctx, receiver))
    return False


def _fresh(declared: str | None):
    """What makes a fresh, unhooked object: a local class or torch layer's
    constructor (forward_binding.fresh_unhooked_instance), or the module class
    of another file the project index just named (its constructor is not
    seen; one that hooks the new object itself would be missed)."""
    def fresh(ctx: FileContext, value: ast.Call) -> bool:
        if fresh_unhooked_instance(ctx, value):
            return True
        return declared is not None and ctx.summarizer.absolute(value.func) == declared
    return fresh


def _call_bypasses_torch(ctx: FileContext, value: ModuleValue, receiver: ast.AST, call: ast.Call) -> bool:
    """Does the receiver's class define a `__call__`, here or in a base of
    another file, that never reaches `nn.Module.__call__` (gpytorch's
    modules)?  Then calling the module runs no torch hook either.  A receiver
    whose class is not known is not excused: the framework of the calling
    class says nothing of the module it holds (keras' `TorchModuleWrapper`
    is a keras layer around a plain torch module)."""
    if value.local_class is not None:
        local = local_qualname(value.local_class.node)
        qual = None if local is None else f"{ctx.module}.{local}"
    elif value.call is not None and isinstance(value.call.func, (ast.Name, ast.Attribute)):
        qual = ctx.summarizer.absolute(value.call.func)
    else:
        qual = declared_class(ctx, receiver)
    if qual is None:
        return False
    answer = ctx.project.module_class(qual)
    return bool(answer and answer[1])


def _is_method_self(ctx: FileContext, expr: ast.AST) -> bool:
    """Is ``expr`` the ``self`` (first parameter) of a method?"""
    if not isinstance(expr, ast.Name):
        return False
    bindings = ctx.model.bindings_at(expr)
    if len(bindings) != 1 or bindings[0].kind != "param":
        return False
    func = bindings[0].scope.node
    params = positional_params(func)
    return bool(params) and params[0] == expr.id and not is_staticmethod(func) \
        and ctx.model.enclosing_class(func) is not None
