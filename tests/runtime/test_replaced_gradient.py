"""A hook that returns a gradient of another shape (or dtype) than the one it
received: PyTorch raises "hook '...' has changed the size of value" at backward,
and `hooklint run` maps it to HKL402 at the hook's registration line.  And a
script that fails is never summed up as "no hook problems observed"."""

from __future__ import annotations

import pytest

from conftest import run_cli

torch = pytest.importorskip("torch")
nn = torch.nn
pytestmark = pytest.mark.torch

from hooklint.testing import assert_hooks_ok  # noqa: E402

WIDEN = """
import torch

def widen(grad):
    return torch.cat([grad, grad])

w = torch.ones(3, requires_grad=True)
w.register_hook(widen)  # REGISTER
(w * 2).sum().backward()
print("unreachable")
"""


def _line(path, marker: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if marker in line)


def test_torch_refuses_a_gradient_of_another_shape():
    """The behaviour the finding claims, without hooklint."""
    w = torch.ones(3, requires_grad=True)
    w.register_hook(lambda g: torch.cat([g, g]))
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        (w * 2).sum().backward()
    v = torch.ones(3, requires_grad=True)
    v.register_hook(lambda g: g.double())
    with pytest.raises(RuntimeError, match="has changed the type of value"):
        (v * 2).sum().backward()
    # the same shape, dtype and device is taken
    u = torch.ones(3, requires_grad=True)
    u.register_hook(lambda g: g * torch.tensor([1.0, 0.0, 1.0]))
    (u * 2).sum().backward()
    assert u.grad.tolist() == [2.0, 0.0, 2.0]


def test_run_reports_a_tensor_hook_of_the_wrong_shape(write, tmp_path):
    script = write("widen.py", WIDEN)
    result = run_cli("run", "--output-format", "concise", script.name, cwd=tmp_path)
    assert result.returncode == 1, result.stderr  # the script's own failure
    assert "RuntimeError: hook 'widen' has changed the size of value" in result.stderr  # its traceback
    findings = result.stdout.splitlines()
    assert len(findings) == 1, result.stdout
    line = _line(script, "# REGISTER")
    assert findings[0].startswith(f"widen.py:{line}:1: HKL402 tensor hook `widen` on `w` (shape (3,)) returned a "
                                  f"gradient of float32 (6,) in place of one of float32 (3,)")
    assert "no hook problems observed" not in result.stderr
    assert result.stderr.rstrip().endswith(
        "hooklint run: 1 finding observed while running widen.py (HKL402); the script then failed with the error "
        "HKL402 explains: RuntimeError: hook 'widen' has changed the size of value.")


def test_run_reports_a_module_hook_returning_a_wrong_shaped_grad_input(write, tmp_path):
    script = write("module_hook.py", """
        import torch
        from torch import nn

        def replace_input_grad(module, grad_input, grad_output):
            return (grad_input[0].sum(dim=0),)

        layer = nn.Linear(3, 2)
        layer.register_full_backward_hook(replace_input_grad)  # REGISTER
        layer(torch.ones(4, 3, requires_grad=True)).sum().backward()
    """)
    result = run_cli("run", "--output-format", "json", script.name, cwd=tmp_path)
    assert result.returncode == 1
    import json

    findings = json.loads(result.stdout)
    assert [(f["code"], f["location"]["row"]) for f in findings] == [("HKL402", _line(script, "# REGISTER"))]
    message = findings[0]["message"]
    assert message.startswith("full backward hook `replace_input_grad` on `layer` (Linear) returned `grad_input[0]` "
                              "of float32 (3,) in place of one of float32 (4, 3)"), message
    assert "HKL402 explains" in result.stderr


def test_run_reports_a_changed_dtype(write, tmp_path):
    script = write("dtype.py", """
        import torch
        w = torch.ones(3, requires_grad=True)
        w.register_hook(lambda grad: grad.double())  # REGISTER
        (w * 2).sum().backward()
    """)
    result = run_cli("run", "--output-format", "concise", script.name, cwd=tmp_path)
    assert result.returncode == 1
    assert f"dtype.py:{_line(script, '# REGISTER')}:1: HKL402" in result.stdout
    assert "returned a gradient of float64 (3,) in place of one of float32 (3,)" in result.stdout
    assert "has changed the type of value" in result.stderr


def test_a_gradient_of_the_same_shape_is_clean(write, tmp_path):
    script = write("mask.py", """
        import torch
        w = torch.ones(3, requires_grad=True)
        mask = torch.tensor([1.0, 0.0, 1.0])
        w.register_hook(lambda grad: grad * mask)
        (w * 2).sum().backward()
        print(w.grad.tolist())
    """)
    result = run_cli("run", script.name, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[2.0, 0.0, 2.0]\n"
    assert "no hook problems observed while running" in result.stderr


def test_a_failure_that_is_no_hook_error_is_said_as_such(write, tmp_path):
    script = write("broken.py", """
        import torch
        x = torch.ones(3, requires_grad=True)
        raise ValueError("the data file is missing")
    """)
    result = run_cli("run", script.name, cwd=tmp_path)
    assert result.returncode == 1
    assert "no hook problems observed" not in result.stderr
    assert result.stderr.rstrip().splitlines()[-1] == (
        "hooklint run: the script failed before the hooks could be judged: ValueError: the data file is missing.")


def test_a_nonzero_exit_is_not_a_clean_run(write, tmp_path):
    script = write("exits.py", "import sys\nsys.exit(5)\n")
    result = run_cli("run", script.name, cwd=tmp_path)
    assert result.returncode == 5
    assert result.stderr.rstrip().splitlines()[-1] == (
        "hooklint run: the script failed before the hooks could be judged: it exited with status 5.")


def test_findings_then_an_unrelated_failure(write, tmp_path):
    script = write("both.py", """
        import torch

        def double_in_place(grad):
            grad *= 2

        x = torch.ones(3, requires_grad=True)
        x.register_hook(double_in_place)
        (x ** 2).sum().backward()
        raise KeyError("epoch")
    """)
    result = run_cli("run", script.name, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.rstrip().splitlines()[-1] == (
        "hooklint run: 1 finding observed while running both.py (HKL401) before the script failed: KeyError: "
        "'epoch'; what would have run after that was not judged.")


class Widen(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.fc.weight.register_hook(self.widen)  # REGISTERED IN MODEL

    def widen(self, grad):
        return grad.repeat(2, 1)

    def forward(self, x):
        return self.fc(x)


def test_assert_hooks_ok_reports_the_wrong_shape():
    with pytest.raises(AssertionError) as info:
        assert_hooks_ok(Widen(), torch.ones(4, 3))
    message = str(info.value)
    assert message.startswith("hooks of Widen are not OK: 1 finding in 2 forward and backward passes.")
    assert "HKL402 hook-return-arity: tensor hook `Widen.widen` on `fc.weight` (shape (2, 3)) returned a " \
           "gradient of float32 (4, 3) in place of one of float32 (2, 3)" in message, message
    assert "  expected: None or float32 (2, 3)" in message
    assert "The run stopped with RuntimeError: hook 'widen' has changed the size of value" in message
    assert isinstance(info.value.__cause__, RuntimeError)


def test_assert_hooks_ok_passes_the_right_shape():
    class Masked(Widen):
        def widen(self, grad):
            return grad * 0.5

    model = Masked()
    assert_hooks_ok(model, torch.ones(4, 3))
