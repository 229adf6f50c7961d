"""Real torch: modules held in containers and wrappers whose `forward` is
called directly (HKL303), and full backward hooks on layers a comprehension
picks from the caller's model (HKL405).

Each test runs the fixture's code, shows what the rule claims (the child's
hooks never fire; the forward fails once an in-place op follows a hooked
layer) and that the good twin is fine, and checks the static side.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES, codes_at, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

CONTAINERS = FIXTURES / "rules" / "hkl303_containers.py"
CALLER = FIXTURES / "rules" / "hkl405_full_hook_on_caller_module.py"
ERROR = "Output 0 of BackwardHookFunction is a view and is being modified inplace"


def _hook_every_child(container, fired):
    for name, child in container.named_children():
        child.register_forward_hook(lambda m, i, o, name=name: fired.append(name))


@pytest.mark.parametrize("cls", ["Chain", "Broadcast"])
def test_a_sequential_subclass_calling_each_childs_forward_skips_the_childrens_hooks(cls):
    fixture = runpy.run_path(str(CONTAINERS))
    container = fixture[cls](nn.Linear(2, 2), nn.Linear(2, 2))
    fired: list = []
    _hook_every_child(container, fired)
    container(torch.rand(1, 2))
    assert fired == []
    twin = fixture["CalledChain"](nn.Linear(2, 2), nn.Linear(2, 2))
    _hook_every_child(twin, fired)
    twin(torch.rand(1, 2))
    assert fired == ["0", "1"]


def test_module_lists_dicts_and_named_children_called_through_forward_skip_their_hooks():
    fixture = runpy.run_path(str(CONTAINERS))
    stack = fixture["Stack"](2, 2)
    fired: list = []
    for name, module in stack.named_modules():
        if name:
            module.register_forward_hook(lambda m, i, o, name=name: fired.append(name))
    stack(torch.rand(1, 2))
    assert fired == []  # ModuleList items, blocks[-1], the ModuleDict's items() and values()
    choice = fixture["Choice"](nn.Linear(2, 2), nn.Linear(2, 2))
    _hook_every_child(choice, fired)
    choice(torch.rand(1, 2), True)
    choice(torch.rand(1, 2), False)
    assert fired == []
    stack.blocks[0](torch.rand(1, 2))
    assert fired == ["blocks.0"]


def test_layers_reached_with_getattr_and_called_through_forward_skip_their_hooks():
    fixture = runpy.run_path(str(CONTAINERS))
    stages = fixture["Stages"]()
    fired: list = []
    _hook_every_child(stages, fired)
    stages(torch.rand(1, 2))
    assert fired == []
    stages.layer1(torch.rand(1, 2))
    assert fired == ["layer1"]


def test_the_container_fixture_is_reported_where_forward_is_called():
    source = CONTAINERS.read_text(encoding="utf-8")
    lines = [i for i, text in enumerate(source.splitlines(), 1) if ".forward(" in text and "# HKL303" in text]
    got = {line for line, code in codes_at(lint(source, "HKL303"))}
    assert set(lines) <= got
    quiet = [i for i, text in enumerate(source.splitlines(), 1)
             if "step.forward(x)" in text or 'f"s{k}").forward' in text]
    assert not set(quiet) & got


def test_full_hooks_on_the_layers_a_comprehension_picks_break_a_model_with_an_in_place_relu():
    """singd 0.0.1: the optimizer's full backward hook on each Conv2d/Linear of
    the caller's model; a Conv2d followed by ReLU(inplace=True) makes the first
    forward fail.  The same model with an out-of-place ReLU runs."""
    fixture = runpy.run_path(str(CALLER))

    def model(inplace):
        return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=inplace), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))

    broken = model(True)
    fixture["CurvatureOptimizer"](broken)
    with pytest.raises(RuntimeError, match=ERROR):
        broken(torch.rand(1, 3, 8, 8))
    fine = model(False)
    optimizer = fixture["Preconditioner"](fine)
    fixture["hook_convolutions"](fine, [])
    fine(torch.rand(1, 3, 8, 8)).sum().backward()
    assert optimizer.last.shape == (1, 2)  # the hook on the Linear ran, with the output gradient


def test_the_comprehension_registrations_are_reported():
    source = CALLER.read_text(encoding="utf-8")
    got = {line for line, code in codes_at(lint(source, "HKL405"))}
    for needle in ("self.handles.append(module.register_full_backward_hook(self.accumulate))",
                   "handles.append(module.register_full_backward_hook(self.accumulate))",
                   "conv.register_full_backward_hook("):
        line = next(i for i, text in enumerate(source.splitlines(), 1) if needle in text)
        assert line in got, needle


def test_a_function_that_hooks_its_parameter_module_by_module_and_calls_forward_skips_the_models_own_hooks():
    """fixtures/rules/hkl303_forward_bypasses_hooks.py's `profile`: the pre-hooks on
    the children run (the model's forward calls them), the one on the model itself
    does not; calling the model runs it."""
    fixture = runpy.run_path(str(FIXTURES / "rules" / "hkl303_forward_bypasses_hooks.py"))
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    fired: list = []
    model.register_forward_pre_hook(lambda m, i: fired.append("model"))
    model[0].register_forward_pre_hook(lambda m, i: fired.append("0"))
    fixture["profile"](model, torch.rand(1, 2))
    assert fired == ["0"]
    model(torch.rand(1, 2))
    assert fired == ["0", "model", "0"]
    source = (FIXTURES / "rules" / "hkl303_forward_bypasses_hooks.py").read_text(encoding="utf-8")
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "out = model.forward(x)  # HKL303" in text)
    assert (line, "HKL303") in codes_at(lint(source, "HKL303"))
