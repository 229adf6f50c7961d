"""Real torch: what the findings of the program-analysis core claim, on the
code of the fixtures that show each shape (control flow, wrappers,
containers, hooks left on the caller's model, removals skipped by an
exception), and that the good twins are really fine.

Each test imports the fixture module itself and runs its classes and
functions; the static findings on the same lines are checked by
tests/test_fixtures.py.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def _load(relative: str, name: str):
    path = FIXTURES / relative
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def control_flow():
    return _load("rules/control_flow.py", "hl_fixture_control_flow")


@pytest.fixture(scope="module")
def wrappers():
    return _load("rules/wrappers.py", "hl_fixture_wrappers")


@pytest.fixture(scope="module")
def containers():
    return _load("rules/containers.py", "hl_fixture_containers")


@pytest.fixture(scope="module")
def left_on():
    return _load("rules/hkl307_hook_left_on_caller_model.py", "hl_fixture_hkl307")


@pytest.fixture(scope="module")
def on_exception():
    return _load("rules/hkl308_hook_leak_on_exception.py", "hl_fixture_hkl308")


def _hook_count(module: nn.Module) -> int:
    return len(module._forward_hooks) + len(module._backward_hooks) + len(module._forward_pre_hooks)


class Raises(nn.Module):
    """A caller's model whose forward fails (a wrong input shape)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)

    def forward(self, x):
        out = self.fc(x[..., :2])  # the hooked layer runs, then the model fails
        if x.shape[-1] != 2:
            raise ValueError("bad input")
        return out


# ------------------------------------------------------------ HKL501: paths that fall off `backward`

def test_backward_falling_off_with_two_inputs_raises(control_flow):
    x = torch.ones(3)  # frozen: `needs_input_grad[0]` is False
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="returned an incorrect number of gradients"):
        control_flow.Scale.apply(x, w).sum().backward()
    # the path that returns works
    x2 = torch.ones(3, requires_grad=True)
    control_flow.Scale.apply(x2, w).sum().backward()
    assert torch.equal(x2.grad, torch.ones(3))


def test_backward_falling_off_with_one_input_gives_none_silently(control_flow):
    x = torch.ones(3, requires_grad=True)
    control_flow.Halve.apply(x).sum().backward()
    assert x.grad is None, "no error, and no gradient"


def test_bare_return_in_backward_raises(control_flow):
    x = torch.ones(2, requires_grad=True)
    y = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="returned an incorrect number of gradients"):
        control_flow.EarlyExit.apply(x, y, True).sum().backward()
    control_flow.EarlyExit.apply(x, y, False).sum().backward()
    assert torch.equal(x.grad, torch.ones(2))


def test_backwards_with_every_path_returning_are_fine(control_flow):
    x = torch.ones(2, requires_grad=True)
    y = torch.ones(2, requires_grad=True)
    control_flow.BothBranches.apply(x, y).sum().backward()
    assert torch.equal(y.grad, torch.ones(2))
    z = torch.ones(2, requires_grad=True)
    control_flow.Exhaustive.apply(z, "pass").sum().backward()
    assert torch.equal(z.grad, torch.ones(2))


# ------------------------------------------------------------ HKL304: removals that never run

@pytest.mark.parametrize("name", ["record_after_return", "record_debug_only"])
def test_removal_that_never_runs_leaves_the_hook_stacking(control_flow, name):
    net = nn.Linear(2, 2)
    store: list = []
    function = getattr(control_flow, name)
    for _ in range(3):
        function(net, torch.ones(1, 2), store)
    assert len(net._forward_hooks) == 3, "the `remove()` never ran: one more hook per call"
    store.clear()
    net(torch.ones(1, 2))
    assert len(store) == 3, "one forward now records three outputs"


def test_removal_after_an_exit_never_runs(control_flow):
    net = nn.Linear(2, 2)
    with pytest.raises(SystemExit):
        control_flow.record_after_raise(net, torch.ones(1, 2), [])
    assert len(net._forward_hooks) == 1, "the hook registered before the exit is still there"


def test_removal_in_finally_leaves_nothing(control_flow):
    net = nn.Linear(2, 2)
    for _ in range(3):
        control_flow.record_then_remove(net, torch.ones(1, 2), [])
    assert _hook_count(net) == 0


def test_tensor_hook_with_a_dead_removal_still_fires(control_flow):
    """HKL301 stays quiet: the removal after the `return` never runs, so the hook is not removed early."""
    x = torch.ones(3, requires_grad=True)
    loss = control_flow.scaled_grad(x)
    loss.backward()
    assert torch.equal(x.grad, torch.full((3,), 4.0)), "2x from the function, doubled by the hook"


# ------------------------------------------------------------ wrappers

def test_wrapper_kind_chosen_by_argument(wrappers):
    net = nn.Linear(2, 2)
    fired = []
    handle = wrappers.add(net, lambda m, gi, go: fired.append("bwd"), backward=True)
    assert len(net._backward_hooks) == 1 and not net._forward_hooks
    net(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert fired == ["bwd"]
    handle.remove()
    assert not net._backward_hooks


def test_wrapper_called_in_a_loop_stacks_backward_hooks(wrappers):
    net = nn.Linear(2, 2)
    grads: list = []
    batches = [torch.ones(1, 2, requires_grad=True) for _ in range(3)]
    wrappers.saliency(net, batches, grads)
    assert len(net._backward_hooks) == 3
    grads.clear()
    net(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert len(grads) == 3, "one backward, three hooks"
    twin = nn.Linear(2, 2)
    wrappers.saliency_removed(twin, batches, [])
    assert not twin._backward_hooks


def test_wrapper_returning_none_makes_the_callers_removal_dead(wrappers):
    net = nn.Linear(2, 2)
    assert wrappers.add_quietly(net, lambda m, i, o: None) is None
    store: list = []
    wrappers.features(net, [torch.ones(1, 2)] * 3, store)
    assert len(net._forward_hooks) == 4, "the caller's `if handle is not None: handle.remove()` never runs"
    with pytest.raises(AttributeError):
        wrappers.add_quietly(net, print).remove()


def test_removal_through_a_helper_in_forward_drops_the_hook_after_one_call(wrappers):
    recorder = wrappers.Recorder(nn.Linear(2, 2))
    recorder(torch.ones(1, 2))
    first = recorder.last
    recorder(torch.full((1, 2), 5.0))
    assert recorder.last is first, "`_detach()` in forward removed the hook: the second call recorded nothing"


def test_removal_through_a_helper_outside_finally_leaves_the_hooks(wrappers):
    model = Raises()
    model.hook_point = wrappers.HookPoint()
    patcher = wrappers.Patcher(model)
    with pytest.raises(ValueError):
        patcher.run(torch.ones(1, 3), [])
    assert len(model.hook_point._forward_hooks) == 1, "`remove_hooks()` never ran"
    with pytest.raises(ValueError):
        patcher.run_safely(torch.ones(1, 3), [])
    assert not model.hook_point._forward_hooks, "the twin's finally removed every hook the point kept"


# ------------------------------------------------------------ containers

def test_full_hooks_on_each_layer_of_the_callers_list_stack_per_object(containers):
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    layers = [model[0], model[1]]
    for _ in range(3):
        containers.MultiLayerCAM(model, layers)
    assert [len(layer._backward_hooks) for layer in layers] == [3, 3]


def test_hooks_on_each_module_a_generator_yields_stack_per_call(containers):
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    guided = containers.GuidedRelu(model)
    for _ in range(2):
        guided.attribute(torch.ones(1, 2))
    assert len(model[1]._backward_hooks) == 2 and not model[0]._backward_hooks


def test_handle_list_appended_on_every_call_never_empties(containers):
    model = nn.Linear(2, 2)
    recorder = containers.Recorder(model)
    counts = [recorder.record(torch.ones(1, 2)) for _ in range(3)]
    assert counts == [1, 2, 3] and len(model._forward_hooks) == 3
    twin = containers.RecorderThatRemoves(nn.Linear(2, 2))
    for _ in range(3):
        twin.record(torch.ones(1, 2))
    assert not twin.model._forward_hooks and twin.handles == []


# ------------------------------------------------------------ HKL307: hooks left on the caller's model

def test_hook_left_on_callers_model_keeps_running_after_the_call(left_on):
    model = nn.Sequential()
    model.layer4 = nn.Linear(2, 2)
    extractor = left_on.FeatureExtractor(model)
    first = extractor(torch.ones(1, 2))
    assert first is not None
    model(torch.full((1, 2), 7.0))  # the caller's own forward, after the library call returned
    assert extractor.features is not first, "the library's hook ran in the caller's forward"
    assert len(model.layer4._forward_hooks) == 1, "it did not stack (HKL304's case), it stayed"


def test_guided_relu_hook_left_on_caller_changes_later_gradients(left_on):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    with torch.no_grad():
        model[2].weight.fill_(-1.0)
    x = torch.randn(8, 4)

    def grads():
        model.zero_grad()
        model(x).sum().backward()
        return model[0].weight.grad.clone()

    before = grads()
    explainer = left_on.GuidedBackprop(model)
    explainer.attribute(torch.randn(2, 4, requires_grad=True))
    after = grads()
    assert not torch.allclose(before, after), "training gradients are clamped by the explainer's leftover hook"
    assert len(model[1]._backward_hooks) == 1


def test_closable_twin_can_be_taken_off(left_on):
    model = nn.Linear(2, 2)
    probe = left_on.Closable(model)
    probe(torch.ones(1, 2))
    probe.close()
    assert not model._forward_hooks


# ------------------------------------------------------------ HKL308: removals an exception skips

def test_removal_outside_finally_leaves_hooks_when_the_model_raises(on_exception):
    model = Raises()
    for attempt in range(2):
        with pytest.raises(ValueError):
            on_exception.layer_output(model, model.fc, torch.ones(1, 3))
        assert len(model.fc._forward_hooks) == attempt + 1, "every retry leaves one more hook"
    twin = Raises()
    with pytest.raises(ValueError):
        on_exception.layer_output_safely(twin, twin.fc, torch.ones(1, 3))
    assert not twin.fc._forward_hooks


def test_handler_that_swallows_leaves_the_hook(on_exception):
    model = nn.Linear(2, 2)

    def fail(module, inputs, output):
        raise RuntimeError("boom")

    model.register_forward_hook(fail)
    assert on_exception.swallowed(model, model, torch.ones(1, 2)) is None
    assert len(model._forward_hooks) == 2, "the except returned before `handle.remove()`"


def test_removed_on_error_and_optional_cleanup_twins(on_exception):
    model = Raises()
    with pytest.raises(ValueError):
        on_exception.removed_on_error(model, model.fc, torch.ones(1, 3))
    with pytest.raises(ValueError):
        on_exception.optional_cleanup(model, model.fc, torch.ones(1, 3))
    assert not model.fc._forward_hooks


def test_helpers_removing_outside_finally_leave_every_hook(on_exception):
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    explainer = on_exception.Explainer(model)

    def forward_fn(net, x):
        raise ValueError("the caller's forward failed")

    with pytest.raises(ValueError):
        explainer.explain(torch.ones(1, 2), forward_fn)
    assert all(len(m._forward_hooks) == 1 for m in model.modules())


def test_handles_added_with_plus_equals_through_a_view_stay_when_the_loop_raises(on_exception):
    """A helper hooks the modules of a view (`table.values()`, `model.children()`)
    and its handles join a list with `+=`: a raise in the loop skips the removal."""

    def batches():
        yield torch.ones(1, 3)
        raise ValueError("the loader failed")

    model = Raises()
    stats = on_exception.TableStatistics(model, {"fc": model.fc})
    with pytest.raises(ValueError):
        stats.collect(batches())
    assert len(model.fc._forward_hooks) == 1, "the table's module keeps the hook"
    model = Raises()
    with pytest.raises(ValueError):
        on_exception.gather_children(model, [torch.ones(1, 3)])
    assert all(len(child._forward_hooks) == 1 for child in model.children())
    twin = Raises()
    with pytest.raises(ValueError):
        on_exception.gather_children_safely(twin, [torch.ones(1, 3)])
    assert not any(child._forward_hooks for child in twin.children())


def test_a_flag_fixed_by_the_constructor_decides_whether_a_raise_leaves_a_hook(on_exception):
    """`if self.capture_outputs:` registers: the runner whose base constructor got
    the default (False) never hooks, so a raise leaves nothing; the twin built
    with the flag on leaves its hook on the module."""
    plain = Raises()
    with pytest.raises(ValueError):
        on_exception.PlainRunner().run(plain, torch.ones(1, 3))
    assert not plain._forward_hooks
    capturing = Raises()
    with pytest.raises(ValueError):
        on_exception.CapturingRunner().run(capturing, torch.ones(1, 3))
    assert len(capturing._forward_hooks) == 1


# ------------------------------------------------------------ across files

def test_function_applied_with_more_inputs_than_backward_returns(monkeypatch):
    folder = FIXTURES / "projects" / "wrappers"
    monkeypatch.syspath_prepend(str(folder))
    for name in [m for m in sys.modules if m == "hooklib" or m.startswith(("hooklib.", "tools."))]:
        monkeypatch.delitem(sys.modules, name)
    probes = importlib.import_module("tools.probes")
    net = probes.Net()
    with pytest.raises(RuntimeError, match="expected 2, got 1"):
        net(torch.ones(1, 4, requires_grad=True)).sum().backward()
    hooklib = importlib.import_module("hooklib")
    x = torch.ones(3, requires_grad=True)
    hooklib.ScaleGrad.apply(x).sum().backward()  # one input: one gradient is right
    assert torch.equal(x.grad, torch.full((3,), 2.0))
