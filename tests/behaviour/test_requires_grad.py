"""Real torch: hooks on parameters or modules whose gradient may not exist
(HKL206), run on the fixtures' own code.

`Tensor.register_hook` and `register_post_accumulate_grad_hook` raise on a
frozen parameter; an optimizer or a model with one frozen layer is enough.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"
REGISTER_ERROR = "cannot register a hook on a tensor that doesn't require gradient"


@pytest.fixture(scope="module")
def frozen():
    return runpy.run_path(str(RULES / "hkl206_hook_on_frozen_param.py"))


def _partly_frozen():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model[0].requires_grad_(False)  # fine-tuning the last layer only
    return model


def test_hooks_on_every_optimizer_parameter_fail_on_a_frozen_one(frozen):
    model = _partly_frozen()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # frozen parameters are legal here
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        frozen["GradientStats"](optimizer)
    stats = frozen["TrainableGradientStats"](optimizer)
    model(torch.randn(5, 3)).sum().backward()
    assert len(stats.norms) == 2  # the last layer's weight and bias
    stats.close()


def test_post_accumulate_hooks_on_every_module_parameter_fail_on_a_frozen_one(frozen):
    model, log = _partly_frozen(), []
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        frozen["log_gradients"](model, log)
    frozen["log_trainable_gradients"](model, log)
    model(torch.randn(5, 3)).sum().backward()
    assert sorted(log) == ["2.bias", "2.weight"]


def test_on_a_fully_trainable_model_both_work(frozen):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    stats = frozen["GradientStats"](torch.optim.SGD(model.parameters(), lr=0.1))
    model(torch.randn(5, 3)).sum().backward()
    assert len(stats.norms) == 4  # why the library's own tests pass
