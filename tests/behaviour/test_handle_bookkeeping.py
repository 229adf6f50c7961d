"""Real torch: hook-handle bookkeeping that breaks on the second use (HKL309)
or before the first (HKL310), run on the fixtures' own classes.

- A dict of handles reset to a list by the cleanup method: the next
  registration after a cleanup fails (wandb 0.15's `unhook_all`).
- An attribute of hooks assigned when training begins and read by
  `__del__`: an object dropped before that raises in its finalizer
  (fastai 1.0.51's `HookCallback`).
"""

from __future__ import annotations

import gc
import runpy
import sys

import pytest

from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"


@pytest.fixture(scope="module")
def containers():
    return runpy.run_path(str(RULES / "hkl309_handle_container_type.py"))


@pytest.fixture(scope="module")
def unset():
    return runpy.run_path(str(RULES / "hkl310_handle_attribute_unset.py"))


def _watch_twice(watcher_class):
    watcher = watcher_class()
    seen = []
    x = torch.ones(2, requires_grad=True)
    watcher.watch("x", x, lambda g: seen.append(g.clone()))
    (x * 3).sum().backward()
    watcher.unwatch_all()
    watcher.watch("x", x, lambda g: seen.append(g.clone()))  # watch again after a cleanup
    (x * 3).sum().backward()
    return seen


def test_dict_of_handles_reset_to_list_breaks_the_next_watch(containers):
    with pytest.raises(AttributeError, match="'list' object has no attribute 'get'"):
        _watch_twice(containers["GradientWatcher"])
    assert len(_watch_twice(containers["FixedWatcher"])) == 2


def test_list_of_handles_reset_to_dict_breaks_the_next_record(containers):
    layer, store = nn.Linear(2, 2), []
    recorder = containers["ActivationRecorder"]()
    recorder.record(layer, store)
    layer(torch.ones(1, 2))
    recorder.stop()
    with pytest.raises(AttributeError, match="'dict' object has no attribute 'append'"):
        recorder.record(layer, store)
    fixed = containers["ClearedRecorder"]()
    fixed.record(layer, store)
    fixed.stop()
    fixed.record(layer, store)
    layer(torch.ones(1, 2))
    assert len(store) == 2


def test_hkl309_reports_the_resets(containers):
    findings = lint((RULES / "hkl309_handle_container_type.py").read_text(), "HKL309")
    text = (RULES / "hkl309_handle_container_type.py").read_text()
    expected = [row for row, line in enumerate(text.splitlines(), 1) if line.endswith("# HKL309")]
    assert [f.location.row for f in findings] == expected and len(expected) == 2


def _finalizer_errors(make):
    """Exceptions raised by `__del__` of the object `make()` returns, once dropped."""
    caught = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda info: caught.append(info.exc_value)
    try:
        obj = make()
        del obj
        gc.collect()
    finally:
        sys.unraisablehook = old
    return caught


def test_callback_dropped_before_training_raises_in_its_finalizer(unset):
    modules = [nn.Linear(2, 2)]
    errors = _finalizer_errors(lambda: unset["HookCallback"](modules))
    assert len(errors) == 1 and isinstance(errors[0], AttributeError) and "handles" in str(errors[0])
    def cleanup_before_training():
        callback = unset["HookCallback"](modules)
        with pytest.raises(AttributeError, match="handles"):
            callback.remove()  # a direct cleanup before training fails too
        return callback

    assert len(_finalizer_errors(cleanup_before_training)) == 1
    for good in ("FixedCallback", "GuardedCallback"):
        assert _finalizer_errors(lambda: unset[good](modules)) == []
    # once training began, the hooks are removed as they should be
    cb = unset["FixedCallback"](modules)
    cb.on_train_begin()
    assert len(modules[0]._forward_hooks) == 1
    cb.remove()
    assert len(modules[0]._forward_hooks) == 0


def test_cleanup_in_init_before_the_handle_exists_raises(unset):
    with pytest.raises(AttributeError, match="handle"):
        unset["Resettable"](nn.Linear(2, 2))
