"""Real torch: which hooks fire under ``torch.compile`` and under activation
checkpointing (HKL701, HKL702, HKL703; docs/compile.md).

Each claim of the three rules and of docs/compile.md has a test here, the
ones that do *not* fail included.  Compiled tests use ``backend="aot_eager"``
(fast) and reset dynamo between tests; one test runs the default (inductor)
backend and is marked slow.
"""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
checkpoint_module = pytest.importorskip("torch.utils.checkpoint")
checkpoint = checkpoint_module.checkpoint
checkpoint_sequential = checkpoint_module.checkpoint_sequential

pytestmark = pytest.mark.torch

BACKEND = "aot_eager"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Net(nn.Module):
    """A user-defined class: torch.compile runs its own hooks outside dynamo."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))


def _net() -> Net:
    torch.manual_seed(0)
    return Net()


def _x(n: int = 3) -> torch.Tensor:
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(n))


_REGISTER = {
    "forward": lambda m, c, k: m.register_forward_hook(lambda *a: c.__setitem__(k, c[k] + 1)),
    "forward-pre": lambda m, c, k: m.register_forward_pre_hook(lambda *a: c.__setitem__(k, c[k] + 1)),
    "full-backward": lambda m, c, k: m.register_full_backward_hook(lambda *a: c.__setitem__(k, c[k] + 1)),
    "full-backward-pre": lambda m, c, k: m.register_full_backward_pre_hook(lambda *a: c.__setitem__(k, c[k] + 1)),
}


def _register_all(module: nn.Module, counts: dict, prefix: str) -> None:
    for kind, register in _REGISTER.items():
        key = f"{prefix}:{kind}"
        counts[key] = 0
        register(module, counts, key)


# ----------------------------------------------------------------- torch.compile


@pytest.mark.parametrize("how", ["torch.compile(model)", "model.compile()", "compiled function"])
def test_module_hooks_on_submodules_registered_after_a_compiled_call_never_fire(how):
    model = _net()
    if how == "torch.compile(model)":
        run = torch.compile(model, backend=BACKEND)
    elif how == "model.compile()":
        model.compile(backend=BACKEND)
        run = model
    else:
        @torch.compile(backend=BACKEND)
        def run(inputs):
            return model(inputs)
    run(_x()).sum().backward()  # the first call compiles
    counts: dict[str, int] = {}
    _register_all(model.fc, counts, "fc")
    _register_all(model.out, counts, "out")
    for _ in range(4):
        run(_x()).sum().backward()
    assert counts and all(n == 0 for n in counts.values()), counts
    # the same hooks fire when the submodules run eagerly (`model.forward` is not compiled in any of the
    # three ways): they are registered, only ignored by the compiled code
    model.forward(_x()).sum().backward()
    assert all(n == 1 for n in counts.values()), counts


def test_root_hooks_of_a_user_class_still_fire_after_torch_compile():
    """torch.compile(module) runs the root module's hooks outside dynamo when the
    root's class is not one of torch.nn's: only its submodules' hooks are ignored."""
    model = _net()
    compiled = torch.compile(model, backend=BACKEND)
    compiled(_x()).sum().backward()
    counts: dict[str, int] = {}
    _register_all(model, counts, "root")
    for _ in range(3):
        compiled(_x()).sum().backward()
    assert all(n == 3 for n in counts.values()), counts


def test_root_hooks_of_a_torch_container_are_ignored_after_torch_compile():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    compiled = torch.compile(model, backend=BACKEND)
    compiled(_x()).sum().backward()
    counts: dict[str, int] = {}
    _register_all(model, counts, "root")
    for _ in range(3):
        compiled(_x()).sum().backward()
    assert all(n == 0 for n in counts.values()), counts


def test_root_hooks_are_ignored_when_a_compiled_function_calls_the_model():
    model = _net()

    @torch.compile(backend=BACKEND)
    def step(inputs):
        return model(inputs).sum()

    step(_x()).backward()
    counts: dict[str, int] = {}
    _register_all(model, counts, "root")
    for _ in range(3):
        step(_x()).backward()
    assert all(n == 0 for n in counts.values()), counts


def test_hooks_registered_before_compiling_fire_on_every_call():
    model = _net()
    counts: dict[str, int] = {}
    _register_all(model.fc, counts, "fc")
    compiled = torch.compile(model, backend=BACKEND)
    for _ in range(4):
        compiled(_x()).sum().backward()
    assert all(n == 4 for n in counts.values()), counts


def test_hooks_registered_after_compile_but_before_the_first_call_fire():
    model = _net()
    compiled = torch.compile(model, backend=BACKEND)  # compiling is lazy: nothing traced yet
    counts: dict[str, int] = {}
    _register_all(model.fc, counts, "fc")
    for _ in range(2):
        compiled(_x()).sum().backward()
    assert all(n == 2 for n in counts.values()), counts


def test_gradient_monitor_added_at_step_one_records_nothing():
    """The brief's training loop: a backward hook added after the first step."""
    model = _net()
    compiled = torch.compile(model, backend=BACKEND)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    norms: list[float] = []
    for step in range(4):
        loss = compiled(_x()).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            model.fc.register_full_backward_hook(lambda m, gi, go: norms.append(go[0].norm().item()))
    assert norms == []


def test_gradcam_feature_hook_after_compiled_call_captures_nothing():
    model = _net()
    compiled = torch.compile(model, backend=BACKEND)
    compiled(_x())  # warm-up: compiles
    features: list = []
    model.fc.register_forward_hook(lambda m, i, o: features.append(o.detach()))
    compiled(_x())
    assert features == []


def test_tensor_and_post_accumulate_hooks_added_after_compile_fire():
    model = _net()
    compiled = torch.compile(model, backend=BACKEND)
    compiled(_x()).sum().backward()
    seen = {"tensor": 0, "post-accumulate": 0}
    model.fc.weight.register_hook(lambda g: seen.__setitem__("tensor", seen["tensor"] + 1))
    model.fc.weight.register_post_accumulate_grad_hook(
        lambda p: seen.__setitem__("post-accumulate", seen["post-accumulate"] + 1))
    for _ in range(3):
        compiled(_x()).sum().backward()
    assert seen == {"tensor": 3, "post-accumulate": 3}


def test_tensor_hook_on_an_intermediate_inside_a_compiled_function_fires():
    layer = nn.Linear(4, 4)
    grads: list = []

    @torch.compile(backend=BACKEND)
    def run(inputs):
        hidden = layer(inputs)
        hidden.register_hook(lambda g: grads.append(g.shape))
        return hidden.sum()

    run(_x()).backward()
    run(_x()).backward()
    assert len(grads) == 2


def test_a_recompilation_picks_up_the_late_hook():
    """The late hook is ignored by the graph compiled before it; a recompilation
    (another input shape here) traces the hooks in place at that moment."""
    model = _net()

    @torch.compile(backend=BACKEND)
    def step(inputs):
        return model(inputs).sum()

    step(_x(3))
    calls = []
    model.fc.register_forward_hook(lambda *a: calls.append(1))
    step(_x(3))
    assert calls == []
    step(_x(5))  # a new shape: recompiled, with the hook
    assert calls == [1]


def test_dynamo_reset_makes_late_hooks_fire_by_recompiling():
    model = _net()
    compiled = torch.compile(model, backend=BACKEND)
    compiled(_x())
    calls = []
    model.fc.register_forward_hook(lambda *a: calls.append(1))
    compiled(_x())
    assert calls == []
    torch._dynamo.reset()
    compiled(_x())
    assert calls == [1]


def test_dynamo_skips_module_hook_guards_by_default():
    assert torch._dynamo.config.skip_nnmodule_hook_guards is True


def test_late_hooks_fire_when_hook_guards_are_not_skipped():
    model = _net()
    with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
        compiled = torch.compile(model, backend=BACKEND)
        compiled(_x())
        calls = []
        model.fc.register_forward_hook(lambda *a: calls.append(1))
        compiled(_x())
    assert calls == [1]


@pytest.mark.slow
def test_late_hook_never_fires_with_the_default_backend():
    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler: inductor cannot build its CPU kernels here")
    before, late = [], []
    early = _net()
    early.fc.register_forward_hook(lambda *a: before.append(1))
    compiled_early = torch.compile(early)  # inductor
    try:
        compiled_early(_x())
    except Exception as exc:  # noqa: BLE001 - a toolchain problem, not the behaviour under test
        pytest.skip(f"inductor could not compile on this machine: {type(exc).__name__}: {exc}"[:300])
    compiled_early(_x())
    torch._dynamo.reset()  # another instance of the class would reuse this graph (next test)
    model = _net()
    compiled = torch.compile(model)
    compiled(_x())
    model.fc.register_forward_hook(lambda *a: late.append(1))
    compiled(_x())
    compiled(_x())
    assert (len(before), late) == (2, [])


def test_another_instance_of_a_compiled_class_reuses_the_graph_and_ignores_its_hooks():
    """Hooks registered before compiling are traced only when their module is
    traced: a second instance of a class whose forward was compiled already
    reuses that graph (dynamo does not guard on hooks), with its own hooks
    ignored although they were registered before its `torch.compile`."""
    first = torch.compile(_net(), backend=BACKEND)
    first(_x())
    second_model = _net()
    calls = []
    second_model.fc.register_forward_hook(lambda *a: calls.append(1))
    second = torch.compile(second_model, backend=BACKEND)
    second(_x())
    second(_x())
    assert calls == []


# ----------------------------------------------------------------- checkpointing


def _mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))


def _data() -> torch.Tensor:
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(7))


def _steered_grads(checkpointed: bool, remove_before_backward: bool) -> list:
    """A 3-layer MLP with a forward hook that scales the first layer's output (a
    steering vector, an intervention): the gradients of every parameter."""
    model = _mlp()
    handle = model[0].register_forward_hook(lambda m, i, o: o * 3.0)
    out = checkpoint(model, _data(), use_reentrant=False) if checkpointed else model(_data())
    if remove_before_backward:
        handle.remove()
    out.sum().backward()
    if not remove_before_backward:
        handle.remove()
    return [p.grad.clone() for p in model.parameters()]


def _max_diff(a: list, b: list) -> float:
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def test_output_changing_hook_removed_before_backward_under_checkpoint_gives_wrong_gradients():
    reference = _steered_grads(checkpointed=False, remove_before_backward=False)
    removed = _steered_grads(checkpointed=True, remove_before_backward=True)
    assert _max_diff(removed, reference) > 0.1  # 1.35 on this MLP; no error, no warning


def test_output_changing_hook_kept_through_backward_is_in_the_recompute():
    reference = _steered_grads(checkpointed=False, remove_before_backward=False)
    kept = _steered_grads(checkpointed=True, remove_before_backward=False)
    assert _max_diff(kept, reference) == 0.0


def test_removing_a_forward_hook_before_backward_without_checkpointing_changes_nothing():
    reference = _steered_grads(checkpointed=False, remove_before_backward=False)
    removed = _steered_grads(checkpointed=False, remove_before_backward=True)
    assert _max_diff(removed, reference) == 0.0


def test_observe_only_hook_removed_before_backward_under_checkpoint_changes_nothing():
    def grads(with_hook: bool) -> list:
        model = _mlp()
        seen = []
        handle = model[0].register_forward_hook(lambda m, i, o: seen.append(o.detach())) if with_hook else None
        out = checkpoint(model, _data(), use_reentrant=False)
        if handle is not None:
            handle.remove()
        out.sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    assert _max_diff(grads(True), grads(False)) == 0.0


def test_in_place_output_edit_removed_before_backward_under_checkpoint_gives_wrong_gradients():
    def grads(checkpointed: bool) -> list:
        model = _mlp()
        handle = model[0].register_forward_hook(lambda m, i, o: o.mul_(3.0))
        out = checkpoint(model, _data(), use_reentrant=False) if checkpointed else model(_data())
        handle.remove()
        out.sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    assert _max_diff(grads(True), grads(False)) > 0.1


def _wrap(mode: str, model: nn.Sequential):
    if mode == "checkpoint":
        return lambda x: checkpoint(model, x, use_reentrant=False)
    if mode == "reentrant":
        return lambda x: checkpoint(model, x, use_reentrant=True)
    if mode == "checkpoint_wrapper":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        return checkpoint_wrapper(model)
    if mode == "checkpoint_sequential":
        return lambda x: checkpoint_sequential(model, 2, x, use_reentrant=False)
    raise AssertionError(mode)


@pytest.mark.parametrize("mode", ["checkpoint", "reentrant", "checkpoint_wrapper", "checkpoint_sequential"])
def test_collector_on_an_inner_layer_stores_each_activation_twice(mode):
    model = _mlp()
    stored, counter = [], {"calls": 0}

    def collect(module, inputs, output):
        stored.append(output.detach())
        counter["calls"] += 1

    model[0].register_forward_hook(collect)
    run = _wrap(mode, model)
    x = _data().requires_grad_()
    run(x).sum().backward()
    assert len(stored) == 2 and counter["calls"] == 2
    assert torch.equal(stored[0], stored[1])  # the same activation, stored twice


def test_stateful_hooks_do_not_double_without_checkpointing():
    model = _mlp()
    stored = []
    model[0].register_forward_hook(lambda m, i, o: stored.append(1))
    model(_data()).sum().backward()
    assert stored == [1]


def test_running_statistics_updated_by_a_hook_double_under_checkpoint():
    def running_mean(checkpointed: bool) -> torch.Tensor:
        model = _mlp()
        state = {"mean": torch.zeros(8), "steps": 0}

        def track(module, inputs, output):
            state["mean"].mul_(0.9).add_(0.1 * output.detach().mean(0))
            state["steps"] += 1

        model[0].register_forward_hook(track)
        for _ in range(3):
            out = checkpoint(model, _data(), use_reentrant=False) if checkpointed else model(_data())
            out.sum().backward()
        return state["mean"], state["steps"]

    plain_mean, plain_steps = running_mean(False)
    ckpt_mean, ckpt_steps = running_mean(True)
    assert (plain_steps, ckpt_steps) == (3, 6)
    assert not torch.allclose(plain_mean, ckpt_mean)


def test_non_reentrant_recompute_stops_before_the_last_saving_layer_and_the_root():
    """Early stop (the default): the recompute ends once the last saved tensor is
    rebuilt, inside the last layer's forward; that layer's and the checkpointed
    module's own forward hooks run once.  Forward pre-hooks run before the
    forward, so the last layer's and the root's run twice."""
    model = _mlp()
    forward_calls = {i: 0 for i in ("root", 0, 4)}
    pre_calls = {i: 0 for i in ("root", 4)}
    for key, module in (("root", model), (0, model[0]), (4, model[4])):
        module.register_forward_hook(lambda m, i, o, key=key: forward_calls.__setitem__(key, forward_calls[key] + 1))
    for key, module in (("root", model), (4, model[4])):
        module.register_forward_pre_hook(lambda m, i, key=key: pre_calls.__setitem__(key, pre_calls[key] + 1))
    checkpoint(model, _data().requires_grad_(), use_reentrant=False).sum().backward()
    assert forward_calls == {"root": 1, 0: 2, 4: 1}
    assert pre_calls == {"root": 2, 4: 2}


def test_reentrant_recompute_runs_every_forward_hook_again():
    model = _mlp()
    calls = {"root": 0, 4: 0}
    model.register_forward_hook(lambda *a: calls.__setitem__("root", calls["root"] + 1))
    model[4].register_forward_hook(lambda *a: calls.__setitem__(4, calls[4] + 1))
    checkpoint(model, _data().requires_grad_(), use_reentrant=True).sum().backward()
    assert calls == {"root": 2, 4: 2}


def test_checkpoint_sequential_leaves_its_last_segment_uncheckpointed():
    model = _mlp()
    calls = [0] * 5
    for i, layer in enumerate(model):
        layer.register_forward_hook(lambda *a, i=i: calls.__setitem__(i, calls[i] + 1))
    checkpoint_sequential(model, 2, _data().requires_grad_(), use_reentrant=False).sum().backward()
    # segment 1 is layers 0-1 (layer 1 saves the last tensor: stopped there); layers 2-4 run once, unchecked
    assert calls == [2, 1, 1, 1, 1]


def test_the_recompute_runs_under_the_recomputation_saved_tensor_hooks():
    """The run-time signal hooklint uses (torch 2.13): inside the checkpointed
    forward the top saved-tensor hooks are checkpoint's, and in the recompute
    they are the recomputation's; reentrant checkpointing recomputes inside
    the backward of `CheckpointFunction`."""
    model = _mlp()
    seen = []

    def probe(module, inputs, output):
        top = torch._C._autograd._top_saved_tensors_default_hooks(False)
        node = torch._C._current_autograd_node()
        seen.append((top[1].__qualname__ if top else None, node.name() if node is not None else None))

    model[0].register_forward_hook(probe)
    checkpoint(model, _data().requires_grad_(), use_reentrant=False).sum().backward()
    checkpoint(model, _data().requires_grad_(), use_reentrant=True).sum().backward()
    assert seen[0] == ("_checkpoint_hook.__init__.<locals>.unpack_hook", None)
    assert seen[1][0] == "_recomputation_hook.__init__.<locals>.unpack_hook"
    assert seen[2] == (None, None)
    assert seen[3] == (None, "CheckpointFunctionBackward")
