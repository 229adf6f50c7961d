"""HKL325: a class's `forward` wrapped again each time an object is made."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.forward_binding import class_rewraps
from hooklint.static.values import src


class ForwardRewrappedPerObject(Rule):
    """
    ## What it does
    Reports an assignment that replaces a class's `forward` (or
    `__call__`) with a wrapper of the class's current `forward`, in code
    that runs once per object: `__new__` (`cls.forward =
    wrap(cls.forward)`), `__init__` or another method (`type(self).forward
    = ...`, `self.__class__.forward = ...`, `Model.forward = ...` inside
    `Model`'s methods), or a function given the object (`type(model).forward
    = wrap(type(model).forward)`).  `setattr(cls, "forward", ...)` counts
    too.

    ## Why is this bad?
    The attribute lives on the class, which every object shares, and the
    wrapper wraps whatever the class holds at that moment: the wrapper made
    for the previous object.  After N objects, every call of any of them
    goes through N nested wrappers.  It works at first and then gets
    slower, runs the wrapper's side effects N times (a context set N times,
    a hook-like callback N times), and, once enough objects were built
    (losses re-created per trial, models per test), fails with
    `RecursionError` in `forward`.  torchrl 0.3.0's `LossModule.__new__` did
    exactly this; 0.3.1 wraps once per class.

    ## Known problems
    An assignment under a test (`if not getattr(cls.forward, "wrapped",
    False):`) or after an early `return` guarded by a flag the code sets is
    taken as wrapping once and not reported; a wrapper that checks inside
    itself whether it already wrapped (in another file) is not seen, so the
    severity is *warning*.  A metaclass's `__new__` / `__init__` runs once
    per class and is not reported.

    ## Example
    ```python
    import functools
    import torch.nn as nn

    def traced(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper

    class Loss(nn.Module):
        def __new__(cls, *args, **kwargs):
            cls.forward = traced(cls.forward)
            return super().__new__(cls)
    ```

    ## Use instead
    ```python
    import functools
    import torch.nn as nn

    def traced(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)
        return wrapper

    class Loss(nn.Module):
        def __init_subclass__(cls, **kwargs):
            super().__init_subclass__(**kwargs)
            cls.forward = traced(cls.forward)  # once per class
    ```

    ## Fix safety
    No fix is offered: where to wrap once (a metaclass, `__init_subclass__`,
    a decorator on the class) is a design choice.

    ## References
    - [Python data model: `__init_subclass__`](https://docs.python.org/3/reference/datamodel.html#object.__init_subclass__)
    - [torchrl #1897](https://github.com/pytorch/rl/pull/1897)
    """

    code = "HKL325"
    name = "forward-rewrapped-per-object"
    summary = "a class's `forward` is wrapped again for every object: the wrappers nest"
    severity = Severity.WARNING
    triggers = ("forward", "__call__")
    # an assignment to the attribute, or `setattr(..., "forward", ...)`
    trigger_pattern = r"\.(?:forward|__call__)[ \t]*=[^=]|setattr\(.{0,80}?[\"'](?:forward|__call__)[\"']"
    VALID: ClassVar[tuple[str, ...]] = (
        # once per class, from __init_subclass__
        "import torch.nn as nn\n"
        "def wrap(f):\n"
        "    return lambda *a: f(*a)\n"
        "class Loss(nn.Module):\n"
        "    def __init_subclass__(cls):\n"
        "        cls.forward = wrap(cls.forward)\n",
        # a metaclass: its __init__ runs once per class
        "def wrap(f):\n"
        "    return lambda *a: f(*a)\n"
        "class Meta(type):\n"
        "    def __init__(cls, name, bases, ns):\n"
        "        super().__init__(name, bases, ns)\n"
        "        cls.forward = wrap(cls.forward)\n",
        # guarded by a marker the wrapper sets
        "import torch.nn as nn\n"
        "def wrap(f):\n"
        "    g = lambda *a: f(*a)\n"
        "    g.wrapped = True\n"
        "    return g\n"
        "class Loss(nn.Module):\n"
        "    def __new__(cls, *args):\n"
        "        if not getattr(cls.forward, 'wrapped', False):\n"
        "            cls.forward = wrap(cls.forward)\n"
        "        return super().__new__(cls)\n",
        # the instance's own forward: one wrapper per object, nothing shared
        "import torch.nn as nn\n"
        "def wrap(f):\n"
        "    return lambda *a: f(*a)\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.forward = wrap(self.forward)\n",
        # replacing with something that does not wrap the current forward
        "import torch.nn as nn\n"
        "def fast_forward(self, x):\n"
        "    return x\n"
        "def patch(model):\n"
        "    type(model).forward = fast_forward\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "def wrap(f):\n"
            "    return lambda *a: f(*a)\n"
            "class Loss(nn.Module):\n"
            "    def __new__(cls, *args, **kwargs):\n"
            "        cls.forward = wrap(cls.forward)  # HKL325\n"
            "        return super().__new__(cls)\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "def wrap(f):\n"
            "    return lambda *a: f(*a)\n"
            "class Policy(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        type(self).forward = wrap(type(self).forward)  # HKL325\n",
        ),
        Invalid(
            "import functools\n"
            "def instrument(model, log):\n"
            "    setattr(model.__class__, 'forward', functools.partial(log, model.__class__.forward))  # HKL325\n",
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for stmt, value, attr, words, func in class_rewraps(ctx):
            where = getattr(func, "name", "?")
            target = src(stmt.targets[0]) if isinstance(stmt, ast.Assign) else f"setattr(..., {attr!r}, ...)"
            yield self.finding(
                ctx, stmt,
                f"`{target}` wraps the class's current `{attr}` in {where}(), which runs for every object "
                f"({words}): the class is shared, so each new object wraps the previous wrapper again; after N "
                f"objects every call of `{attr}` goes through N nested wrappers (slower each time, the "
                f"wrapper's effects repeated N times, and at last RecursionError)",
                help=f"Wrap `{attr}` once per class: in `__init_subclass__`, a metaclass or a class decorator, "
                     f"or mark the wrapper and skip it when the class's `{attr}` is already wrapped.",
            )
