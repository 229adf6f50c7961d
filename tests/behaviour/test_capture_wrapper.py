"""Real torch: what HKL328 claims.  A model whose forward reads an attribute of
its first layer before running it fails with AttributeError when the layer is
swapped for a capture wrapper; a forward pre-hook with kwargs captures the same
inputs.  The capture functions are the fixture's own."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl328_capture_wrapper_replaces_module.py"


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = nn.Linear(2, 2)

    def forward(self, hidden, scale=1.0):
        return self.self_attn(hidden) * scale


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        dtype = self.layers[0].self_attn.weight.dtype  # read before the layers run
        for layer in self.layers:
            x = layer(x.to(dtype), scale=0.5)
        return x


def test_wrapper_breaks_a_model_that_reads_the_layer_and_the_hook_does_not():
    ns = runpy.run_path(str(FIXTURE))
    batch = torch.ones(1, 2)
    model = Model()
    with pytest.raises(AttributeError, match="self_attn"):
        ns["capture_with_wrapper"](model, batch)
    assert isinstance(model.layers[0], Layer)  # put back by the finally
    cached = ns["capture_with_pre_hook"](model, batch)
    assert len(cached) == 1 and torch.equal(cached[0][0], batch) and cached[0][1] == {"scale": 0.5}
    assert not model.layers[0]._forward_pre_hooks


def test_findings_are_the_fixtures():
    text = FIXTURE.read_text(encoding="utf-8")
    lines = text.splitlines()
    rows = [f.location.row for f in lint(text, "HKL328")]
    assert len(rows) == 2 and all(lines[r - 1].rstrip().endswith("# HKL328") for r in rows)
