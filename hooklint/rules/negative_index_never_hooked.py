"""HKL415: hooks placed where a loop position is in the caller's indices; a negative index never is."""

from __future__ import annotations

from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.context import FileContext
from hooklint.static.describe import KIND_WORDS
from hooklint.static.hooks import REGISTRATION_TRIGGERS
from hooklint.static.index_selection import negative_blind_selections
from hooklint.static.values import src


class NegativeIndexNeverHooked(Rule):
    """
    ## What it does
    Reports a hook registered only where a loop position (the counter of
    `enumerate(...)` or `range(...)`) is among indices the caller chose (a
    parameter such as `layer_ids`, or `self.layers` set from one), tested
    with `in`, `not in` or `==`, when nothing in the code maps negative
    indices to positions or rejects them.  The test may be an `if` around
    the registration, an earlier `if ...: continue`, or the filter of the
    comprehension the hooked modules come from.

    ## Why is this bad?
    Python's indexing lets a caller say `-1` for the last layer, and callers
    do (`layers=[-1]`, `layer_ids=(-2, -1)`), but a position from
    `enumerate` or `range` is never negative: `-1 in layer_ids` is never
    tested, no position equals it, and the layer it names gets no hook.
    Nothing fails: the activations of that layer are simply never recorded
    (or never steered, pruned, masked), and the caller gets an empty or
    shorter result with no error to say why.

    ## Known problems
    The rule cannot see what the callers pass: a function documented for
    non-negative indices only is reported too.  It is quiet when the code
    handles negative indices anywhere it reads them (`i - len(blocks) in
    ids`, `k % n`, `len(...) + k`, a check such as `k < 0` that rejects or
    maps them, a `-1` it tests for), when the indices are a constant of the
    code rather than the caller's, and when the positions are not the
    plain counter of `enumerate` / `range` (a negative start, a negative
    step).  The severity is *warning*.

    ## Example
    ```python
    def record(model, layer_ids, store):
        handles = []
        for i, block in enumerate(model.blocks):
            if i not in layer_ids:
                continue
            handles.append(block.register_forward_hook(
                lambda m, args, out, i=i: store.setdefault(i, []).append(out)))
        return handles
    ```

    ## Use instead
    ```python
    def record(model, layer_ids, store):
        n = len(model.blocks)
        wanted = {k % n for k in layer_ids}
        handles = []
        for i, block in enumerate(model.blocks):
            if i not in wanted:
                continue
            handles.append(block.register_forward_hook(
                lambda m, args, out, i=i: store.setdefault(i, []).append(out)))
        return handles
    ```

    ## Fix safety
    There is no automatic fix: whether a negative index should count from
    the end (as Python's indexing does) or be refused is the function's
    contract.  Normalize the indices before the loop (`k % n`, after
    checking `-n <= k < n`), or raise on the ones no position can match.

    ## References
    - [Python: common sequence operations](https://docs.python.org/3/library/stdtypes.html#common-sequence-operations):
      a negative index counts from the end
    - [`enumerate`](https://docs.python.org/3/library/functions.html#enumerate): positions start at 0
    - steering-vectors 0.12.1 (`record_activations` skipped `layer_nums=[-1]`; 0.12.2 tests
      `layer_num - len(matching_layers)` too)
    """

    code = "HKL415"
    name = "negative-index-never-hooked"
    summary = "Hooks placed where a loop position is in the caller's indices: a negative index never matches"
    severity = Severity.WARNING
    triggers = REGISTRATION_TRIGGERS
    trigger_pattern = r"\b(?:enumerate|range)\s*\("
    VALID: ClassVar[tuple[str, ...]] = (
        # negative indices mapped to positions first
        "def record(model, layer_ids, out):\n"
        "    n = len(model.layers)\n"
        "    wanted = [k if k >= 0 else n + k for k in layer_ids]\n"
        "    for i, layer in enumerate(model.layers):\n"
        "        if i in wanted:\n"
        "            layer.register_forward_hook(lambda m, a, o: out.append(o))\n",
        # the test itself accounts for them (steering-vectors 0.12.2)
        "def record(model, layers, layer_nums, out):\n"
        "    for num, name in enumerate(layers):\n"
        "        if layer_nums is not None and num not in layer_nums \\\n"
        "                and (num - len(layers)) not in layer_nums:\n"
        "            continue\n"
        "        model.get_submodule(name).register_forward_hook(lambda m, a, o: out.append(o))\n",
        # negative indices refused up front
        "def record(model, layer_ids, out):\n"
        "    if any(k < 0 for k in layer_ids):\n"
        "        raise ValueError('layer_ids must be non-negative')\n"
        "    for i, layer in enumerate(model.layers):\n"
        "        if i in layer_ids:\n"
        "            layer.register_forward_hook(lambda m, a, o: out.append(o))\n",
        # the indices are the code's own constant, not the caller's
        "HOOKED = (0, 3, 5)\n"
        "def record(model, out):\n"
        "    for i, layer in enumerate(model.layers):\n"
        "        if i in HOOKED:\n"
        "            layer.register_forward_hook(lambda m, a, o: out.append(o))\n",
        # the layers are picked by indexing, which takes negative indices as Python does
        "def record(model, layer_ids, out):\n"
        "    for k in layer_ids:\n"
        "        model.layers[k].register_forward_hook(lambda m, a, o: out.append(o))\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def record(model, layer_ids, out):\n"
            "    for i, layer in enumerate(model.layers):\n"
            "        if i in layer_ids:\n"
            "            layer.register_forward_hook(lambda m, a, o: out.append(o))  # HKL415\n"
        ),
        # the indices kept by the constructor, a `range` position, an earlier `continue`
        Invalid(
            "class Steer:\n"
            "    def __init__(self, model, layers):\n"
            "        self.model, self.layers = model, list(layers)\n"
            "    def attach(self, vector):\n"
            "        hs = []\n"
            "        for idx in range(len(self.model.h)):\n"
            "            if idx not in self.layers:\n"
            "                continue\n"
            "            hs.append(self.model.h[idx].register_forward_pre_hook(  # HKL415\n"
            "                lambda m, a: (a[0] + vector,)))\n"
            "        return hs\n"
        ),
        # one index compared with ==, the layers picked by a comprehension
        Invalid(
            "def tap(blocks, layer_index, fn):\n"
            "    chosen = [b for pos, b in enumerate(blocks) if pos == layer_index]\n"
            "    for block in chosen:\n"
            "        block.register_forward_hook(fn)  # HKL415\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        for hit in negative_blind_selections(ctx):
            kind = KIND_WORDS.get(hit.kind, "hook")
            producer = hit.producer.func.id if hasattr(hit.producer.func, "id") else "the loop"
            message = (f"this {kind} is registered only where the position `{hit.counter}` (from "
                       f"`{producer}(...)`, never negative) passes `{src(hit.test)}`, and the indices are "
                       f"{hit.origin}: a negative index (`-1` for the last layer, as Python's indexing "
                       f"allows) never equals a position, so what it names (the last one, for `-1`) gets no hook "
                       f"and nothing that hook would record or change happens, with no error")
            yield self.finding(
                ctx, hit.registration.func, message,
                help="Map negative indices to positions before the loop (`{k % n for k in indices}` after "
                     "checking `-n <= k < n`), or reject them with an error.",
                related=[Related("the positions come from here", ctx.display_path, ctx.span(hit.producer)[0]),
                         Related("the test on the position", ctx.display_path, ctx.span(hit.test)[0])],
            )
