"""Real torch: an optimizer-like constructor that hooks every parameter it
is handed (HKL206), as torch.optim takes them (tensors, or dicts of
"params"), run on the fixture's own code.

The caller's parameters may be frozen (fine-tuning the last layer only):
`model.parameters()` then holds tensors that do not require grad, and
`register_post_accumulate_grad_hook` or `register_hook` raises on them.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES
from hooklint.static.checker import check_file

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl206_caller_param_groups.py"
REGISTER_ERROR = "cannot register a hook on a tensor that doesn't require gradient"


@pytest.fixture(scope="module")
def groups():
    return runpy.run_path(str(FIXTURE))


def _partly_frozen():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model[0].requires_grad_(False)
    return model


@pytest.mark.parametrize("as_groups", [False, True], ids=["tensors", "dicts"])
def test_offload_optimizer_fails_in_its_constructor_on_a_frozen_parameter(groups, as_groups):
    model = _partly_frozen()
    params = [{"params": list(model.parameters()), "lr": 0.1}] if as_groups else model.parameters()
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        groups["OffloadOptimizer"](params, lr=0.1)


def test_subscript_and_get_spellings_fail_the_same_way(groups):
    model = _partly_frozen()
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        groups["watch_groups"]([{"params": list(model.parameters())}], print)
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        groups["GradLogger"]([{"params": list(model.parameters())}])


def test_the_checked_twin_skips_frozen_parameters_and_counts_the_rest(groups):
    model = _partly_frozen()
    checked = groups["CheckedOffloadOptimizer"](model.parameters())
    model(torch.randn(5, 3)).sum().backward()
    assert checked.count == 2  # the last layer's weight and bias, each once


def test_on_a_fully_trainable_model_the_bad_shape_works(groups):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    optimizer = groups["OffloadOptimizer"](model.parameters(), lr=0.1)
    before = model[2].bias.detach().clone()
    model(torch.randn(5, 3)).sum().backward()
    assert not torch.equal(before, model[2].bias.detach())  # each post-accumulate hook stepped its parameter
    assert len(optimizer.inner) == 4  # why the library's own tests pass


def test_hooklint_reports_the_bad_shapes_only():
    result = check_file(str(FIXTURE), frozenset({"HKL206"}))
    lines = FIXTURE.read_text().splitlines()
    reported = {lines[f.location.row - 1].strip().split("(")[0] for f in result.findings}
    assert reported == {"p.register_post_accumulate_grad_hook", "handles.append", "weight.register_hook"}
