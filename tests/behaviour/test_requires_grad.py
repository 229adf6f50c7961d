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


def test_parameters_kept_per_layer_then_hooked_fail_on_a_frozen_layer(frozen):
    # sparseml's shape: the parameter of each layer the caller passes is kept in a list, hooked later
    model = _partly_frozen()
    masked = frozen["MaskedLayers"]([model[0], model[2]])
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        masked.enable()
    trainable = frozen["TrainableMaskedLayers"]([model[0], model[2]])
    trainable.enable()
    model(torch.randn(5, 3)).sum().backward()
    assert model[2].weight.grad is not None and model[0].weight.grad is None
    trainable.disable()


def test_weight_of_each_submodule_and_comprehension_lists_fail_on_a_frozen_layer(frozen):
    model = _partly_frozen()
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        frozen["scale_linear_weights"](model, 0.5)
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        frozen["clip_each"](model, 1.0)
    model = _partly_frozen()
    frozen["scale_trainable_linear_weights"](model, 0.5)
    handles = frozen["clip_each_trainable"](model, 1.0)
    model(torch.randn(5, 3)).sum().backward()
    assert len(handles) == 2 and model[2].weight.grad is not None


# --------------------------------------------------------------------- HKL311


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, tokens):
        return self.head(self.embed(tokens))

    def get_input_embeddings(self):
        return self.embed


@pytest.fixture(scope="module")
def embeddings():
    return runpy.run_path(str(RULES / "hkl311_backward_hook_on_embedding.py"))


def test_backward_hook_on_a_frozen_embedding_never_runs(embeddings):
    tokens = torch.tensor([[1, 2, 3]])
    model = TinyLM()
    assert len(embeddings["embedding_gradients"](model, tokens)) == 1  # trainable: the library's own tests
    model.embed.requires_grad_(False)  # fine-tuning with a frozen embedding
    assert embeddings["embedding_gradients"](model, tokens) == []  # silently nothing
    grads = embeddings["trainable_embedding_gradients"](model, tokens)
    assert len(grads) == 1 and grads[0].shape == (1, 3, 4)
    assert model.embed.weight.requires_grad is False  # restored


def test_tensor_hook_on_a_frozen_embeddings_output_raises(embeddings):
    tokens = torch.tensor([[1, 2, 3]])
    model = TinyLM()
    assert len(embeddings["embedding_output_gradients"](model, tokens)) == 1
    model.embed.requires_grad_(False)
    with pytest.raises(RuntimeError, match=REGISTER_ERROR):
        embeddings["embedding_output_gradients"](model, tokens)
