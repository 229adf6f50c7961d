"""Real torch: what HKL513 claims about `ctx` in a custom autograd Function.

`ctx` is the `<Name>Backward` node, not the Function: a read of an attribute
nothing set raises AttributeError when backward reaches it (a class attribute
of the Function is not visible on it), and `save_for_backward` takes tensors
only.  The fixture's classes are run as they are written there.
"""

from __future__ import annotations

import ast

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.function_ctx_attribute_unset import FunctionCtxAttributeUnset

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl513_function_ctx_attribute_unset.py"


def _fixture_namespace() -> dict:
    namespace: dict = {}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), namespace)  # noqa: S102
    return namespace


def _reported_classes() -> set[str]:
    tree = ast.parse(FIXTURE.read_text(encoding="utf-8"))
    rows = {f.location.row for f in lint(FIXTURE.read_text(encoding="utf-8"), FunctionCtxAttributeUnset.code)}
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef)
            and any(node.lineno <= row <= node.end_lineno for row in rows)}


def _backward(fn, *args):
    out = fn.apply(*args)
    out.sum().backward()


def test_reported_classes_fail_and_twins_train():
    ns = _fixture_namespace()
    assert _reported_classes() == {"PiecewiseQuadratic", "MisspelledShape", "ClassConstant", "SetupContextStyle"}

    x = torch.randn(4, requires_grad=True)
    # a float handed to save_for_backward: forward itself refuses it
    with pytest.raises(TypeError, match="save_for_backward can only save variables"):
        _backward(ns["PiecewiseQuadratic"], x, 1.0)
    # a tensor alpha gets through save_for_backward; backward then finds no ctx.alpha
    with pytest.raises(AttributeError, match="'PiecewiseQuadraticBackward' object has no attribute 'alpha'"):
        _backward(ns["PiecewiseQuadratic"], x, torch.tensor(1.0))
    with pytest.raises(AttributeError, match="no attribute 'input_shape'"):
        _backward(ns["MisspelledShape"], torch.randn(2, 3, requires_grad=True), torch.randn(3, 3))
    with pytest.raises(AttributeError, match="no attribute 'threshold'"):
        _backward(ns["ClassConstant"], x)
    with pytest.raises(AttributeError, match="no attribute 'scaled_input'"):
        _backward(ns["SetupContextStyle"], x, 2.0)

    for name, args in (("SavedAsAttribute", (x, 1.0)), ("ThroughHelper", (x, 2.0)),
                       ("TupleUnpackedInSetup", (x, -1.0, 1.0)), ("GuardedRead", (x,)), ("Derived", (x,))):
        x.grad = None
        _backward(ns[name], *args)
        assert x.grad is not None and torch.isfinite(x.grad).all(), name


def test_misspelled_read_fails_only_on_its_branch():
    """The read under `if ctx.needs_input_grad[0]` runs only when that input needs a gradient."""
    ns = _fixture_namespace()
    weight = torch.randn(3, 3, requires_grad=True)
    _backward(ns["MisspelledShape"], torch.randn(2, 3), weight)  # input needs no grad: the branch is skipped
    assert weight.grad is None  # the Function returns None for weight
    with pytest.raises(AttributeError):
        _backward(ns["MisspelledShape"], torch.randn(2, 3, requires_grad=True), weight)
