"""Real torch: what HKL506 and HKL507 claim about custom autograd Functions.

HKL506: a gradient that ignores the incoming gradient does not scale with it,
while the chain rule (and the good twin) does.  HKL507: a tuple in one input's
gradient position makes backward raise.  The Functions are the fixtures' own.
"""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

HKL506_FIXTURE = FIXTURES / "rules" / "hkl506_function_backward_ignores_grad_output.py"
HKL507_FIXTURE = FIXTURES / "rules" / "hkl507_function_grad_is_tuple.py"


@pytest.fixture(scope="module")
def ignores():
    return runpy.run_path(str(HKL506_FIXTURE))


@pytest.fixture(scope="module")
def nested():
    return runpy.run_path(str(HKL507_FIXTURE))


def _grads(apply, inputs, scale):
    """Gradients of `inputs` when the Function's output is scaled by `scale` before the loss."""
    out = apply(*inputs)
    return torch.autograd.grad((out * scale).sum(), [t for t in inputs if t.requires_grad], allow_unused=True)


def test_the_findings_are_where_the_fixture_says():
    text = HKL506_FIXTURE.read_text(encoding="utf-8")
    flagged = {text.splitlines()[f.location.row - 1].strip() for f in lint(text, "HKL506")}
    assert flagged == {"return grad_output, glogits, None  # HKL506", "return grad_x, grad_w  # HKL506",
                       "return grad_hidden, d_aux  # HKL506", "return g, pull  # HKL506"}


def test_penalty_gradient_does_not_follow_loss_scaling(ignores):
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)

    def run(cls, scale):
        out = cls.apply((logits ** 2).mean(), logits)
        return torch.autograd.grad(out * scale, logits)[0]  # through the loss and through the penalty

    buggy_1, buggy_1000 = run(ignores["MaxLogitPenalty"], 1.0), run(ignores["MaxLogitPenalty"], 1000.0)
    fixed_1, fixed_1000 = run(ignores["MaxLogitPenaltyFixed"], 1.0), run(ignores["MaxLogitPenaltyFixed"], 1000.0)
    # the loss term scales by 1000 in both; the penalty term only in the fixed one
    direct = torch.autograd.grad((logits ** 2).mean(), logits)[0]
    assert torch.allclose(fixed_1000, 1000 * fixed_1)
    assert not torch.allclose(buggy_1000, 1000 * buggy_1)
    assert torch.allclose(buggy_1000 - 1000 * direct, buggy_1 - direct)  # the penalty part did not move
    assert torch.allclose(buggy_1, fixed_1)  # identical when the upstream gradient is exactly one


def test_weight_gradient_from_helper_does_not_scale(ignores):
    x = torch.randn(4, 3)
    w = torch.randn(3, requires_grad=True)
    for name, scales in (("DecayedScale", False), ("DecayedScaleFixed", True)):
        cls = ignores[name]
        g1 = _grads(cls.apply, (x, w), 1.0)[0]
        g7 = _grads(cls.apply, (x, w), 7.0)[0]
        assert torch.allclose(g7, 7 * g1) is scales, name


def test_injected_aux_gradient_ignores_the_upstream_scale(ignores):
    hidden = torch.randn(2, 4, requires_grad=True)
    aux = torch.tensor(0.3, requires_grad=True)
    cls = ignores["AuxLossInjector"]
    g1 = _grads(cls.apply, (hidden, aux), 1.0)
    g100 = _grads(cls.apply, (hidden, aux), 100.0)
    assert torch.allclose(g100[0], 100 * g1[0])  # the hidden states' gradient follows the scale
    assert torch.equal(g100[1], g1[1])  # the auxiliary loss's does not


def test_inherited_forward_pull_ignores_the_scale(ignores):
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    cls = ignores["PassthroughWithPull"]
    g1, g5 = _grads(cls.apply, (x, y), 1.0), _grads(cls.apply, (x, y), 5.0)
    assert torch.allclose(g5[0], 5 * g1[0]) and torch.equal(g5[1], g1[1])


def test_good_twins_scale_or_are_zero(ignores):
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3, requires_grad=True)
    z = torch.randn(3, requires_grad=True)
    g1, g3 = _grads(ignores["Detached"].apply, (x, y, z), 1.0), _grads(ignores["Detached"].apply, (x, y, z), 3.0)
    assert torch.allclose(g3[0], 3 * g1[0]) and g1[1] is None and torch.equal(g3[2], torch.zeros(3))


def test_tuple_in_a_gradient_slot_raises(nested):
    y = torch.randn(4, 3, requires_grad=True)
    bias = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"expected Variable or None \(got tuple\)"):
        nested["BiasAct"].apply(y, bias).sum().backward()
    nested["BiasActFixed"].apply(y, bias).sum().backward()
    first = y.grad.clone()
    y.grad = None
    nested["BiasActWhole"].apply(y, bias).sum().backward()
    assert torch.equal(y.grad, first) and bias.grad is not None


def test_autograd_grad_tuple_not_spread_raises(nested):
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"expected Variable or None \(got tuple\)"):
        nested["Recompute"].apply(torch.sin, x).sum().backward()
    nested["RecomputeFixed"].apply(torch.sin, x).sum().backward()
    assert torch.allclose(x.grad, torch.cos(x.detach()))


def test_halves_as_one_slot_raise(nested):
    a = torch.randn(2, requires_grad=True)
    b = torch.randn(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"expected Variable or None \(got tuple\)"):
        nested["Halves"].apply(a, b).sum().backward()
    nested["HalvesFixed"].apply(a, b).sum().backward()
    assert torch.equal(a.grad, torch.ones(2)) and torch.equal(b.grad, torch.ones(2))


HKL508_FIXTURE = FIXTURES / "rules" / "hkl508_function_saved_subset_misindexed.py"


def test_compacted_saves_pair_inputs_with_the_wrong_tensor():
    ns = runpy.run_path(str(HKL508_FIXTURE))
    const = torch.tensor([1.0, 2.0, 3.0])  # an earlier input that needs no grad
    x = torch.tensor([4.0, 5.0, 6.0], requires_grad=True)

    def mul(a, b):
        return a * b

    ns["InputTimesGradFixed"].apply(mul, const, x).sum().backward()
    assert torch.equal(x.grad, const * x.detach())  # relevance of x: d(out)/dx * x
    x.grad = None
    # the buggy one looks up position 1 of a one-element saved list: the index runs past the end
    with pytest.raises(IndexError):
        ns["InputTimesGrad"].apply(mul, const, x).sum().backward()

    a = torch.tensor([2.0], requires_grad=False)
    b = torch.tensor([3.0], requires_grad=True)
    c = torch.tensor([5.0], requires_grad=True)
    ns["Product3Fixed"].apply(a, b, c).sum().backward()
    fixed = (b.grad.clone(), c.grad.clone())
    b.grad = c.grad = None
    assert torch.equal(fixed[0], a * c.detach()) and torch.equal(fixed[1], a * b.detach())
    with pytest.raises(IndexError):  # position 2 of the two tensors saved
        ns["Product3"].apply(a, b, c).sum().backward()
