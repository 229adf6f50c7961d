"""Real torch (2.13, backend "eager"): what HKL704 claims about forward hooks
Dynamo cannot trace, run on the builders of
fixtures/rules/hkl704_untraceable_hook_under_fullgraph.py.

- Under `fullgraph=True`, a forward hook or pre-hook that flips
  `requires_grad` on a tensor that does not require grad yet, assigns
  `.requires_grad`, or is wrapped in `torch._dynamo.disable` makes the first
  compiled call fail with `torch._dynamo.exc.Unsupported`.
- Without fullgraph the same hook is a graph break: the call works and the
  output requires grad.  Hooks outside the compiled part, and a compile-aware
  hook whose flip would be a no-op, compile with no graph break.
- hooklint reports the four bad builders and none of the good ones.
"""

from __future__ import annotations

import runpy

import pytest

from conftest import FIXTURES, lint

torch = pytest.importorskip("torch")
pytest.importorskip("torch._dynamo")

pytestmark = pytest.mark.torch

FIXTURE = FIXTURES / "rules" / "hkl704_untraceable_hook_under_fullgraph.py"


@pytest.fixture(scope="module")
def builders():
    return runpy.run_path(str(FIXTURE))


def run(builders, name):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    out = builders[name]()
    return out, sum(torch._dynamo.utils.counters["graph_break"].values())


@pytest.mark.parametrize("name, error", [
    ("embedding_hook_fullgraph", r"returning intermediate with requires_grad_\(\)"),
    ("pre_hook_in_compiled_step", r"returning intermediate with requires_grad_\(\)"),
    ("attribute_flip_in_place_compile", r"setattr\(\) on Tensor.requires_grad"),
    ("disabled_monitor_fullgraph", r"Skip calling `torch.compiler.disable\(\)`d function"),
])
def test_untraceable_hook_under_fullgraph_fails_to_compile(builders, name, error):
    from torch._dynamo.exc import Unsupported

    with pytest.raises(Unsupported, match=error):
        run(builders, name)


def test_without_fullgraph_the_flip_is_a_graph_break_that_works(builders):
    out, breaks = run(builders, "embedding_hook_graph_break")
    assert out.requires_grad
    assert breaks >= 1


@pytest.mark.parametrize("name", ["embedding_hook_outside_the_compiled_part", "compile_aware_hook_fullgraph"])
def test_good_twins_compile_with_fullgraph(builders, name):
    out, breaks = run(builders, name)
    assert out.requires_grad
    assert breaks == 0


def test_requires_grad_on_a_tensor_that_already_requires_it_is_accepted():
    # The compile-aware fix relies on this: the flip Dynamo refuses is only a real change.
    lin = torch.nn.Linear(4, 4)
    lin.register_forward_hook(lambda m, i, o: o.requires_grad_(True))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), lin)
    torch._dynamo.reset()
    out = torch.compile(model, backend="eager", fullgraph=True)(torch.rand(1, 4))
    assert out.requires_grad


def test_hooklint_reports_the_bad_builders_only():
    text = FIXTURE.read_text()
    findings = lint(text, "HKL704")
    lines = text.splitlines()
    assert len(findings) == 4
    assert all(lines[f.location.row - 1].endswith("# HKL704") for f in findings)
