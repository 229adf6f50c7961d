"""HKL408: a forward hook without `with_kwargs` that judges the call by its positional arguments alone."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.core import places as P
from hooklint.static.hook_arguments import on_every_module, tensor_assumptions
from hooklint.static.hooks import HookKind
from hooklint.static.positional_view import judges_by_positional, looked_up_by_name, own_class_takes_kwargs
from hooklint.static.pre_hook_args import callers_module, keyword_call_evidence, positional_need


class HookReadsPositionalOnly(Rule):
    """
    ## What it does
    Reports a forward hook or forward pre-hook registered without
    `with_kwargs=True` whose body judges the call by its positional-argument
    tuple (its length, whether it is empty, the type of the tuple or of its
    elements: `inputs[0] if len(inputs) == 1 else inputs`,
    `isinstance(args[0], TensorDict)`), directly or in a helper of the file
    it hands the tuple to, when the hooked module may be called with keyword
    arguments: it is a layer of the caller's model (the model itself, a
    part reached by attribute, accessor or name), or it is the module itself
    and its class's `forward` (or a subclass's, in the file) takes
    `**kwargs`.

    ## Why is this bad?
    Without `with_kwargs=True`, PyTorch hands a forward hook and a forward
    pre-hook only the positional arguments of the call.  A module called as
    `layer(hidden_states=x, attention_mask=m)` (Hugging Face decoder layers,
    modules with keyword inputs) gives the hook `()`: a hook that records
    "the input" records an empty tuple, and a hook that decides how the
    module was called from the tuple decides wrong.  Nothing raises; the
    recorded inputs or the filtered outputs are silently wrong.

    ## Known problems
    Whether the module is really called with keyword arguments is not known
    from the file (the caller's model, a subclass's callers), so the
    severity is *warning* and the message says "if".  Hooks that need
    `args[0]` (an index error on a keyword call) are HKL317's, hooks on
    every module that read tensor attributes HKL406's.

    ## Example
    ```python
    class Trace:
        def __init__(self, model, layer_name):
            layer = model.get_submodule(layer_name)

            def retain(module, inputs, output):
                self.input = inputs[0] if len(inputs) == 1 else inputs
                self.output = output

            self.handle = layer.register_forward_hook(retain)
    ```

    ## Use instead
    ```python
    class Trace:
        def __init__(self, model, layer_name):
            layer = model.get_submodule(layer_name)

            def retain(module, args, kwargs, output):
                if args:
                    self.input = args[0] if len(args) == 1 else args
                else:
                    self.input = kwargs.get("hidden_states", kwargs)
                self.output = output

            self.handle = layer.register_forward_hook(retain, with_kwargs=True)
    ```

    ## Fix safety
    There is no automatic fix: register with `with_kwargs=True` (the hook
    then takes `(module, args, kwargs, output)`, or `(module, args, kwargs)`
    for a pre-hook) and look in `kwargs` too.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook) (`with_kwargs`)
    - EasyEdit pull request 654 (`nethook.Trace` recorded an empty input for decoder layers called with `hidden_states=`)
    - tensordict pull request 409 (the out-keys hook misclassified keyword calls)
    """

    code = "HKL408"
    name = "hook-reads-positional-only"
    summary = "A forward hook without `with_kwargs` judges the call by its positional arguments alone"
    severity = Severity.WARNING
    triggers = ("register_forward_hook", "register_forward_pre_hook")
    VALID: ClassVar[tuple[str, ...]] = (
        # with_kwargs: the hook sees both
        "def trace(model, name, store):\n"
        "    def hook(module, args, kwargs, output):\n"
        "        store['in'] = args[0] if len(args) == 1 else (args or kwargs)\n"
        "    return model.get_submodule(name).register_forward_hook(hook, with_kwargs=True)\n",
        # a module the file builds
        "import torch.nn as nn\n"
        "layer = nn.Linear(2, 2)\n"
        "def hook(module, inputs, output):\n"
        "    print(len(inputs))\n"
        "layer.register_forward_hook(hook)\n",
        # records the output only
        "def trace(model, name, store):\n"
        "    def hook(module, inputs, output):\n"
        "        store['out'] = output\n"
        "    return model.get_submodule(name).register_forward_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def trace(model, name, store):\n"
            "    def hook(module, inputs, output):\n"
            "        store['in'] = inputs[0] if len(inputs) == 1 else inputs  # HKL408\n"
            "    return model.get_submodule(name).register_forward_hook(hook)\n"
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Selector:\n"
            "    def __call__(self, module, args, output):\n"
            "        if self.by_key(args):  # HKL408\n"
            "            return output[0]\n"
            "    def by_key(self, args):\n"
            "        return not args\n"
            "class Base(nn.Module):\n"
            "    def select(self):\n"
            "        self.register_forward_hook(Selector())\n"
            "class Keyed(Base):\n"
            "    def forward(self, *args, **kwargs):\n"
            "        return kwargs\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.registrations:
            if reg.kind not in (HookKind.FORWARD, HookKind.FORWARD_PRE) or reg.with_kwargs or reg.is_global \
                    or reg.receiver is None:
                continue
            hook = reg.hook
            node = getattr(hook, "node", None)
            if hook is None or hook.has_varargs or node is None or id(node) in seen:
                continue
            args = reg.param("input")
            if args is None or _required(hook.params, node) > (3 if reg.kind is HookKind.FORWARD else 2):
                continue  # a `(module, args, kwargs, ...)` signature: another overload than this registration's
            judged = judges_by_positional(ctx.model, node, args)
            if judged is None:
                continue
            func = ctx.core.places.owner(reg.call)
            if ctx.core.places.of(reg.receiver, func) == P.SELF:
                evidence = own_class_takes_kwargs(ctx.tree, reg.call)
                where = "the module itself"
            else:
                evidence = None
                where = looked_up_by_name(ctx.model, reg.receiver, func)
                if where is not None and callers_module(ctx.model, ctx.core, reg.receiver, func) is not None:
                    evidence = "any layer of the caller's model, which the library cannot know is called positionally"
            if evidence is None:
                continue
            if reg.kind is HookKind.FORWARD_PRE and positional_need(node, args) is not None \
                    and keyword_call_evidence(ctx.model, ctx.core, reg.receiver, func) is not None:
                continue  # HKL317 reports the index that fails
            if on_every_module(ctx, reg) is not None and tensor_assumptions(
                    node, reg.param("output") if reg.kind is HookKind.FORWARD else None, args):
                continue  # HKL406 reports it
            seen.add(id(node))
            kind = "forward hook" if reg.kind is HookKind.FORWARD else "forward pre-hook"
            yield self.finding(
                ctx, judged.node,
                message=(f"{kind} `{hook.name}` {judged.text}, but it is registered without `with_kwargs=True` "
                         f"on {where} ({evidence}): PyTorch hands it only the positional arguments, so if the "
                         f"module is called with keyword arguments (`layer(hidden_states=x)`) the hook sees "
                         f"`{args} == ()` (or a shorter tuple) and silently misreads the call"),
                help="Register with `with_kwargs=True` (the hook then also takes `kwargs`, after `args`) and look "
                     "in the keyword arguments too.",
                related=[Related("registered here", ctx.display_path, ctx.span(reg.call)[0])],
            )


def _required(params: list[str], node: ast.AST) -> int:
    """How many of the hook's parameters have no default (``name=name`` in a loop is no argument of torch's)."""
    arguments = getattr(node, "args", None)
    defaults = len(arguments.defaults) if arguments is not None else 0
    return max(len(params) - defaults, 0)
