"""HKL414: a hook or capture creates a per-key record as a bare value on one path and appends to it on later calls."""

from __future__ import annotations

import ast
from typing import ClassVar, Iterable

from hooklint.findings import Finding, Related, Severity
from hooklint.rules.base import Invalid, Rule
from hooklint.static.capture_state import first_value_then_append
from hooklint.static.context import FileContext
from hooklint.static.hook_io import forward_captures
from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import walk_tree


class CaptureFirstValueThenAppend(Rule):
    """
    ## What it does
    Reports a hook or capture (a registered hook, a function stored as a
    module's `forward`, or a callback a factory returns) that keeps a dict of
    per-key records across calls, creates the record under
    `if key not in records:` as a list on one path and as the bare value
    (`records[key] = data`) on another, and, on later calls, appends to the
    record (`records[key].append(...)`) with nothing testing what it holds.

    ## Why is this bad?
    A hook or capture runs once per call of its module: once per calibration
    sample, per step.  The first call creates each record, the later calls
    extend it, so the record must be a list on every path that creates it.
    When the first sample takes the bare-value path (an optional keyword
    argument that is `None` on that sample, a key treated as shared), the
    first later sample that reaches the append fails with
    `AttributeError: 'NoneType' object has no attribute 'append'` (or
    `'Tensor' object ...`), only for the models and data that take that path
    first.

    ## Known problems
    Which path the first call takes depends on the data, so the severity is
    *warning*.  Only records created and extended in the two branches of one
    `if key not in records` test are compared.

    ## Example
    ```python
    from functools import partial


    def make_capture(store):
        def capture(module, *args, **kwargs):
            for key, value in kwargs.items():
                if key not in store:
                    if value is None:
                        store[key] = value
                    else:
                        store[key] = [value]
                else:
                    store[key].append(value)
            return module.orig_forward(*args, **kwargs)

        return capture


    def install(layer, store):
        layer.orig_forward = layer.forward
        layer.forward = partial(make_capture(store), layer)
    ```

    ## Use instead
    ```python
    from functools import partial


    def make_capture(store):
        def capture(module, *args, **kwargs):
            for key, value in kwargs.items():
                if key not in store:
                    store[key] = [value]
                else:
                    store[key].append(value)
            return module.orig_forward(*args, **kwargs)

        return capture


    def install(layer, store):
        layer.orig_forward = layer.forward
        layer.forward = partial(make_capture(store), layer)
    ```

    ## Fix safety
    There is no automatic fix: create the record as a list on every path
    (`[value]`, or `[]` for a missing value), or turn a stored bare value
    into a list before appending.

    ## References
    - [`Module.register_forward_hook`](https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.register_forward_hook)
      ("called every time after forward() has computed an output")
    - auto-round pull request 1979 (a None first value, then `append` on it)
    """

    code = "HKL414"
    name = "capture-first-value-then-append"
    summary = ("A hook or capture creates a per-key record as a bare value on one path and appends to it on later "
               "calls")
    severity = Severity.WARNING
    # the append on a record (`records[key].append(`), and the `if key not in records:` line the shape
    # starts with: "forward" / "_hook" alone admitted 290 more files of the corpus to parsing
    triggers = ("].append(", "].extend(")
    # and a hook or a capture in the file (a registration, a `forward` assignment, a `partial`); each
    # lookahead is one scan of the text from its start
    trigger_pattern = (r"\A(?=[\s\S]*?(?:_hook\(|\.forward[ \t]*=[^=]|partial\())"
                       r"(?=[\s\S]*?\n[ \t]*if [^\n]{1,120} not in [^\n]{1,120}:)")
    VALID: ClassVar[tuple[str, ...]] = (
        # a list on every path
        "def watch(model, store):\n"
        "    def hook(module, args, output):\n"
        "        name = type(module).__name__\n"
        "        if name not in store:\n"
        "            store[name] = [output]\n"
        "        else:\n"
        "            store[name].append(output)\n"
        "    return model.register_forward_hook(hook)\n",
        # the record is tested before the append
        "def watch(model, store):\n"
        "    def hook(module, args, output):\n"
        "        if 'out' not in store:\n"
        "            store['out'] = output if output is None else [output]\n"
        "        else:\n"
        "            if store['out'] is None:\n"
        "                store['out'] = []\n"
        "            store['out'].append(output)\n"
        "    return model.register_forward_hook(hook)\n",
        # a dict made in this call
        "def watch(model, sink):\n"
        "    def hook(module, args, output):\n"
        "        seen = {}\n"
        "        for o in output:\n"
        "            if 'a' not in seen:\n"
        "                seen['a'] = o if o is None else [o]\n"
        "            else:\n"
        "                seen['a'].append(o)\n"
        "        sink.append(seen)\n"
        "    return model.register_forward_hook(hook)\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "def watch(model, store):\n"
            "    def hook(module, args, output):\n"
            "        if 'out' not in store:\n"
            "            if output is None:\n"
            "                store['out'] = output\n"
            "            else:\n"
            "                store['out'] = [output]\n"
            "        else:\n"
            "            store['out'].append(output)  # HKL414\n"
            "    return model.register_forward_hook(hook)\n"
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        # the shape first (cheap, syntactic), the function's role only for the few that have it;
        # the semantic model links every node to its parent, which the guards are read through
        ctx.model
        candidates = {id(f): found for f in walk_tree(ctx.tree) if isinstance(f, FunctionNode)
                      for found in [first_value_then_append(f)] if found}
        if not candidates:
            return
        seen: set[int] = set()
        for func, what in self._bodies(ctx, candidates):
            if id(func) in seen:
                continue
            seen.add(id(func))
            for found in candidates[id(func)]:
                yield self.finding(
                    ctx, found.extend,
                    message=(f"{what} appends to `{found.entry}` on later calls, but the first call can create that "
                             f"record as the bare value (`{ast.unparse(found.store)}`, line {found.store.lineno}) "
                             f"instead of a list: it runs once per call of the module, so when the first call takes "
                             f"that path, the next one raises `AttributeError` here"),
                    help="Create the record as a list on every path (`[value]`, `[]` for a missing value), or turn "
                         "a stored bare value into a list before appending.",
                    related=[Related("the bare value is stored here", ctx.display_path, ctx.span(found.store)[0])],
                )

    @staticmethod
    def _bodies(ctx: FileContext, candidates: dict):
        for reg in ctx.hooks.registrations:
            node = getattr(reg.hook, "node", None)
            if isinstance(node, FunctionNode) and id(node) in candidates:
                yield node, f"hook `{node.name}`"
        for cap in forward_captures(ctx.model, ctx.inference, ctx.tree):
            if isinstance(cap.func, FunctionNode) and id(cap.func) in candidates:
                yield cap.func, f"`{cap.func.name}`, which runs in place of a module's forward,"
        for outer in walk_tree(ctx.tree):
            if not isinstance(outer, FunctionNode):
                continue
            returned = {n.id for r in ast.walk(outer) if isinstance(r, ast.Return) and r.value is not None
                        for n in ast.walk(r.value) if isinstance(n, ast.Name)}
            for inner in outer.body:
                if isinstance(inner, FunctionNode) and id(inner) in candidates and inner.name in returned:
                    yield inner, f"callback `{inner.name}` (returned by `{outer.name}`, run once per call)"
