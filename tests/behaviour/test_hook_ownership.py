"""Real torch: who owns a hook's handle (HKL304 on library-shaped code,
HKL305, HKL306), run on the fixtures' own classes.

- A library that hooks a caller's module in a constructor or a public method,
  called in a loop in another file, stacks one more hook per call.
- Handles in a list created in the class body are shared by every instance:
  one instance's cleanup removes the others' hooks.
- A hook registered once and removed in a method that runs again is missing
  from every later call.
"""

from __future__ import annotations

import runpy
import sys
import warnings

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

PROJECT = FIXTURES / "projects" / "attribution"


class SmallNet(nn.Module):
    """Enough of a ResNet's shape for the fixtures: layer3, layer4, ReLUs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer3 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.layer4 = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.layer4(self.layer3(x)).mean((2, 3)))


@pytest.fixture(scope="module")
def evaluate():
    """scripts/evaluate.py of the project fixture, importing ../explain."""
    sys.path.insert(0, str(PROJECT))
    try:
        yield runpy.run_path(str(PROJECT / "scripts" / "evaluate.py"))
    finally:
        sys.path.remove(str(PROJECT))
        for name in [m for m in sys.modules if m == "explain" or m.startswith("explain.")]:
            del sys.modules[name]


def _batches(n):
    torch.manual_seed(1)
    return [(torch.rand(1, 3, 8, 8), torch.tensor([0])) for _ in range(n)]


def _hooks(module):
    return len(module._forward_hooks), len(module._backward_hooks)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ------------------------------------------------------------ HKL304, library-shaped

def test_a_constructor_called_in_another_files_loop_stacks_hooks(evaluate):
    """explain/cam.py registers in `_Recorder.__init__`; scripts/evaluate.py builds a GradCAM per batch."""
    model = SmallNet()
    evaluate["saliency_maps"](model, _batches(4), "layer4")
    assert _hooks(model.layer4) == (4, 4), "one forward and one backward hook per GradCAM built"
    recorders = [hook.__self__ for hook in model.layer4._forward_hooks.values()]
    assert len({id(r) for r in recorders}) == 4, "the discarded explainers stay alive through their hooks"
    x = torch.rand(1, 3, 8, 8)
    model(x)
    expected = model.layer4(model.layer3(x))
    assert all(torch.equal(r.activation, expected) for r in recorders), \
        "every later forward, training included, still runs all 4 hooks"


def test_an_inherited_constructor_leaks_the_same_way(evaluate):
    model = SmallNet()
    evaluate["score_maps"](model, [torch.rand(1, 3, 8, 8) for _ in range(3)])
    assert _hooks(model.layer4) == (3, 3)


def test_a_public_method_in_a_comprehension_stacks_guided_hooks_and_changes_later_gradients(evaluate):
    model = SmallNet()
    image = torch.rand(1, 3, 8, 8, requires_grad=True)
    model(image)[0, 0].backward()
    vanilla_before = image.grad.clone()
    evaluate["guided"](model, [torch.rand(1, 3, 8, 8) for _ in range(3)])
    relus = [m for m in model.modules() if isinstance(m, nn.ReLU)]
    assert all(len(r._backward_hooks) == 3 for r in relus)
    image.grad = None
    model(image)[0, 0].backward()
    assert not torch.allclose(image.grad, vanilla_before), \
        "a plain backward after `generate()` is still guided: the hooks stayed"


def test_a_function_called_every_epoch_records_each_output_once_per_call_so_far(evaluate):
    model = SmallNet()
    store = evaluate["features_per_epoch"](model, _batches(2), epochs=3)
    # epoch 1: 1 hook x 2 batches, epoch 2: 2 hooks x 2, epoch 3: 3 hooks x 2
    assert len(store["layer4"]) == 2 + 4 + 6
    assert _hooks(model.layer4) == (3, 0)


def test_the_correct_variants_leave_no_hook(evaluate):
    model = SmallNet()
    outputs = evaluate["tapped"](model, _batches(3))
    assert all(o is not None for o in outputs)
    evaluate["guided_once"](model, [torch.rand(1, 3, 8, 8) for _ in range(3)])
    assert all(len(m._forward_hooks) == 0 and len(m._backward_hooks) == 0 for m in model.modules())


def test_a_hook_removed_only_when_the_model_does_not_raise_stays_after_an_error(evaluate):
    """explain/probe.py: `layer_output` removes its hook after the forward, not in a `finally`."""
    probe = runpy.run_path(str(PROJECT / "explain" / "probe.py"))

    class Flaky(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 2)

        def forward(self, x):
            y = self.layer(x)
            if x.shape[0] > 1:
                raise ValueError("batch too large")
            return y

    model = Flaky()
    for attempt in range(3):
        with pytest.raises(ValueError):
            probe["layer_output"](model, model.layer, torch.ones(2, 2))
    assert len(model.layer._forward_hooks) == 3, "each failed call left its hook on the caller's layer"
    fine = Flaky()
    for attempt in range(3):
        with pytest.raises(ValueError):
            probe["layer_output_safely"](fine, fine.layer, torch.ones(2, 2))
        with pytest.raises(ValueError):
            probe["layer_output_with"](fine, fine.layer, torch.ones(2, 2))
    assert not fine.layer._forward_hooks, "`finally` and `with` remove it when the model raises"
    assert torch.equal(probe["layer_output_safely"](fine, fine.layer, torch.ones(1, 2)),
                       fine.layer(torch.ones(1, 2)))


def test_hooks_added_through_apply_and_removed_by_a_helper_stay_after_an_error():
    probe = runpy.run_path(str(PROJECT / "explain" / "probe.py"))

    class Failing(nn.Module):
        def __init__(self):
            super().__init__()
            self.relu = nn.ReLU()

        def forward(self, x):
            self.relu(x)
            raise RuntimeError("bad input")

    model = Failing()
    clamped = probe["ClampedRelus"](model)
    for attempt in range(2):
        with pytest.raises(RuntimeError):
            clamped.attribute(torch.ones(1))
    assert len(model.relu._forward_hooks) == 2, "two failed calls, two hooks left on the caller's ReLU"
    safe = probe["ClampedRelus"](Failing())
    for attempt in range(2):
        with pytest.raises(RuntimeError):
            safe.attribute_safely(torch.ones(1))
    assert not safe.model.relu._forward_hooks


def test_an_object_that_keeps_its_handle_private_hooks_again_per_instance():
    probe = runpy.run_path(str(PROJECT / "explain" / "probe.py"))
    layer = nn.Linear(2, 2)
    monitors = [probe["ActivationMonitor"](layer) for _ in range(3)]
    assert len(layer._forward_hooks) == 3
    closable = [probe["ClosableMonitor"](layer) for _ in range(3)]
    for monitor in closable:
        monitor.close()
    assert len(layer._forward_hooks) == 3, "the closable ones are gone, the others stay"
    del monitors


# ------------------------------------------------------------------------- HKL305

_HKL305 = runpy.run_path(str(FIXTURES / "rules" / "hkl305_shared_hook_handles.py"))


def test_one_instances_cleanup_removes_every_instances_hooks():
    FeatureExtractor = _HKL305["FeatureExtractor"]
    FeatureExtractor.handles.clear()  # the fixture's class is shared across tests too
    a_model, b_model = SmallNet(), SmallNet()
    a = FeatureExtractor(a_model, ["layer3"])
    b = FeatureExtractor(b_model, ["layer3"])
    assert a.handles is b.handles and len(b.handles) == 2, "each instance sees the other's handle"
    a.close()
    b_model(torch.rand(1, 3, 8, 8))
    assert b.features == {}, "closing `a` removed `b`'s hook: `b` records nothing"
    FeatureExtractor.handles.clear()


def test_a_list_per_instance_keeps_the_other_instances_hooks():
    PerInstance = _HKL305["PerInstance"]
    a_model, b_model = SmallNet(), SmallNet()
    a, b = PerInstance(a_model), PerInstance(b_model)
    assert a.handles is not b.handles
    for handle in a.handles:
        handle.remove()
    assert not any(len(m._forward_hooks) for m in a_model.modules())
    assert sum(len(m._forward_hooks) for m in b_model.modules()) == len(list(b_model.modules())), \
        "`b`'s hooks are all still there"


# ------------------------------------------------------------------------- HKL306

_HKL306 = runpy.run_path(str(FIXTURES / "rules" / "hkl306_hook_removed_while_needed.py"))


class WithLayer4(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer4 = nn.Linear(3, 3)

    def forward(self, x):
        return self.layer4(x)


def test_a_hook_removed_in_forward_is_missing_from_the_second_call():
    wrapper = _HKL306["SaveFeatures"](WithLayer4())
    first_in, second_in = torch.ones(1, 3), torch.full((1, 3), 2.0)
    out1, features1 = wrapper(first_in)
    assert torch.equal(features1, out1)
    out2, features2 = wrapper(second_in)
    assert not torch.equal(out2, out1)
    assert torch.equal(features2, out1), "the second call returns the first call's features: the hook is gone"


def test_grad_cam_removing_its_hooks_in_call_returns_stale_maps():
    model = SmallNet()
    cam = _HKL306["GradCAM"](model, model.layer4)
    cam(torch.rand(1, 3, 8, 8), 0)
    first_activation = cam.activation
    cam(torch.rand(1, 3, 8, 8), 0)
    assert cam.activation is first_activation, "the second call did not record: it reuses the first image's map"


def test_a_parameter_hook_removed_in_forward_never_fires():
    layer = nn.Linear(2, 1)
    reference = nn.Linear(2, 1)
    reference.load_state_dict(layer.state_dict())
    wrapped = _HKL306["ScaledGrad"](layer)
    x = torch.ones(1, 2)
    wrapped(x).sum().backward()
    reference(x).sum().backward()
    assert torch.equal(layer.weight.grad, reference.weight.grad), \
        "not halved: the tensor hook was removed before backward looked it up"


def test_removing_in_a_cleanup_method_keeps_the_hook_for_every_call():
    net = WithLayer4()
    probe = _HKL306["WithClose"](net.layer4)
    for value in (1.0, 2.0):
        out = net(torch.full((1, 3), value))
        assert torch.equal(probe.output, out)
    probe.close()
    assert not net.layer4._forward_hooks
