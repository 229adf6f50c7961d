"""When torch.fx cannot trace a model: the forward-and-grad_fn fallback, what is
said when neither works, fx-only facts without example inputs, and factories
that declare their inputs."""

from __future__ import annotations

import textwrap

import pytest

from conftest import FIXTURES
from graph.helpers import model_named

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
nn = torch.nn


def _describe():
    from hooklint.graph.build import describer

    return describer({})


def test_data_dependent_control_flow_falls_back_to_the_autograd_graph():
    facts = model_named(FIXTURES / "models" / "untraceable.py", "Gated").facts
    assert facts.method == "autograd" and facts.autograd
    assert facts.fx_error.startswith("TraceError: symbolically traced variables cannot be used as inputs to "
                                     "control flow")
    root = facts.root
    assert root.bound.name == "ReluBackward0" and root.bound.code == "return self.out(h).relu()"
    assert root.bound.function == "Gated.forward" and root.bound.line == 22
    assert facts.module("fc").ops[-1].name == "AddmmBackward0" and facts.module("fc").ops[-1].line == 17
    # which branch ran decides the op between fc and out, and hooklint shows it
    assert [op.name for op in root.ops][2] in ("MulBackward0", "NegBackward0")


def test_a_custom_autograd_function_is_run_not_traced():
    facts = model_named(FIXTURES / "seeds" / "seed002_custom_function.py", "LinearCraft").facts
    assert facts.method == "autograd"
    assert "LinearFunction.apply is a custom autograd.Function" in facts.fx_error
    assert facts.root.bound.name == "LinearFunctionBackward"
    assert facts.inputs_origin == "derived from the layer itself (input_features=20)"


class _TwoInputsBranching(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, mask):
        if mask.any():
            return self.fc(x) * mask
        return x


class _TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, y):
        return self.fc(x) + y


def test_neither_method_says_why():
    from hooklint.graph.trace import AnalysisError, analyse_model

    with pytest.raises(AnalysisError) as info:
        analyse_model(_TwoInputsBranching(), source="test", describe=_describe())
    message = str(info.value)
    assert message.startswith("fx could not trace it (TraceError: symbolically traced variables")
    assert "no example input: its forward takes several inputs; declare them with a factory returning " \
           "(model, example_inputs) in [tool.hooklint] models" in message


def test_fx_without_example_inputs_gives_fx_level_facts():
    from hooklint.graph.trace import analyse_model

    facts = analyse_model(_TwoInputs(), source="test", describe=_describe())
    assert facts.method == "fx" and not facts.autograd and "several inputs" in facts.note
    root = facts.root
    assert [op.name for op in root.ops] == ["Linear", "add"] and not root.ops[0].autograd
    assert root.bound.name == "add" and root.legacy_safe is None
    assert facts.module("fc").inputs_from_data is True and root.output_needs_grad is True


def test_declared_example_inputs_are_used():
    from hooklint.graph.trace import analyse_model

    x, mask = torch.rand(3, 4), torch.ones(3, 4)
    facts = analyse_model(_TwoInputsBranching(), source="test", describe=_describe(), inputs=(x, mask),
                          inputs_origin="declared by the factory")
    assert facts.method == "autograd" and [str(s) for s in facts.inputs] == ["float32[3, 4]", "float32[3, 4]"]
    assert facts.root.bound.name == "MulBackward0"


FACTORY_PROJECT = {
    "nets.py": """
        import torch.nn as nn


        class Masked(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.fc = nn.Linear(width, width)

            def forward(self, x, mask):
                if mask.any():
                    return self.fc(x) * mask
                return x
    """,
    "factories.py": """
        import torch
        from nets import Masked


        def build():
            return Masked(6), (torch.rand(2, 6), torch.ones(2, 6))


        def broken():
            raise RuntimeError("no weights here")
    """,
    "hooks.py": """
        import torch.nn as nn
        from nets import Masked


        class Wrapper(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.inner = Masked(width)
                self.inner.register_backward_hook(self.log)

            def log(self, module, grad_input, grad_output):
                print(grad_input)
    """,
}


def test_factories_from_the_config(tmp_path):
    from hooklint.config import Config
    from hooklint.findings import NoticeLevel
    from hooklint.graph.provider import GraphRun, provide_graph_facts

    for name, text in FACTORY_PROJECT.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    config = Config(root=tmp_path, models=["factories:build", "factories:broken"])
    run = GraphRun()
    facts, notices = provide_graph_facts([str(tmp_path / "nets.py")], config, use_cache=False, run=run)
    [model] = run.factories
    assert model.source == "factory factories:build" and model.inputs_origin == "declared by the factory"
    assert model.method == "autograd" and model.root.bound.name == "MulBackward0"
    # the model's classes live in nets.py: its facts can be linked from there
    assert facts[str(tmp_path / "nets.py")].borrowed == [model]
    assert [(n.level, n.message) for n in notices] == [
        (NoticeLevel.ERROR, "model factory `factories:broken`: RuntimeError: no weights here (factories.py:11)")
    ], "Masked cannot be built from nets.py alone, but the factory covers it: no notice for it"


class _OptionalMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x, mask=None):
        y = self.fc(x)
        if mask is not None:
            y = y * mask
        return y


def test_optional_arguments_are_traced_at_their_default():
    """A placeholder for `mask` would make `mask is not None` true while tracing."""
    from hooklint.graph.trace import analyse_model

    facts = analyse_model(_OptionalMask(), source="test", describe=_describe())
    assert facts.method == "fx" and facts.root.bound.name == "AddmmBackward0"
    masked = analyse_model(_OptionalMask(), source="test", describe=_describe(),
                           inputs=(torch.rand(2, 4), torch.ones(2, 4)))
    assert masked.method == "fx" and masked.root.bound.name == "MulBackward0"
