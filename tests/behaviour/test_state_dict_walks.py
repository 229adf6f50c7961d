"""Real torch: what HKL904 claims.  A loader that walks the modules and calls
`_load_from_state_dict` itself loads the tensors but never runs the hooks of
`register_load_state_dict_post_hook`; `load_state_dict()` does, and so does a
walk that runs them.  The same for `_save_to_state_dict` and the state_dict
hooks.  The loaders are the fixture's own.
"""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl904_state_dict_step_skips_hooks.py"


def _model_with_post_hook(calls):
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[1].register_load_state_dict_post_hook(lambda module, keys: calls.append(module))
    return model


@pytest.fixture(scope="module")
def loaders():
    return runpy.run_path(str(FIXTURE))


def test_walks_skip_the_load_post_hook(loaders):
    source = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    state = source.state_dict()
    for name, load in (("load_checkpoint", loaders["load_checkpoint"]),
                       ("Loader.restore", lambda m, sd: loaders["Loader"]().restore(m, sd))):
        calls: list = []
        model = _model_with_post_hook(calls)
        load(model, state)
        assert torch.equal(model[1].weight, source[1].weight), name  # the tensors were loaded
        assert calls == [], name  # the hook never ran
    for name in ("load_checkpoint_with_hooks", "load_public"):
        calls = []
        model = _model_with_post_hook(calls)
        loaders[name](model, state)
        assert calls == [model[1]], name


def test_private_save_skips_state_dict_hooks(loaders):
    model = nn.Sequential(nn.Linear(2, 2))
    seen: list = []
    model[0].register_state_dict_pre_hook(lambda module, prefix, keep_vars: seen.append("pre"))
    model.state_dict()
    assert seen == ["pre"]
    seen.clear()
    out = loaders["export_weights"](model)
    assert set(out) == {"0.weight", "0.bias"} and seen == []


def test_findings_are_the_fixtures():
    text = FIXTURE.read_text(encoding="utf-8")
    rows = sorted(f.location.row for f in lint(text, "HKL904"))
    lines = text.splitlines()
    assert rows and all(lines[r - 1].rstrip().endswith("# HKL904") for r in rows)
    assert len(rows) == sum(1 for line in lines if line.rstrip().endswith("# HKL904"))
