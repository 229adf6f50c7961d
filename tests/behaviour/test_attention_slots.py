"""Real torch: what HKL424 claims about hooks reading attention weights.

A forward hook gets what `forward` returned.  The fixture's attention
modules are run: on the fused path (`F.scaled_dot_product_attention`) and
with `nn.MultiheadAttention(..., need_weights=False)` the hooked slot is None
and the reported hooks fail on it; the twins get real weights.  openai-whisper
is not a dependency: its `MultiHeadAttention.qkv_attention` (release 20250625,
read in bench/real_bugs' cache) is mirrored below in its two branches, and an
`nn.TransformerEncoderLayer`, which calls its `self_attn` with
`need_weights=False`, shows the same None with torch alone.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.hook_reads_none_attention_slot import HookReadsNoneAttentionSlot

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl424_hook_reads_none_attention_slot.py"


def _namespace() -> dict:
    namespace: dict = {}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), namespace)  # noqa: S102
    return namespace


def test_fixture_reports_the_five_unguarded_reads():
    text = FIXTURE.read_text(encoding="utf-8")
    rows = [f.location.row for f in lint(text, HookReadsNoneAttentionSlot.code)]
    marked = [i for i, line in enumerate(text.splitlines(), 1) if line.endswith("# HKL424")]
    assert rows == marked and len(rows) == 5


def test_fused_branch_hands_the_hook_none_and_eager_twin_real_weights():
    ns = _namespace()
    x = torch.randn(2, 5, 8)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'mean'"):
        ns["record_fused_maps"](None, x)
    maps = ns["record_eager_maps"](x)
    assert len(maps) == 1 and maps[0].shape == (2, 5, 5)
    # the same class with its fused path off returns the weights: the slot depends on the path taken
    layer = ns["FlashSelfAttention"]()
    ns["FlashSelfAttention"].use_fused = False
    try:
        _, probs = layer(x)
    finally:
        ns["FlashSelfAttention"].use_fused = True
    assert probs is not None and torch.allclose(probs.sum(-1), torch.ones(2, 2, 5))


def test_multihead_attention_without_weights():
    ns = _namespace()
    x = torch.randn(2, 5, 8)
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'detach'"):
        ns["SummaryBlock"]()(x)
    twin = ns["SummaryBlockWithWeights"]()
    twin(x)
    assert twin.maps[0].shape == (2, 5, 5)


def test_transformer_encoder_layer_calls_self_attn_without_weights():
    layer = torch.nn.TransformerEncoderLayer(8, 2, batch_first=True)
    seen = []
    layer.self_attn.register_forward_hook(lambda m, i, o: seen.append(o[1]))
    layer(torch.randn(2, 3, 8))
    assert seen == [None]


class WhisperLikeAttention(torch.nn.Module):
    """The two branches of openai-whisper's `MultiHeadAttention.qkv_attention`."""

    use_sdpa = True

    def forward(self, q, k, v):
        if WhisperLikeAttention.use_sdpa:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v), None
        qk = q @ k.transpose(-1, -2)
        return qk.softmax(-1) @ v, qk.detach()


def test_whisper_switch_decides_what_the_hook_stores():
    attn = WhisperLikeAttention()
    stored = {}
    attn.register_forward_hook(lambda m, i, outs: stored.__setitem__("qk", outs[-1]))
    q = torch.randn(1, 2, 4, 8)
    attn(q, q, q)
    assert stored["qk"] is None
    WhisperLikeAttention.use_sdpa = False  # what whisper.model.disable_sdpa() does for its block
    try:
        attn(q, q, q)
    finally:
        WhisperLikeAttention.use_sdpa = True
    assert stored["qk"].shape == (1, 2, 4, 4)


def test_fixture_transformer_layers_hand_their_hooks_none():
    ns = _namespace()
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'cpu'"):
        ns["EncoderWithMaps"]()(torch.randn(2, 3, 8))
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'sum'"):
        ns["decoder_cross_maps"](torch.randn(2, 3, 8), torch.randn(2, 4, 8))
