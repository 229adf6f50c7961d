"""Real torch: what HKL345 claims, and that the fix it suggests works.

A forward hook handed its owner's list itself (a closure over a local alias,
a default argument, ``functools.partial``) keeps filling that list after the
owner rebinds the attribute: the owner's new list stays empty.  Emptying the
list in place keeps one object.
"""

from __future__ import annotations

import functools

import pytest

from conftest import lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def _collect(bucket, module, args, output):
    bucket.append(output)


class Recorder:
    def __init__(self, layer, how: str, clear_in_place: bool):
        self.outputs = []
        self.clear_in_place = clear_in_place
        if how == "closure":
            store = self.outputs
            layer.register_forward_hook(lambda m, a, out: store.append(out))
        elif how == "default":
            layer.register_forward_hook(lambda m, a, out, sink=self.outputs: sink.append(out))
        else:
            layer.register_forward_hook(functools.partial(_collect, self.outputs))

    def reset(self):
        if self.clear_in_place:
            self.outputs.clear()
        else:
            self.outputs = []


@pytest.mark.parametrize("how", ["closure", "default", "partial"])
def test_rebound_attribute_stays_empty(how):
    layer = nn.Linear(3, 2)
    recorder = Recorder(layer, how, clear_in_place=False)
    layer(torch.randn(1, 3))
    assert len(recorder.outputs) == 1
    old = recorder.outputs
    recorder.reset()
    layer(torch.randn(1, 3))
    layer(torch.randn(1, 3))
    assert recorder.outputs == []  # the owner sees nothing
    assert len(old) == 3  # the hook kept filling the old list


@pytest.mark.parametrize("how", ["closure", "default", "partial"])
def test_clearing_in_place_keeps_recording(how):
    layer = nn.Linear(3, 2)
    recorder = Recorder(layer, how, clear_in_place=True)
    layer(torch.randn(1, 3))
    recorder.reset()
    layer(torch.randn(1, 3))
    assert len(recorder.outputs) == 1


BUGGY = '''
import torch

class Recorder:
    def __init__(self, layer):
        self.outputs = []
        store = self.outputs
        layer.register_forward_hook(lambda m, a, out: store.append(out))

    def reset(self):
        self.outputs = []
'''

FIXED = BUGGY.replace("    def reset(self):\n        self.outputs = []\n",
                      "    def reset(self):\n        self.outputs.clear()\n")


def test_rule_reports_the_rebind_and_not_the_clear_twin():
    found = lint(BUGGY, "HKL345")
    assert [(f.code, f.location.row) for f in found] == [("HKL345", 11)]
    assert FIXED != BUGGY
    assert lint(FIXED, "HKL345") == []
