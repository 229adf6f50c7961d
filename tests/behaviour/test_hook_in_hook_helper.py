"""Real torch: a forward hook whose helper registers a pre-hook on the hooked
module's child, keeping handles nobody removes, stacks one more pre-hook per
forward (HKL304); removing them in the same run keeps one."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl304_registered_by_helper_in_hook.py"


def test_inner_hooks_stack_per_pass():
    ns = runpy.run_path(str(FIXTURE))
    for name, per_pass in (("_Corrector", None), ("_CorrectorFixed", 1)):
        model = torch.nn.Sequential(ns["Block"]())
        corrector = ns[name]()
        corrector.attach(model)
        counts = []
        for _ in range(3):
            before = corrector.calls
            model(torch.ones(1, 2))
            counts.append(corrector.calls - before)
        if per_pass is None:
            assert counts == [1, 3, 5], counts  # one more inner hook each pass, and each fires on both runs
            assert len(model[0].act._forward_pre_hooks) == 3  # and they stay on the model
        else:
            assert counts == [per_pass] * 3 and not model[0].act._forward_pre_hooks


def test_the_finding_is_the_helper_call():
    text = FIXTURE.read_text(encoding="utf-8")
    rows = [f.location.row for f in lint(text, "HKL304")]
    assert len(rows) == 1 and text.splitlines()[rows[0] - 1].rstrip().endswith("# HKL304")
