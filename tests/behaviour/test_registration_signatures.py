"""The static pass takes a call for a torch hook registration only when torch's
method could take its arguments (hooklint.static.hooks.fits_torch_signature):
a library's own ``pipeline.register_backward_hook(site, work)`` is another API.
Its table of what torch's methods accept must be torch's own."""

from __future__ import annotations

import inspect

import pytest

from hooklint.static.hooks import _TORCH_SIGNATURES

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

_OWNER = {"register_hook": torch.Tensor, "register_post_accumulate_grad_hook": torch.Tensor}


def _accepts(method: str) -> tuple[int, frozenset[str]]:
    func = getattr(_OWNER.get(method, torch.nn.Module), method)
    params = list(inspect.signature(func).parameters.values())[1:]  # without self
    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    keywords = frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    return positional, keywords


@pytest.mark.parametrize("method", sorted(_TORCH_SIGNATURES))
def test_the_table_is_torchs_signature(method):
    assert _TORCH_SIGNATURES[method] == _accepts(method)


def test_torch_rejects_the_call_the_table_rules_out():
    layer = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError):
        layer.register_backward_hook(lambda *a: None, lambda *a: None)  # torchrec's (site, work) shape
    with pytest.raises(TypeError):
        layer.register_forward_hook(lambda *a: None, site=None)
    layer.register_full_backward_hook(lambda *a: None, True).remove()  # (hook, prepend): accepted
