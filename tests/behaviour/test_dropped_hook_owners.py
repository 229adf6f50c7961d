"""Real torch: an object that registers a hook in its constructor and keeps the
handle (`self.hook`), with a `close()` that removes it, leaves its hook on the
module for good when the function that made it lets it go without `close()`
(HKL304, torch-dreams 1.1.0's `get_gradients`): the hooks stack, one more per
call, and the objects stay alive through their bound `hook_fn`.  Closing them
(the good twin, fixtures/rules/hkl304_hook_leak.py's `features_closed`) leaves
the module clean.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from conftest import lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


class SaveOutput:
    def __init__(self, module):
        self.hook = module.register_forward_hook(self.hook_fn)

    def hook_fn(self, module, inputs, output):
        self.output = output

    def close(self):
        self.hook.remove()


def features_dropped(model, layers, x):
    probes = [SaveOutput(layer) for layer in layers]
    model(x)
    return [p.output for p in probes]


def features_closed(model, layers, x):
    probes = [SaveOutput(layer) for layer in layers]
    model(x)
    outputs = [p.output for p in probes]
    for p in probes:
        p.close()
    return outputs


def _model():
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def test_dropped_owners_leave_their_hooks_stacking():
    model = _model()
    for _ in range(5):
        features_dropped(model, [model[0], model[2]], torch.ones(1, 4))
    assert len(model[0]._forward_hooks) == 5
    assert len(model[2]._forward_hooks) == 5
    # and the dropped objects are kept alive by their own bound hook
    probe = SaveOutput(model[0])
    ref = weakref.ref(probe)
    del probe
    gc.collect()
    assert ref() is not None


def test_closed_owners_leave_the_model_clean():
    model = _model()
    for _ in range(5):
        features_closed(model, [model[0], model[2]], torch.ones(1, 4))
    assert len(model[0]._forward_hooks) == 0
    assert len(model[2]._forward_hooks) == 0


def test_rule_reports_the_dropped_owners_only():
    import inspect
    import textwrap

    body = "".join(textwrap.dedent(inspect.getsource(obj)) for obj in (SaveOutput, features_dropped, features_closed))
    driver = ("def explain(model, layers, batches):\n"
              "    for x in batches:\n"
              "        features_dropped(model, layers, x)\n"
              "        features_closed(model, layers, x)\n")
    found = lint(body + driver, "HKL304")
    assert [f.location.row for f in found] == [body.splitlines().index(
        "    probes = [SaveOutput(layer) for layer in layers]") + 1]
