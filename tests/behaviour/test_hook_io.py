"""Real torch: what a forward pre-hook's return does to the arguments (HKL411),
keyword arguments passed as None to a capture (HKL412), and forward
replacements receiving the parent's call as it is (HKL317), run on the
fixtures' own functions.
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
def returns():
    return runpy.run_path(str(RULES / "hkl411_pre_hook_returns_unwrapped_input.py"))


@pytest.fixture(scope="module")
def kwargs_fixture():
    return runpy.run_path(str(RULES / "hkl412_capture_assumes_kwarg_tensor.py"))


@pytest.fixture(scope="module")
def positional():
    return runpy.run_path(str(RULES / "hkl317_pre_hook_needs_positional_input.py"))


class TakesPair(nn.Module):
    """One argument, a tuple (as an LSTM's state, or a block fed `(x, mask)`)."""

    def forward(self, pair):
        x, scale = pair
        return x * scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = TakesPair()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.pair((self.lin(x), 2.0))


# ------------------------------------------------------------------ HKL411


def test_pre_hook_returning_the_one_tuple_argument_spreads_it(returns):
    net, x = Net(), torch.randn(2, 3)
    expected = net(x)
    profiler = returns["Profiler"](net)
    profiler.start()
    with pytest.raises(TypeError, match="positional argument"):
        net(x)  # TakesPair.forward(pair) is called as forward(x, 2.0)
    assert "pair" in profiler.names
    for handle in profiler.handles:
        handle.remove()
    assert torch.equal(net(x), expected)


def test_unwrap_single_spreads_and_whole_tuple_is_fine(returns):
    net, x = Net(), torch.randn(2, 3)
    expected = net(x)
    handles = returns["unwrap_single"](net, [])
    with pytest.raises(TypeError):
        net(x)
    for h in handles:
        h.remove()
    handles = returns["whole_tuple"](net, [])  # the good twin: the tuple as it came
    assert torch.equal(net(x), expected)
    for h in handles:
        h.remove()


def test_pre_hook_returning_first_of_two_arguments_drops_the_second():
    class Two(nn.Module):
        def forward(self, x, y=None):
            return x if y is None else x + y

    two, x, y = Two(), torch.ones(2), torch.full((2,), 5.0)
    two.register_forward_pre_hook(lambda m, args: args[0])
    assert torch.equal(two(x, y), x)  # y was silently dropped: x + y would be 6s


def test_tensor_checked_variant_keeps_single_tensor(returns):
    lin, x = nn.Linear(3, 3), torch.randn(2, 3, requires_grad=True)
    expected = lin(x)
    returns["tensor_checked"](lin)
    assert torch.allclose(lin(x), expected)  # the quiet variant: its one argument is a tensor


# ------------------------------------------------------------------ HKL412


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, hidden_states, attention_mask=None, position_ids=None):
        return self.proj(hidden_states)


class Decoder(nn.Module):
    """Calls its layers with keywords, passing the optional ones as None (as SDPA / Flash Attention paths do)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.blocks = self.layers

    def forward(self, x, mask=None):
        for layer in self.layers:
            x = layer(hidden_states=x, attention_mask=mask, position_ids=None)
        return x


def test_capture_wrapper_raises_on_none_mask_and_checked_twin_captures(kwargs_fixture):
    stop = kwargs_fixture["Stop"]
    model, x = Decoder(), torch.randn(2, 3)
    cache = []
    kwargs_fixture["capture_with_wrapper"](model.layers, cache)
    with pytest.raises(AttributeError, match="NoneType"):
        model(x)  # attention_mask=None
    model = Decoder()
    kwargs_fixture["capture_checked"](model.layers, cache)
    with pytest.raises(stop):
        model(x)
    assert cache[-1][1] is None


def test_with_kwargs_pre_hook_raises_on_none_and_guarded_twin_is_fine(kwargs_fixture):
    model, x = Decoder(), torch.randn(2, 3)
    handle = kwargs_fixture["with_kwargs_pre_hook"](model, [])
    with pytest.raises(AttributeError, match="NoneType"):
        model(x)
    handle.remove()
    store = []
    for layer in model.layers:
        kwargs_fixture["guarded_early"](layer, store)
    model(x)
    model(x, mask=torch.ones(2, 3))
    assert len(store) == 2  # only the calls that had a mask


def test_partial_capture_raises_on_none_position_ids(kwargs_fixture):
    model, x = Decoder(), torch.randn(2, 3)
    kwargs_fixture["capture_with_partial"](model, [])
    with pytest.raises(AttributeError, match="NoneType"):
        model(x)


# ------------------------------------------------------------------ HKL317 on forward replacements


class Renamed(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, hidden_state, mask=None):  # another name for the input
        return self.proj(hidden_state)


class KeywordParent(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Renamed()

    def forward(self, x):
        return self.block(hidden_state=x, mask=None)


def test_forward_replacement_demanding_a_named_input_fails_on_keyword_call(positional):
    store = []
    model = KeywordParent()
    positional["capture_blocks_with_partial"](model, {"block"}, store)
    with pytest.raises(TypeError, match="hidden_states"):
        model(torch.randn(2, 3))
    assert store == []


def test_optional_replacement_captures_and_forwards(positional):
    store = []
    model = KeywordParent()
    x = torch.randn(2, 3)
    expected = model(x)
    positional["capture_blocks_optional"](model, {"block"}, store)
    assert torch.equal(model(x), expected)
    assert store and "hidden_state" in store[0]


def test_closure_reading_args0_fails_on_keyword_call(positional):
    class WithLayers(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Renamed()])

        def forward(self, x):
            return self.layers[0](hidden_state=x)

    model = WithLayers()
    positional["capture_first_layer_closure"](model, [])
    with pytest.raises(IndexError):
        model(torch.randn(2, 3))


class KeywordLayers(nn.Module):
    """Calls its layer with keyword arguments only, as Hugging Face decoders call theirs."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Renamed()])

    def forward(self, x):
        return self.layers[0](hidden_state=x, mask=None)


class _Family:
    @staticmethod
    def get_model_layers(model):
        return model.layers


def test_capture_in_a_helper_returned_slot_fails_on_keyword_call(positional):
    model = KeywordLayers()
    with pytest.raises(TypeError, match="hijacked_inputs"):
        positional["LayerCalibrator"](_Family(), model).first_layer_inputs(torch.randn(2, 3))
    store = []
    with pytest.raises(TypeError, match="'x'"):
        positional["block_inputs"](KeywordLayers(), lambda model: model.layers, torch.randn(2, 3), store)
    assert store == []


def test_capture_taking_either_records_the_keyword_input(positional):
    model, x, store = KeywordLayers(), torch.randn(2, 3), []
    positional["block_inputs_either"](model, lambda model: model.layers, x, store)
    assert len(store) == 1 and torch.equal(store[0], x)
    assert isinstance(model.layers[0], Renamed)  # the slot is restored


# ------------------------------------------------------------------ HKL413


@pytest.fixture(scope="module")
def pairing():
    return runpy.run_path(str(RULES / "hkl413_hook_outputs_paired_by_position.py"))


def test_one_collector_pairs_outputs_by_firing_order(pairing):
    net, x = pairing["Net"](), torch.randn(2, 3)
    names = ["fc", "conv1"]  # listed in another order than the forward runs them
    feats = pairing["Extractor"](net, names).run(x)
    assert feats["fc"].shape == (2, 4)  # conv1's output, stored under "fc"
    assert feats["conv1"].shape == (2, 2)
    feats = pairing["extract_with_zip"](pairing["Net"](), names, x)
    assert feats["fc"].shape == (2, 4)


def test_per_layer_hooks_keep_each_output_under_its_name(pairing):
    net, x = pairing["Net"](), torch.randn(2, 3)
    names = ["fc", "conv1"]
    for extract in (pairing["extract_by_name"], pairing["extract_by_module"]):
        feats = extract(net, names, x)
        assert feats["fc"].shape == (2, 2)
        assert feats["conv1"].shape == (2, 4)


# ------------------------------------------------------------------ HKL414


@pytest.fixture(scope="module")
def first_value():
    return runpy.run_path(str(RULES / "hkl414_capture_first_value_then_append.py"))


class MaskedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, hidden_states, mask=None):
        return self.proj(hidden_states) if mask is None else self.proj(hidden_states) * mask


class MaskedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = MaskedBlock()

    def forward(self, x, mask=None):
        return self.block(x, mask=mask)


def test_none_first_then_tensor_raises_on_append(first_value):
    model, state = MaskedModel(), {}
    first_value["install"](model, state)
    model(torch.randn(2, 3))  # the first sample has no mask: stored as a bare None
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'append'"):
        model(torch.randn(2, 3), mask=torch.ones(2, 3))


def test_fixed_capture_records_every_sample(first_value):
    model, state = MaskedModel(), {}
    first_value["install_fixed"](model, state)
    model(torch.randn(2, 3))
    model(torch.randn(2, 3), mask=torch.ones(2, 3))
    model(torch.randn(2, 3), mask=torch.ones(2, 3))
    assert len(state["block"]["mask"]) == 2
