"""Real torch: state-dict hooks get the whole call's state dict and the hooked
module's `prefix` (HKL906).  A hook that spells its module's keys as fixed
strings works while the module is the root and fails once it is nested; the
twin that builds keys from `prefix` works at both depths."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def fixture():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl906_state_dict_hook_ignores_prefix.py"))


class Parent(nn.Module):
    def __init__(self, child):
        super().__init__()
        self.fusion = child


def test_fixed_keys_work_at_the_root(fixture):
    model = fixture["EarlyFusion"]()
    state = model.state_dict()
    assert "decoder.tok_embeddings.weight" in state and "tok_embeddings.weight" not in state
    model.load_state_dict(state)  # the pre-hook moves the key back


def test_fixed_keys_fail_once_nested(fixture):
    parent = Parent(fixture["EarlyFusion"]())
    with pytest.raises(KeyError, match="tok_embeddings.weight"):
        parent.state_dict()  # the hook deletes the unprefixed key, which is not there


def test_load_hook_misses_the_prefixed_keys(fixture):
    root_state = fixture["EarlyFusion"]().state_dict()
    parent = Parent(fixture["EarlyFusion"]())
    nested = {f"fusion.{k}": v for k, v in root_state.items()}
    with pytest.raises(RuntimeError, match="Missing key"):
        parent.load_state_dict(nested)  # `key.startswith("decoder.tok_embeddings")` never matches


def test_private_pre_hook_misses_nested_keys(fixture):
    old = {k.replace("norm.weight", "norm.gamma"): v for k, v in fixture["Block"]().state_dict().items()}
    fixture["Block"]().load_state_dict(old)  # at the root the rename works
    with pytest.raises(RuntimeError, match="Unexpected key"):
        Parent(fixture["Block"]()).load_state_dict({f"fusion.{k}": v for k, v in old.items()})


def test_prefixed_keys_work_at_any_depth(fixture):
    root = fixture["EarlyFusionFixed"]()
    assert "decoder.tok_embeddings.weight" in root.state_dict()
    parent = Parent(fixture["EarlyFusionFixed"]())
    state = parent.state_dict()
    assert "fusion.decoder.tok_embeddings.weight" in state and "fusion.tok_embeddings.weight" not in state
    Parent(fixture["EarlyFusionFixed"]()).load_state_dict(state)
    suffix = Parent(fixture["SuffixUpgrade"]())
    old = {k.replace("norm.weight", "norm.gamma"): v for k, v in suffix.state_dict().items()}
    suffix.load_state_dict(old)
