"""Real torch: a caller's model handed to a constructor of another file whose
helper method hooks a layer of it and drops the handle (HKL304 at the
hand-over), run on fixtures/projects/handover.

- Each `Posterior(model, ...)` adds one more hook on the caller's layer,
  which stays after the object is gone; a deep copy handed over leaves the
  caller's model clean (laplace-torch 0.1a2's fix).
- A loop that builds one tap per dataset on the same model stacks them.
"""

from __future__ import annotations

import gc
import importlib
import sys

import pytest

from conftest import FIXTURES
from hooklint.config import Config
from hooklint.engine import CheckOptions, run_check

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

PROJECT = FIXTURES / "projects" / "handover"


@pytest.fixture()
def posterior(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT))
    for name in [m for m in sys.modules if m.split(".")[0] in ("features", "methods")]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module("methods.posterior")


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_each_object_hooks_the_callers_layer_again_and_the_hooks_outlive_it(posterior):
    model = _model()
    first = posterior.Posterior(model, "2")
    features = first.features
    del first
    gc.collect()
    posterior.Posterior(model, "2")
    assert len(model[2]._forward_hooks) == 2
    model(torch.randn(5, 3))
    assert features.features.shape == (5, 4)  # the first object's extractor still stores features


def test_a_deep_copy_handed_over_leaves_the_callers_model_clean(posterior):
    model = _model()
    copied = posterior.CopiedPosterior(model, "2")
    assert len(model[2]._forward_hooks) == 0
    copied.features(torch.randn(5, 3))
    assert copied.features.features.shape == (5, 4)


def test_one_tap_per_dataset_on_the_same_model_stacks(posterior):
    model = _model()
    seen = posterior.fit_many(model, [torch.randn(2, 3) for _ in range(3)])
    assert [len(s) for s in seen] == [3, 2, 1]  # each tap stays and sees every later pass
    assert len(model[2]._forward_pre_hooks) == 3
    fresh = posterior.fit_fresh(_model, [torch.randn(2, 3) for _ in range(3)])
    assert [len(s) for s in fresh] == [1, 1, 1]


def test_hooklint_reports_the_handover_sites(monkeypatch):
    monkeypatch.chdir(PROJECT)
    report = run_check(CheckOptions(paths=["."], config=Config(root=PROJECT, cache=False),
                                    codes=frozenset({"HKL304"}), static_only=True))
    found = sorted((f.path, f.location.row) for f in report.findings if f.path.startswith("methods"))
    lines = (PROJECT / "methods" / "posterior.py").read_text().splitlines()
    assert found == [("methods/posterior.py", n) for n, line in enumerate(lines, 1) if line.endswith("# HKL304")]
