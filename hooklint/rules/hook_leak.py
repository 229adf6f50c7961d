"""HKL304: a hook registered again on every call or loop iteration and never removed."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Location, Origin, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.callgraph import EMPTY, SELF, is_step_method, leaves_loop_after
from hooklint.static.context import FileContext
from hooklint.static.flow import constant_range_length, contains, enclosing_loops, executed_nodes, function_of
from hooklint.static.handles import apply_overwrite, destination, lost_wrappers, overwritten_each_run
from hooklint.static.hook_dicts import removes_through_hook_dict
from hooklint.static.hook_targets import KIND_WORDS, binding_of, hook_words, single_name_target
from hooklint.static.hooks import REGISTRATION_TRIGGERS, HookKind, Registration
from hooklint.static.owner_objects import owner_fate
from hooklint.static.semantic import Binding, ClassInfo, FunctionNode, is_staticmethod, positional_params
from hooklint.static.setup_methods import attributes_used, called_only_to_set_up, given_attributes, only_sets_up
from hooklint.static.tree_walk import walk_tree
from hooklint.static.values import TensorValue, src


class HookLeak(Rule):
    """
    ## What it does
    Reports a hook registered again and again on the same target, with a
    handle that is never removed: inside a loop whose iterations all hook the
    same module or parameter, or inside a function, method or constructor
    that runs again with the same target.  It runs again when a module's
    `forward` (or `training_step`) calls it, when it is called in a loop or
    a comprehension, or twice on the same object, or from a function that
    runs again itself, in any of the checked files: a Grad-CAM class in a
    library that hooks `target_layer` in its constructor leaks when an
    evaluation script in another folder builds one per image.  The target
    may arrive as an argument (`model`, `target_layer`, `self.model`
    assigned from one, `model.get_submodule(name)`, the modules of
    `model.named_modules()`): the call site must then pass the same object
    each time.

    Where no call in the checked files repeats it, an entry point that its
    users call is reported as a *warning*: a public method (or `__call__`)
    of a public class that hooks the object's own module (`self.model`) or
    a module it is passed, the constructor of a public class that hooks a
    module it is given, and a public function of a package that hooks its
    argument.  One call in the checked files (a demo, a test) does not make
    it run once: its users call it again.  Every further call adds one more
    hook and nothing can remove them.

    Registrations through the project's own functions count where the
    function is called (hooklint.static.core summarizes them, across
    files): `add_hook(model, fn, dir="bwd")` registers the kind its
    arguments choose and hands the handle back, so a call that drops that
    handle leaks; a wrapper that returns None instead of the handle makes
    the caller's `remove()` fail or do nothing.  A removal that never runs
    (after a `return`, under `if False:` or a switch bound once to `False`,
    after a `raise` or `sys.exit()`) removes nothing.  Handles appended on
    every call to a list that no method removes (or only clears) leak too.
    A caller's model handed to the constructor of a class of another file
    (`self.features = FeatureExtractor(model)`) whose methods hook a layer
    of `self.model` and keep no handle is reported at that call: the
    class's own file sees the attribute of a new object each time, the call
    shows that every object hooks the caller's module again.

    An object whose constructor registers a hook and keeps the handle
    (`self.hook = layer.register_forward_hook(self.save)`), with a method
    that removes it (`close()`), hands the removal to the code that makes
    it: a function that makes such objects (by name, into a local list, in a
    comprehension) and lets them go without calling that method leaves one
    more hook per call that nothing can remove (torch-dreams' `Hook`
    objects in `get_gradients`).  Objects that are returned, stored, handed
    to other code or used in a `with` block are someone else's to close.

    Parameters outlive the call as modules do: a tensor hook or a
    post-accumulate-grad hook on each parameter of a model or optimizer
    the caller passes (`for p in model.parameters()`, `for p in
    group["params"]` of its `param_groups`, `layer.weight` of each of its
    layers) stacks the same way when the code runs again with that model.

    A removal that runs only when the caller's code does not raise is
    HKL308; a hook that does not stack but stays on the caller's model
    after the call that needed it is HKL307.

    ## Why is this bad?
    Every registration adds one more hook; the old ones stay.  After N
    iterations (or calls) the hook runs N times per forward or backward pass,
    so a hook that scales a gradient scales it N times, a hook that records
    activations records N copies, and memory grows.  The objects the hooks
    reference (an explainer, its saved activations) stay alive with the model.
    hook-semantics.md, section 3: a saliency library registered its "guided"
    ReLU hooks on every call and dropped the handles, so its "vanilla" mode
    returned guided gradients after a single guided call.

    ## Known problems
    Registering one hook per module in a loop over `model.modules()`,
    `named_modules()`, `children()` or `parameters()` hooks different targets
    and is not reported; tensor hooks on tensors created in the loop or in
    `forward` die with the tensor and are not reported either.  A registration
    guarded by a condition that can make it run once (`if self._handle is
    None:`, `if step == 0:`, `hasattr(...)`), here or at a call site on the
    way, is not reported.  A handle stored in an attribute counts as
    removed as soon as a method of the class removes it (directly or
    through a helper), and a public attribute or list as removable by the
    object's users: hooklint does not check that this happens between
    registrations.  Calls in other files are seen when those files are
    checked in the same run (`hooklint check .`), through imports,
    re-exports, constructors, methods of instances whose class the file
    shows (`cam = GradCAM(...)`, a parameter annotated with the class) and
    `super()`; a method called on an object of unknown class is followed
    only when an annotation names its class (`Dict[str, HookPoint]`) or one
    class of the file defines it with a signature that fits the call.
    A layer a function hooklint cannot see into looks up in the caller's
    model (`layer = find_layer(self.model, name)`, a getter of another
    file) is taken to be the same layer on every call with the same
    arguments: a guess from the shape of the call, so such a finding is a
    warning.  A class whose methods delete entries of the hooked modules'
    hook dicts (`del layer._forward_hooks[key]`, `.pop(key)`) is taken to
    remove its hooks that way.  A one-shot hook, which takes its own
    registration off when it runs (a hook object whose `__call__` deletes
    itself from the module's hook dict, a hook function that pops its own
    entry, a closure removing the handle its call bound; its class may be
    in another checked file), runs once per registration and is not
    reported.  A public method that only sets its object up (it hooks the
    object's own submodules, attributes no method of the class stores from
    an argument, runs neither the object nor any of its attributes, and
    calls only methods of its class that do the same, like a mixin's
    `init_adapters`; the file calls it only from a constructor or from the
    same method of a subclass) is a deferred constructor: without a call
    that repeats it, it is not reported.  An early exit that needs a
    parameter false by default (`if hasattr(p, "trackers") and persist:
    return`) does not guard a call that leaves it out; attributes a
    function stores only on an object it builds itself (`cfg =
    Namespace(...)`, `cfg.model = ...`; a constructor told by its
    CapWords name) are not flags a later call could read.  A file in a
    folder without `__init__.py` under a regular package
    (`pkg/hook/hook.py`) is a module of that package: its public
    functions are entry points.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    features = []
    for step in range(100):
        model.register_forward_hook(lambda module, inputs, output: features.append(output))
        model(torch.rand(8, 4)).sum().backward()
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    features = []
    handle = model.register_forward_hook(lambda module, inputs, output: features.append(output))
    for step in range(100):
        model(torch.rand(8, 4)).sum().backward()
    handle.remove()
    ```

    ## Fix safety
    There is no automatic fix: where the hook should be registered once, or
    removed, depends on what it is for.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook):
      every `register_*` call returns a handle whose `remove()` removes that one hook
    """

    code = "HKL304"
    origins = (Origin.STATIC, Origin.RUNTIME)
    name = "hook-leak"
    summary = "A hook is registered again on the same target on every iteration or call, and never removed"
    severity = Severity.ERROR
    triggers = REGISTRATION_TRIGGERS
    VALID: ClassVar[tuple[str, ...]] = (
        # one hook per module: different targets
        "import torch.nn as nn\n"
        "net = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
        "for m in net.modules():\n"
        "    m.register_forward_hook(lambda mod, i, o: None)\n"
        "for name, p in net.named_parameters():\n"
        "    p.register_hook(lambda g: g)\n",
        # handle removed in the loop
        "import torch, torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "for step in range(3):\n"
        "    h = net.register_forward_hook(lambda m, i, o: None)\n"
        "    net(torch.rand(1, 2))\n"
        "    h.remove()\n",
        # fresh tensors each iteration
        "import torch\n"
        "for step in range(3):\n"
        "    x = torch.rand(3, requires_grad=True)\n"
        "    x.register_hook(lambda g: g * 2)\n"
        "    (x * x).sum().backward()\n",
        # once-guard
        "import torch.nn as nn\n"
        "class Probe:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "        self._handle = None\n"
        "    def attach(self):\n"
        "        if self._handle is None:\n"
        "            self._handle = self.model.register_forward_hook(self.record)\n"
        "    def record(self, m, i, o):\n"
        "        pass\n"
        "p = Probe(nn.Linear(2, 2))\n"
        "p.attach()\n"
        "p.attach()\n",
        # handles kept in a list and removed later
        "import torch.nn as nn\n"
        "class Guided:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "        self.handles = []\n"
        "    def attach(self):\n"
        "        for m in self.model.modules():\n"
        "            if isinstance(m, nn.ReLU):\n"
        "                self.handles.append(m.register_full_backward_hook(lambda mod, gi, go: None))\n"
        "    def detach(self):\n"
        "        for h in self.handles:\n"
        "            h.remove()\n"
        "g = Guided(nn.Sequential(nn.ReLU()))\n"
        "g.attach(); g.detach(); g.attach()\n",
        # gradient reversal on the forward's input: a fresh tensor every call
        "import torch.nn as nn\n"
        "class Reverse(nn.Module):\n"
        "    def forward(self, x):\n"
        "        x = x.view_as(x)\n"
        "        x.register_hook(lambda g: -g)\n"
        "        return x\n",
        # registered once, then break
        "import torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "for attempt in range(3):\n"
        "    net.register_forward_hook(lambda m, i, o: None)\n"
        "    break\n",
        # copying different hooks onto one module (torch.ao does this)
        "import torch.nn as nn\n"
        "old, new = nn.Linear(2, 2), nn.Linear(2, 2)\n"
        "for hook_fn in old._forward_hooks.values():\n"
        "    new.register_forward_hook(hook_fn)\n",
        # a function called once
        "import torch.nn as nn\n"
        "net = nn.Linear(2, 2)\n"
        "def attach():\n"
        "    net.register_forward_hook(lambda m, i, o: None)\n"
        "attach()\n",
        # registered once in __init__, the handle kept
        "class Probe:\n"
        "    def __init__(self, layer):\n"
        "        self.handle = layer.register_forward_hook(self.save)\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n"
        "    def close(self):\n"
        "        self.handle.remove()\n"
        "for image in range(3):\n"
        "    Probe(object()).close()\n",
        # a public method that removes its hook in `finally`
        "class Explainer:\n"
        "    def __init__(self, model):\n"
        "        self.model = model\n"
        "    def attribute(self, x):\n"
        "        handle = self.model.register_forward_hook(self.save)\n"
        "        try:\n"
        "            return self.model(x)\n"
        "        finally:\n"
        "            handle.remove()\n"
        "    def save(self, m, i, o):\n"
        "        self.out = o\n",
        # a private class constructed in a loop, on a new model each time
        "class _Probe:\n"
        "    def __init__(self, model):\n"
        "        model.register_forward_hook(print)\n"
        "def run(models):\n"
        "    for model in models:\n"
        "        _Probe(model)\n",
        # a public method that only sets its object up: hooks its own submodules, runs nothing
        "class AdaptersMixin:\n"
        "    def init_adapters(self, config):\n"
        "        for layer in self.encoder.layer:\n"
        "            layer.register_forward_pre_hook(lambda m, args: args)\n"
        "        self.embeddings.register_forward_hook(self.after_embeddings)\n"
        "    def after_embeddings(self, m, i, o):\n"
        "        return o\n",
        # a set-up method reached only from another set-up step (a wrapper mixin walking its submodules)
        "class EncoderMixin:\n"
        "    def install(self, config):\n"
        "        for block in self.blocks:\n"
        "            self._hook_block(block)\n"
        "    def _hook_block(self, block):\n"
        "        block.register_forward_pre_hook(lambda m, args: args)\n"
        "class WrapperMixin:\n"
        "    def _install_parts(self, config):\n"
        "        for part in self.backbone.modules():\n"
        "            if hasattr(part, 'install'):\n"
        "                part.install(config)\n",
        # __init__ and __setstate__ both hook the parameters, but an object runs only one of them (a deepcopy
        # or an unpickled copy runs __setstate__ instead of __init__, and carries no tensor hooks over)
        "import torch\n"
        "import torch.nn as nn\n"
        "class HalvedGrads(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.weight = nn.Parameter(torch.ones(3))\n"
        "        self._hook()\n"
        "    def __setstate__(self, state):\n"
        "        super().__setstate__(state)\n"
        "        self._hook()\n"
        "    def _hook(self):\n"
        "        for p in self.parameters():\n"
        "            p.register_hook(lambda g: g * 0.5)\n",
        # a one-shot hook object: its __call__ deletes its own entry, so registrations do not stack
        "class AddBatchDim:\n"
        "    def __call__(self, mod, args):\n"
        "        for key, hook in list(mod._forward_pre_hooks.items()):\n"
        "            if hook is self:\n"
        "                del mod._forward_pre_hooks[key]\n"
        "def batch(module, names):\n"
        "    for name in names:\n"
        "        module.register_forward_pre_hook(AddBatchDim())\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch, torch.nn as nn\n"
            "model = nn.Linear(4, 1)\n"
            "for step in range(5):\n"
            "    model.weight.register_hook(lambda g: g * 0.5)  # HKL304\n"
            "    model(torch.rand(2, 4)).sum().backward()\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Saliency:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "    def guided(self, x):\n"
            "        for m in self.model.modules():\n"
            "            if isinstance(m, nn.ReLU):\n"
            "                m.register_full_backward_hook(self.clamp)  # HKL304\n"
            "        return self.model(x)\n"
            "    def clamp(self, m, gi, go):\n"
            "        return (gi[0].clamp(min=0),)\n"
            "s = Saliency(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))\n"
            "s.guided(1)\n"
            "s.guided(2)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(2, 2)\n"
            "        self.seen = []\n"
            "    def forward(self, x):\n"
            "        self.fc.register_forward_hook(lambda m, i, o: self.seen.append(o))  # HKL304\n"
            "        return self.fc(x)\n"
        ),
        Invalid(
            "import torch, torch.nn as nn\n"
            "net = nn.Linear(2, 2)\n"
            "for step in range(3):\n"
            "    h = net.register_forward_hook(lambda m, i, o: None)  # HKL304\n"
            "    net(torch.rand(1, 2))\n"
            "h.remove()\n"
        ),
        Invalid(
            # a constructor that hooks its argument, built once per image
            "class GradCAM:\n"
            "    def __init__(self, model, target_layer):\n"
            "        self.model = model\n"
            "        target_layer.register_forward_hook(self.save)  # HKL304\n"
            "    def save(self, m, i, o):\n"
            "        self.activation = o\n"
            "def explain(model, images):\n"
            "    return [GradCAM(model, model.layer4) for image in images]\n"
        ),
        Invalid(
            # a public method that hooks its own model on every call (a warning)
            "class FeatureExtractor:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "    def extract(self, x):\n"
            "        self.model.layer4.register_forward_hook(self.keep)  # HKL304\n"
            "        self.model(x)\n"
            "        return self.features\n"
            "    def keep(self, m, i, o):\n"
            "        self.features = o\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        analysis = _LeakAnalysis(ctx)
        for reg in ctx.hooks.registrations:
            finding = analysis.check(self, reg)
            if finding is None:
                finding = analysis.apply_overwrite(self, reg)
            if finding is None:
                finding = analysis.inside_hook(self, reg)
            if finding is not None:
                yield finding
        for reg in ctx.core.wrapped():
            finding = analysis.check_wrapped(self, reg)
            if finding is not None:
                yield finding
        yield from analysis.lost_wrappers(self)
        yield from analysis.inside_hook_through_helpers(self)
        yield from analysis.dropped_owners(self)


# List methods that store or forget handles without removing their hooks.
_LIST_METHODS_THAT_DROP = frozenset({"append", "clear"})


class _LeakAnalysis:
    def __init__(self, ctx: FileContext):
        self.ctx = ctx
        self.dependence = ctx.summarizer.dependence
        self.guards = ctx.summarizer.guards
        self._loads: tuple[dict[str, list[ast.Name]], dict[str, list[ast.Attribute]]] | None = None
        self._self_classes: dict[int, ClassInfo | None] = {}
        # registrations whose handle is lost only in some runs (a hook that removes itself when it runs)
        self.conditional_fates: set[int] = set()
        # registrations whose target is a guessed lookup in the caller's model (reported as warnings)
        self.guessed_targets: set[int] = set()

    def _load_index(self) -> tuple[dict[str, list[ast.Name]], dict[str, list[ast.Attribute]]]:
        """Every read of a name and of an attribute in the file, by name (built once)."""
        if self._loads is None:
            names: dict[str, list[ast.Name]] = {}
            attributes: dict[str, list[ast.Attribute]] = {}
            for node in walk_tree(self.ctx.tree):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    names.setdefault(node.id, []).append(node)
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                    attributes.setdefault(node.attr, []).append(node)
            self._loads = (names, attributes)
        return self._loads

    # ---------------------------------------------------------------- entry
    def check(self, rule: Rule, reg: Registration) -> Finding | None:
        if self._one_shot(reg):
            return None
        for loop in enclosing_loops(reg.call):
            if self._needed(reg, loop) != EMPTY or self.guards.guarded(reg.call, loop) \
                    or leaves_loop_after(reg.call, loop):
                continue
            fate = self._handle_fate(reg, loop)
            if fate is None:
                return None
            times = constant_range_length(loop.iter) if isinstance(loop, (ast.For, ast.AsyncFor)) else None
            return self._finding(rule, reg, f"on every iteration of the loop at line {loop.lineno}", times, fate)
        func = function_of(reg.call)
        if not isinstance(func, FunctionNode):
            return None
        needed = self._needed(reg, func)
        if needed is None or self.guards.guarded(reg.call, func):
            return None
        fate = self._handle_fate(reg, func)
        if fate is None or removes_through_hook_dict(self.ctx.model.enclosing_class(func), reg.kind):
            return None  # kept, or taken off through the module's hook dict by a method of the class
        repeat = self._repeat(func, needed)
        if repeat is None:
            return None
        text, proven, related = repeat
        if not proven:
            kept = destination(self.ctx, reg)
            if kept.kind in ("attribute", "container") and kept.attr and not kept.attr.startswith("_"):
                return None  # the object's users can reach the handles and remove them
        cls = self.ctx.model.enclosing_class(func)
        name = f"{cls.name}.{func.name}" if cls is not None and func in cls.methods.values() else func.name
        if id(reg.call) in self.guessed_targets:
            text += (f"; `{src(reg.receiver)}` is taken to be a part of the module the lookup is given, found "
                     f"the same way each time, not a new module")
        finding = self._finding(rule, reg, f"each time `{name}` runs ({text})", None, fate, related)
        if not proven or id(reg.call) in self.conditional_fates or id(reg.call) in self.guessed_targets:
            # unproven repeat; a hook that removes itself leaks only unrun; a guessed lookup of the target
            finding = finding.with_changes(severity=Severity.WARNING)
        return finding

    def _one_shot(self, reg: Registration) -> bool:
        """A hook that takes its own registration off when it runs (core's
        ``hook_removes_itself``): registered again, it runs once per
        registration and is gone, it does not stack.  A handle kept where only
        the hook removes it is judged by ``_self_removing_fate`` instead (a
        warning: a module whose forward never runs keeps it)."""
        parent = getattr(reg.call, "_hl_parent", None)
        if isinstance(parent, ast.Assign) and any(isinstance(t, ast.Attribute) for t in parent.targets):
            return False
        if isinstance(parent, ast.Return):
            return False
        return self.ctx.core.hook_removes_itself(reg) is not None

    def check_wrapped(self, rule: Rule, reg: Registration, owner_fate_only: bool = False) -> Finding | None:
        """A registration through a wrapper (a function of the project that
        registers for its caller), at the call of the wrapper: it leaks when
        the call runs again with the same target and the caller loses the
        handle the wrapper hands back (or the wrapper hands back None)."""
        summary = reg.summary
        if owner_fate_only:
            fate = self._owner_dropped_fate(reg)
        else:
            fate = self._wrapped_fate(reg)
            if fate is None:
                fate = self._handed_over_fate(reg)
            if fate is None:
                fate = self._owner_dropped_fate(reg)
        if fate is None:
            return None
        for loop in enclosing_loops(reg.call):
            if self._needed_wrapped(reg, loop) != EMPTY or self.guards.guarded(reg.call, loop) \
                    or leaves_loop_after(reg.call, loop):
                continue
            return self._finding(rule, reg, f"on every iteration of the loop at line {loop.lineno}",
                                 constant_range_length(loop.iter) if isinstance(loop, (ast.For, ast.AsyncFor))
                                 else None, fate)
        func = function_of(reg.call)
        if not isinstance(func, FunctionNode) or summary.guarded:  # type: ignore[union-attr]
            return None
        needed = self._needed_wrapped(reg, func)
        if needed is None:
            return None
        repeat = self._repeat(func, needed)
        if repeat is None:
            return None
        text, proven, related = repeat
        cls = self.ctx.model.enclosing_class(func)
        name = f"{cls.name}.{func.name}" if cls is not None and func in cls.methods.values() else func.name
        finding = self._finding(rule, reg, f"each time `{name}` runs ({text})", None, fate, related)
        return finding if proven else finding.with_changes(severity=Severity.WARNING)

    def _wrapped_fate(self, reg: Registration) -> str | None:
        summary = reg.summary
        handle: str = summary.handle  # type: ignore[union-attr]
        chain = reg.wrapper_chain
        wrapper = f"`{chain[0][0]}`" if chain else "the wrapper"
        if handle.startswith("nil:"):
            return (f"{wrapper} returns None, not the handle: the caller's `remove()` of what it returned gets "
                    f"None (an AttributeError, or, behind a None check, nothing is removed)")
        if not summary.passed:  # type: ignore[union-attr]
            return None  # lost (or removed) inside the wrapper: reported there
        if handle == "drop":
            return f"the handle {wrapper} returns is discarded"
        if handle.startswith("dead:"):
            line = int(handle.partition(":")[2])
            removal = next((c for c in self.ctx.model.calls_of_method("remove") if c.lineno == line), None)
            reason = self.ctx.core.unreachable_reason(removal) if removal is not None else None
            return f"the only removal of the handle {wrapper} returns, at line {line}, never runs" + \
                (f" ({reason})" if reason else "")
        return None

    def _handed_over_fate(self, reg: Registration) -> str | None:
        """``Extractor(model)`` of a class of another file whose methods hook
        ``self.model`` (set from the argument) and drop the handle: the
        constructor's file sees a new object's attribute each time, only this
        call shows that it is the caller's module, hooked again by each object."""
        summary = reg.summary
        chain = reg.wrapper_chain
        if not getattr(summary, "through_init", False) or summary.handle != "drop" or len(chain) < 2:  # type: ignore[union-attr]
            # a constructor that registers in its own body is judged in its file (its `self.model` is the
            # argument there); one whose helper method registers on `self.model` is not
            return None
        name, path, _line = chain[0]
        if not path or path == self.ctx.display_path:
            return None
        inner = f" (through `{chain[-1][0]}`)" if len(chain) > 1 else ""
        return (f"`{name.rsplit('.', 1)[0]}` keeps no handle{inner}: neither the object nor its caller can remove "
                f"the hook, which outlives the object")

    def dropped_owners(self, rule: Rule) -> Iterable[Finding]:
        """Constructor calls of this file's hook-owning classes (``Hook(layer)``)
        whose objects are let go without the method that removes the handle."""
        ctx = self.ctx
        core = ctx.core
        inits = {id(function_of(reg.call)) for reg in ctx.hooks.registrations
                 if isinstance(getattr(reg.call, "_hl_parent", None), ast.Assign)}
        owners = [info for info in ctx.model.classes.values() if "__init__" in info.methods
                  and id(info.methods["__init__"]) in inits  # registers and keeps the handle in its own body
                  and any(r.handle.startswith("at:s.") for r in core.facts(info.methods["__init__"]).regs)]
        if not owners:
            return
        wrapped_sites = {id(r.call) for r in core.wrapped()}
        for info in owners:
            for call in ctx.model.name_calls.get(info.name, ()):
                if id(call) in wrapped_sites:
                    continue  # judged with the other wrapped registrations
                func = function_of(call)
                if not isinstance(func, FunctionNode):
                    continue
                for summary in core.facts(func).regs:
                    if summary.site is not call or not summary.chain or not summary.kind:
                        continue
                    reg = core.registration_of(summary)
                    if reg is None or self._owner_dropped_fate(reg) is None:
                        continue
                    finding = self.check_wrapped(rule, reg, owner_fate_only=True)
                    if finding is not None:
                        # a shape new in this round: a warning until it has met more libraries
                        yield finding.with_changes(severity=Severity.WARNING)
                        break

    def _owner_dropped_fate(self, reg: Registration) -> str | None:
        """``Hook(layer)`` of a class of this file whose constructor keeps the
        handle on the object and whose method (``close()``) removes it, made
        here and let go without that method being called (static/owner_objects.py):
        nobody holds the handle any more, so the hook can never be removed."""
        summary = reg.summary
        chain = reg.wrapper_chain
        if summary is None or summary.handle != "at:n" or not chain or len(chain) != 1:  # type: ignore[union-attr]
            return None
        name, path, _line = chain[0]
        if path and path != self.ctx.display_path or not name.endswith(".__init__"):
            return None
        class_name = name[:-len(".__init__")].rsplit(".", 1)[-1]
        infos = [info for info in self.ctx.model.classes.values() if info.name == class_name]
        if len(infos) != 1 or "__init__" not in infos[0].methods:
            return None
        info = infos[0]
        core = self.ctx.core
        attrs = {r.handle[len("at:s."):] for r in core.facts(info.methods["__init__"]).regs
                 if r.handle.startswith("at:s.") and "." not in r.handle[len("at:s."):]}
        if len(attrs) != 1:
            return None
        attr = attrs.pop()
        removers = frozenset(method.name for method, _removal in core.removals_of(info, attr)
                             if method.name not in ("__init__", "__del__", "__exit__"))
        if not removers or any(m in info.methods for m in ("__del__", "__exit__", "__enter__")):
            return None  # removed when collected, or meant for a `with` block
        func = function_of(reg.call)
        if not isinstance(func, FunctionNode) or owner_fate(reg.call, func, removers) != "dropped":
            return None
        methods = " or ".join(f"`{m}()`" for m in sorted(removers))
        return (f"`{class_name}` keeps the handle on the object (`self.{attr}`) and {methods} removes it, but "
                f"the objects made here are let go without {methods}: nothing can remove the hook any more")

    def _needed_wrapped(self, reg: Registration, unit: ast.AST) -> frozenset[str] | None:
        """As :meth:`_needed`, for a registration at a wrapper's call: a hook
        made inside the wrapper is the same hook every time."""
        hook = EMPTY if reg.hook_expr is None else self.dependence.behaviour(reg.hook_expr, unit)
        if hook is None or reg.receiver is None:
            return None
        target = self.dependence.of(reg.receiver, unit)
        if target is None:
            return None
        if reg.kind.is_tensor:
            value = self.ctx.inference.infer(reg.receiver)
            if not (isinstance(value, TensorValue) and (value.parameter or value.leaf is True)):
                return None
        return target | hook

    def apply_overwrite(self, rule: Rule, reg: Registration) -> Finding | None:
        """A handle kept under the module that ``model.apply(fn)`` visits, with
        no check for one already there: a submodule shared by two parents is
        visited twice and its first handle is lost (a warning: it needs a
        shared submodule)."""
        found = apply_overwrite(self.ctx, reg)
        if found is None:
            return None
        ctx = self.ctx
        applied = src(found.apply_call.func.value)  # type: ignore[attr-defined]
        store = src(found.store)
        checked = ""
        if found.wrong_check is not None:
            checked = (f" (`{src(found.wrong_check)}` at line {found.wrong_check.lineno} checks another attribute "
                       f"than `{store}`)")
        message = (f"{hook_words(reg)} is registered on `{found.module_param}` for each submodule of `{applied}` "
                   f"(`{src(found.apply_call)}` at line {found.apply_call.lineno}) and its handle is kept in "
                   f"`{store}` with no check for a handle already there{checked}: `Module.apply` visits a submodule "
                   f"once per parent that holds it, so a module shared by two parents (one activation instance "
                   f"reused across layers) is hooked twice and the second handle overwrites the first; that first "
                   f"hook can never be removed and keeps running in every later forward")
        return rule.finding(
            ctx, reg.name_node, message, name_only=True,
            help=f"Skip modules already hooked (`if {found.module_param} in ...: return`, or a `hasattr` check of "
                 f"the attribute you store), or iterate `{applied}.modules()`, which yields each module once.",
            related=[Related("`apply` runs the function on every submodule here", ctx.display_path,
                             ctx.span(found.apply_call)[0])],
        ).with_changes(severity=Severity.WARNING)

    def lost_wrappers(self, rule: Rule) -> Iterable[Finding]:
        """``W(module)`` of a class whose constructor hooks ``module`` and
        whose ``close()`` (or the like) alone removes the hook, when the
        object is dropped or kept where nothing calls it, in code that runs
        again with the same module."""
        ctx = self.ctx
        for lost in lost_wrappers(ctx):
            call, wrapper = lost.call, lost.wrapper
            func = function_of(call)
            if not isinstance(func, FunctionNode) or self.guards.guarded(call, func):
                continue
            reg = wrapper.registration
            cleanup = " or ".join(f"`{name}()`" for name in wrapper.cleanup)
            where = f"kept only in `{lost.kept_in}`" if lost.kept_in else "dropped"
            head = (f"`{src(call.func)}(...)` registers a {KIND_WORDS[reg.kind]} on `{src(lost.argument)}` "
                    f"(`{wrapper.cls.name}.__init__`, line {reg.call.lineno}) whose handle only {cleanup} removes; "
                    f"the object is {where} and nothing calls {cleanup} on it")
            repeat: tuple[str, bool, list[Related]] | None = None
            for loop in enclosing_loops(call):
                if self.dependence.of(lost.argument, loop) == EMPTY and not self.guards.guarded(call, loop) \
                        and not leaves_loop_after(call, loop):
                    repeat = (f"on every iteration of the loop at line {loop.lineno}", True, [])
                    break
            if repeat is None:
                needed = self.dependence.of(lost.argument, func)
                if needed is None:
                    continue
                found = self._repeat(func, needed)
                if found is None:
                    continue
                text, proven, related = found
                cls = ctx.model.enclosing_class(func)
                name = f"{cls.name}.{func.name}" if cls is not None and func in cls.methods.values() else func.name
                repeat = (f"each time `{name}` runs ({text})", proven, related)
            text, proven, related = repeat
            event = "forward" if reg.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
            finding = rule.finding(
                ctx, call, f"{head}: it runs {text}, and each run leaves one more hook that runs on every {event} "
                f"pass", help=f"Call {cleanup} on the objects when done (a `try`/`finally`, or a context manager), "
                f"or keep them where the caller can.",
                related=[Related("the hook is registered here", ctx.display_path, ctx.span(reg.call)[0])] + related)
            yield finding if proven else finding.with_changes(severity=Severity.WARNING)

    def inside_hook_through_helpers(self, rule: Rule) -> Iterable[Finding]:
        """A module hook whose body calls a helper that registers a hook on the hook's own module (or a
        part of it) and keeps the handle where nothing removes it (a list whose only cleanup method is
        never called, brevitas 0.9.1's bias correction): one more hook per pass of the module."""
        ctx = self.ctx
        seen: set[int] = set()
        for outer in ctx.hooks.registrations:
            func = outer.hook.node if outer.hook is not None else None
            if not isinstance(func, FunctionNode) or id(func) in seen or not outer.kind.is_module \
                    or outer.receiver is None:
                continue
            seen.add(id(func))
            params = positional_params(func)
            bound = outer.hook.bound if outer.hook is not None else 0
            if len(params) <= bound:
                continue
            module_place = f"p:{params[bound]}"
            cls = ctx.model.enclosing_class(func)
            for reg in ctx.core.facts(func).regs:
                if not reg.chain or reg.site is None or reg.guarded or reg.once \
                        or not (reg.target == module_place or reg.target.startswith(module_place + ".")):
                    continue
                if ctx.core.removals_after(func, reg):
                    continue
                place = reg.handle[3:] if reg.handle.startswith("at:") else ""
                attr = place[len("e:s."):] if place.startswith("e:s.") else place[2:] if place.startswith("s.") else ""
                if not attr or "." in attr or cls is None or ctx.core.handles_released(cls, attr) is not False:
                    continue
                event = "forward" if outer.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
                helper = reg.chain[0][0]
                yield rule.finding(
                    ctx, reg.site,
                    f"`{helper}` registers a hook on `{reg.target[2:]}` (line {reg.line}) each time `{func.name}` "
                    f"runs, and `{func.name}` is itself a {KIND_WORDS[outer.kind]} on `{outer.receiver_text}` (line "
                    f"{outer.call.lineno}) that runs on every {event} pass; the handles go to `self.{attr}`, which "
                    f"nothing that runs ever removes (a method that would is never called): each pass adds one more "
                    f"hook, which stays on the caller's module",
                    help="Remove the inner hooks in the same run (`try`/`finally`), or call the cleanup method where "
                         "the outer hooks are removed.",
                    related=[Related("the hook that runs this code is registered here", ctx.display_path,
                                     ctx.span(outer.call)[0])],
                ).with_changes(severity=Severity.WARNING)

    def inside_hook(self, rule: Rule, reg: Registration) -> Finding | None:
        """A registration inside a module hook: it runs on every forward (or
        backward) of that module, and its handles end up where the next run
        overwrites them, or nowhere (a warning: it needs two passes before the
        handles are removed)."""
        ctx = self.ctx
        func = function_of(reg.call)
        if not isinstance(func, FunctionNode) or reg.receiver is None or reg.hook_expr is None:
            return None
        outer = [r for r in ctx.hooks.registrations if r.hook is not None and r.hook.node is func
                 and r.kind.is_module and r.receiver is not None]
        if not outer:
            return None
        params = positional_params(func)
        bound = outer[0].hook.bound if outer[0].hook is not None else 0
        module_param = params[bound] if len(params) > bound else None  # every module hook gets its module first
        target = self.dependence.of(reg.receiver, func)
        if target is None or not target <= ({module_param} if module_param else set()):
            return None  # another object on each run
        if self.guards.guarded(reg.call, func):
            return None
        parent = getattr(reg.call, "_hl_parent", None)
        if isinstance(parent, ast.Expr):
            fate = "its handle is discarded"
        else:
            kept = overwritten_each_run(ctx, reg, func)
            if kept is None:
                return None
            fate = (f"its handle ends up in `{kept.name}` (line {kept.assignment.lineno}), which the next run "
                    f"overwrites: only the handles of the last run can be removed")
        first = outer[0]
        event = "forward" if first.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
        message = (f"{hook_words(reg)} is registered on {reg.describe_target()} inside `{func.name}`, which is "
                   f"itself a {KIND_WORDS[first.kind]} on `{first.receiver_text}` (line {first.call.lineno}) and "
                   f"runs on every {event} pass of it, and {fate}: each pass adds one more hook, after N passes "
                   f"it runs N times")
        return rule.finding(
            ctx, reg.name_node, message, name_only=True,
            help="Register the inner hooks once, outside the hook, or remove them in the same run "
                 "(`try`/`finally` around the work that needs them).",
            related=[Related("the hook that runs this code is registered here", ctx.display_path,
                             ctx.span(first.call)[0])],
        ).with_changes(severity=Severity.WARNING)

    def _needed(self, reg: Registration, unit: ast.AST) -> frozenset[str] | None:
        """The parameters of ``unit`` that must be the same for the registration
        to hook the same target with the same hook again (None: it hooks a new
        object each time, or copies different hooks: not a leak)."""
        if reg.hook_expr is None:
            return None
        hook = self.dependence.behaviour(reg.hook_expr, unit)
        if hook is None:
            return None
        if reg.receiver is None:
            return hook  # a global hook: one target, every module
        target = self.dependence.of(reg.receiver, unit)
        if target is None and reg.kind.is_module:
            target = self._looked_up(reg, unit)
        if target is None:
            return None
        if reg.kind.is_tensor:
            # only tensors known to outlive the loop or call: parameters and leaves, the caller's included
            value = self.ctx.inference.infer(reg.receiver)
            if not (isinstance(value, TensorValue) and (value.parameter or value.leaf is True)) \
                    and not self._callers_parameter(reg):
                return None
        return target | hook

    def _callers_parameter(self, reg: Registration) -> bool:
        """The hooked tensor is, in turn, each parameter of a collection the
        caller supplies (``for p in model.parameters()``, ``for p in
        group["params"]`` of an optimizer's ``param_groups``, ``m.weight`` of
        each of its layers): parameters outlive the call, so a hook on them
        stacks like one on a module."""
        from hooklint.static.requires_grad import caller_layer_parameter, caller_parameter

        model, inference = self.ctx.model, self.ctx.inference
        return reg.receiver is not None and (caller_parameter(model, inference, reg.receiver, filtered=True) is not None
                                             or caller_layer_parameter(model, inference, reg.receiver) is not None)

    def _looked_up(self, reg: Registration, unit: ast.AST) -> frozenset[str] | None:
        """A module looked up in the caller's model by a helper the file cannot
        see into (``layer = find_layer(self.model, name)``, another file's
        getter): the same module as long as the lookup's arguments are.  A
        guess from the shape of the call (hooklint.static.core's
        ``looked_up_in_callers``), so a finding that rests on it is a warning."""
        func = function_of(reg.call)
        if reg.receiver is None or self.ctx.core.looked_up_in_callers(reg.receiver, func) is None:
            return None
        call = reg.receiver
        for _ in range(4):
            if not isinstance(call, ast.Name):
                break
            bindings = self.ctx.model.bindings_at(call)
            if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
                return None
            call = bindings[0].value
        if not isinstance(call, ast.Call) or any(isinstance(a, ast.Starred) for a in call.args) \
                or any(k.arg is None for k in call.keywords) or not self._plain_function(call.func):
            return None
        found = _union_of(self.dependence.of(arg, unit) for arg in [*call.args, *(k.value for k in call.keywords)])
        if found is not None:
            self.guessed_targets.add(id(reg.call))
        return found

    def _plain_function(self, func: ast.AST) -> bool:
        """``find_layer(...)`` or ``layers.find_layer(...)`` (a function, or one
        of an imported module), not a method of some object (``cls.from_dense(
        mod)`` builds a new module) nor an alternate constructor (``from_*``)."""
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name.startswith("from_"):
            return False
        if isinstance(func, ast.Name):
            return True
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and hasattr(func.value, "_hl_scope"):
            bindings = self.ctx.model.bindings_at(func.value)
            return len(bindings) == 1 and bindings[0].kind == "import"
        return False

    def _finding(self, rule: Rule, reg: Registration, repeat: str, times: int | None, fate: str,
                 related: Iterable[Related] = ()) -> Finding:
        event = "forward" if reg.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
        stacks = (f"after {times} iterations it is registered {times} times and runs {times} times per {event} pass"
                  if times and times > 1 else f"after N registrations it runs N times per {event} pass")
        message = (f"{hook_words(reg)} is registered on {reg.describe_target()} {repeat}, and {fate}: the hooks "
                   f"stack up, {stacks}")
        return rule.finding(
            self.ctx, reg.name_node, message, name_only=True,
            help="Register the hook once (before the loop, or in `__init__`), or keep the handle and call "
                 "`handle.remove()` before registering it again (a `with` block or `try`/`finally` does it).",
            related=related,
        )

    # ----------------------------------------------------- repeated functions
    def _repeat(self, func: ast.AST, needed: frozenset[str]) -> tuple[str, bool, list[Related]] | None:
        """Why ``func`` runs again with the same ``needed`` arguments: (words,
        proven, related locations); not proven for an entry point (a public
        method, a constructor, a public function) that nothing shown calls twice."""
        ctx = self.ctx
        model = ctx.model
        cls = model.enclosing_class(func)
        if is_step_method(model, func) and all(n == SELF or n.startswith(SELF + ".") for n in needed):
            return f"torch calls `{cls.name}.{func.name}` on every step", True, []  # type: ignore[union-attr]
        qual = ctx.qualname(func)
        if qual is None:
            return None
        reason = ctx.project.first_reason(qual, needed)
        if reason is None:
            return None
        if reason.kind == "public" and self._set_up_entry(reason.via[-1][0] if reason.via else qual):
            return None  # a method that only sets its object up: calling it again is a misuse, not its use
        related = [] if reason.path == ctx.display_path else \
            [Related("the call that repeats it", reason.path, Location(reason.line, 1))]
        text = reason.describe(ctx.display_path)
        if not reason.proven:
            text += "; nothing in the checked files calls it twice, so this is reported as a warning"
        return text, reason.proven, related

    def _set_up_entry(self, qual: str) -> bool:
        """Whether the public method ``qual`` of this file hooks its object's own
        modules and runs nothing (static/setup_methods.py): a deferred
        constructor, not an action each use repeats."""
        model = self.ctx.model
        for info in model.classes.values():
            for method in info.methods.values():
                if self.ctx.qualname(method) == qual:
                    methods = _ClassMethods(info)
                    if not only_sets_up(method, methods):
                        return False
                    if not called_only_to_set_up(model, method, self._class_methods_of, function_of):
                        return False  # called by code that runs things: a step of that action
                    # the object's own modules only: a module it was given belongs to its caller
                    return not attributes_used(method, methods) & given_attributes(methods.all())
        return False

    def _class_methods_of(self, func: ast.AST) -> "_ClassMethods | None":
        cls = self.ctx.model.enclosing_class(func)
        if cls is None or cls.methods.get(getattr(func, "name", "")) is not func:
            return None
        return _ClassMethods(cls)

    # ------------------------------------------------------------- handles
    def _handle_fate(self, reg: Registration, unit: ast.AST) -> str | None:
        """How the handle is lost ("its handle is discarded"...), or None when it
        is (or may be) removed."""
        ctx = self.ctx
        parent = getattr(reg.call, "_hl_parent", None)
        if isinstance(parent, ast.Expr):
            return "its handle is discarded"
        target = single_name_target(parent, reg.call) if parent is not None else None
        if target is not None:
            return self._name_handle_fate(target, parent, unit)  # type: ignore[arg-type]
        if isinstance(parent, ast.Return):
            # `return m.register_...(hook)` from a method, stored by the caller: `self.h = self._register()`
            stored = self._stored_from_method(reg)
            if stored is None:
                return None
            return self._self_removing_fate(reg, stored)
        if isinstance(parent, ast.Assign) and parent.value is reg.call and len(parent.targets) == 1 \
                and isinstance(parent.targets[0], ast.Attribute):
            attr = parent.targets[0].attr
            if self._attribute_read_elsewhere(attr, parent.targets[0]):
                return self._self_removing_fate(reg, parent.targets[0])
            return f"its handle is stored in `{src(parent.targets[0])}` and never removed"
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr == "append" \
                and isinstance(getattr(parent, "_hl_parent", None), ast.Expr):
            holder = parent.func.value
            if isinstance(holder, ast.Attribute):
                owner = self._self_class(holder)
                if owner is not None:
                    released = ctx.core.handles_released(owner, holder.attr)
                    if released is not False:
                        return None
                elif self._attribute_read_elsewhere(holder.attr, holder, allow_append=True):
                    return None
                return f"its handle is appended to `{src(holder)}`, whose handles are never removed"
            if isinstance(holder, ast.Name):
                bindings = ctx.model.bindings_at(holder)
                if len(bindings) != 1 or self._name_used_except_append(holder, bindings[0]):
                    return None
                return f"its handle is appended to `{holder.id}`, whose handles are never removed"
        return None

    def _stored_from_method(self, reg: Registration) -> ast.Attribute | None:
        """``self.<attr> = self.<method>()`` where ``method`` returns the
        registration: the ``self.<attr>`` (the only caller of the method)."""
        func = function_of(reg.call)
        cls = self.ctx.model.enclosing_class(func) if isinstance(func, FunctionNode) else None
        if cls is None or func not in cls.methods.values():
            return None
        returns = [n for n in executed_nodes(func) if isinstance(n, ast.Return)]
        if len(returns) != 1:
            return None
        calls = [c for c in self.ctx.model.method_calls.get(func.name, ())  # type: ignore[union-attr]
                 if self._self_class(c.func) is cls]
        if len(calls) != 1:
            return None
        holder = getattr(calls[0], "_hl_parent", None)
        if isinstance(holder, ast.Assign) and holder.value is calls[0] and len(holder.targets) == 1 \
                and isinstance(holder.targets[0], ast.Attribute) and self._self_class(holder.targets[0]) is cls:
            return holder.targets[0]
        return None

    def _self_removing_fate(self, reg: Registration, stored: ast.Attribute) -> str | None:
        """Every read of the stored handle is ``self.<attr>.remove()`` in the
        hook's own body: the hook is removed only if it runs."""
        hook = reg.hook
        if hook is None or reg.kind not in (HookKind.FORWARD, HookKind.FORWARD_PRE) or reg.receiver is None:
            return None
        owner = self._self_class(stored)
        removals = []
        for node in self._load_index()[1].get(stored.attr, ()):
            other = self._self_class(node)
            if owner is not None and other is not None and other is not owner and not _related_classes(owner, other):
                continue
            parent = getattr(node, "_hl_parent", None)
            call = getattr(parent, "_hl_parent", None)
            if not (isinstance(parent, ast.Attribute) and parent.attr == "remove" and isinstance(call, ast.Call)
                    and call.func is parent and contains(hook.node, call)):
                return None
            removals.append(call)
        if not removals:
            return None
        self.conditional_fates.add(id(reg.call))
        event = "forward" if reg.kind in (HookKind.FORWARD, HookKind.FORWARD_PRE) else "backward"
        return (f"its handle, `{src(stored)}`, is removed only by the hook itself (line {removals[0].lineno}), when "
                f"it runs: a module whose {event} never runs (a layer the input does not reach) keeps it")

    def _name_handle_fate(self, target: ast.Name, stmt: ast.stmt, unit: ast.AST) -> str | None:
        ctx = self.ctx
        binding = binding_of(ctx, target, stmt)
        scope = ctx.model.scope_of(target)
        if binding is None or target.id in scope.globals_ or target.id in scope.nonlocals:
            return None
        removed_outside: list[ast.Call] = []
        dead: list[ast.Call] = []
        for node in self._load_index()[0].get(target.id, ()):
            if not contains(scope.node, node):
                continue
            if ctx.model.scope_of(node) is not scope:
                return None  # used by a nested function: it may remove it
            if binding not in ctx.model.bindings_at(node) and \
                    (node.lineno <= binding.lineno or not _other_branch(ctx, node, binding)):
                continue  # another binding of the name, in straight-line code
            parent = getattr(node, "_hl_parent", None)
            call = getattr(parent, "_hl_parent", None)
            if isinstance(parent, ast.Attribute) and parent.attr == "remove" and isinstance(call, ast.Call) \
                    and call.func is parent:
                if not ctx.core.can_run(call):
                    dead.append(call)  # after a `return`, in a branch that never runs: removes nothing
                    continue
                if contains(unit, call):
                    return None
                removed_outside.append(call)
                continue
            return None  # the handle goes somewhere hooklint does not follow
        if dead and not removed_outside:
            first = min(dead, key=lambda c: c.lineno)
            return (f"its only `{target.id}.remove()`, at line {first.lineno}, never runs "
                    f"({ctx.core.unreachable_reason(first)})")
        if removed_outside:
            return (f"its handle `{target.id}` is overwritten each time; `{target.id}.remove()` at line "
                    f"{min(c.lineno for c in removed_outside)} removes only the last one")
        return f"its handle `{target.id}` is never removed"

    def _attribute_read_elsewhere(self, attr: str, stored: ast.AST, allow_append: bool = False) -> bool:
        """Is ``<x>.<attr>`` read anywhere other than in a test for None (or, for
        lists, other than to append)?  ``self.<attr>`` in the methods of an
        unrelated class is another object's attribute and does not count."""
        owner = self._self_class(stored)
        for node in self._load_index()[1].get(attr, ()):
            if node is stored:
                continue
            other = self._self_class(node)
            if owner is not None and other is not None and other is not owner and not _related_classes(owner, other):
                continue
            parent = getattr(node, "_hl_parent", None)
            if allow_append and isinstance(parent, ast.Attribute) and parent.attr in _LIST_METHODS_THAT_DROP:
                continue
            if isinstance(parent, ast.Compare) and all(isinstance(c, ast.Constant) and c.value is None
                                                       for c in parent.comparators):
                continue
            return True
        return False

    def _self_class(self, attribute: ast.AST) -> ClassInfo | None:
        """The class whose instance ``self.<attr>`` is, when the receiver is a method's ``self``."""
        key = id(attribute)
        if key not in self._self_classes:
            self._self_classes[key] = self._compute_self_class(attribute)
        return self._self_classes[key]

    def _compute_self_class(self, attribute: ast.AST) -> ClassInfo | None:
        if not (isinstance(attribute, ast.Attribute) and isinstance(attribute.value, ast.Name)):
            return None
        bindings = self.ctx.model.bindings_at(attribute.value)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        func = bindings[0].scope.node
        params = positional_params(func)
        cls = self.ctx.model.enclosing_class(func)
        if not params or params[0] != attribute.value.id or cls is None or func not in cls.methods.values() \
                or is_staticmethod(func):
            return None
        return cls

    def _name_used_except_append(self, holder: ast.Name, binding: Binding) -> bool:
        ctx = self.ctx
        for node in self._load_index()[0].get(holder.id, ()):
            if contains(binding.scope.node, node):
                if ctx.model.scope_of(node) is not binding.scope:
                    return True
                if binding not in ctx.model.bindings_at(node):
                    continue
                parent = getattr(node, "_hl_parent", None)
                if isinstance(parent, ast.Attribute) and parent.attr in _LIST_METHODS_THAT_DROP:
                    continue
                return True
        return False


def _other_branch(ctx: FileContext, use: ast.Name, binding: Binding) -> bool:
    """Can ``binding`` reach ``use`` although another binding comes between them
    in the text (``if d == "fwd": h = ... elif ...: h = ...``, then ``use(h)``)?
    True when the bindings in between are all in branches (if/try) that do not
    hold ``binding`` itself."""
    others = [b for b in ctx.model.bindings_at(use) if b is not binding]
    for other in others:
        cur = getattr(other.node, "_hl_parent", None)
        in_branch = False
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            if isinstance(cur, (ast.If, ast.Try, ast.Match)) and not contains(cur, binding.node):
                in_branch = True
                break
            cur = getattr(cur, "_hl_parent", None)
        if not in_branch:
            return False
    return True


def _union_of(parts: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    out: set[str] = set()
    for part in parts:
        if part is None:
            return None
        out |= part
    return frozenset(out)


def _related_classes(a: ClassInfo, b: ClassInfo) -> bool:
    def bases(info: ClassInfo) -> set[int]:
        out, stack = set(), [info]
        while stack:
            cur = stack.pop()
            if id(cur) not in out:
                out.add(id(cur))
                stack.extend(cur.local_bases)
        return out

    return id(b) in bases(a) or id(a) in bases(b)


class _ClassMethods:
    """A class's methods by name, its bases of the file included."""

    def __init__(self, info: ClassInfo):
        self.info = info

    def get(self, name: str) -> ast.AST | None:
        return self.info.method(name)

    def all(self) -> list[ast.AST]:
        out: list[ast.AST] = []
        todo, seen = [self.info], set()
        while todo:
            info = todo.pop()
            if id(info) in seen:
                continue
            seen.add(id(info))
            out.extend(info.methods.values())
            todo.extend(info.local_bases)
        return out
