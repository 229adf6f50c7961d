"""Real torch: what HKL518 claims about an output kept as a `ctx` attribute.

Every class of the fixture is applied to a tensor that requires grad, the
outputs are dropped, and a weak reference tells whether reference counting
alone freed them (the cycle collector switched off).  The reported classes
keep their outputs alive (ctx -> output -> grad_fn -> ctx); the twins free
them at once.  Each class's backward also runs, so the twins are correct
Functions, not just quiet ones.
"""

from __future__ import annotations

import ast
import gc
import weakref

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.function_ctx_stores_output import FunctionCtxStoresOutput

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl518_function_ctx_stores_output.py"
ARGS = {
    "SoftplusWithCache": lambda x: (x, 2.0),
    "EventSolve": lambda x: (x, torch.tensor(2.0), torch.ones(2, requires_grad=True)),
    "ScaleWithCount": lambda x: (x, 3.0),
}


def _classes() -> tuple[dict, set[str], list[str]]:
    text = FIXTURE.read_text(encoding="utf-8")
    namespace: dict = {}
    exec(compile(text, str(FIXTURE), "exec"), namespace)  # noqa: S102
    tree = ast.parse(text)
    rows = {f.location.row for f in lint(text, FunctionCtxStoresOutput.code)}
    names = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    reported = {node.name for node in tree.body if isinstance(node, ast.ClassDef)
                and any(node.lineno <= row <= node.end_lineno for row in rows)}
    return namespace, reported, names


def _survives_refcounting(fn, args) -> bool:
    outputs = fn.apply(*args)
    tensors = [o for o in (outputs if isinstance(outputs, tuple) else (outputs,))
               if isinstance(o, torch.Tensor) and o.requires_grad]
    assert tensors, "the Function must return a differentiable output"
    refs = [weakref.ref(t) for t in tensors]
    del outputs, tensors
    return any(r() is not None for r in refs)


def test_reported_outputs_outlive_their_last_reference_and_twins_do_not():
    namespace, reported, names = _classes()
    assert reported == {"SoftplusWithCache", "EventSolve", "NormalizeTwoWays", "Sigmoid"}
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for name in names:
            fn = namespace[name]
            x = torch.randn(3, 4, requires_grad=True)
            args = ARGS.get(name, lambda t: (t,))(x)
            assert _survives_refcounting(fn, args) is (name in reported), name
            gc.collect()  # the cycle collector does free them: the memory is held, not lost for good
    finally:
        if was_enabled:
            gc.enable()


def test_every_fixture_function_runs_backward():
    namespace, _, names = _classes()
    for name in names:
        x = torch.randn(3, 4, requires_grad=True)
        args = ARGS.get(name, lambda t: (t,))(x)
        outputs = namespace[name].apply(*args)
        first = outputs[0] if isinstance(outputs, tuple) else outputs
        first.sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape, name


def test_cycle_is_collected_only_by_the_cycle_collector():
    namespace, _, _ = _classes()
    gc.disable()
    try:
        x = torch.randn(3, requires_grad=True)
        out = namespace["Sigmoid"].apply(x)
        ref = weakref.ref(out)
        del out
        assert ref() is not None
        gc.collect()
        assert ref() is None
    finally:
        gc.enable()
