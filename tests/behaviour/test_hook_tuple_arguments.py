"""Real torch: what HKL419 claims about the tuples module hooks receive.

`args` of a pre-hook or forward hook is a tuple (`()` for a keyword-only
call), never None; the gradients of backward (pre-)hooks are tuples too.  The
fixture's hooks are run as written.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl419_hook_tuple_argument_misread.py"


def _namespace() -> dict:
    namespace: dict = {"__name__": "hkl419_fixture"}
    exec(compile(FIXTURE.read_text(encoding="utf-8"), str(FIXTURE), "exec"), namespace)  # noqa: S102
    return namespace


def test_keyword_call_gives_empty_tuple_not_none():
    ns = _namespace()
    assert len(lint(FIXTURE.read_text(encoding="utf-8"), "HKL419")) == 4
    block, store = ns["Block"](), []
    handle = ns["capture_inputs"](block, store)
    block(hidden_states=torch.randn(2, 4))
    handle.remove()
    assert store == [()]  # the None fallback never ran: the hidden states were not captured

    block, store = ns["Block"](), []
    handle = ns["capture_inputs_fixed"](block, store)
    x = torch.randn(2, 4)
    block(hidden_states=x)
    handle.remove()
    assert len(store) == 1 and store[0][0] is x


def test_tensor_methods_on_the_tuple_raise():
    ns = _namespace()
    layer = nn.Linear(4, 4)
    ns["Extractor"](layer, save_input=True)
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'clone'"):
        layer(torch.randn(2, 4))

    layer = nn.Linear(4, 4)
    fixed = ns["ExtractorFixed"](layer, save_input=True)
    layer(torch.randn(2, 4))
    assert isinstance(fixed.latents, tuple) and fixed.latents[0].shape == (2, 4)

    model = nn.Sequential(nn.Linear(4, 4))
    handles = ns["grad_norms"](model, [])
    with pytest.raises(AttributeError, match="'tuple' object has no attribute 'norm'"):
        model(torch.randn(2, 4, requires_grad=True)).sum().backward()
    for h in handles:
        h.remove()

    handle = ns["log_shapes"]([])
    try:
        with pytest.raises(AttributeError, match="'tuple' object has no attribute 'shape'"):
            nn.Linear(4, 4)(torch.randn(2, 4))
    finally:
        handle.remove()
