"""Real torch: what HKL519 claims about `torch.autograd.grad` over `parameters()`.

`torch.autograd.grad` raises as soon as one of its inputs does not require
grad, with or without `allow_unused=True`.  The fixture's functions are run
on a model with one frozen parameter: the reported ones raise (the Function
from its backward), the twins return gradients; on a fully trainable model
the reported ones work, which is why the bug goes unnoticed.
"""

from __future__ import annotations

import ast

import pytest
from conftest import FIXTURES, lint

from hooklint.rules.grad_wrt_frozen_params import GradWrtFrozenParams

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl519_grad_wrt_frozen_params.py"
MESSAGE = "One of the differentiated Tensors does not require grad"


def _namespace() -> dict:
    namespace: dict = {}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), namespace)  # noqa: S102
    return namespace


def _model(frozen: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    if frozen:
        model[0].bias.requires_grad_(False)
    return model


def _loss(model):
    return model(torch.randn(5, 3)).pow(2).mean()


def _run(ns, name, model):
    if name.startswith("implicit_solve"):
        x = torch.randn(5, 3, requires_grad=True)
        ns[name](model, x).sum().backward()
        return x.grad
    return ns[name](model, _loss(model))


def test_reported_functions_are_the_three_marked():
    text = FIXTURE.read_text(encoding="utf-8")
    rows = [f.location.row for f in lint(text, GradWrtFrozenParams.code)]
    tree = ast.parse(text)
    names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)
             and any(node.lineno <= row <= node.end_lineno for row in rows)}
    assert names == {"adapted_weights", "gradient_norm_penalty", "implicit_solve"}


@pytest.mark.parametrize("name", ["adapted_weights", "gradient_norm_penalty", "implicit_solve"])
def test_reported_raise_on_a_partly_frozen_model_and_work_on_a_trainable_one(name):
    ns = _namespace()
    with pytest.raises(RuntimeError, match=MESSAGE):
        _run(ns, name, _model(frozen=True))
    assert _run(ns, name, _model(frozen=False)) is not None


@pytest.mark.parametrize("name", ["adapted_weights_trainable", "implicit_solve_trainable"])
def test_twins_work_on_a_partly_frozen_model(name):
    ns = _namespace()
    assert _run(ns, name, _model(frozen=True)) is not None


def test_allow_unused_does_not_help():
    w = torch.ones(2, requires_grad=True)
    frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
    with pytest.raises(RuntimeError, match=MESSAGE):
        torch.autograd.grad((w * 2).sum(), (w, frozen), allow_unused=True)
