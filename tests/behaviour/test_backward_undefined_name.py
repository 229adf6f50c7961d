"""Real torch: what HKL517 claims about names used only at backward time.

The fixture is executed as a module: importing it and every forward pass
(with grad enabled, and under ``no_grad``) succeed, and the code HKL517
reports raises NameError only when a backward pass reaches it; the correct
twins in the same file train.
"""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.backward_calls_undefined_name import BackwardCallsUndefinedName

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl517_backward_calls_undefined_name.py"


def _namespace() -> dict:
    namespace: dict = {"__name__": "hkl517_fixture"}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), namespace)  # noqa: S102
    return namespace


def _reported_names() -> set[str]:
    findings = lint(FIXTURE.read_text(encoding="utf-8"), BackwardCallsUndefinedName.code)
    return {re.search(r"(?:calls|reads) `([^`]+)`", f.message).group(1) for f in findings}


def test_reported_names_are_the_ones_backward_misses():
    assert _reported_names() == {"_unpack_mask", "SLOPE_TABLE", "grad_norm_of", "summarize_grad"}


def test_function_backward_raises_name_error_only_at_backward():
    ns = _namespace()
    x = torch.randn(2, 3, requires_grad=True)
    weight = torch.randn(4, 3, requires_grad=True)
    mask = torch.ones(2, 4)
    out = ns["PseudoQuantNoMaster"].apply(x, weight, mask)  # forward with grad: fine
    with torch.no_grad():
        ns["PseudoQuantNoMaster"].apply(x, weight, mask)  # inference: fine
    with pytest.raises(NameError, match="_unpack_mask"):
        out.sum().backward()

    y = ns["ClippedSurrogate"].apply(torch.randn(5, requires_grad=True))
    with pytest.raises(NameError, match="SLOPE_TABLE"):
        y.sum().backward()


def test_backward_hooks_raise_name_error_only_at_backward():
    ns = _namespace()
    p = torch.nn.Parameter(torch.ones(3))
    ns["attach_grad_scaler"](p)
    loss = (p * 2).sum()  # the forward runs with the hook registered
    with pytest.raises(NameError, match="grad_norm_of"):
        loss.backward()

    probed = ns["ProbedLinear"]()
    out = probed(torch.randn(2, 4))
    with torch.no_grad():
        probed(torch.randn(2, 4))
    with pytest.raises(NameError, match="summarize_grad"):
        out.sum().backward()


def test_correct_twins_train():
    ns = _namespace()
    x = torch.randn(6, requires_grad=True)
    mask = (torch.rand(6) > 0.5).float()
    ns["FusedMaskGrad"].apply(x, mask).sum().backward()
    assert torch.equal(x.grad, mask)

    z = torch.tensor([0.5, 2.0], requires_grad=True)
    ns["DefinedLater"].apply(z).sum().backward()
    assert z.grad.tolist() == [1.0, 0.0]

    p = torch.nn.Parameter(torch.ones(3))
    logger = ns["PostAccumulateLogger"](p)
    (p * 3).sum().backward()
    assert logger.seen == [9.0]
