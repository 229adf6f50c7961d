"""Real torch: hooks on the caller's parameters stack like module hooks when
the registering code runs again with the same model (HKL304 on parameters,
fixtures/rules/hkl304_caller_parameters.py), and the kept-and-removed twin
does not."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from hooklint.static.checker import check_file

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def test_post_accumulate_hooks_of_each_new_wrapper_stack_on_the_same_parameters():
    model = nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []
    for _ in range(3):  # a wrapper rebuilt per epoch on the same optimizer, handles dropped
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.register_post_accumulate_grad_hook(lambda p: calls.append(p))
    model(torch.ones(1, 3)).sum().backward()
    assert len(calls) == 3 * 2  # three hooks on each of weight and bias, every backward


def test_tensor_hooks_of_each_call_stack_and_kept_handles_do_not():
    model = nn.Linear(2, 1)
    runs = []

    def clip_gradients(model):
        for parameter in model.parameters():
            parameter.register_hook(lambda grad: runs.append(1) or grad.clamp(-1.0, 1.0))

    clip_gradients(model)
    clip_gradients(model)
    model(torch.ones(1, 2)).sum().backward()
    assert len(runs) == 2 * 2  # two clamps per parameter

    fresh = nn.Linear(2, 1)
    runs.clear()
    for _ in range(2):
        handles = [p.register_hook(lambda grad: runs.append(1) or grad) for p in fresh.parameters()]
        fresh(torch.ones(1, 2)).sum().backward()
        for handle in handles:
            handle.remove()
    assert len(runs) == 2 * 2  # one hook per parameter in each of the two passes, never more


def test_linter_reports_the_stacking_shapes_of_the_fixture():
    path = FIXTURES / "rules" / "hkl304_caller_parameters.py"
    result = check_file(str(path), frozenset({"HKL304"}))
    rows = {f.location.row for f in result.findings}
    text = path.read_text().splitlines()
    expected = {i + 1 for i, line in enumerate(text) if line.rstrip().endswith("# HKL304")}
    assert rows == expected and len(expected) == 3
