"""Real torch: the behaviour behind the known problems no rule covers in the
second round of bench/trial.py (docs/real-world.md, "Second round").

- Under non-reentrant activation checkpointing, a forward hook on a layer
  inside the checkpointed function runs again at the recompute in backward;
  a hook on the checkpointed module itself does not (the recompute stops
  early, once the saved tensors are rebuilt).
- A forward hook that edits an output and is removed at the end of the
  forward that checkpoints (pyvene's shape) is missing at the recompute:
  backward silently uses activations the forward never produced.
- A module backward hook never fires for a forward run under no_grad.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
checkpoint = pytest.importorskip("torch.utils.checkpoint").checkpoint

pytestmark = pytest.mark.torch


def _block() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))


def test_inner_forward_hook_runs_again_at_recompute_outer_does_not():
    block = _block()
    inner_calls, outer_calls = [], []
    block[0].register_forward_hook(lambda m, i, o: inner_calls.append(1))
    block.register_forward_hook(lambda m, i, o: outer_calls.append(1))
    out = checkpoint(block, torch.randn(2, 4), use_reentrant=False)
    assert (len(inner_calls), len(outer_calls)) == (1, 1)
    out.sum().backward()
    assert (len(inner_calls), len(outer_calls)) == (2, 1)


def _grad_of_outer(remove_before_backward: bool, checkpointed: bool) -> torch.Tensor:
    block = _block()
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    handle = block[0].register_forward_hook(lambda m, i, o: o * 3.0)
    out = checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
    if remove_before_backward:
        handle.remove()
    out.pow(2).sum().backward()
    return block[2].weight.grad


def test_intervention_removed_before_recompute_gives_silently_wrong_gradients():
    reference = _grad_of_outer(remove_before_backward=False, checkpointed=False)
    kept = _grad_of_outer(remove_before_backward=False, checkpointed=True)
    removed = _grad_of_outer(remove_before_backward=True, checkpointed=True)
    without_checkpoint = _grad_of_outer(remove_before_backward=True, checkpointed=False)
    assert torch.allclose(kept, reference) and torch.allclose(without_checkpoint, reference)
    # no error, different numbers: the recompute ran without the hook
    assert not torch.allclose(removed, reference, atol=1e-3)


def test_module_backward_hook_never_fires_under_no_grad():
    block = _block()
    fired = []
    block.register_full_backward_hook(lambda m, gi, go: fired.append(1))
    with torch.no_grad():
        out = block(torch.randn(2, 4, requires_grad=True))
    assert not out.requires_grad and fired == []
    block(torch.randn(2, 4, requires_grad=True)).sum().backward()
    assert fired == [1]
