"""HKL317: a forward pre-hook on a caller's module needs a positional argument, but a keyword-only call passes none (hook-semantics.md, section 6)."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_arguments import on_every_module, tensor_assumptions
from hooklint.static.hook_io import forward_captures
from hooklint.static.hooks import HookKind
from hooklint.static.pre_hook_args import callers_module, keyword_call_evidence, part_through_helper, positional_need


class PreHookNeedsPositionalInput(Rule):
    """
    ## What it does
    Reports a forward pre-hook registered without `with_kwargs=True` on a
    module of a model its caller supplies (the model, a part reached by
    attribute or accessor such as `get_input_embeddings()`, a submodule
    looked up by name), whose body cannot do without a positional argument
    (it reads `args[0]` or unpacks `args` with nothing handling an empty
    tuple, or raises when the tuple is empty), when something says the
    module is called with keyword arguments: the file calls that object
    with keyword arguments only (`model(**batch)`), or it is a part that
    Hugging Face models call with keywords (what `get_input_embeddings()`
    and the other `PreTrainedModel` accessors return, `.self_attn`,
    `.vision_tower`, `.vision_model`, `.language_model`).  A function
    stored as such a module's `forward`, or a capture module put in its
    slot (also a slot of what a helper returns when given the caller's
    model: `layers = family.get_model_layers(self.model)`, then
    `layers[0] = Catcher(layers[0])`), receives the call as it is and is
    asked the same question of its signature.

    ## Why is this bad?
    A forward pre-hook registered without `with_kwargs=True` receives only
    the call's positional arguments.  Many modules are called with keyword
    arguments only: Hugging Face models (`model(input_ids=...)`,
    `model(**batch)`), their vision towers and embeddings
    (`self.embeddings(pixel_values=...)`), attention layers
    (`self.self_attn(hidden_states=...)`).  For those the hook gets
    `args == ()`: it fails with `IndexError: tuple index out of range`, or
    with its own error, on every step, for exactly the models the library
    was not tested with.

    ## Known problems
    The library cannot see how the caller's model calls the module, so the
    severity is *warning*, and without one of the signals above nothing is
    reported: most layers (`nn.Linear`, `nn.Conv2d`) are called with their
    input as a positional argument, and a pre-hook reading `args[0]` on
    them is fine.  The Hugging Face part names are a table, not an
    analysis of the caller's model.  Hooks on every module of a model are HKL406's;
    a registration narrowed to a module type (`isinstance(m, nn.Linear)`)
    is not reported.

    ## Example
    ```python
    def make_inputs_require_grad(model):
        def hook(module, args):
            args[0].requires_grad_(True)

        return model.get_input_embeddings().register_forward_pre_hook(hook)
    ```

    ## Use instead
    ```python
    def make_inputs_require_grad(model):
        def hook(module, args, kwargs):
            if args:
                args[0].requires_grad_(True)
            for value in kwargs.values():
                if hasattr(value, "requires_grad_") and value.is_floating_point():
                    value.requires_grad_(True)

        return model.get_input_embeddings().register_forward_pre_hook(hook, with_kwargs=True)
    ```

    ## Fix safety
    There is no automatic fix: register with `with_kwargs=True` (the hook
    then takes `(module, args, kwargs)`) and look in the keyword arguments
    too.

    ## References
    - [`Module.register_forward_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_pre_hook) (`with_kwargs`)
    - unsloth-zoo pull request 96 (the gradient-checkpointing pre-hook failed on SigLIP's keyword-only call)
    """

    code = "HKL317"
    name = "pre-hook-needs-positional-input"
    summary = "A forward pre-hook on a caller's module needs a positional argument; a keyword-only call passes none"
    severity = Severity.WARNING
    triggers = ("register_forward_pre_hook", "forward")
    # a registration, or a function stored as a module's `forward` (assignment, `setattr`), or a wrapper
    # module built around the module in its own slot (`layers[0] = Catcher(layers[0])`)
    # (`(?<![\w.])`: a dotted chain is tried from its start only; without it `.forward` chains backtrack)
    trigger_pattern = (r"register_forward_pre_hook|\.forward[ \t]*=[^=]|setattr\(.{0,80}?[\"']forward[\"']"
                       r"|(?<![\w.])(\w+(?:\.\w+)*\[[^\]\n]{1,40}\])[ \t]*=[ \t]*[A-Z]\w*\([ \t]*\1")
    VALID: ClassVar[tuple[str, ...]] = (
        # with_kwargs: the hook sees both
        "def watch(model, log):\n"
        "    def hook(module, args, kwargs):\n"
        "        log.append(args[0] if args else kwargs)\n"
        "    return model.register_forward_pre_hook(hook, with_kwargs=True)\n",
        # handles the empty tuple
        "def watch(model, log):\n"
        "    def hook(module, args):\n"
        "        if not args:\n"
        "            return\n"
        "        log.append(args[0].shape)\n"
        "    return model.register_forward_pre_hook(hook)\n",
        # a module the file builds and calls
        "import torch.nn as nn\n"
        "layer = nn.Linear(2, 2)\n"
        "layer.register_forward_pre_hook(lambda m, args: print(args[0].shape))\n",
        # a layer of the caller's model with nothing saying how it is called: layers are mostly called positionally
        "import torch.nn as nn\n"
        "def watch(model, log):\n"
        "    for m in model.modules():\n"
        "        if isinstance(m, nn.Linear):\n"
        "            m.register_forward_pre_hook(lambda mod, args: log.append(args[0].shape))\n",
        # a module's pre-hook on itself
        "import torch.nn as nn\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_forward_pre_hook(lambda m, args: None)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def make_inputs_require_grad(model):\n"
            "    def hook(module, args):\n"
            "        args[0].requires_grad_(True)  # HKL317\n"
            "    return model.get_input_embeddings().register_forward_pre_hook(hook)\n"
        ),
        Invalid(
            "def first_token_ids(model, batch):\n"
            "    seen = []\n"
            "    def hook(module, inputs):\n"
            "        if len(inputs) == 0:\n"
            "            raise RuntimeError('no input')  # HKL317\n"
            "        seen.append(inputs[0][:, 0])\n"
            "    handle = model.register_forward_pre_hook(hook)\n"
            "    try:\n"
            "        model(**batch)\n"
            "    finally:\n"
            "        handle.remove()\n"
            "    return seen\n"
        ),
        Invalid(
            "class Capture:\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "        self.inputs = []\n"
            "    def start(self):\n"
            "        self.handle = self.model.vision_tower.register_forward_pre_hook(self.grab)\n"
            "    def grab(self, module, args):\n"
            "        (x,) = args  # HKL317\n"
            "        self.inputs.append(x)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.registrations:
            if reg.kind is not HookKind.FORWARD_PRE or reg.with_kwargs or reg.is_global or reg.receiver is None:
                continue
            hook = reg.hook
            node = getattr(hook, "node", None)
            if hook is None or hook.has_varargs or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                         ast.Lambda)):
                continue
            args = reg.param("input")
            if args is None:
                continue
            func = ctx.core.places.owner(reg.call)
            where = callers_module(ctx.model, ctx.core, reg.receiver, func)
            if where is None:
                continue
            evidence = keyword_call_evidence(ctx.model, ctx.core, reg.receiver, func)
            if evidence is None:
                continue  # nothing says the module is called with keywords: most layers are called positionally
            need = positional_need(node, args)
            if need is None or id(need.node) in seen:
                continue
            if on_every_module(ctx, reg) is not None and tensor_assumptions(node, None, args):
                continue  # a hook on every module: HKL406 reports it
            seen.add(id(need.node))
            consequence = ("raises its own error" if need.raises
                           else "fails with `IndexError: tuple index out of range`")
            yield self.finding(
                ctx, need.node,
                message=(f"forward pre-hook `{hook.name}` {need.text}, but it is registered without "
                         f"`with_kwargs=True` on {where}, which is likely called with keyword arguments only "
                         f"({evidence}): such a call hands the hook an empty `{args}` tuple, and the hook "
                         f"{consequence} on every call"),
                help="Register with `with_kwargs=True` and take `(module, args, kwargs)`, looking in `kwargs` "
                     "when `args` is empty (or return early on an empty tuple).",
                related=[Related("registered here", ctx.display_path, ctx.span(reg.call)[0])],
            )
        yield from self._captures(ctx, seen)

    def _captures(self, ctx: FileContext, seen: set[int]) -> Iterable[Finding]:
        """A function stored as a caller's module's `forward` (or a wrapper
        module put in its slot) receives the parent's call as it is, keywords
        included: the same question, asked of its signature and body."""
        for cap in forward_captures(ctx.model, ctx.inference, ctx.tree):
            func = ctx.core.places.owner(cap.site)
            if not cap.records_inputs():
                continue  # a lasting replacement passes its arguments on; a capture keeps them
            where = callers_module(ctx.model, ctx.core, cap.receiver, func) \
                or part_through_helper(ctx.model, ctx.core, cap.receiver, func)
            if where is None:
                continue
            evidence = keyword_call_evidence(ctx.model, ctx.core, cap.receiver, func)
            if evidence is None and cap.kwargs is not None:
                evidence = f"the capture itself takes `**{cap.kwargs}`"
            if evidence is None:
                continue
            name = getattr(cap.func, "name", "<lambda>")
            required = cap.required_inputs()
            if required and (len(cap.inputs) > len(required) or cap.func.args.kwonlyargs):
                continue  # it names the module's other inputs too: written for one known signature, not a capture
            if required:
                params = list(cap.func.args.posonlyargs) + list(cap.func.args.args)
                node = next((a for a in params if a.arg == required[0]), cap.func)
                need = (f"demands a first input `{required[0]}` with no default, filled only by a positional "
                        f"argument or the keyword `{required[0]}=`")
                consequence = (f"a parent that calls the module with keyword arguments only, naming its input "
                               f"otherwise, makes the call fail with `TypeError: missing ... '{required[0]}'`")
            elif cap.varargs is not None:
                found = positional_need(cap.func, cap.varargs)
                if found is None:
                    continue
                node, need = found.node, found.text
                consequence = (f"a call with keyword arguments only hands it an empty `{cap.varargs}` tuple and it "
                               + ("raises its own error" if found.raises
                                  else "fails with `IndexError: tuple index out of range`"))
            else:
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            yield self.finding(
                ctx, node,
                message=(f"`{name}` runs in place of the forward of {where} ({cap.how}), so it receives the "
                         f"parent's call as it is, like a pre-hook registered with `with_kwargs=True`; it "
                         f"{need}, and the module is likely called with keyword arguments ({evidence}): "
                         f"{consequence}"),
                help="Take `(*args, **kwargs)`, find the input in either (an optional parameter with a default "
                     "of None, moved into `kwargs` when given), and call the original forward with the "
                     "arguments as they came.",
                related=[Related("installed here", ctx.display_path, ctx.span(cap.site)[0])],
            )
