"""Hooked modules written in every way Python code picks a submodule: negative
indices, nested attributes, `getattr(model, "name")`, `model.get_submodule("a.b")`,
`dict(model.named_modules())["a.b"]`, and loops over a container or a slice of
it.  For each form, the module hooklint links the registration to is the very
module torch gives for that expression on a real instance, and the graph rule
(HKL403) is reported there exactly when a real full hook makes the forward fail."""

from __future__ import annotations

import ast
import textwrap

import pytest

from graph.helpers import file_facts_in_process, model_named
from hooklint.graph.link import modules_for
from hooklint.static.checker import check_file
from hooklint.static.context import FileContext
from hooklint.config import resolve_codes

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

MODEL = '''\
import torch.nn as nn
from collections import OrderedDict


class BasicBlock(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.layer4 = nn.Sequential(BasicBlock(), BasicBlock(), BasicBlock())
        self.blocks = nn.ModuleDict({"a": BasicBlock()})
        self.head = nn.Sequential(OrderedDict(pool=nn.AdaptiveAvgPool2d(1), flat=nn.Flatten(),
                                              fc=nn.Linear(4, 2)))

    def forward(self, x):
        return self.head(self.blocks["a"](self.layer4(self.stem(x))))


def log(module, grad_input, grad_output):
    pass


model = Net()
'''

# (receiver as written, the module paths torch gives for it)
FORMS = [
    ("model.layer4[1].bn2", ["layer4.1.bn2"]),
    ("model.layer4[-1].bn2", ["layer4.2.bn2"]),
    ("model.layer4[-3].conv2", ["layer4.0.conv2"]),
    ("getattr(model, 'layer4')[0].bn2", ["layer4.0.bn2"]),
    ("getattr(model.layer4[2], 'bn2')", ["layer4.2.bn2"]),
    ("model.get_submodule('layer4.1.bn2')", ["layer4.1.bn2"]),
    ("model.layer4.get_submodule('2.bn1')", ["layer4.2.bn1"]),
    ("dict(model.named_modules())['blocks.a.bn2']", ["blocks.a.bn2"]),
    ("dict(model.named_children())['stem']", ["stem"]),
    ("model.blocks['a'].conv2", ["blocks.a.conv2"]),
    ("model.head[-1]", ["head.fc"]),
    ("model.head[0]", ["head.pool"]),
]


def _write(tmp_path, body: str):
    path = tmp_path / "targets.py"
    path.write_text(MODEL + textwrap.dedent(body), encoding="utf-8")
    return path


def _links(path):
    text = path.read_text(encoding="utf-8")
    ctx = FileContext(str(path), text, ast.parse(text), graph=file_facts_in_process(path))
    return {ctx.segment(reg.receiver): [m.path for model, m in modules_for(ctx, reg.receiver)
                                        if model.class_name == "Net"]
            for reg in ctx.hooks.registrations if reg.receiver is not None}


def _instance(path):
    return model_named(path, "Net").model


def test_each_form_links_to_the_module_torch_gives(tmp_path):
    path = _write(tmp_path, "".join(f"{receiver}.register_full_backward_hook(log)\n" for receiver, _ in FORMS))
    links = _links(path)
    net = _instance(path)
    by_path = dict(net.named_modules())
    for receiver, expected in FORMS:
        assert links[receiver] == expected, receiver
        real = eval(receiver, {"model": net})  # noqa: S307 - the test's own expressions
        assert real is by_path[expected[0]], receiver


def test_loops_over_a_container_and_a_slice_of_it(tmp_path):
    path = _write(tmp_path, """\
        for block in model.layer4[1:]:
            block.bn2.register_full_backward_hook(log)
        for i, block in enumerate(model.layer4):
            pass
        for child in model.layer4[:-2]:
            child.conv1.register_full_backward_hook(log)
        for name, m in model.blocks.named_modules():
            m.register_full_backward_hook(log)
    """)
    links = _links(path)
    assert links["block.bn2"] == ["layer4.1.bn2", "layer4.2.bn2"]
    assert links["child.conv1"] == ["layer4.0.conv1"]
    assert links["m"][:3] == ["blocks", "blocks.a", "blocks.a.conv1"]
    net = _instance(path)
    assert [b.bn2 for b in net.layer4[1:]] == [net.get_submodule(p) for p in links["block.bn2"]]
    assert [m for _n, m in net.blocks.named_modules()] == [net.get_submodule(p) for p in links["m"]]


def test_what_torch_cannot_pick_links_nothing(tmp_path):
    """A slice is a new nn.Sequential (not a module of the model), an index past the
    end raises, a computed index is unknown: no graph fact, the static rules decide."""
    path = _write(tmp_path, """\
        model.layer4[1:].register_full_backward_hook(log)
        model.layer4[3].bn2.register_full_backward_hook(log)
        model.layer4[len(model.layer4) - 1].bn2.register_full_backward_hook(log)
        model.blocks[0].register_full_backward_hook(log)
    """)
    links = _links(path)
    assert links == {"model.layer4[1:]": [], "model.layer4[3].bn2": [],
                     "model.layer4[len(model.layer4) - 1].bn2": [], "model.blocks[0]": []}
    net = _instance(path)
    assert net.layer4[1:] is not net.layer4 and all(net.layer4[1:] is not m for m in net.modules())
    with pytest.raises(IndexError):
        net.layer4[3]


@pytest.mark.parametrize(("receiver", "fails"), [
    ("model.layer4[-1].bn2", True),       # `out += identity` follows it
    ("model.get_submodule('layer4.0.conv1')", False),  # bn1 follows, then ReLU(inplace) on bn1's output
    ("dict(model.named_modules())['layer4.0.bn1']", True),  # ReLU(inplace=True) follows
    ("getattr(model, 'stem')", False),
    ("model.head[-1]", False),
])
def test_hkl403_where_a_real_full_hook_breaks_the_forward(tmp_path, receiver, fails):
    path = _write(tmp_path, f"{receiver}.register_full_backward_hook(log)\n")
    facts = file_facts_in_process(path)
    result = check_file(str(path), frozenset(resolve_codes(["HKL403"], [], [])), graph=facts)
    row = len(MODEL.splitlines()) + 1
    assert [(f.location.row, f.code) for f in result.findings] == ([(row, "HKL403")] if fails else [])
    net = _instance(path)
    module = eval(receiver, {"model": net})  # noqa: S307
    module.register_full_backward_hook(lambda m, gi, go: None)
    x = torch.rand(2, 3, 8, 8, requires_grad=True)
    if fails:
        with pytest.raises(RuntimeError, match="BackwardHookFunction is a view and is being modified inplace"):
            net(x)
    else:
        net(x).sum().backward()
