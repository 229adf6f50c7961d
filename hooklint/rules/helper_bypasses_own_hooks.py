"""HKL322: a module's own method returns `self.forward(...)` while the module is also called as a module."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.forward_binding import called_as_module, hands_over_to_module_call, helper_forward_results

_SKIPPED = frozenset({"forward", "__call__", "_call_impl", "_wrapped_call_impl"})


class HelperBypassesOwnHooks(Rule):
    """
    ## What it does
    Reports a method of an `nn.Module` subclass that returns the result of
    `self.forward(...)` as its own (`return self.forward(x)`, `out =
    self.forward(x, deterministic=True); return cast(Tensor, out)`), when
    the same file shows that instances of the class are also called as
    modules: the class's `__call__` hands over to `nn.Module.__call__`
    (`super().__call__(x)`), another of its methods calls `self(...)`, or the
    file calls an instance.

    ## Why is this bad?
    Module hooks run from `nn.Module.__call__`, never from `forward`.  Such
    a method (`best_action`, `sample`, `predict`, `embed`) is a second way
    to get the module's output, and it skips every forward pre-hook,
    forward hook and module backward hook registered on the module: the
    user's monitoring and debugging hooks, and torch's own (`weight_norm`,
    `spectral_norm` and pruning recompute the weight in a forward
    pre-hook, so the method computes with a stale weight).  Since the
    module is also called as a module elsewhere, its hooks fire on some
    paths and silently not on others: d3rlpy 2.0.4's policies were called
    as modules in training but through `best_action` / `sample` in action
    selection, where no hook a user put on the policy ran.

    ## Known problems
    The severity is *warning*: a method may run the module's computation
    without hooks on purpose (a partial forward that returns something
    else is not reported: the result must be `forward`'s own).  Whether the
    module is called as a module elsewhere is judged from this file only; a
    class whose instances are called in other files only is not reported.
    HKL303 reports `forward` called on another module.

    ## Example
    ```python
    import torch
    import torch.nn as nn

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, deterministic=False):
            return torch.tanh(self.fc(x))

        def __call__(self, x):
            return super().__call__(x)

        def best_action(self, x):
            return self.forward(x, deterministic=True)
    ```

    ## Use instead
    ```python
    import torch
    import torch.nn as nn

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x, deterministic=False):
            return torch.tanh(self.fc(x))

        def __call__(self, x, deterministic=False):
            return super().__call__(x, deterministic=deterministic)

        def best_action(self, x):
            return self(x, deterministic=True)
    ```

    ## Fix safety
    No fix is offered: calling `self(...)` runs the module's hooks in the
    method too, which changes what they see (that is the point, but review
    it), and a `__call__` override may not accept `forward`'s keywords.

    ## References
    - [`nn.Module.forward`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.forward):
      "one should call the Module instance afterwards instead of this since the
      former takes care of running the registered hooks while the latter
      silently ignores them"
    - [d3rlpy #244](https://github.com/takuseno/d3rlpy/issues/244)
    """

    code = "HKL322"
    name = "helper-bypasses-own-hooks"
    summary = "a module's method returns `self.forward(...)` while the module is also called: hooks fire on one path only"
    severity = Severity.WARNING
    triggers = ("forward",)
    # the helper returns `<its first parameter>.forward(...)`: a call on a bare name, not on `self.layer`.  The
    # pattern starts at the literal `.forward` and looks back (one fixed-width look-behind per name length, up to
    # 24 characters), which costs a fortieth of scanning every position for a name (1.2 s on the corpus)
    trigger_pattern = (r"\.forward(?:"
                       + "|".join(r"(?<=[^\w.][A-Za-z_]" + r"\w" * k + r"\.forward)" for k in range(24))
                       + r")[ \t]*\(")
    VALID: ClassVar[tuple[str, ...]] = (
        # no sign that the module is ever called as a module (transformers' Gemma3n AltUp)
        "import torch.nn as nn\n"
        "class AltUp(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2\n"
        "    def scale_corrected_output(self, x):\n"
        "        return self.forward(x)\n",
        # a partial forward whose result is not the module's output (transformer-lens)
        "import torch.nn as nn\n"
        "class Bridge(nn.Module):\n"
        "    def forward(self, x, stop_at_layer=None):\n"
        "        return x\n"
        "    def __call__(self, x):\n"
        "        return super().__call__(x)\n"
        "    def input_to_embed(self, x):\n"
        "        residual = self.forward(x, stop_at_layer=0)\n"
        "        return residual, x\n",
        # the helper calls the module
        "import torch.nn as nn\n"
        "class Policy(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "    def __call__(self, x):\n"
        "        return super().__call__(x)\n"
        "    def best_action(self, x):\n"
        "        return self(x)\n",
        # a __call__ that replaces torch's: `policy(x)` runs no hook either
        "import torch.nn as nn\n"
        "class Policy(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x\n"
        "    def __call__(self, x):\n"
        "        return self.forward(x)\n"
        "    def best_action(self, x):\n"
        "        return self.forward(x)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "from typing import cast\n"
            "class Policy(nn.Module):\n"
            "    def forward(self, x, with_log_prob=False):\n"
            "        return x\n"
            "    def __call__(self, x):\n"
            "        return cast(object, super().__call__(x))\n"
            "    def sample(self, x):\n"
            "        out = self.forward(x, with_log_prob=True)  # HKL322\n"
            "        return cast(tuple, out)\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Encoder(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x\n"
            "    def encode(self, x):\n"
            "        return self.forward(x)[0]  # HKL322\n"
            "encoder = Encoder()\n"
            "features = encoder(1)\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "class Critic(nn.Module):\n"
            "    def forward(self, x):\n"
            "        return x\n"
            "    def loss(self, x, y):\n"
            "        return (self(x) - y) ** 2\n"
            "    def value(this, x):\n"
            "        return this.forward(x)  # HKL322\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for cls in ctx.model.classes.values():
            if not ctx.model.is_module_class(cls) or cls.method("forward") is None:
                continue
            helpers = [stmt for stmt in cls.node.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                       and stmt.name not in _SKIPPED and not (stmt.name.startswith("__") and stmt.name.endswith("__"))
                       and not any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                                   for d in stmt.decorator_list)]
            calls = [(h, c) for h in helpers for c in helper_forward_results(ctx, h)]
            if not calls:
                continue
            own_call = cls.method("__call__")
            if own_call is not None and not hands_over_to_module_call(own_call):
                continue  # its own __call__ replaces torch's: no path runs the hooks
            sign = called_as_module(ctx, cls)
            if sign is None:
                continue
            for helper, call in calls:
                self_name = call.func.value.id  # type: ignore[attr-defined]
                yield self.finding(
                    ctx, call,
                    f"`{cls.name}.{helper.name}` returns `{self_name}.forward(...)` as its result: a caller that "
                    f"uses `.{helper.name}(...)` gets the module's output without its forward pre-hooks, forward "
                    f"hooks or backward hooks, while the module is also called as a module ({sign}), so hooks "
                    f"registered on it fire on one path and silently not on the other",
                    help=f"Call the module: `{self_name}(...)` (extend `__call__` to pass `forward`'s keywords if "
                         f"needed), so that every way of getting its output runs its hooks.",
                )
