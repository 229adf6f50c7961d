"""Real torch: a forward hook registered without `with_kwargs=True` sees only
the positional arguments, so a hook that judges the call by them misreads a
keyword call, silently (HKL408), on the fixture's own classes."""

from __future__ import annotations

import runpy

import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def views():
    return runpy.run_path(str(FIXTURES / "rules" / "hkl408_hook_reads_positional_only.py"))


class Decoder(nn.Module):
    """Calls its block with a keyword argument, as recent transformers decoders do."""

    def __init__(self, keyword=True):
        super().__init__()
        self.block = nn.Linear(2, 2)
        self.keyword = keyword

    def forward(self, x):
        return self.block(input=x) if self.keyword else self.block(x)


def test_a_keyword_call_leaves_the_traced_input_empty(views):
    x = torch.randn(1, 2)
    model = Decoder(keyword=True)
    trace = views["InputTrace"](model, "block")
    model(x)
    trace.close()
    assert trace.input == ()  # no error: the recorded input is silently empty
    positional = Decoder(keyword=False)
    trace = views["InputTrace"](positional, "block")
    positional(x)
    assert torch.equal(trace.input, x)


def test_a_pre_hook_records_nothing_for_a_keyword_call(views):
    x = torch.randn(1, 2)
    model = Decoder(keyword=True)
    seen, handles = views["first_arguments"](model, ["block"])
    model(x)
    assert seen == {"block": None}
    model = Decoder(keyword=False)
    seen, handles = views["first_arguments"](model, ["block"])
    model(x)
    assert torch.equal(seen["block"], x)


def test_the_selector_misreads_a_keyword_call(views):
    x = torch.randn(1, 2)
    block = views["KeywordBlock"]("out")
    assert set(block({"x": x})) == {"out"}  # called with a mapping: filtered
    assert set(block(x=x)) == {"out", "x"}  # the same data by keyword: the hook sees () and does not filter


def test_the_good_twin_finds_the_keyword_input(views):
    x = torch.randn(1, 2)
    model = Decoder(keyword=True)
    trace = views["InputTraceWithKwargs"](model, "block")
    model(x)
    assert torch.equal(trace.input["input"], x)  # kwargs, as the call passed them
