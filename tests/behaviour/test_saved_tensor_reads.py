"""Real torch: what HKL514 claims about reading `ctx.saved_tensors` more than
once in a custom Function's backward, run on the fixture's own Functions
(fixtures/rules/hkl514_function_saved_tensors_read_twice.py).

- The same holds for the backward a custom op registers with
  `torch.library.register_autograd` (the fixture's `hkl514::scaled_mul`).
- Each read of `ctx.saved_tensors` unpacks every saved tensor again: under a
  counting `saved_tensors_hooks`, a Function that saves two tensors and reads
  them twice runs the unpack hook four times for two packs.
- Non-reentrant checkpointing allows one unpack per saved tensor: the second
  read raises CheckpointError ("Unpack is being triggered for a tensor that
  was already unpacked once").
- The good twins (one read into a local, exclusive branches, one read as a
  loop's iterable, one helper call) unpack once per pack, run under
  checkpointing, give the gradients of `x * y`, and hooklint says nothing
  about them; it reports every bad one.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
checkpoint_module = pytest.importorskip("torch.utils.checkpoint")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl514_function_saved_tensors_read_twice.py"


@pytest.fixture(scope="module")
def functions():
    return runpy.run_path(str(FIXTURE))


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(5, requires_grad=True)
    y = torch.randn(5, requires_grad=True)
    return x, y


def _counted(fn):
    counts = {"pack": 0, "unpack": 0}

    def pack(t):
        counts["pack"] += 1
        return t

    def unpack(t):
        counts["unpack"] += 1
        return t

    x, y = _inputs()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        out = fn.apply(x, y)
    out.sum().backward()
    return counts, x.grad, y.grad


def _checkpointed(fn):
    x, y = _inputs()
    out = checkpoint_module.checkpoint(lambda a, b: fn.apply(a * 1.0, b * 1.0), x, y, use_reentrant=False)
    out.sum().backward()
    return x.grad, y.grad


def _names(functions, group):
    return [f.__name__ for f in functions[group]]


BAD = ["SlicedTwice", "PerGradient", "CountedFirst", "PerSlot", "ThroughHelper", "ThroughOwnMethods", "ThroughClosure",
       "ScaledMul"]
GOOD = ["ReadOnce", "EitherBranch", "LoopOverSaved", "HelperOnce", "ClosureOnce"]


def test_fixture_lists_match(functions):
    assert _names(functions, "BAD") == BAD
    assert _names(functions, "GOOD") == GOOD


@pytest.mark.parametrize("name", BAD)
def test_each_read_unpacks_every_saved_tensor_again(functions, name):
    counts, gx, gy = _counted(functions[name])
    assert counts["pack"] == 2
    assert counts["unpack"] > counts["pack"]
    x, y = _inputs()
    assert torch.allclose(gx, y.detach()) and torch.allclose(gy, x.detach())  # without checkpointing: right, slower


@pytest.mark.parametrize("name", BAD)
def test_non_reentrant_checkpoint_rejects_the_second_unpack(functions, name):
    with pytest.raises(checkpoint_module.CheckpointError, match="already unpacked once"):
        _checkpointed(functions[name])


@pytest.mark.parametrize("name", GOOD)
def test_one_read_unpacks_once_and_checkpoints(functions, name):
    counts, _, _ = _counted(functions[name])
    assert counts == {"pack": 2, "unpack": 2}
    gx, gy = _checkpointed(functions[name])
    x, y = _inputs()
    assert torch.allclose(gx, y.detach()) and torch.allclose(gy, x.detach())


def test_hooklint_reports_the_bad_functions_only(functions):
    source = FIXTURE.read_text()
    findings = [f for f in lint(source, "HKL514") if f.code == "HKL514"]
    lines = source.splitlines()

    def owner(row):
        for i in range(row - 1, -1, -1):
            if lines[i].startswith("class "):
                return lines[i].split()[1].split("(")[0]
            if lines[i].startswith("def _scaled_mul_backward"):
                return "ScaledMul"
        return None

    flagged = {owner(f.location.row) for f in findings}
    assert flagged == set(BAD)
