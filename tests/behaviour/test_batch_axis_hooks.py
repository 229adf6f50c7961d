"""Real torch: what HKL423 claims about hooks that squeeze axis 0 of a batched activation.

TransformerLens runs a hook as a forward hook of a `HookPoint` (an identity
module) that calls `fn(output, hook=hook_point)`; the same mechanism is
built here from torch alone.  A batched run of the reported hooks disagrees
with per-prompt runs; the fixed twins agree.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.hook_squeezes_batch_axis import HookSqueezesBatchAxis

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl423_hook_squeezes_batch_axis.py"


class HookPoint(nn.Identity):
    """TransformerLens's calling convention: the hook gets the activation and `hook=` the point."""

    def add_hook(self, fn):
        return self.register_forward_hook(lambda module, inputs, output: fn(output, hook=module))


def _namespace() -> dict:
    ns: dict = {"__name__": "hkl423_fixture"}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), ns)  # noqa: S102
    return ns


def test_squeeze_drops_axis_zero_only_for_one_element():
    assert torch.zeros(1, 5, 3).squeeze(0).shape == (5, 3)
    assert torch.zeros(2, 5, 3).squeeze(0).shape == (2, 5, 3)


def test_rule_reports_the_three_fixture_hooks():
    rows = {f.location.row for f in lint(FIXTURE.read_text(encoding="utf-8"), HookSqueezesBatchAxis.code)}
    assert len(rows) == 3


def _cached(make_hooks, acts):
    cache, hooks = make_hooks(lambda a: a * 1.0, slice(0, 1), 1)
    point = HookPoint()
    point.add_hook(hooks[0][1])
    point(acts)
    return cache[0]


def test_batched_caching_hook_zeroes_whole_prompts():
    ns = _namespace()
    acts = torch.arange(1, 2 * 3 * 2 + 1, dtype=torch.float32).reshape(2, 3, 2)  # (batch, pos, d)
    batched = _cached(ns["transcoder_caching_hooks"], acts)
    per_prompt = [_cached(ns["transcoder_caching_hooks"], acts[i:i + 1]) for i in range(2)]
    # one prompt: position 0 zeroed; two prompts: the whole first prompt zeroed instead
    assert per_prompt[0][0].abs().sum() == 0 and per_prompt[0][1].abs().sum() > 0
    assert batched[0].abs().sum() == 0
    assert not torch.equal(batched[1], per_prompt[1])

    fixed = _cached(ns["transcoder_caching_hooks_fixed"], acts)
    fixed_per_prompt = [_cached(ns["transcoder_caching_hooks_fixed"], acts[i:i + 1]) for i in range(2)]
    assert torch.equal(fixed, torch.cat(fixed_per_prompt))


def test_forward_hook_last_token_is_a_whole_sequence_for_a_batch():
    ns = _namespace()
    layer = nn.Linear(3, 3)
    recorder = ns["LastTokenRecorder"](layer)
    layer(torch.randn(1, 4, 3))
    layer(torch.randn(2, 4, 3))
    assert recorder.last[0].shape == (3,)  # the last token's vector
    assert recorder.last[1].shape == (4, 3)  # the second sequence, not a token

    checked = ns["LastTokenRecorderChecked"](nn.Linear(3, 3))
    checked.handle.remove()
    layer = nn.Linear(3, 3)
    checked = ns["LastTokenRecorderChecked"](layer)
    layer(torch.randn(1, 4, 3))
    with pytest.raises(ValueError, match="one sequence"):
        layer(torch.randn(2, 4, 3))


def test_head_ablator_hits_prompts_not_positions():
    ns = _namespace()
    point = HookPoint()
    ns["HeadAblator"](point, heads=[0])
    one = point(torch.ones(1, 3, 2))
    many = point(torch.ones(2, 3, 2))
    assert one.shape == (3, 2) and one[0].abs().sum() == 0 and one[1].abs().sum() > 0
    assert many.shape == (2, 3, 2) and many[0].abs().sum() == 0 and many[1].abs().sum() > 0
