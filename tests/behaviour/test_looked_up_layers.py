"""Real torch: hooks on layers a getter of another file looks up (HKL304),
run on fixtures/projects/lookups.

- An extractor whose constructor hooks the caller's layers and drops the
  handles: each extractor built on the same encoder adds one more hook per
  layer, and the old extractors' savers keep collecting.
- The twin that deletes its own hook from each layer's `_forward_hooks` in
  `__del__` leaves the encoder as it found it.
- Public functions and methods that hook a looked-up layer stack on repeat.
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

PROJECT = FIXTURES / "projects" / "lookups"


@pytest.fixture()
def extract(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT))
    for name in [m for m in sys.modules if m == "probing" or m.startswith("probing.")]:
        monkeypatch.delitem(sys.modules, name)
    return importlib.import_module("probing.extract")


def _encoder():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))


def test_each_extractor_on_the_same_encoder_adds_hooks_that_outlive_it(extract):
    encoder = _encoder()
    first = extract.FeatureExtractor(encoder, ["0", "2"])
    saver = first.saver
    del first
    gc.collect()
    second = extract.FeatureExtractor(encoder, ["0", "2"], detach=False)
    features = second(torch.randn(1, 3))
    assert set(features) == {"0", "2"}
    assert len(encoder[0]._forward_hooks) == 2  # the first extractor's hook is still there
    assert len(saver.outputs) == 2  # and its saver still collects activations


def test_the_destructor_twin_removes_only_its_own_hooks(extract):
    encoder = _encoder()
    other = encoder[0].register_forward_hook(lambda m, i, o: None)  # a user's hook stays
    extractor = extract.CleanedFeatureExtractor(encoder, ["0", "2"])
    assert len(encoder[0]._forward_hooks) == 2
    del extractor
    gc.collect()
    assert len(encoder[0]._forward_hooks) == 1 and len(encoder[2]._forward_hooks) == 0
    other.remove()


def test_public_function_and_method_stack_on_each_call(extract):
    encoder, sink = _encoder(), []
    extract.add_probe(encoder, "2", sink)
    extract.add_probe(encoder, "2", sink)
    encoder(torch.randn(1, 3))
    assert len(sink) == 2  # one forward, two pre-hooks
    watcher = extract.Watcher(encoder)
    watcher.watch("0")
    watcher.watch("0")
    encoder(torch.randn(1, 3))
    assert len(watcher.seen) == 2


def test_close_twin_and_copy_twin_leave_the_callers_layers_clean(extract):
    encoder = _encoder()
    watcher = extract.ClosingWatcher(encoder)
    watcher.watch("0")
    watcher.close("0")
    assert len(encoder[0]._forward_hooks) == 0
    extract.CopyingExtractor(encoder, "0")
    assert len(encoder[0]._forward_hooks) == 0


def test_hooklint_reports_the_bad_shapes_as_warnings_only(monkeypatch):
    monkeypatch.chdir(PROJECT)
    report = run_check(CheckOptions(paths=["."], config=Config(root=PROJECT, cache=False),
                                    codes=frozenset({"HKL304"}), static_only=True))
    found = sorted((f.location.row, f.severity.value) for f in report.findings if f.path.endswith("extract.py"))
    assert len(found) == len(report.findings)
    lines = (PROJECT / "probing" / "extract.py").read_text().splitlines()
    expected = sorted((n, "warning") for n, line in enumerate(lines, 1) if line.endswith("# HKL304"))
    assert found == expected and len(expected) == 3


def test_an_alternate_constructor_builds_a_new_module_each_time(extract):
    encoder, sink = _encoder(), []
    mapping = {nn.Linear: extract.Dense2Sparse}
    first = extract.swap(encoder[0], mapping, sink)
    second = extract.swap(encoder[0], mapping, sink)
    assert first is not second and len(first._forward_hooks) == len(second._forward_hooks) == 1
    assert len(encoder[0]._forward_hooks) == 0
