"""Real torch: what HKL421 claims about forward hooks on modules that return tuples.

Every class of ``hooklint.static.tuple_outputs``'s tables returns a tuple on
every call, a forward hook gets it as it is, and a tensor method on it raises
AttributeError; the fixture's reported hooks fail and their twins work.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.hook_reads_tuple_output_as_tensor import HookReadsTupleOutputAsTensor
from hooklint.static.tuple_outputs import ALWAYS_TUPLE, TUPLE_WITH_INDICES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl421_hook_reads_tuple_output_as_tensor.py"


def _instance_and_input(name: str):
    if name in ("LSTM", "GRU", "RNN"):
        return getattr(nn, name)(4, 6), (torch.randn(3, 2, 4),)
    if name == "LSTMCell":
        return nn.LSTMCell(4, 6), (torch.randn(2, 4),)
    if name == "MultiheadAttention":
        x = torch.randn(3, 2, 8)
        return nn.MultiheadAttention(8, 2), (x, x, x)
    if name == "AdaptiveLogSoftmaxWithLoss":
        return nn.AdaptiveLogSoftmaxWithLoss(8, 10, cutoffs=[4]), (torch.randn(5, 8), torch.randint(0, 10, (5,)))
    raise AssertionError(name)


@pytest.mark.parametrize("name", sorted(ALWAYS_TUPLE))
def test_table_classes_return_tuples_and_tensor_reads_fail(name):
    module, args = _instance_and_input(name)
    seen = []
    module.register_forward_hook(lambda m, i, o: seen.append(type(o)))
    module(*args)
    assert issubclass(seen[0], tuple)

    module.register_forward_hook(lambda m, i, o: o.detach())
    with pytest.raises(AttributeError, match="'.*' object has no attribute 'detach'"):
        module(*args)


def test_multihead_attention_returns_a_pair_without_weights_too():
    attn = nn.MultiheadAttention(8, 2)
    x = torch.randn(3, 2, 8)
    out = attn(x, x, x, need_weights=False)
    assert isinstance(out, tuple) and len(out) == 2 and out[1] is None


@pytest.mark.parametrize("name", sorted(TUPLE_WITH_INDICES))
def test_pooling_with_indices_returns_pairs(name):
    cls = getattr(nn, name)
    dims = int(name[-2])
    if name.startswith("Fractional"):
        with_indices, without = cls(2, output_size=2, return_indices=True), cls(2, output_size=2)
    elif name.startswith("Adaptive"):
        with_indices, without = cls(2, return_indices=True), cls(2)
    else:
        with_indices, without = cls(2, return_indices=True), cls(2)
    x = torch.randn(1, 2, *([6] * dims))
    assert isinstance(with_indices(x), tuple)
    assert isinstance(without(x), torch.Tensor)


def test_fixture_reported_hooks_fail_and_twins_work():
    source = FIXTURE.read_text(encoding="utf-8")
    rows = {f.location.row for f in lint(source, HookReadsTupleOutputAsTensor.code)}
    assert len(rows) == 5

    # running the module body registers the module-level hooks; nothing has fired yet
    ns: dict = {"__name__": "hkl421_fixture"}
    exec(compile(source, str(FIXTURE), "exec"), ns)  # noqa: S102
    x = torch.randn(2, 3, 8)

    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'detach'"):
        ns["AttentionMapRecorder"]()(x)
    fixed = ns["AttentionMapRecorderFixed"]()
    fixed(x)
    assert fixed.maps[0].shape == (2, 3, 3)

    model = nn.Sequential(nn.Linear(4, 4))
    model.add_module("rnn", nn.GRU(4, 5))
    sizes: list = []
    ns["record_recurrent_sizes"](model, sizes)
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'shape'"):
        model(torch.randn(3, 2, 4))
    model = nn.Sequential(nn.Linear(4, 4))
    model.add_module("rnn", nn.GRU(4, 5))
    ns["record_recurrent_sizes_fixed"](model, sizes)
    model(torch.randn(3, 2, 4))
    assert sizes == [(3, 2, 5)]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x):
            return self.attn(x, x, x)[0]

    block = Block()
    ns["collect_attention"](block)
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'cpu'"):
        block(x)

    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'mean'"):
        ns["gated"](torch.randn(2, 8))
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'size'"):
        ns["pool"](torch.randn(1, 1, 4, 4))
    ns["plain_pool"](torch.randn(1, 1, 4, 4))
    assert ns["pooled_sizes"] == [torch.Size([1, 1, 2, 2])]
