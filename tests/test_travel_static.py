"""The static analyses behind hooks that travel (hooklint/static/travel.py),
module identity (identity.py) and dead fallbacks (fallbacks.py), piece by
piece.  The fixtures check the rules end to end; these pin down each form."""

from __future__ import annotations

import ast
import textwrap

import pytest

from hooklint.static.context import FileContext
from hooklint.static.fallbacks import dead_on_current_torch, decide
from hooklint.static.hooks import HookKind
from hooklint.static.travel import MAX_ENVS


def _ctx(source: str) -> FileContext:
    text = textwrap.dedent(source)
    return FileContext("example.py", text, ast.parse(text))


def _expr(ctx: FileContext, marker: str) -> ast.expr:
    """The value assigned to the name ``marker``."""
    for node in ast.walk(ctx.tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == marker:
            return node.value
    raise AssertionError(marker)


# ------------------------------------------------------------------ fallbacks

@pytest.mark.parametrize(("test", "value"), [
    ("hasattr(m, 'register_full_backward_hook')", True),
    ("not hasattr(nn.Module, 'register_full_backward_hook')", False),
    ("hasattr(m, 'register_full_backward_pre_hook')", None),  # torch 2.0: 1.8 to 1.13 lack it
    ("getattr(m, 'register_full_backward_hook', None) is not None", True),
    ("torch.__version__ < '1.8'", False),
    ("torch.__version__ >= '1.8.0'", True),
    ("torch.__version__ >= '1.9'", None),  # 1.8 takes the other branch
    ("torch.__version__ < '2.1'", None),
    ("version.parse(torch.__version__) >= version.parse('1.8')", True),
    ("LooseVersion(torch.__version__) < LooseVersion('1.7.1')", False),
    # snntorch's probes: torch's own TorchVersion (torch >= 1.10) as the parser
    ("torch.__version__ >= torch.torch_version.TorchVersion('1.8.0')", True),
    ("torch.__version__ < torch.torch_version.TorchVersion('1.8.0')", False),
    ("torch.__version__ >= torch.torch_version.TorchVersion('1.9')", None),
    ("TORCH_VERSION >= (1, 8)", True),
    ("(1, 8) <= TORCH_VERSION", True),
    ("int(torch.__version__.split('.')[1]) >= 8", None),  # the minor number alone: 2.0 < 1.8 there
    ("is_torch_greater_or_equal('1.8')", True),
    ("TORCH_GE_1_8", True),
    ("full and hasattr(m, 'register_full_backward_hook')", None),
    ("full or hasattr(m, 'register_full_backward_hook')", True),
])
def test_decide(test, value):
    ctx = _ctx(f"""
        import torch
        import torch.nn as nn
        from packaging import version
        from distutils.version import LooseVersion
        from mylib import TORCH_VERSION, is_torch_greater_or_equal, TORCH_GE_1_8
        flag = {test}
    """)
    assert decide(ctx.model, _expr(ctx, "flag")) is value


def test_version_built_from_torch_version_is_recognised():
    ctx = _ctx("""
        import torch
        TORCH_VERSION = tuple(int(x) for x in torch.__version__.split(".")[:2])
        flag = TORCH_VERSION < (1, 8)
    """)
    assert decide(ctx.model, _expr(ctx, "flag")) is False


def test_only_missing_api_errors_make_a_dead_handler():
    ctx = _ctx("""
        def a(m, h):
            try:
                m.register_full_backward_hook(h)
            except (AttributeError,):
                m.register_backward_hook(h)
        def b(m, h):
            try:
                m.register_full_backward_hook(h)
            except (AttributeError, RuntimeError):
                m.register_backward_hook(h)
    """)
    legacy = [c for c in ctx.model.calls_of_method("register_backward_hook")]
    assert dead_on_current_torch(ctx.model, legacy[0]) is not None
    assert dead_on_current_torch(ctx.model, legacy[1]) is None


# ------------------------------------------------------------------ identity

@pytest.mark.parametrize(("guard", "names"), [
    ("if isinstance(m, nn.ReLU):", ("ReLU",)),
    ("if isinstance(m, (nn.Conv2d, nn.Linear)):", ("Conv2d", "Linear")),
    ("if isinstance(m, TARGETS):", ("Conv2d", "BatchNorm2d")),
    ("if type(m) is nn.ReLU:", ("ReLU",)),
    ("if type(m) == nn.ReLU:", ("ReLU",)),
    ("if type(m) in (nn.ReLU, nn.ELU):", ("ReLU", "ELU")),
    ("if m.__class__ is nn.ReLU:", ("ReLU",)),
    ("if m.__class__.__name__ == 'ReLU':", ("ReLU",)),
    ("if type(m).__name__ in ('ReLU', 'GELU'):", ("ReLU", "GELU")),
    ("if isinstance(m, nn.ReLU) and m.inplace:", ("ReLU",)),
    ("if isinstance(m, nn.ReLU) or isinstance(m, nn.ELU):", ("ReLU", "ELU")),
    ("if not isinstance(m, nn.Conv2d):\n                    pass\n                else:", ("Conv2d",)),
    ("if 'Conv' in m.__class__.__name__:", None),  # a substring proves nothing about the forward
    ("if isinstance(m, nn.Module):", None),  # no narrower than before
    ("if isinstance(m, tuple(self_types)):", None),  # not known
])
def test_narrowing(guard, names):
    ctx = _ctx(f"""
        import torch.nn as nn
        TARGETS = (nn.Conv2d, nn.BatchNorm2d)
        def f(model, self_types):
            for m in model.modules():
                {guard}
                    target = m
    """)
    value = ctx.inference.infer(_expr(ctx, "target"))
    got = value.narrowing.names if value is not None and value.narrowing is not None else None
    assert got == names


def test_a_guard_clause_narrows_the_rest_of_the_loop():
    ctx = _ctx("""
        import torch.nn as nn
        def f(model):
            for m in model.modules():
                if not isinstance(m, nn.ReLU):
                    continue
                target = m
    """)
    assert ctx.inference.infer(_expr(ctx, "target")).torch_class == "torch.nn.ReLU"


def test_a_test_on_another_variable_does_not_narrow():
    ctx = _ctx("""
        import torch.nn as nn
        def f(model, other):
            for m in model.modules():
                if isinstance(other, nn.ReLU):
                    target = m
    """)
    value = ctx.inference.infer(_expr(ctx, "target"))
    assert value.narrowing is None and value.torch_class is None


# ------------------------------------------------------------------ travel

def _instances(ctx: FileContext, kind: HookKind | None = None):
    return [r for r in ctx.hooks.instances if kind is None or r.kind is kind]


@pytest.mark.parametrize("spelling", [
    "f'register_{kind}_hook'",
    "'register_{}_hook'.format(kind)",
    "'register_%s_hook' % kind",
    "'register_' + kind + '_hook'",
])
def test_names_built_from_a_loop_give_one_registration_per_item(spelling):
    ctx = _ctx(f"""
        def attach(m, fwd, bwd):
            for kind, fn in (("forward", fwd), ("backward", bwd)):
                getattr(m, {spelling})(fn)
    """)
    kinds = sorted(r.kind.value for r in _instances(ctx))
    assert kinds == ["backward-legacy", "forward"]


def test_a_dict_subscript_gives_the_handler():
    ctx = _ctx("""
        def bwd(module, grad_input, grad_output):
            pass
        handlers = {"backward": bwd}
        def attach(m):
            m.register_backward_hook(handlers["backward"])
    """)
    (reg,) = _instances(ctx)
    assert reg.hook is not None and reg.hook.name == "bwd"


def test_three_calls_deep_is_followed():
    ctx = _ctx("""
        import torch.nn as nn
        def hook(module, grad_input, grad_output):
            pass
        def a(m, fn):
            return m.register_backward_hook(fn)
        def b(m, fn):
            return a(m, fn)
        def c(m, fn):
            return b(m, fn)
        c(nn.Linear(2, 2), hook)
    """)
    (reg,) = _instances(ctx)
    assert reg.hook is not None and reg.hook.name == "hook"
    assert reg.receiver_module is not None and reg.receiver_module.class_name == "Linear"
    assert len(reg.via) == 3


def test_many_call_sites_stay_bounded():
    calls = "\n".join(f"add(nn.Linear({i}, 2), hook)" for i in range(1, 200))
    ctx = _ctx(f"""
        import torch.nn as nn
        def hook(module, grad_input, grad_output):
            pass
        def add(m, fn):
            return m.register_backward_hook(fn)
{textwrap.indent(calls, "        ")}
    """)
    assert 0 < len(_instances(ctx)) <= MAX_ENVS


def test_recursive_helpers_terminate():
    ctx = _ctx("""
        def add(model, fn):
            for child in model.children():
                add(child, fn)
            model.register_backward_hook(fn)
        add(net, print)
    """)
    assert _instances(ctx)


def test_a_local_method_of_the_same_name_is_not_torch_but_is_followed():
    ctx = _ctx("""
        class Recorder:
            def register_backward_hook(self, fn):
                self.fn = fn
        class Forwarder:
            def __init__(self, module):
                self.module = module
            def register_backward_hook(self, fn):
                return self.module.register_backward_hook(fn)
        def hook(module, grad_input, grad_output):
            pass
        Recorder().register_backward_hook(hook)
        Forwarder(object()).register_backward_hook(hook)
    """)
    regs = _instances(ctx)
    assert len(regs) == 1 and regs[0].hook.name == "hook" and regs[0].call.lineno == 9


def test_a_test_on_the_key_keeps_each_handler_with_its_api():
    ctx = _ctx("""
        import torch.nn as nn
        def fwd(module, inputs, output):
            pass
        def bwd(module, grad_input, grad_output):
            return (grad_input[0] * 2,)
        def install(m, hooks):
            for kind, fn in hooks.items():
                if kind == "forward":
                    m.register_forward_hook(fn)
                else:
                    m.register_full_backward_hook(fn)
        install(nn.Linear(2, 2), {"forward": fwd, "backward": bwd})
    """)
    pairs = sorted((r.kind.value, r.hook.name) for r in _instances(ctx))
    assert pairs == [("forward", "fwd"), ("full-backward", "bwd")]


def test_a_flag_passed_by_the_caller_chooses_the_branch():
    ctx = _ctx("""
        import torch.nn as nn
        def attach(module, fn, full):
            name = "register_full_backward_hook" if full else "register_backward_hook"
            return getattr(module, name)(fn)
        attach(nn.Conv2d(2, 2, 3), print, full=True)
    """)
    assert [r.kind for r in _instances(ctx)] == [HookKind.FULL_BACKWARD]


def test_a_flag_passed_through_calls_chooses_between_bound_methods():
    # fastai's Hook: `hook_outputs(m)` (grad=False) makes a forward hook; only `hook_output`, whose
    # `grad` no call of this file fixes, can make the legacy one, and its chain is the one named
    ctx = _ctx("""
        class Hook:
            def __init__(self, m, hook_func, is_forward=True):
                f = m.register_forward_hook if is_forward else m.register_backward_hook
                self.hook = f(hook_func)
        class Hooks:
            def __init__(self, ms, hook_func, is_forward=True):
                self.hooks = [Hook(m, hook_func, is_forward) for m in ms]
        def hook_output(module, grad=False):
            return Hook(module, print, is_forward=not grad)
        def hook_outputs(modules, grad=False):
            return Hooks(modules, print, is_forward=not grad)
        def sizes(model):
            return hook_outputs(model.children())
    """)
    legacy = _instances(ctx, HookKind.BACKWARD_LEGACY)
    assert legacy and all(r.via_text() == " (through `Hook(...)` at line 10)" for r in legacy)
    forward_chains = {r.via_text() for r in _instances(ctx, HookKind.FORWARD)}
    assert any("hook_outputs(...)" in text for text in forward_chains)


def test_a_method_of_the_same_name_with_another_signature_is_not_a_registration():
    # torchrec's TrainPipeline.register_backward_hook(site, work), defined in another file
    ctx = _ctx("""
        from .train_pipelines import TrainPipelineSparseDist
        class Pipeline(TrainPipelineSparseDist):
            def _pipeline_model(self, work):
                self.register_backward_hook(self._site, work)
                self.register_forward_hook(work, site=self._site)
                self.register_backward_hook(work)
    """)
    assert [(r.kind, r.call.lineno) for r in _instances(ctx)] == [(HookKind.BACKWARD_LEGACY, 7)]
