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
