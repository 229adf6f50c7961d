"""HKL324: attributes copied onto a replacement module by name, hook dicts left out."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.forward_binding import attribute_copies_dropping_hooks
from hooklint.static.values import src


class HookDictsNotCopied(Rule):
    """
    ## What it does
    Reports a function that carries a module's attributes over to another
    module by name (`for name in dir(model): setattr(fx_model, name,
    getattr(model, name))`, or over `vars(model)` / `model.__dict__`),
    leaves out the names that start with an underscore (`name.startswith("_")`,
    a pattern `"_"` used with `re.match`), and never names a hook dict.
    It reports the filter.

    ## Why is this bad?
    A module's hooks live in dicts on the instance: `_forward_hooks`,
    `_forward_pre_hooks`, `_backward_hooks`, `_backward_pre_hooks` (and
    their `_with_kwargs` companions, the state-dict hooks).  A module made
    afresh (`torch.fx.symbolic_trace`, `GraphModule`, `prepare_fx`, a
    quantized or fused replacement) has none of them.  Copying the
    original's attributes over is how such code keeps what the rest of
    the program put on the module, but the underscore filter drops exactly
    the hook dicts: every hook registered on the original (a distillation
    feature recorder, a profiler, `weight_norm`'s pre-hook) silently stops
    firing once the replacement is used.  neural-compressor 2.0's FX
    adaptor lost intermediate-layer distillation hooks this way; 2.1
    copies the three hook dicts explicitly.

    ## Known problems
    The severity is *warning*: the original module may carry no hook.  The
    function must show that it handles modules (an `isinstance(...,
    nn.Module)` test, a module argument); a copy of plain objects is not
    reported.  A function that names any hook dict (or a string
    mentioning hooks) is taken to handle them.

    ## Example
    ```python
    import torch.nn as nn

    def carry_over(new_model, model):
        for name in dir(model):
            if name.startswith("_") or hasattr(new_model, name):
                continue
            attr = getattr(model, name)
            if not isinstance(attr, nn.Module):
                setattr(new_model, name, attr)
        return new_model
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")

    def carry_over(new_model, model):
        for name in dir(model):
            if name.startswith("_") or hasattr(new_model, name):
                continue
            attr = getattr(model, name)
            if not isinstance(attr, nn.Module):
                setattr(new_model, name, attr)
        for name in HOOK_DICTS:
            getattr(new_model, name).update(getattr(model, name))
        return new_model
    ```

    ## Fix safety
    No fix is offered.

    ## References
    - [`nn.Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
    - [neural-compressor #445](https://github.com/intel/neural-compressor/pull/445)
    """

    code = "HKL324"
    name = "hook-dicts-not-copied"
    summary = "module attributes copied by name without the underscore ones: the hooks stay on the original"
    severity = Severity.WARNING
    # the underscore filter (`startswith("_")`, `name[0] == "_"`, a pattern `r"_"` / `"^_"`) ...
    triggers = ('startswith("_', "startswith('_", '"_",', "'_',", '"_"]', "'_']", '"^_', "'^_", '== "_"', "== '_'")
    # ... and the attribute names listed (`dir(x)`, `vars(x)`, `x.__dict__`, `inspect.getmembers(x)`)
    trigger_pattern = r"\b(?:dir|vars)\(|__dict__|getmembers\("
    VALID: ClassVar[tuple[str, ...]] = (
        # the hook dicts carried over explicitly (neural-compressor 2.1)
        "import re\n"
        "import torch\n"
        "def append_attr(fx_model, model):\n"
        "    special = [r'_forward_hooks', r'_forward_pre_hooks', r'_backward_hooks']\n"
        "    for name in dir(model):\n"
        "        if any(re.search(p, name) for p in special) or not re.match(r'_', name):\n"
        "            attr = getattr(model, name)\n"
        "            if not isinstance(attr, torch.nn.Module):\n"
        "                setattr(fx_model, name, attr)\n",
        # plain objects: no sign of a module
        "def copy_config(dst, src):\n"
        "    for key, value in vars(src).items():\n"
        "        if not key.startswith('_'):\n"
        "            setattr(dst, key, value)\n",
        # every attribute copied, underscore ones included
        "import torch.nn as nn\n"
        "def clone_into(new: nn.Module, old: nn.Module):\n"
        "    for key in vars(old):\n"
        "        setattr(new, key, getattr(old, key))\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import re\n"
            "import torch\n"
            "def append_attr(fx_model, model):\n"
            "    fx_attr = dir(fx_model)\n"
            "    ignore = [r'_', r'quant', r'weight', r'bias']  # HKL324\n"
            "    names = [i for i in dir(model) if i not in fx_attr and not any(re.match(p, i) for p in ignore)]\n"
            "    for name in names:\n"
            "        attr = getattr(model, name)\n"
            "        if isinstance(attr, torch.nn.Module):\n"
            "            continue\n"
            "        setattr(fx_model, name, attr)\n"
            "    return fx_model\n",
        ),
        Invalid(
            "import torch.fx\n"
            "import torch.nn as nn\n"
            "def trace_keeping_state(model: nn.Module):\n"
            "    traced = torch.fx.symbolic_trace(model)\n"
            "    for key, value in model.__dict__.items():\n"
            "        if key[0] == '_':  # HKL324\n"
            "            continue\n"
            "        setattr(traced, key, value)\n"
            "    return traced\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for node, source, target, func in attribute_copies_dropping_hooks(ctx):
            yield self.finding(
                ctx, node,
                f"`{getattr(func, 'name', '?')}` copies the attributes of `{src(source)}` onto `{src(target)}` by "
                f"name but leaves out the names that start with `_`: the module's hook dicts "
                f"(`_forward_hooks`, `_forward_pre_hooks`, `_backward_hooks`) are among them, so the hooks "
                f"registered on `{src(source)}` do not follow it and silently stop firing once `{src(target)}` "
                f"is used in its place",
                help=f"Carry the hook dicts over explicitly (`getattr({src(target)}, n).update(getattr({src(source)}, "
                     f"n))` for `_forward_hooks`, `_forward_pre_hooks`, `_backward_hooks`, `_backward_pre_hooks` and "
                     f"their `_with_kwargs` companions), or register the hooks on the new module.",
            )
