"""The graph layer's API for running the user's models (what `--fix --verify`
builds on): the models it analyses, built in the worker with example inputs,
from the file or from a fixed text of it."""

from __future__ import annotations

import textwrap

import pytest

from hooklint.config import Config
from hooklint.graph.provider import run_in_worker

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

CAM = textwrap.dedent("""\
    import torch.nn as nn


    class Cam(nn.Module):
        def __init__(self, classes):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.relu = nn.ReLU(inplace=True)
            self.fc = nn.Linear(8, classes)
            self.conv.register_backward_hook(self.save)

        def save(self, module, grad_input, grad_output):
            self.grad = grad_output[0]

        def forward(self, x):
            return self.fc(self.relu(self.conv(x)).mean((2, 3)))


    if __name__ == "__main__":
        Cam(4)
""")


def test_the_models_run_and_a_fixed_text_that_breaks_them_says_how(tmp_path):
    """The issue's broken fix, seen through the API: `register_full_backward_hook`
    on a conv an in-place ReLU follows fails in the forward."""
    path = tmp_path / "cam.py"
    path.write_text(CAM, encoding="utf-8")
    config = Config(root=tmp_path)
    args = {"path": str(path), "root": str(tmp_path)}
    original = run_in_worker("hooklint.graph.instances:run_instances", args, config, timeout=60)
    assert original.error is None, original.error
    [run] = original.value["runs"]
    assert run == {"class_name": "Cam", "source": "Cam(4)", "inputs": ["float32[2, 3, 32, 32]"], "error": None}

    fixed_text = CAM.replace("register_backward_hook", "register_full_backward_hook")
    fixed = run_in_worker("hooklint.graph.instances:run_instances", {**args, "text": fixed_text}, config,
                          timeout=60)
    [run] = fixed.value["runs"]
    assert run["error"].startswith("RuntimeError: Output 0 of BackwardHookFunction is a view and is being "
                                   "modified inplace")
    assert path.read_text(encoding="utf-8") == CAM, "the file on disk is not touched"


def test_only_hooklint_functions_run_there(tmp_path):
    reply = run_in_worker("os:system", {"command": "true"}, Config(root=tmp_path), timeout=30)
    assert reply.value is None and reply.kind == "internal"
    assert "`os:system` is not a hooklint function" in reply.error
