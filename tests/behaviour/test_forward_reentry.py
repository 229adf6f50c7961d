"""Real torch: a module's forward stand-in or forward hook that calls the same module through
`Module.__call__` runs the module's hooks twice per call, or recurses (HKL341).  Each test runs
the fixture's own functions, buggy and good, and checks what the rule says of them."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

from hooklint.static.checker import check_file

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

PATH = FIXTURES / "rules" / "hkl341_forward_reenters_module_call.py"


def _flagged(ns, name):
    code = ns[name].__code__
    first = code.co_firstlineno
    last = max(ln for _, _, ln in code.co_lines() if ln is not None)
    rows = [f.location.row for f in check_file(str(PATH), frozenset({"HKL341"})).findings]
    return any(first <= row <= last for row in rows)


def _counting(layer):
    fired = []
    layer.register_forward_pre_hook(lambda m, a: fired.append("pre"))
    layer.register_forward_hook(lambda m, a, o: fired.append("post"))
    return fired


@pytest.mark.parametrize("name", ["offload", "install_timer", "trace_calls", "install_checked"])
def test_stand_in_calling_the_module_runs_its_hooks_twice(name):
    ns = runpy.run_path(str(PATH))
    layer = nn.Linear(2, 2)
    fired = _counting(layer)
    args = {"offload": (layer, "cpu"), "install_timer": (layer,), "trace_calls": (layer, []),
            "install_checked": (layer,)}[name]
    ns[name](*args)
    out = layer(torch.ones(1, 2))
    assert fired == ["pre", "pre", "post", "post"]
    assert out.shape == (1, 2)
    # a bound function holds the call
    assert _flagged(ns, {"install_timer": "_timed", "install_checked": "_checked_forward"}.get(name, name))


def test_stand_in_left_installed_recurses():
    ns = runpy.run_path(str(PATH))
    block = nn.Linear(2, 2)
    ns["stateless_swap"](block, dict(block.named_parameters()))
    with pytest.raises(RecursionError):
        block(torch.ones(1, 2))
    assert _flagged(ns, "stateless_swap")


def test_hook_calling_its_module_recurses():
    ns = runpy.run_path(str(PATH))
    model = nn.Linear(2, 2)
    ns["averaged"](model)
    with pytest.raises(RecursionError):
        model(torch.ones(1, 2))
    assert _flagged(ns, "averaged") and _flagged(ns, "noisy_inputs")


@pytest.mark.parametrize("name", ["offload_fixed", "class_forward"])
def test_calling_the_saved_forward_runs_the_hooks_once(name):
    ns = runpy.run_path(str(PATH))
    layer = nn.Linear(2, 2)
    fired = _counting(layer)
    ns[name](*((layer, "cpu") if name == "offload_fixed" else (layer,)))
    layer(torch.ones(1, 2))
    assert fired == ["pre", "post"]
    assert not _flagged(ns, name)


def test_guarded_second_pass_and_other_modules_are_not_flagged():
    ns = runpy.run_path(str(PATH))
    model, teacher = nn.Linear(2, 2), nn.Linear(2, 2)
    fired = _counting(model)
    ns["calls_other"](model, teacher)
    model(torch.ones(1, 2))
    assert fired == ["pre", "post"]
    assert not _flagged(ns, "calls_other") and not _flagged(ns, "guarded")
    rows = [f.location.row for f in check_file(str(PATH), frozenset({"HKL341"})).findings]
    tree_line = next(i for i, line in enumerate(PATH.read_text().splitlines(), 1) if line.startswith("class Tree"))
    assert all(row < tree_line for row in rows)  # a forward recursing over a structure is not a stand-in
