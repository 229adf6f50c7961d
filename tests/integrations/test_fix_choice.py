"""Which fix HKL101 offers, and how safe it is, from what the hook uses and
what the graph (or the source) shows after the hooked module.  Static: graph
facts are built here as plain data, as the worker would report them; what
they stand for is shown with real torch in tests/behaviour/test_legacy_fix_pattern.py
and tests/integrations/test_fix_scripts.py."""

from __future__ import annotations

import textwrap

import pytest

from hooklint.findings import Applicability
from hooklint.graph.facts import FileFacts, ModelFacts, ModuleFacts, Op
from hooklint.static.checker import check_text

SAFE, UNSAFE = Applicability.SAFE, Applicability.UNSAFE

SOURCE = """\
import torch.nn as nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3)
        self.act = {act}

    def forward(self, x):
        return self.act(self.conv(x))

def output_only(module, grad_input, grad_output):
    print(grad_output[0].norm())

def reads_input(module, grad_input, grad_output):
    print(grad_input[0].norm())

def returns(module, grad_input, grad_output):
    return grad_input

block = Block()
block.{target}.register_backward_hook({hook})
"""

RELU_INPLACE = Op("ReluBackward0 (in place)", "act")


def facts(target="conv", inplace=True, autograd=True):
    path = "" if target == "" else target
    module = ModuleFacts(path, "Conv2d", "torch.nn.Conv2d", calls=1, output_needs_grad=True,
                         output_inplace=RELU_INPLACE if inplace else None)
    modules = (module,) if path == "" else (ModuleFacts("", "Block", "a.Block", calls=1), module)
    return FileFacts("a.py", models=[ModelFacts("Block", None, None, "Block()", call_line=21, autograd=autograd,
                                                modules=modules)])


def fix_of(hook, *, act="nn.ReLU()", target="conv", graph=None):
    text = SOURCE.format(act=act, target=target, hook=hook) if target else \
        SOURCE.format(act=act, target="conv", hook=hook).replace("block.conv.register", "block.register")
    findings = [f for f in check_text("a.py", text, frozenset({"HKL101"}), graph=graph).findings]
    assert len(findings) == 1
    fix = findings[0].fix
    if fix is None:
        return None
    kind = "pattern" if any("output_grad_hook(" in e.content for e in fix.edits) else "rename"
    return kind, fix.applicability


@pytest.mark.parametrize(("hook", "act", "graph", "expected"), [
    # graph facts
    ("output_only", "nn.ReLU()", facts(inplace=False), ("rename", SAFE)),
    ("output_only", "nn.ReLU(inplace=True)", facts(inplace=True), ("pattern", SAFE)),
    ("reads_input", "nn.ReLU()", facts(inplace=False), ("rename", UNSAFE)),
    ("returns", "nn.ReLU()", facts(inplace=False), ("rename", UNSAFE)),
    ("reads_input", "nn.ReLU(inplace=True)", facts(inplace=True), None),
    ("returns", "nn.ReLU(inplace=True)", facts(inplace=True), None),
    # fx-only facts (no forward ran): they do not show that no in-place op follows
    ("output_only", "nn.ReLU()", facts(inplace=False, autograd=False), ("pattern", UNSAFE)),
    # no graph facts: the source alone
    ("output_only", "nn.ReLU()", None, ("pattern", UNSAFE)),
    ("output_only", "nn.ReLU(inplace=True)", None, ("pattern", UNSAFE)),
    ("reads_input", "nn.ReLU()", None, ("rename", UNSAFE)),
    ("reads_input", "nn.ReLU(inplace=True)", None, None),
    ("returns", "nn.ReLU(inplace=True)", None, None),
    ("lambda m, gi, go: print(go[0])", "nn.ReLU()", None, ("pattern", UNSAFE)),
    ("lambda m, gi, go: gi", "nn.ReLU()", None, ("rename", UNSAFE)),
], ids=lambda v: v if isinstance(v, str) else None)
def test_the_fix_offered(hook, act, graph, expected):
    assert fix_of(hook, act=act, graph=graph) == expected


def test_the_model_itself_is_never_proven_free_of_in_place_ops():
    """Its output goes to the user's script, which the graph does not see."""
    assert fix_of("output_only", target="", graph=facts(target="", inplace=False)) == ("pattern", UNSAFE)


def test_an_in_place_layer_hooked_itself():
    text = textwrap.dedent("""\
        import torch.nn as nn
        relu = nn.ReLU(inplace=True)
        def clip(module, grad_input, grad_output):
            return (grad_input[0].clamp(min=0),)
        relu.register_backward_hook(clip)
        def log(module, grad_input, grad_output):
            print(grad_output[0])
        relu.register_backward_hook(log)
    """)
    guided, logged = check_text("a.py", text, frozenset({"HKL101"})).findings
    assert guided.fix is None  # guided backprop: a full hook breaks on the in-place ReLU, and it returns grad_input
    assert logged.fix is not None and logged.fix.applicability is UNSAFE
    assert "register_forward_hook" in [e.content for e in logged.fix.edits]
