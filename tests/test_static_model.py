"""The static semantic model: names through imports and aliases, module
classes through local bases, attributes, and hook registrations with their
resolved callables."""

from __future__ import annotations

import ast
import textwrap

import pytest

from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind
from hooklint.static.values import CallableValue, ModuleValue, TensorValue


def ctx_of(src: str) -> FileContext:
    text = textwrap.dedent(src)
    return FileContext("t.py", text, ast.parse(text))


def regs(src: str):
    return ctx_of(src).hooks.registrations


@pytest.mark.parametrize(
    "imports, expr",
    [
        ("import torch.nn as tnn", "tnn.Linear"),
        ("from torch import nn", "nn.Linear"),
        ("import torch", "torch.nn.Linear"),
        ("import torch.nn", "torch.nn.Linear"),
        ("from torch.nn import Linear", "Linear"),
        ("from torch.nn import Linear as L", "L"),
        ("from torch.nn.modules.linear import Linear", "Linear"),
    ],
)
def test_qualified_names_through_imports(imports, expr):
    ctx = ctx_of(f"{imports}\nx = {expr}(2, 2)\nx.register_backward_hook(print)\n")
    (reg,) = ctx.hooks.registrations
    assert isinstance(reg.receiver_value, ModuleValue)
    assert reg.receiver_value.class_name == "Linear"


def test_module_subclass_through_local_bases_and_aliases():
    ctx = ctx_of("""
        from torch.nn import Module
        import torch.nn as tnn
        Base = tnn.Module
        class A(Module): pass
        class B(A): pass
        class C(Base): pass
        class D(object): pass
        class E(SomethingElse): pass
    """)
    by_name = {info.name: ctx.model.is_module_class(info) for info in ctx.model.classes.values()}
    assert by_name == {"A": True, "B": True, "C": True, "D": False, "E": None}


def test_self_attributes_and_nested_access():
    ctx = ctx_of("""
        import torch.nn as nn
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 3, 3)
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()
                self.head = nn.Linear(3, 1)
            def setup(self):
                self.block.conv.register_full_backward_hook(print)
        net = Net()
        net.head.register_forward_hook(print)
        net.block.conv.weight.register_hook(print)
    """)
    kinds = [(r.kind, r.receiver_text, getattr(r.receiver_value, "class_name", None)) for r in ctx.hooks.registrations]
    assert kinds[0] == (HookKind.FULL_BACKWARD, "self.block.conv", "Conv2d")
    assert kinds[1] == (HookKind.FORWARD, "net.head", "Linear")
    assert kinds[2][0] is HookKind.TENSOR
    assert isinstance(ctx.hooks.registrations[2].receiver_value, TensorValue)
    assert ctx.hooks.registrations[2].receiver_value.parameter


def test_hook_callables_resolve():
    ctx = ctx_of("""
        import functools
        import torch.nn as nn

        def plain(module, grad_input, grad_output): pass
        def factory(index):
            def inner(module, grad_input, grad_output): pass
            return inner
        def with_extra(scale, module, grad_input, grad_output): pass

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)
                self.fc.register_full_backward_hook(self._hook)
            def _hook(self, module, grad_input, grad_output): pass

        class Saver:
            def __call__(self, module, inp, out): pass

        m = nn.Linear(2, 2)
        m.register_full_backward_hook(plain)
        m.register_full_backward_hook(factory(3))
        m.register_full_backward_hook(lambda mod, gi, go: None)
        m.register_full_backward_hook(functools.partial(with_extra, 2.0))
        m.register_forward_hook(Saver())
    """)
    names = [(r.hook.name, r.hook.params) if isinstance(r.hook, CallableValue) else None
             for r in ctx.hooks.registrations]
    assert names == [
        ("_hook", ["module", "grad_input", "grad_output"]),
        ("plain", ["module", "grad_input", "grad_output"]),
        ("inner", ["module", "grad_input", "grad_output"]),
        ("<lambda>", ["mod", "gi", "go"]),
        ("with_extra", ["module", "grad_input", "grad_output"]),
        ("__call__", ["module", "inp", "out"]),
    ]
    assert ctx.hooks.registrations[3].param("grad_input") == "gi"


def test_apply_registrations_target_every_submodule():
    ctx = ctx_of("""
        import torch.nn as nn
        net = nn.Sequential(nn.Linear(1, 2), nn.Linear(2, 1))
        def add_hook(module):
            module.register_full_backward_hook(print)
        net.apply(add_hook)
    """)
    (reg,) = ctx.hooks.registrations
    assert "every submodule of `net`" in reg.describe_target()


def test_global_registration_functions():
    ctx = ctx_of("""
        import torch
        from torch.nn.modules.module import register_module_full_backward_hook as reg_full
        torch.nn.modules.module.register_module_forward_hook(print)
        reg_full(print)
    """)
    assert [(r.kind, r.is_global) for r in ctx.hooks.registrations] == [
        (HookKind.FORWARD, True), (HookKind.FULL_BACKWARD, True)]


def test_own_methods_named_like_hook_apis_are_not_torch():
    ctx = ctx_of("""
        class Runner:
            def register_hook(self, hook): self.hooks.append(hook)
            def register_backward_hook(self, hook): pass
            def setup(self):
                self.register_backward_hook(print)
        runner = Runner()
        runner.register_hook(print)
        runner.register_backward_hook(print)
    """)
    assert ctx.hooks.registrations == []


def test_grad_fn_hooks_are_not_tensor_hooks():
    ctx = ctx_of("""
        import torch
        y = torch.ones(2, requires_grad=True) * 2
        y.grad_fn.register_hook(print)
    """)
    assert ctx.hooks.registrations == []


def test_deep_nesting_does_not_crash():
    src = "x = " + "(" * 180 + "1" + ")" * 180 + "\nm.register_hook(print)\n"
    ctx = ctx_of(src)
    assert len(ctx.hooks.registrations) == 1
