"""Real torch: what HKL339 claims about handles overwritten in a loop.

Handles kept in one name that a loop reassigns: after the loop only the last
pass's handles are left, and removing them leaves every other pass's hooks
registered (they keep firing).  The fixtures' functions are run as written.
"""

from __future__ import annotations

import importlib
import sys

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

SINGLE = FIXTURES / "rules" / "hkl339_handle_overwritten_in_loop.py"
PROJECT = FIXTURES / "projects" / "hkl339_handles_from_other_file"


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3), nn.Linear(3, 2))


def _namespace(path) -> dict:
    namespace: dict = {"__name__": "hkl339_fixture"}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102
    return namespace


def _fired_after_removal(handles, model, calls) -> int:
    for h in handles if isinstance(handles, list) else [handles]:
        h.remove()
    calls.clear()
    model(torch.randn(2, 3)).sum().backward()
    return len(calls)


def test_single_file_overwritten_handles_leave_hooks_behind():
    ns = _namespace(SINGLE)
    text = SINGLE.read_text(encoding="utf-8")
    lines = text.splitlines()
    flagged = {lines[f.location.row - 1].split("=")[0].strip() for f in lint(text, "HKL339")}
    assert flagged == {"handles", "handle", "self.hook_handle", "probe"}

    calls: list[str] = []

    def hook(module, *args):
        calls.append(type(module).__name__)

    model = _model()
    kept = ns["wrap_blocks"](model, hook, True)
    assert _fired_after_removal(kept, model, calls) > 0  # the first children's hooks still run

    model = _model()
    kept = ns["wrap_blocks_extended"](model, hook)
    assert _fired_after_removal(kept, model, calls) == 0

    model = _model()
    recorder = ns["Recorder"](model, lambda m, i, o: calls.append("fwd"))
    recorder.attach()
    recorder.detach()
    calls.clear()
    model(torch.randn(2, 3))
    assert calls == ["fwd", "fwd"]  # three Linear layers hooked, one handle removed


def test_project_helper_handles_overwritten_per_child(monkeypatch):
    monkeypatch.syspath_prepend(str(PROJECT))
    for name in [m for m in sys.modules if m == "pkg" or m.startswith("pkg.")]:
        monkeypatch.delitem(sys.modules, name)
    strategy = importlib.import_module("pkg.strategy")

    calls: list[str] = []
    model = _model()
    monkeypatch.setattr(importlib.import_module("pkg.oom"), "generate_sync_hook",
                        lambda device: (lambda module, *args: calls.append(type(module).__name__)))
    kept, _ = strategy.prepare_module(model, True, lambda child: child)
    assert len(kept) == 1  # the last child's single module
    assert _fired_after_removal(kept, model, calls) == 3  # the other three children's pre-hooks still run

    model = _model()
    kept = strategy.prepare_module_fixed(model, True, lambda child: child)
    assert len(kept) == 4
    assert _fired_after_removal(kept, model, calls) == 0
