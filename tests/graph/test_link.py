"""From a registration in the source to the facts of the module it hooks (what
HKL102, HKL403 and HKL201 use), and the facts' JSON round trip."""

from __future__ import annotations

import ast
import json
import textwrap

import pytest

from conftest import FIXTURES
from graph.helpers import file_facts_in_process
from hooklint.graph.facts import FileFacts
from hooklint.graph.link import describe_module, fed_by_data, modules_for
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _context(path, facts=None):
    text = path.read_text(encoding="utf-8")
    return FileContext(str(path), text, ast.parse(text), graph=facts or file_facts_in_process(path))


def _linked(ctx, kind=HookKind.FULL_BACKWARD):
    return {(reg.call.lineno, ctx.segment(reg.receiver)): sorted((m.class_name, mod.path, mod.inputs_from_data)
                                                                 for m, mod in modules_for(ctx, reg.receiver))
            for reg in ctx.hooks.by_kind(kind)}


def test_seed000_first_layer_inputs_come_from_data():
    """HKL201's question: on which hooked modules does a full hook run before .grad is accumulated?"""
    ctx = _context(FIXTURES / "seeds" / "seed000_conditional_grad_hook.py")
    linked = _linked(ctx)
    assert linked[(56, "net.fc3")] == [("Model", "fc3", False)]
    # `module` is every submodule of `net` (net.apply(apply_grad_mod))
    assert linked[(61, "module")] == [("Model", "", True), ("Model", "fc1", True), ("Model", "fc2", False),
                                      ("Model", "fc3", False)]


def test_a_layer_built_on_its_own_is_fed_data():
    ctx = _context(FIXTURES / "seeds" / "seed003_freeze_element.py")
    assert _linked(ctx)[(23, "conv")] == [("Conv2d", "", True)]


def test_self_in_a_method_is_every_instance_of_the_class(tmp_path):
    path = tmp_path / "frozen.py"
    path.write_text(textwrap.dedent("""\
        import torch.nn as nn

        class Frozen(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(10, 4)
                self.embed.weight.requires_grad_(False)
                self.fc = nn.Linear(4, 2)
                self.fc.register_full_backward_hook(self.log)

            def log(self, module, grad_input, grad_output):
                print(module.weight.grad)

            def forward(self, tokens):
                return self.fc(self.embed(tokens))

        class Twice(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = Frozen()
                self.b = nn.Linear(8, 10)

            def forward(self, x):
                return self.a(self.b(x).argmax(-1))
    """), encoding="utf-8")
    linked = _linked(_context(path))
    # a frozen embedding in front: fc's input needs no grad, in both models
    assert linked[(9, "self.fc")] == [("Frozen", "fc", True), ("Twice", "a.fc", True)]


def test_unknown_receivers_link_to_nothing():
    ctx = _context(FIXTURES / "models" / "residual.py", FileFacts("residual.py"))
    assert all(not pairs for pairs in _linked(ctx).values())


def test_file_facts_round_trip_through_json():
    facts = file_facts_in_process(FIXTURES / "models" / "residual.py")
    again = FileFacts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again.to_dict() == facts.to_dict()
    assert again.models[0].modules[1].ops == facts.models[0].modules[1].ops


def test_what_hkl201_asks():
    ctx = _context(FIXTURES / "seeds" / "seed000_conditional_grad_hook.py")
    regs = {reg.call.lineno: reg for reg in ctx.hooks.by_kind(HookKind.FULL_BACKWARD)}
    assert fed_by_data(ctx, regs[56].receiver) == []  # net.fc3: its input comes from fc2
    fed = fed_by_data(ctx, regs[61].receiver)  # every module of net, via net.apply
    assert [describe_module(*pair) for pair in fed] == ["`fc1` (Linear, in Model)"]
    seed003 = _context(FIXTURES / "seeds" / "seed003_freeze_element.py")
    [reg] = [r for r in seed003.hooks.by_kind(HookKind.FULL_BACKWARD) if r.call.lineno == 23]
    assert [describe_module(*pair) for pair in fed_by_data(seed003, reg.receiver)] == [
        "Conv2d built with `nn.Conv2d(3, 1, 3)`"]


def test_hkl201_message_names_the_modules_fed_by_data():
    """With graph facts, HKL201 says where the hook certainly runs too early and
    is reported by the graph layer; without them it keeps its static message."""
    from hooklint.findings import Origin
    from hooklint.rules import get_rule

    rule = get_rule("HKL201")()
    path = FIXTURES / "seeds" / "seed000_conditional_grad_hook.py"
    [with_graph] = rule.check(_context(path))
    assert with_graph.origin is Origin.GRAPH
    assert "the model graph shows `fc1` (Linear, in Model) is fed straight from data" in with_graph.message
    text = path.read_text(encoding="utf-8")
    [static] = rule.check(FileContext(str(path), text, ast.parse(text)))
    assert static.origin is Origin.STATIC and "model graph" not in static.message
    assert static.location == with_graph.location
