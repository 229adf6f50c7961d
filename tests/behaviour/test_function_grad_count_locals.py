"""Real torch: HKL501 on a backward that returns one local bound to tensors.

snntorch 1.0's LeakySpikeOperator returned `grad` (a local computed from the
incoming gradient) for a forward of two inputs; the fixture holds that shape
and its twins, run here as written.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl501_local_tensor_return.py"


def test_local_tensor_return_fails_and_twins_train():
    text = FIXTURE.read_text(encoding="utf-8")
    namespace: dict = {}
    exec(compile(text, str(FIXTURE), "exec"), namespace)  # noqa: S102
    rows = [f.location.row for f in lint(text, "HKL501")]
    lines = text.splitlines()
    assert [lines[r - 1].strip() for r in rows] == ["return grad  # HKL501", "return passed  # HKL501"]

    x = torch.randn(5, requires_grad=True)
    for name in ("LeakySpike", "StraightThrough"):
        with pytest.raises(RuntimeError, match=r"returned an incorrect number of gradients \(expected 2, got 1\)"):
            namespace[name].apply(x, 0.1 if name == "LeakySpike" else 4.0).sum().backward()
    for name in ("LeakySpikeFixed", "GradsBuiltElsewhere"):
        x.grad = None
        namespace[name].apply(x, 0.1).sum().backward()
        assert x.grad is not None
