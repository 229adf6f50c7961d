"""What rules may conclude from hooks linked across files (no torch).

:mod:`hooklint.graph.crossfile` gives a library file's registrations the
modules of the caller's models they land on (``FileFacts.linked``).  A rule
asks here, for one registration:

* :func:`hooked_pairs`: modules that are certainly hooked when the linking
  call runs (exact links): enough to report what happens on them (the op a
  legacy hook binds to, an in-place op that breaks a full hook);
* :func:`all_pairs`: every module the project can hook there, when the
  links are *complete* (every call in the checked files was linked): enough
  to say that nothing goes wrong (no in-place op follows any of them, all of
  them are legacy-safe); None otherwise.

Both are empty/None when nothing links, and rules then keep their static
verdicts: the graph only sharpens them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.graph.facts import FileFacts, LinkedHook, ModelFacts, ModuleFacts

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

Pair = tuple[ModelFacts, ModuleFacts]


def registration_call(receiver: ast.AST | None) -> ast.Call | None:
    """The ``register_*hook`` call whose receiver is ``receiver``."""
    parent = getattr(receiver, "_hl_parent", None)
    if isinstance(parent, ast.Attribute) and parent.value is receiver and parent.attr.startswith("register_"):
        call = getattr(parent, "_hl_parent", None)
        if isinstance(call, ast.Call) and call.func is parent:
            return call
    return None


def links_for(ctx: "FileContext", call: ast.Call | None) -> list[LinkedHook]:
    facts = ctx.graph if isinstance(ctx.graph, FileFacts) else None
    if facts is None or call is None or not facts.linked:
        return []
    return facts.linked_at(call.lineno, call.col_offset + 1)


def _unique(pairs: list[Pair]) -> list[Pair]:
    out: list[Pair] = []
    seen: set[tuple[int, str]] = set()
    for model, module in pairs:
        key = (id(model), module.path)
        if key not in seen:
            seen.add(key)
            out.append((model, module))
    return out


def hooked_pairs(links: list[LinkedHook]) -> list[Pair]:
    """Modules certainly hooked (those its forward calls)."""
    return _unique([(m, mod) for link in links if link.exact for m, mod in link.pairs() if mod.calls])


def all_pairs(links: list[LinkedHook]) -> list[Pair] | None:
    """Every module the project can hook here, or None when some call was not linked."""
    if not links or not all(link.complete for link in links):
        return None
    return _unique([(m, mod) for link in links for m, mod in link.pairs() if mod.calls])


@dataclass(frozen=True)
class LinkNote:
    """How a model reached the registration, for messages."""

    text: str


def via_text(links: list[LinkedHook], model: ModelFacts | None = None) -> str:
    """``; the model comes from main.py:86 `KFACOptimizer(net, ...)`, built by `net = ...` (line 62, ...)``."""
    chosen = next((link for link in links if model is None or link.model is model), None)
    if chosen is None:
        return ""
    where = chosen.via[0] if chosen.via else chosen.callee
    built = chosen.model.source
    origin = chosen.model.origin_file
    from os.path import basename

    file = f"{basename(origin)}: " if origin else ""
    more = f" (then {', '.join(chosen.via[1:])})" if len(chosen.via) > 1 else ""
    return f"; linked through {where}{more}, the model built in {file}{built}"


def full_hook_breaker(module: ModuleFacts):
    """The in-place op that makes a full backward hook on ``module`` fail the
    forward (HKL403's condition), or None."""
    if module.output_inplace is not None and module.output_needs_grad is not False:
        return module.output_inplace
    if module.input_inplace is not None and module.inputs_from_data is False:
        return module.input_inplace
    return None


def exact_pairs_for_receiver(ctx: "FileContext", receiver: ast.AST | None) -> list[Pair]:
    """For :func:`hooklint.graph.link.modules_for`: the linked modules when they
    are all the modules hooked there (exact and complete links)."""
    links = links_for(ctx, registration_call(receiver))
    if not links or not all(link.exact and link.complete for link in links):
        return []
    return hooked_pairs(links)
