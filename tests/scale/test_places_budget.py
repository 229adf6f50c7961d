"""The places of hooklint.static.core stop after a budget of steps per question:
answers inside a chain of bindings are not remembered, so a long chain of calls
through `self` once made one corpus file (transformer-lens's
architecture_adapter.py) run without end.  Past the budget a place is UNKNOWN,
which only makes rules quieter."""

from __future__ import annotations

import hooklint.static.core.places as places
from hooklint.static.checker import check_text

HANDLE_LIST = """\
import torch


class Probe:
    def __init__(self, model):
        self.model = model
        self.handles = []

    def attach(self):
        self.handles.append(self.model.register_forward_hook(self.hook))

    def detach(self):
        for handle in self.handles:
            handle.remove()

    def hook(self, module, inputs, output):
        return None
"""


def codes(text: str) -> list[str]:
    return [f.code for f in check_text("probe.py", text, frozenset({"HKL316"}), prefilter=False).findings]


def test_the_handle_list_is_reported_within_the_budget():
    assert codes(HANDLE_LIST) == ["HKL316"]


def test_past_the_budget_places_are_unknown_and_the_rule_is_quiet(monkeypatch):
    monkeypatch.setattr(places, "MAX_STEPS", 0)
    assert codes(HANDLE_LIST) == []
