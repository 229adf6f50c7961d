"""Real torch (HKL420), on the fixture's own functions: every hook kind is
called with a fixed positional argument list, and a hook that cannot bind it
raises TypeError when the event first happens (the first state_dict(),
load_state_dict(), step(), forward, backward, saved tensor, buffer
registration).  Each `good_*` twin registers the same kind of hook with the
argument list torch passes, and the same event runs without error."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl420_hook_signature_mismatch.py"


@pytest.fixture(scope="module")
def scenarios():
    return runpy.run_path(str(FIXTURE))


def _names(prefix: str) -> list[str]:
    found = runpy.run_path(str(FIXTURE))
    return sorted(name[len(prefix):] for name in found if name.startswith(prefix))


def test_every_bad_scenario_has_a_good_twin():
    assert _names("bad_") == _names("good_")
    assert len(_names("bad_")) >= 18  # one per kind of registration the fixture covers


@pytest.mark.parametrize("kind", _names("bad_"))
def test_wrong_argument_list_raises_type_error_at_the_event(scenarios, kind):
    with pytest.raises(TypeError, match=r"positional argument|keyword-only argument"):
        scenarios[f"bad_{kind}"]()


@pytest.mark.parametrize("kind", _names("good_"))
def test_argument_list_torch_passes_works(scenarios, kind):
    scenarios[f"good_{kind}"]()


def test_node_hooks_of_a_walked_graph_take_two_arguments(scenarios):
    x = torch.ones(2, requires_grad=True)
    y = x * 3
    scenarios["walk_nodes"](y)
    y.sum().backward()
    assert torch.equal(x.grad, torch.full((2,), 3.0))


# ------------------------------------------------------------------ HKL905


@pytest.fixture(scope="module")
def numbers():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl905_state_dict_hook_number_as_tensor.py"))


def test_load_hook_on_the_float_default_raises(numbers):
    m = numbers["LoConLike"]()
    with pytest.raises(TypeError, match="must be Tensor, not float"):
        m.load_state_dict(m.state_dict())
    learned = numbers["LoConLike"](use_scalar=True)
    learned.load_state_dict(learned.state_dict())  # the tensor default: fine
    assert isinstance(learned.scalar, torch.nn.Parameter)


def test_state_dict_hook_on_the_int_default_raises(numbers):
    with pytest.raises(AttributeError, match="'int' object has no attribute 'detach'"):
        numbers["Gate"]().state_dict()
    assert "gate" in numbers["Gate"](torch.ones(1)).state_dict()


def test_private_load_pre_hook_on_the_float_default_raises(numbers):
    learned = numbers["Temperature"](learn=True)
    state = learned.state_dict()
    learned.load_state_dict(state)
    plain = numbers["Temperature"]()
    with pytest.raises(AttributeError, match="'float' object has no attribute 'dtype'"):
        plain.load_state_dict(state, strict=False)


@pytest.mark.parametrize("name", ["GuardedScale", "BufferScale"])
def test_good_twins_load_in_both_configurations(numbers, name):
    for use_scalar in (False, True):
        m = numbers[name](use_scalar=use_scalar)
        m.load_state_dict(m.state_dict())
