"""Real torch: a forward pre-hook registered without `with_kwargs=True` gets
only the positional arguments (HKL317), run on the fixtures' own functions.

- A module called with keyword arguments only hands the pre-hook `args == ()`.
- With `with_kwargs=True` the hook gets `(module, args, kwargs)` and sees them.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

RULES = FIXTURES / "rules"


@pytest.fixture(scope="module")
def pre_hooks():
    return runpy.run_path(str(RULES / "hkl317_pre_hook_needs_positional_input.py"))


class VisionEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, pixel_values=None):
        return self.proj(pixel_values)


class TinyVLM(nn.Module):
    """Calls its parts with keyword arguments, as Hugging Face models do."""

    def __init__(self):
        super().__init__()
        self.vision_tower = VisionEmbeddings()
        self.head = nn.Linear(4, 2)

    def get_input_embeddings(self):
        return self.vision_tower

    def forward(self, pixel_values=None):
        return self.head(self.vision_tower(pixel_values=pixel_values))


def test_keyword_only_call_gives_the_pre_hook_an_empty_tuple():
    model = TinyVLM()
    seen = []
    model.vision_tower.register_forward_pre_hook(lambda m, args: seen.append(args))
    model.vision_tower.register_forward_pre_hook(lambda m, args, kwargs: seen.append(sorted(kwargs)),
                                                 with_kwargs=True)
    model(pixel_values=torch.randn(2, 4))
    assert seen == [(), ["pixel_values"]]


def test_pre_hooks_needing_a_positional_argument_fail(pre_hooks):
    model = TinyVLM()
    pre_hooks["make_inputs_require_grad"](model)
    with pytest.raises(RuntimeError, match="Failed to make input require gradients"):
        model(pixel_values=torch.randn(2, 4))

    sizes = []
    with pytest.raises(IndexError):
        pre_hooks["record_batch_sizes"](TinyVLM(), {"pixel_values": torch.randn(3, 4)}, sizes)

    capture = pre_hooks["VisionInputs"](TinyVLM())
    capture.start()
    with pytest.raises(ValueError):  # unpacking an empty tuple
        capture.model(pixel_values=torch.randn(2, 4))


def test_the_good_twins_work(pre_hooks):
    model = TinyVLM()
    pre_hooks["make_inputs_require_grad_kwargs"](model)
    pixels = torch.randn(2, 4)
    model(pixel_values=pixels)
    assert pixels.requires_grad

    sizes = []
    pre_hooks["record_batch_sizes_tolerant"](TinyVLM(), {"pixel_values": torch.randn(3, 4)}, sizes)
    assert sizes == []  # nothing positional to read, and no error

    norms = []
    model = TinyVLM()
    pre_hooks["linear_input_norms"](model, norms)
    model(pixel_values=torch.randn(2, 4))
    assert len(norms) == 2  # the Linear layers are called positionally by their parents
