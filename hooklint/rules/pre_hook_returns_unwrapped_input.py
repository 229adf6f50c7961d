"""HKL411: a forward pre-hook hands back one of its positional arguments unwrapped; PyTorch takes a returned tuple as the whole argument tuple."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_arguments import on_every_module
from hooklint.static.hook_io import hooked_type_known, unwrapped_input_returns, walks_unknown_model
from hooklint.static.hooks import HookKind
from hooklint.static.pre_hook_args import callers_module


class PreHookReturnsUnwrappedInput(Rule):
    """
    ## What it does
    Reports a forward pre-hook, registered on modules whose arguments the
    file does not know (every module of a model, a module of the caller's
    model), that returns one element of its argument tuple unchanged:
    `return args[0]`, a name bound to it (`x = args[0]`, `(x,) = args`),
    or what a function of the file applied to `*args` returns when that
    function hands back its own argument (an identity `autograd.Function`
    whose `forward` returns `args[0]` for a single argument, a helper
    `lambda *a: a[0] if len(a) == 1 else a`).

    ## Why is this bad?
    A forward pre-hook's return value, when it is not `None`, *replaces the
    module's whole positional-argument tuple*: PyTorch uses a returned tuple
    as the arguments, and wraps anything else in a one-element tuple.  A
    hook that returns `args[0]` therefore drops every other positional
    argument, and when that one argument is itself a tuple (a module called
    as `block((x, mask))`, a recurrent cell's `(h, c)` state) the tuple is
    spread: the module is called as `block(x, mask)` and fails with a
    `TypeError`, or, worse, accepts the new signature and computes something
    else.  Even "only when there is one argument" is wrong for that reason.

    ## Known problems
    Whether some hooked module takes a tuple (or several arguments) is not
    known from the file, so the severity is *warning*.  A registration
    narrowed to a module type (`isinstance(m, nn.Linear)`) is not reported.

    ## Example
    ```python
    def install(model, log):
        def enter(module, args):
            log.append(type(module).__name__)
            return args[0] if len(args) == 1 else args

        for m in model.modules():
            m.register_forward_pre_hook(enter)
    ```

    ## Use instead
    ```python
    def install(model, log):
        def enter(module, args):
            log.append(type(module).__name__)
            return args

        for m in model.modules():
            m.register_forward_pre_hook(enter)
    ```

    ## Fix safety
    There is no automatic fix: return the whole tuple (`return args`, or a
    new tuple of the same length, `return (new_x,) + args[1:]`), or `None`
    when the arguments stay as they are.

    ## References
    - [`Module.register_forward_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_pre_hook)
      ("If a single value is returned, it will be wrapped into a tuple")
    - xformers commit 0db4cbe (the profiler's pre-hook returned a one-argument module's tuple argument, spread)
    """

    code = "HKL411"
    name = "pre-hook-returns-unwrapped-input"
    summary = ("A forward pre-hook returns one of its arguments unwrapped; PyTorch takes a returned tuple as the "
               "whole argument tuple")
    severity = Severity.WARNING
    triggers = ("register_forward_pre_hook", "register_module_forward_pre_hook")
    VALID: ClassVar[tuple[str, ...]] = (
        # the whole tuple back
        "def install(model):\n"
        "    def enter(module, args):\n"
        "        return args\n"
        "    for m in model.modules():\n"
        "        m.register_forward_pre_hook(enter)\n",
        # a new tuple of the same length
        "def install(model):\n"
        "    def enter(module, args):\n"
        "        x = args[0]\n"
        "        return (x * 2,) + tuple(args[1:])\n"
        "    for m in model.modules():\n"
        "        m.register_forward_pre_hook(enter)\n",
        # a changed value, not the element itself
        "def install(model):\n"
        "    def enter(module, args):\n"
        "        return args[0].float()\n"
        "    model.register_forward_pre_hook(enter)\n",
        # modules of a known type
        "import torch.nn as nn\n"
        "def install(model):\n"
        "    for m in model.modules():\n"
        "        if isinstance(m, nn.Linear):\n"
        "            m.register_forward_pre_hook(lambda mod, args: args[0])\n",
        # a Function that always returns a tuple
        "import torch\n"
        "class Mark(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, *args):\n"
        "        return tuple(a.view_as(a) for a in args)\n"
        "    @staticmethod\n"
        "    def backward(ctx, *grads):\n"
        "        return grads\n"
        "def install(model):\n"
        "    def enter(module, args):\n"
        "        return Mark.apply(*args)\n"
        "    for m in model.modules():\n"
        "        m.register_forward_pre_hook(enter)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def install(model):\n"
            "    def enter(module, args):\n"
            "        return args[0] if len(args) == 1 else args  # HKL411\n"
            "    for m in model.modules():\n"
            "        m.register_forward_pre_hook(enter)\n"
        ),
        Invalid(
            "import torch\n"
            "class Pass(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, *xs):\n"
            "        if len(xs) == 1:\n"
            "            return xs[0]\n"
            "        return xs\n"
            "    @staticmethod\n"
            "    def backward(ctx, *gs):\n"
            "        return gs\n"
            "class Profiler:\n"
            "    def __init__(self, model):\n"
            "        self.handles = [m.register_forward_pre_hook(self.enter) for m in model.modules()]\n"
            "    def enter(self, module, inputs):\n"
            "        out = Pass.apply(*inputs)\n"
            "        return out  # HKL411\n"
        ),
        Invalid(
            "def first_only(model):\n"
            "    def keep(module, inputs):\n"
            "        (x,) = inputs\n"
            "        return x  # HKL411\n"
            "    return model.register_forward_pre_hook(keep)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for reg in ctx.hooks.instances:
            if reg.kind is not HookKind.FORWARD_PRE:
                continue
            hook = reg.hook
            node = getattr(hook, "node", None)
            if hook is None or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            args = reg.param("args" if reg.with_kwargs else "input")
            if args is None:
                continue
            if not reg.is_global and hooked_type_known(reg):
                continue
            if reg.is_global:
                where = "every module (a global pre-hook)"
            else:
                where = on_every_module(ctx, reg) or walks_unknown_model(reg)
                if where is None and reg.receiver is not None:
                    func = ctx.core.places.owner(reg.call)
                    where = callers_module(ctx.model, ctx.core, reg.receiver, func)
            if where is None:
                continue  # the file knows the hooked module's arguments
            for found in unwrapped_input_returns(ctx.model, node, args):
                if id(found.node) in seen:
                    continue
                seen.add(id(found.node))
                if found.single_only:
                    when = "when the module is called with one argument"
                    effect = "so if that one argument is itself a tuple it is spread into several arguments"
                else:
                    when = "whatever the module is called with"
                    effect = ("so the other positional arguments are dropped and, if that argument is itself a "
                              "tuple, it is spread into several arguments")
                yield self.finding(
                    ctx, found.node,
                    message=(f"forward pre-hook `{hook.name}` returns {found.text}, one element of `{args}`, "
                             f"{when}; it is registered on {where}: PyTorch takes a returned tuple as the whole "
                             f"argument tuple and wraps anything else, {effect} (the module is called with "
                             f"another signature)"),
                    help=f"Return the whole tuple (`return {args}`, or a new tuple of the same length), or "
                         f"`None` to leave the arguments unchanged.",
                    related=[Related("registered here", ctx.display_path, ctx.span(reg.call)[0])],
                )
