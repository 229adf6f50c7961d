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
