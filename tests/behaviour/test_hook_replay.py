"""Real torch: how `nn.Module.__call__` calls forward hooks registered with and
without `with_kwargs=True`, and what a hand-made replay that ignores the
difference does to them (HKL409), on the fixture's own functions."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def replays():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl409_hook_replayed_without_kwargs.py"))


def _model_with_both_pre_hooks(calls):
    model = nn.Sequential(nn.Linear(2, 2))
    layer = model[0]
    layer.register_forward_pre_hook(lambda module, args: calls.append(("plain", len(args))))
    layer.register_forward_pre_hook(lambda module, args, kwargs: calls.append(("kwargs", len(args), dict(kwargs))),
                                    with_kwargs=True)
    return model, layer


def test_torch_passes_kwargs_only_to_with_kwargs_hooks():
    calls = []
    model, layer = _model_with_both_pre_hooks(calls)
    model(torch.randn(1, 2))
    assert calls == [("plain", 1), ("kwargs", 1, {})]
    assert len(layer._forward_pre_hooks_with_kwargs) == 1


def test_a_replay_that_ignores_with_kwargs_breaks_such_hooks(replays):
    calls = []
    model, _ = _model_with_both_pre_hooks(calls)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'kwargs'"):
        replays["run_pre_hooks"](model, (torch.randn(1, 2),))
    mirror = replays["HookMirror"](model[0])
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        mirror.replay(torch.randn(1, 2))


def test_a_replayed_forward_hook_with_kwargs_gets_the_output_in_kwargs(replays):
    seen = []
    block = nn.Sequential(nn.Linear(2, 2))
    block[0].register_forward_hook(lambda m, args, kwargs, out: seen.append((args, kwargs, out)), with_kwargs=True)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'out'"):
        replays["fused_hooks"](block)(block)
    block(torch.randn(1, 2))
    assert seen and seen[0][1] == {} and isinstance(seen[0][2], torch.Tensor)


def test_the_good_twin_calls_each_hook_as_torch_does(replays):
    calls = []
    model, _ = _model_with_both_pre_hooks(calls)
    replays["run_pre_hooks_as_torch_does"](model, (torch.randn(1, 2),), {})
    assert calls == [("plain", 1), ("kwargs", 1, {})]
    # without any with_kwargs hook the plain replay works, which is why it passes its own tests
    plain = nn.Sequential(nn.Linear(2, 2))
    plain[0].register_forward_pre_hook(lambda module, args: calls.append(("only", len(args))))
    replays["run_pre_hooks"](plain, (torch.randn(1, 2),))
    assert calls[-1] == ("only", 1)


def test_module_and_global_forward_hooks_with_kwargs_break_the_same_way(replays):
    layer = nn.Linear(2, 2)
    x = torch.randn(1, 2)
    out = layer(x)
    # a module hook and a global hook without kwargs replay fine
    handle = layer.register_forward_hook(lambda m, args, output: output * 2)
    assert torch.equal(replays["replay_output_hooks"](layer, (x,), out), out * 2)
    handle.remove()
    handle = nn.modules.module.register_module_forward_hook(lambda m, args, kwargs, output: None, with_kwargs=True)
    try:
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'output'"):
            replays["replay_output_hooks"](layer, (x,), out)
        layer(x)  # torch itself calls it with the keyword arguments
    finally:
        handle.remove()
