"""Real torch: what HKL003 claims.  A `# noqa: HKL101` left on a line whose
legacy hook was replaced silences nothing, and hides the next legacy hook
written on that line: hooklint then stays quiet while torch really hands
that hook the last op's gradients instead of the module's (the bug HKL101
exists for).  Removing the unused code (HKL003's fix) makes it visible."""

from __future__ import annotations

import json
import warnings

import pytest

from conftest import run_cli

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SCRIPT = """\
import torch
import torch.nn as nn


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x) / 4


seen = []


def record(module, grad_input, grad_output):
    seen.append([None if g is None else tuple(g.shape) for g in grad_input])


net = Scaled()
net.{register}(record)  # noqa: HKL101
"""


def findings(project, *args):
    r = run_cli("check", "--static-only", "--select", "HKL003,HKL101", "--output-format", "json", *args,
                "model.py", cwd=project)
    assert r.returncode in (0, 1), r.stderr
    return [(f["code"], f["location"]["row"]) for f in json.loads(r.stdout)]


def grad_input_shapes(source: str):
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, "model.py", "exec"), namespace)
        namespace["net"](torch.rand(4, requires_grad=True)).sum().backward()
    return namespace["seen"][0]


def test_an_unused_noqa_hides_the_next_legacy_hook_on_its_line(tmp_path):
    fixed_hook = SCRIPT.format(register="register_full_backward_hook")
    (tmp_path / "model.py").write_text(fixed_hook)
    assert findings(tmp_path) == [("HKL003", 22)]
    # the full hook really sees the module's input gradient: nothing to silence
    assert grad_input_shapes(fixed_hook) == [(4,)]

    # someone writes a legacy hook on that line again: the stale noqa hides it
    legacy = SCRIPT.format(register="register_backward_hook")
    (tmp_path / "model.py").write_text(legacy)
    assert findings(tmp_path) == []
    # ... while torch binds it to `/ 4` (DivBackward0): grad_input is not the module's (4,)
    assert grad_input_shapes(legacy) == [(1,), None]


def test_the_fix_removes_the_code_and_the_next_legacy_hook_is_reported(tmp_path):
    (tmp_path / "model.py").write_text(SCRIPT.format(register="register_full_backward_hook"))
    r = run_cli("check", "--static-only", "--select", "HKL003,HKL101", "--fix", "model.py", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    text = (tmp_path / "model.py").read_text()
    assert "net.register_full_backward_hook(record)\n" in text and "noqa" not in text
    (tmp_path / "model.py").write_text(text.replace("register_full_backward_hook", "register_backward_hook"))
    assert ("HKL101", 22) in findings(tmp_path)
