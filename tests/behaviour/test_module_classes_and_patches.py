"""Real torch, on the fixtures' own code:

- HKL303 (fixtures/projects/module_classes): a module class of another file
  is a module like a local one, and `.forward(...)` on it skips the hooks its
  call runs; a framework module whose `__call__` never reaches
  `nn.Module.__call__` runs no hook either way, so `.forward` skips nothing;
  a test's own model that nothing hooked gives the same result both ways.
- HKL315 (fixtures/rules/hkl315_forward_patches.py): a forward patch applied
  from a recursion over `children()` patches a module shared by two parents
  twice: a class swap built on the current class recurses without end (or
  reports twice), a wrapped forward runs its wrapper twice per call; the
  walks that tell a patched module apart patch it once.  A hook that clamps
  the gradient at 0 gives the same gradient registered once or twice.
"""

from __future__ import annotations

import runpy
import sys

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

PROJECT = FIXTURES / "projects" / "module_classes"


@pytest.fixture(scope="module")
def gpnet():
    sys.path.insert(0, str(PROJECT))
    try:
        import gpnet.blocks
        import gpnet.layers

        yield gpnet
    finally:
        sys.path.remove(str(PROJECT))
        for name in [n for n in sys.modules if n == "gpnet" or n.startswith("gpnet.")]:
            del sys.modules[name]


def test_forward_of_a_module_class_of_another_file_skips_its_hooks(gpnet):
    attention = gpnet.layers.SelfAttention()
    block = gpnet.blocks.Block(attention, gpnet.layers.Stepper())
    seen = []
    attention.register_forward_hook(lambda module, inputs, output: seen.append(output))
    block(torch.ones(2))
    assert seen == []  # Block.forward calls self.attention.forward: the hook never ran
    attention(torch.ones(2))
    assert len(seen) == 1  # calling the module runs it


def test_module_through_a_parametrized_generic_base_skips_its_hooks_from_forward():
    sys.path.insert(0, str(PROJECT))
    try:
        from gpnet import generic_layers, generic_users
    finally:
        sys.path.remove(str(PROJECT))
        for name in [n for n in sys.modules if n == "gpnet" or n.startswith("gpnet.")]:
            del sys.modules[name]
    # `Endomorph(Operator[Tensor, Tensor])`: Python puts `Operator` itself in the MRO, so a
    # subclass of the parametrized generic is an nn.Module like any other
    assert issubclass(generic_layers.Scale, nn.Module)
    assert not issubclass(generic_layers.Plan, nn.Module)
    scale = generic_layers.Scale()
    seen = []
    scale.register_forward_hook(lambda module, inputs, output: seen.append(output))
    x = torch.ones(2)
    assert torch.equal(generic_users.Inverse(scale)(x), x * 2)
    assert seen == []  # Inverse.forward calls self.op.forward: the hook on the operator never ran
    objective = generic_users.objective(scale, flag=False)  # `scaled = op`, declared `scaled: Scale`
    assert torch.equal(objective(x), x * 2 + 1)
    assert torch.equal(generic_users.evaluate(scale, flag=False)(x), x * 2)
    assert seen == []  # the lambda and the nested function skip it too
    scale(x)
    assert len(seen) == 1  # calling the module runs it


def test_framework_call_that_bypasses_torch_runs_no_hook_either_way(gpnet):
    kernel = gpnet.layers.Kernel()
    seen = []
    kernel.register_forward_hook(lambda module, inputs, output: seen.append(1))
    kernel.register_forward_pre_hook(lambda module, inputs: seen.append(0))
    x = torch.ones(3)
    assert torch.equal(kernel(x), kernel.forward(x, x))
    total = gpnet.blocks.SumKernel([gpnet.layers.Kernel()])(x)
    assert torch.equal(total, x * x * 2)
    assert seen == []  # `kernel(x)` never reached nn.Module.__call__: `.forward` skips nothing


def test_a_module_whose_call_passes_on_to_nn_module_runs_hooks():
    class Logged(nn.Linear):
        def __call__(self, *args):
            return super().__call__(*args)

    layer = Logged(2, 2)
    seen = []
    layer.register_forward_hook(lambda module, inputs, output: seen.append(1))
    layer(torch.ones(1, 2))
    layer.forward(torch.ones(1, 2))
    assert seen == [1]  # the override reached torch's: only the call ran the hook


def test_the_tests_own_model_gives_the_same_output_both_ways(gpnet):
    torch.manual_seed(0)
    model = gpnet.blocks.Block(gpnet.layers.SelfAttention(), gpnet.layers.Stepper())
    x = torch.ones(2)
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert torch.equal(model.forward(x), model(x))


# --- HKL315: forward patches ----------------------------------------------------


@pytest.fixture(scope="module")
def patches():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl315_forward_patches.py"))


def _shared():
    shared = nn.Linear(2, 2)
    return nn.Sequential(nn.Sequential(shared), nn.Sequential(shared)), shared


def test_class_swap_per_parent_recurses_without_end_on_a_shared_module(patches):
    model, shared = _shared()
    counter = []
    patches["swap_leaves"](model, counter)
    # the second class's forward calls `original.forward`, the first class's, whose own
    # `original` is Linear: the swap stacks, each call reports twice
    shared(torch.ones(1, 2))
    assert counter == ["Counting", "Linear"]


def test_classy_vision_shape_recurses_without_end():
    class_holder = {}

    def patched(module):
        ty = type(module)

        class ComputeModule(ty):
            def _original_forward(self, *args):
                return ty.forward(self, *args)

            def forward(self, *args):
                return self._original_forward(*args)

        class_holder.setdefault("n", []).append(ComputeModule)
        return ComputeModule

    def modify(model):
        if not list(model.children()):
            model.__class__ = patched(model)
        for child in model.children():
            modify(child)

    model, shared = _shared()
    modify(model)
    assert len(class_holder["n"]) == 2  # the shared Linear was patched once per parent
    with pytest.raises(RecursionError):
        model(torch.ones(1, 2))
    single = nn.Sequential(nn.Linear(2, 2))
    modify(single)
    single(torch.ones(1, 2))  # patched once: runs


def test_wrapped_forward_per_parent_runs_twice_per_call(patches):
    model, shared = _shared()
    instrumenter = patches["Instrumenter"]()
    instrumenter.attach(model)
    shared(torch.ones(1, 2))
    assert instrumenter.counter == [1, 1]


def test_walks_that_tell_a_patched_module_apart_patch_it_once(patches):
    for walk in ("swap_seen", "swap_each_once"):
        model, shared = _shared()
        counter = []
        args = (model, counter, set()) if walk == "swap_seen" else (model, counter)
        patches[walk](*args)
        shared(torch.ones(1, 2))
        assert counter == ["Linear"], walk
    model, shared = _shared()
    patches["rebind"](model)
    assert torch.equal(shared(torch.ones(1, 2)), nn.Linear.forward(shared, torch.ones(1, 2)))


def test_clamp_hook_registered_twice_gives_the_gradient_of_once():
    torch.manual_seed(0)
    x = torch.randn(4, 3, requires_grad=True)

    def grads(times):
        relu = nn.ReLU()
        torch.manual_seed(1)
        layer = nn.Linear(3, 3)
        for _ in range(times):
            relu.register_full_backward_hook(lambda module, grad_in, grad_out: (torch.clamp(grad_in[0], min=0.0),))
        x.grad = None
        (relu(layer(x)) * torch.tensor([1.0, -2.0, 3.0])).sum().backward()
        return x.grad.clone()

    assert torch.equal(grads(1), grads(2))
    assert not torch.equal(grads(0), grads(1))  # the hook does change the gradient


def test_keyword_partial_of_forward_per_parent_still_runs_forward_once():
    """HKL315 stays quiet on `child.forward = partial(child.forward, key=value)` in a children walk
    (mmrazor's DifferentiableMutator): a shared module reached twice gets a partial of a partial, which
    functools flattens, the second keyword replacing the first, so each call still runs forward once."""
    from functools import partial

    from hooklint.rules.hook_per_parent_on_shared_module import HookPerParentOnSharedModule

    source = next(v for v in HookPerParentOnSharedModule.VALID if "partial(child.forward" in v)
    from conftest import lint

    assert not lint(source, "HKL315")
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - the rule's own valid example
    model, shared = _shared()
    calls = []
    original = shared.forward

    def counting(x, arch_param=None):
        calls.append(arch_param)
        return original(x)

    shared.forward = counting
    namespace["set_defaults"](model, {"0": "p"})
    assert isinstance(shared.forward, partial) and shared.forward.func is counting
    shared(torch.ones(1, 2))
    assert calls == ["p"]
