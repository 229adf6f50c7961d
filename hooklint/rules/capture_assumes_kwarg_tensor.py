"""HKL412: a hook or capture treats a keyword argument of the hooked call as a tensor, but callers pass optional ones as None."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.hook_io import forward_captures, unguarded_kwarg_uses
from hooklint.static.hooks import HookKind


class CaptureAssumesKwargTensor(Rule):
    """
    ## What it does
    Reports a hook or capture that receives the keyword arguments of a call
    of a module it does not define, and uses one of them, picked by key
    (`kwargs["attention_mask"]`, `kwargs.get("position_ids")`, a name bound
    to one), as a tensor (`.to(...)`, `.shape`, `.device`, `.float()`...)
    with nothing testing it for `None` (or its type) first.  The hooks and
    captures it looks at: forward pre-hooks and forward hooks registered
    with `with_kwargs=True`, a function stored as a module's `forward`
    (`m.forward = partial(capture, m)`, a closure a factory returns), and
    the `forward` of a wrapper module put in a module's slot
    (`layers[0] = Catcher(layers[0])`).

    ## Why is this bad?
    The keyword arguments a module is called with are whatever its parent
    passes.  Optional inputs (attention masks, position ids, caches, cross
    attention states) are commonly passed explicitly as `None`: Hugging Face
    decoder layers receive `attention_mask=None` under Flash Attention 2 or
    SDPA, `position_ids=None` when positions are implicit.  A capture that
    calls `kwargs["attention_mask"].to(device)` then raises
    `AttributeError: 'NoneType' object has no attribute 'to'` inside the
    model's forward, for every model (or attention backend) that passes
    `None` there: calibration or quantization cannot start.

    ## Known problems
    Whether the parent passes that key as `None` is not visible from the
    file (it is the model library's code), so the severity is *warning*
    and the message says "can".  Keyword arguments of a module the file
    defines and calls itself are not reported.

    ## Example
    ```python
    import torch.nn as nn

    class Catcher(nn.Module):
        def __init__(self, layer, cache):
            super().__init__()
            self.layer, self.cache = layer, cache

        def forward(self, hidden_states, **kwargs):
            self.cache.append((hidden_states, kwargs["attention_mask"].to("cpu")))
            raise ValueError

    layers[0] = Catcher(layers[0], cache)
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    class Catcher(nn.Module):
        def __init__(self, layer, cache):
            super().__init__()
            self.layer, self.cache = layer, cache

        def forward(self, hidden_states, **kwargs):
            mask = kwargs.get("attention_mask")
            self.cache.append((hidden_states, mask.to("cpu") if mask is not None else None))
            raise ValueError

    layers[0] = Catcher(layers[0], cache)
    ```

    ## Fix safety
    There is no automatic fix: test the value for `None` (or
    `isinstance(value, torch.Tensor)`) before using it as a tensor, and
    keep `None` where the model passed `None`.

    ## References
    - [`Module.register_forward_pre_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_pre_hook) (`with_kwargs`)
    - AutoGPTQ issue 401 (the layer capture failed on `attention_mask=None` under Flash Attention 2)
    """

    code = "HKL412"
    name = "capture-assumes-kwarg-tensor"
    summary = ("A hook or capture uses a keyword argument of the hooked call as a tensor; callers pass optional "
               "ones as None")
    severity = Severity.WARNING
    triggers = ("kwargs", "kw[", "kw.get")
    # (`(?<![\w.])`: a dotted chain is tried from its start only; without it `.forward` chains backtrack)
    trigger_pattern = (r"with_kwargs|\.forward[ \t]*=[^=]|setattr\(.{0,80}?[\"']forward[\"']"
                       r"|(?<![\w.])(\w+(?:\.\w+)*\[[^\]\n]{1,40}\])[ \t]*=[ \t]*[A-Z]\w*\([ \t]*\1")
    VALID: ClassVar[tuple[str, ...]] = (
        # tested for None
        "def watch(model, log):\n"
        "    def hook(module, args, kwargs):\n"
        "        mask = kwargs.get('attention_mask')\n"
        "        if mask is not None:\n"
        "            log.append(mask.to('cpu'))\n"
        "    return model.register_forward_pre_hook(hook, with_kwargs=True)\n",
        # conditional expression
        "def watch(model, log):\n"
        "    def hook(module, args, kwargs):\n"
        "        log.append(kwargs['mask'].cpu() if kwargs['mask'] is not None else None)\n"
        "    return model.register_forward_pre_hook(hook, with_kwargs=True)\n",
        # an early exit
        "def watch(model, log):\n"
        "    def hook(module, args, kwargs, output):\n"
        "        ids = kwargs.get('position_ids')\n"
        "        if ids is None:\n"
        "            return\n"
        "        log.append(ids.shape)\n"
        "    return model.register_forward_hook(hook, with_kwargs=True)\n",
        # the module the file defines: it knows what is passed
        "import torch.nn as nn\n"
        "class Block(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.register_forward_pre_hook(self.hook, with_kwargs=True)\n"
        "    def hook(self, module, args, kwargs):\n"
        "        return args, {'x': kwargs['x'].float()}\n",
        # a default of its own
        "def install(layer, store):\n"
        "    def capture(*args, **kwargs):\n"
        "        store.append(kwargs.get('scale', 1.0))\n"
        "        return layer.__class__.forward(layer, *args, **kwargs)\n"
        "    layer.forward = capture\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def catch(layers, cache):\n"
            "    class Catcher(nn.Module):\n"
            "        def __init__(self, m):\n"
            "            super().__init__()\n"
            "            self.m = m\n"
            "        def forward(self, x, **kwargs):\n"
            "            cache.append((x, kwargs['attention_mask'].to('cpu')))  # HKL412\n"
            "            raise ValueError\n"
            "    layers[0] = Catcher(layers[0])\n"
        ),
        Invalid(
            "from functools import partial\n"
            "def capture(store, module, hidden_states=None, **kw):\n"
            "    ids = kw.get('position_ids')\n"
            "    store.append(ids.device)  # HKL412\n"
            "    return module.old_forward(hidden_states, **kw)\n"
            "def install(model, store):\n"
            "    for m in model.layers:\n"
            "        m.old_forward = m.forward\n"
            "        m.forward = partial(capture, store, m)\n"
        ),
        Invalid(
            "def record(model, seen):\n"
            "    def pre(module, args, kwargs):\n"
            "        seen.append(kwargs['attention_mask'].shape)  # HKL412\n"
            "    return model.register_forward_pre_hook(pre, with_kwargs=True)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        seen: set[int] = set()
        for func, kwargs, what, where, site in self._receivers(ctx):
            for use in unguarded_kwarg_uses(func, kwargs):
                if id(use.node) in seen:
                    continue
                seen.add(id(use.node))
                yield self.finding(
                    ctx, use.node,
                    message=(f"{what}, uses `{kwargs}[{use.key}]` as a tensor (`.{use.node.attr}`) without testing it "
                             f"for None: it receives the keyword arguments {where} passes, and optional inputs "
                             f"(masks, position ids, caches) can be passed explicitly as None (Flash Attention and "
                             f"SDPA paths of Hugging Face models pass `attention_mask=None`), which would raise "
                             f"`AttributeError` inside the model's forward"),
                    help="Test the value first (`if value is not None`, or `isinstance(value, torch.Tensor)`) and "
                         "keep None where the model passed None.",
                    related=[Related("installed here", ctx.display_path, ctx.span(site)[0])],
                )

    @staticmethod
    def _receivers(ctx: FileContext):
        for reg in ctx.hooks.registrations:
            if reg.kind not in (HookKind.FORWARD, HookKind.FORWARD_PRE) or not reg.with_kwargs:
                continue
            node = getattr(reg.hook, "node", None)
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            value = reg.receiver_value
            if getattr(value, "local_class", None) is not None or getattr(value, "torch_class", None):
                continue  # a module the file defines, or torch's own: its keyword arguments are known
            if reg.receiver is not None and ctx.model.enclosing_class(reg.call) is not None \
                    and isinstance(reg.receiver, ast.Name) and reg.receiver.id == "self":
                continue
            kwargs = reg.param("kwargs")
            if kwargs is None:
                continue
            kind = "forward hook" if reg.kind is HookKind.FORWARD else "forward pre-hook"
            yield node, kwargs, f"{kind} `{reg.hook.name}` (registered with `with_kwargs=True`)", "the hooked module's caller", reg.call
        for cap in forward_captures(ctx.model, ctx.inference, ctx.tree):
            if cap.kwargs is None:
                continue
            name = getattr(cap.func, "name", "<lambda>")
            yield (cap.func, cap.kwargs, f"`{name}`, which runs in place of `{ast.unparse(cap.receiver)}`'s forward "
                   f"({cap.how})", f"the parent of `{ast.unparse(cap.receiver)}`", cap.site)
