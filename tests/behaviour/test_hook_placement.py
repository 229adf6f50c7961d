"""Real torch: where hooks are placed and which modules they reach (HKL415, HKL337).

Each test runs the shape a rule reports and its good twin on real modules.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


def _blocks():
    return nn.ModuleList(nn.Linear(3, 3) for _ in range(4))


def _record(blocks, layer_nums, normalize):
    seen = []
    n = len(blocks)
    wanted = None if layer_nums is None else ({k % n for k in layer_nums} if normalize else set(layer_nums))
    handles = []
    for num, block in enumerate(blocks):
        if wanted is not None and num not in wanted:
            continue
        handles.append(block.register_forward_hook(lambda m, a, o, num=num: seen.append(num)))
    x = torch.randn(2, 3)
    for block in blocks:
        x = block(x)
    for h in handles:
        h.remove()
    return seen, len(handles)


def test_negative_index_never_equals_an_enumerate_position():
    """HKL415: `-1` (the last layer, for Python's indexing) is never a position,
    so the last block gets no hook and nothing is recorded for it, silently."""
    blocks = _blocks()
    assert blocks[-1] is blocks[3]  # what the caller means by -1
    seen, hooked = _record(blocks, [-1], normalize=False)
    assert hooked == 0 and seen == []
    seen, hooked = _record(blocks, [1, -1], normalize=False)
    assert hooked == 1 and seen == [1]


def test_normalized_indices_hook_the_layer_a_negative_index_names():
    """The good twin: indices mapped with `k % n` hook the last block for -1."""
    blocks = _blocks()
    seen, hooked = _record(blocks, [-1], normalize=True)
    assert hooked == 1 and seen == [3]
    seen, hooked = _record(blocks, [1, -1], normalize=True)
    assert seen == [1, 3]


class _Delayed:
    """horovod 0.16.2's shape: a countdown per parameter, keyed by the names the caller gave."""

    def __init__(self, model, named_parameters, from_hooked_set):
        self.params = list(model.parameters())
        keys = self.params if from_hooked_set else [p for _, p in named_parameters]
        self.delay = {p: 1 for p in keys}
        self.accs = []
        for p in self.params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(p))
            self.accs.append(acc)

    def _make_hook(self, p):
        def hook(*unused):
            self.delay[p] -= 1
        return hook


def test_hook_indexing_a_dict_keyed_by_another_collection_raises_in_backward():
    """HKL337: hooks on every parameter, keys only for the named ones (none by
    default): the AccumulateGrad hook raises KeyError inside backward()."""
    model = nn.Linear(3, 2)
    _Delayed(model, named_parameters=[], from_hooked_set=False)
    with pytest.raises(KeyError):
        model(torch.randn(4, 3)).sum().backward()
    # a subset of names fails the same way for the parameters left out
    model = nn.Linear(3, 2)
    _Delayed(model, named_parameters=[("weight", model.weight)], from_hooked_set=False)
    with pytest.raises(KeyError):
        model(torch.randn(4, 3)).sum().backward()


def test_dict_keyed_by_the_hooked_collection_counts_every_parameter():
    """The good twin: keys from the collection the hooks are placed on."""
    model = nn.Linear(3, 2)
    delayed = _Delayed(model, named_parameters=[], from_hooked_set=True)
    model(torch.randn(4, 3)).sum().backward()
    assert sorted(delayed.delay.values()) == [0, 0]


def _attribute(model, x):
    """The HKL405 shape the rule now reports for hooks needing grad_input: every
    leaf hooked, then the library runs the caller's model itself."""
    def rescale(module, grad_input, grad_output):
        return tuple(None if g is None else g * 0.5 for g in grad_input)

    handles = [m.register_full_backward_hook(rescale) for m in model.modules() if not list(m.children())]
    try:
        x = x.detach().requires_grad_()
        model(x).sum().backward()
        return x.grad
    finally:
        for h in handles:
            h.remove()


def test_library_forward_fails_when_the_callers_model_modifies_a_hooked_output_in_place():
    """HKL405: with ReLU(inplace=True) after a hooked Linear (torchvision's style),
    the library's own forward raises; the same model without in-place ops works."""
    inplace = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True), nn.Linear(3, 1))
    with pytest.raises(RuntimeError, match="BackwardHookFunction"):
        _attribute(inplace, torch.randn(2, 3))
    plain = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    assert _attribute(plain, torch.randn(2, 3)).shape == (2, 3)
