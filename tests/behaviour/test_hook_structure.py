"""Real torch: a forward hook on every module of a model gets every module's
real output and input (HKL406), run on the fixtures' own functions.

- `nn.LSTM` (and `nn.MultiheadAttention`) return tuples: `out.shape` raises.
- A module called with keyword arguments only gets `input == ()`.
- A CNN of tensor-returning layers works, which is why such code passes its
  own tests.
"""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"


@pytest.fixture(scope="module")
def summaries():
    return runpy.run_path(str(RULES / "hkl406_hook_assumes_tensor_output.py"))


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out)


class KeywordBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, hidden_states=None):
        return self.proj(hidden_states)


class Wrapper(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = KeywordBlock()

    def forward(self, x):
        return self.block(hidden_states=x)


def test_hook_on_every_module_fails_on_a_tuple_output(summaries):
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'shape'"):
        summaries["output_shapes"](Tagger(), torch.randn(2, 5, 4))
    shapes = summaries["structured_output_shapes"](Tagger(), torch.randn(2, 5, 4))
    assert shapes["model.rnn"][0] == (5, 8) and shapes["model.head"] == (5, 3)


def test_hook_on_every_module_fails_on_a_keyword_only_call(summaries):
    with pytest.raises(IndexError, match="tuple index out of range"):
        summaries["input_dtypes"](Wrapper(), torch.randn(2, 4))


def test_tensor_only_models_and_type_filtered_hooks_work(summaries):
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 3))
    assert summaries["output_shapes"](cnn, torch.randn(1, 3, 8, 8))["model.2"] == (2, 4, 4)
    assert summaries["conv_output_shapes"](cnn, torch.randn(1, 3, 8, 8)) == [(1, 4, 6, 6), (1, 2, 4, 4)]
    assert summaries["conv_output_shapes"](Tagger(), torch.randn(2, 5, 4)) == []  # the LSTM is not hooked


class PackedTagger(nn.Module):
    """An LSTM fed a PackedSequence returns `(PackedSequence, (h, c))`."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 8, batch_first=True)

    def forward(self, x):
        packed = nn.utils.rnn.pack_padded_sequence(x, [x.shape[1]] * x.shape[0], batch_first=True)
        out, _ = self.rnn(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True)[0]


class DictBlock(nn.Module):
    """A leaf module returning a dict (as `ModelOutput`-returning blocks do)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return {"hidden": x @ self.weight}


def _leaf_shapes(summaries, model, x):
    recorder = summaries["LeafShapes"](model)
    try:
        model(x)
    finally:
        recorder.close()
    return recorder.shapes


def test_a_tuple_test_leaves_dicts_and_packed_elements_unhandled(summaries):
    with pytest.raises(AttributeError, match="'PackedSequence' object has no attribute 'shape'"):
        _leaf_shapes(summaries, PackedTagger(), torch.randn(2, 5, 4))
    with pytest.raises(AttributeError, match="'dict' object has no attribute 'shape'"):
        _leaf_shapes(summaries, DictBlock(), torch.randn(2, 4))
    # tensor-only models pass, and the good twin handles the packed element
    assert _leaf_shapes(summaries, nn.Sequential(nn.Linear(4, 3), nn.ReLU()), torch.randn(2, 4)) == [[2, 3], [2, 3]]
    assert [10, 8] in summaries["packed_aware_shapes"](PackedTagger(), torch.randn(2, 5, 4))


def test_an_early_type_exit_hooks_only_the_known_layers(summaries):
    assert summaries["activation_shapes"](Tagger(), torch.randn(2, 5, 4)) == []  # no activation: nothing hooked
    assert summaries["activation_shapes"](nn.Sequential(nn.Linear(4, 3), nn.Tanh()), torch.randn(2, 4)) == [(2, 3)]


# --------------------------------------------------------------------- HKL407


@pytest.fixture
def counters():
    return runpy.run_path(str(RULES / "hkl407_forward_hook_replaces_output.py"))


def test_a_counter_returned_by_a_forward_hook_replaces_the_output(counters):
    x = torch.randn(1, 3, 4, 4)
    out = counters["upsample"](x)
    assert out.shape == (1,) and out.dtype == torch.float64  # the feature map is gone
    with pytest.raises(RuntimeError):
        nn.Conv2d(3, 2, 3)(counters["upsample"](x))  # the next layer fails
    assert counters["fixed_upsample"](x).shape == (1, 3, 8, 8)
    assert counters["fixed_upsample"].total_ops == 1 * 3 * 8 * 8


def test_a_flag_returned_by_a_forward_hook_replaces_the_output(counters):
    x = torch.randn(2, 4)
    assert counters["counted"](x) is False  # False is not None: it is the Linear's output now
    assert counters["counted"](x) is True


def test_a_deliberate_replacement_is_kept(counters):
    lin = counters["halved"]
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(lin(x), nn.functional.linear(x, lin.weight, lin.bias) * 0.5)


def test_a_test_that_only_prints_still_uses_the_tuple_output(summaries, capsys):
    # the hook notices the LSTM's tuple, prints, then calls `.detach()` on it anyway
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'detach'"):
        summaries["warned_but_used"](Tagger(), torch.rand(2, 5, 4))
    assert "not a tensor output: LSTM" in capsys.readouterr().out
    # the good twin returns from the hook for such outputs and records the tensors
    saved = summaries["skipped_when_not_tensor"](Tagger(), torch.rand(2, 5, 4))
    assert {type(m).__name__ for m in saved} == {"Linear", "Tagger"}
