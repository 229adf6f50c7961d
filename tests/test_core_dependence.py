"""What an object depends on (callgraph.Dependence) and what a class is
(semantic, module_classes), on the shapes the issue-15 cases of branch r7b2
needed: containers filled after they are made, properties of the object's
state, attributes a base constructor of another file sets, comprehensions,
later bindings that cannot reach a use, constructor switches, parametrized
generic bases and locals declared by an annotation."""

from __future__ import annotations

import ast
import textwrap

from hooklint.static.context import FileContext


def ctx_of(src: str) -> FileContext:
    text = textwrap.dedent(src)
    ctx = FileContext("pkg/mod.py", text, ast.parse(text))
    assert ctx.model is not None  # the model marks the nodes with their scopes
    return ctx


def _function(ctx: FileContext, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(ctx.tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _expr(ctx: FileContext, func: ast.AST, text: str, nth: int = -1) -> ast.expr:
    found = [n for n in ast.walk(func) if isinstance(n, ast.expr) and ast.unparse(n) == text]
    return found[nth]


def dep(src: str, func_name: str, text: str, nth: int = -1):
    ctx = ctx_of(src)
    func = _function(ctx, func_name)
    return ctx.summarizer.dependence.of(_expr(ctx, func, text, nth), func)


FILLED = """
from collections import defaultdict
from pkg.base import Base
class Wrapper(Base):
    def __init__(self, optimizer, flag):
        super().__init__(optim=optimizer)
        self.flag = flag
        self.groups = dict()
        for i, group in enumerate(self.optim.param_groups):
            params = list()
            for p in group["params"]:
                params.append(p)
            self.groups[i] = params
        self.keyed = defaultdict(list)
        for group in self.optim.param_groups:
            for p in group["params"]:
                self.keyed[p.dtype].append(p)
        self.buckets = [q for g in self.optim.param_groups for q in g["params"]]
        self.fresh = []
        for group in self.optim.param_groups:
            self.fresh.append(group["params"][0].clone())
        if self.flag:
            self.attach()
        self.sizes = (len(self.groups), len(self.keyed), len(self.fresh))

    @property
    def count(self):
        return len(self.groups)

    def attach(self):
        for i in range(self.count):
            for p in self.groups[i]:
                p.register_hook(print)
"""


def test_a_container_holds_what_is_put_in_it():
    # read after the loops that fill them
    assert dep(FILLED, "__init__", "len(self.groups)") == frozenset({"optimizer"})
    assert dep(FILLED, "__init__", "params") == frozenset({"optimizer"})
    assert dep(FILLED, "__init__", "len(self.keyed)") == frozenset({"optimizer"})


def test_a_container_of_new_objects_is_new():
    assert dep(FILLED, "__init__", "len(self.fresh)") is None  # clones: another object each time


def test_a_comprehension_depends_on_what_its_elements_come_from():
    assert dep(FILLED, "__init__", "self.buckets", 0) == frozenset({"optimizer"})


def test_an_attribute_the_base_constructor_of_another_file_set_follows_its_arguments():
    assert dep(FILLED, "__init__", "self.optim", 0) == frozenset({"optimizer"})


def test_an_attribute_no_one_here_sets_outside_a_constructor_stays_the_objects():
    src = """
from pkg.base import Base
class Wrapper(Base):
    def __init__(self, optimizer):
        super().__init__()
        self.use(self.optim)
    def use(self, x):
        return self.optim
"""
    assert dep(src, "__init__", "self.optim") == frozenset({"self.optim"})  # no argument passed on
    assert dep(src, "use", "self.optim") == frozenset({"self.optim"})


def test_a_property_is_the_state_it_reads():
    assert dep(FILLED, "attach", "self.count") == frozenset({"self.groups"})
    assert dep(FILLED, "attach", "range(self.count)") == frozenset({"self.groups"})


def test_a_binding_after_the_use_outside_a_loop_does_not_reach_it():
    src = """
def run(model, extra):
    for layer in model.children():
        layer.register_forward_hook(print)
    layer = extra
    return layer
"""
    # the later `layer = extra` cannot be what the loop's use reads
    assert dep(src, "run", "layer", 0) == frozenset({"model"})
    looped = """
def run(model, extra):
    layer = model
    for _ in range(3):
        layer.register_forward_hook(print)
        layer = extra
"""
    # inside a loop it can: the second iteration reads it
    assert dep(looped, "run", "layer", 1) == frozenset({"model", "extra"})


def test_a_constructor_switch_is_not_a_once_guard():
    ctx = ctx_of(FILLED)
    init = _function(ctx, "__init__")
    call = _expr(ctx, init, "self.attach()")
    assert not ctx.summarizer.guards.guarded(call, init)
    singleton = ctx_of("""
from pkg.base import Base
class Shared(Base):
    def __init__(self, model):
        if getattr(self, "ready", False):
            return
        if self.ready_flag:
            model.register_forward_hook(print)
        self.ready_flag = True
""")
    init = _function(singleton, "__init__")
    reg = _expr(singleton, init, "model.register_forward_hook(print)")
    assert singleton.summarizer.guards.guarded(reg, init)  # stored after its test: a real flag


def test_a_parametrized_generic_base_is_its_origin_class():
    ctx = ctx_of("""
from typing import Generic, TypeVar
import torch.nn as nn
T = TypeVar("T")
class Operator(Generic[T], nn.Module):
    pass
class Scale(Operator[int]):
    def forward(self, x):
        return x
""")
    scale = next(info for info in ctx.model.classes.values() if info.name == "Scale")
    assert [base.name for base in scale.local_bases] == ["Operator"]
    assert ctx.model.is_module_class(scale) is True


def test_a_local_annotated_on_one_branch_is_declared_in_its_whole_scope():
    from hooklint.static.module_classes import declared_class

    ctx = ctx_of("""
from pkg.layers import Scale, Plan
def objective(op, flag):
    if flag:
        scaled: Scale = Scale()
    else:
        scaled = op
    return lambda x: scaled.forward(x)
def either(a, b, flag):
    if flag:
        pick: Scale = a
    else:
        pick: Plan = b
    return pick.forward(1)
""")
    lam = _expr(ctx, _function(ctx, "objective"), "scaled")
    assert declared_class(ctx, lam) == "pkg.layers.Scale"
    pick = _expr(ctx, _function(ctx, "either"), "pick")
    assert declared_class(ctx, pick) is None  # annotated twice, differently
