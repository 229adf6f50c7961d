"""What run time used to miss (issue 11), each shown on real torch first (the
behaviour the finding claims), then reported, next to the code that must stay
quiet: HKL102 decided from the autograd graph whatever the shapes, HKL301 by
the ops that used the hooked tensor, HKL304 by registration site and at
forward time, HKL203 for a `grad`-named argument clamped in place, PyTorch's
own errors mapped to HKL501/HKL402/HKL403, one finding per hook listing its
parameters, and nested sessions."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = pytest.mark.torch


# -- HKL102: the graph decides, not the shapes ----------------------------------------------------

GRAD_CAM_STAGE = """
import copy
import torch
import torch.nn as nn

torch.manual_seed(0)
stage = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), stage, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(8, 5))
twin = copy.deepcopy(model)

legacy_seen, full_seen = [], []
def save_legacy(module, grad_input, grad_output):
    legacy_seen.append(grad_input[0].detach().clone())
def save_full(module, grad_input, grad_output):
    full_seen.append(grad_input[0].detach().clone())

model[1].register_{kind}(save_legacy)  # REGISTER
twin[1].register_full_backward_hook(save_full)
x = torch.rand(2, 3, 8, 8)
model(x)[:, 1].sum().backward()
twin(x)[:, 1].sum().backward()
same_shape = legacy_seen[0].shape == full_seen[0].shape
wrong_fraction = (~torch.isclose(legacy_seen[0], full_seen[0])).float().mean().item()
"""


def test_hkl102_grad_cam_stage_same_shapes_wrong_values(observe):
    run = observe(GRAD_CAM_STAGE.format(kind="backward_hook"))
    # the real behaviour: same shapes, so comparing shapes saw nothing; the values are not the input's gradient
    assert run.namespace["same_shape"]
    assert run.namespace["wrong_fraction"] > 0.3, run.namespace["wrong_fraction"]
    finding = run.only("HKL102")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "bound to `ReluBackward0`" in finding.message
    assert ("(from the module's input: `ConvolutionBackward0` -> `NativeBatchNormBackward0` -> `ReluBackward0`)"
            in finding.message)
    assert "`grad_input[0]` is the gradient of the output of `NativeBatchNormBackward0`" in finding.message
    assert "the shapes are the same" in finding.message


def test_hkl102_fixed_full_hook_clean(observe):
    run = observe(GRAD_CAM_STAGE.format(kind="full_backward_hook"))
    assert run.namespace["wrong_fraction"] == 0.0
    assert run.findings == []


def test_hkl102_no_op_module_binds_to_the_op_before_it(observe):
    """fixtures/models/pooling_flatten.py's fact: a no-op nn.Flatten runs no op, so
    its legacy hook binds to the op that produced its input."""
    run = observe("""
        import torch
        import torch.nn as nn

        net = nn.Sequential(nn.Linear(8, 8), nn.Flatten(), nn.Linear(8, 2))
        seen = []
        net[1].register_backward_hook(lambda m, gi, go: seen.append(gi[0].shape))  # REGISTER
        net(torch.rand(4, 8)).sum().backward()
    """)
    assert run.namespace["seen"] == [torch.Size([8])]  # the first Linear's bias gradient, not a (4, 8) input's
    finding = run.only("HKL102")
    assert "bound to `AddmmBackward0`, the op that produced the module's input" in finding.message
    assert "`grad_input[0]` is the gradient of `net.0.bias`" in finding.message


def test_hkl102_quiet_where_the_bound_op_takes_the_module_input(observe):
    """A single conv (its op's first input is the module's input), an in-place
    ReLU (the input is modified, the edge noted before the forward is still the
    op's input), a first layer fed plain data, a conv whose forward pre-hook
    replaces its input: `grad_input[0]` is right."""
    run = observe("""
        import torch
        import torch.nn as nn

        conv = nn.Conv2d(3, 4, 3, padding=1)
        relu = nn.ReLU(inplace=True)
        first = nn.Conv2d(3, 3, 1)
        seen = {}
        def save(name):
            def hook(module, grad_input, grad_output):
                seen[name] = grad_input[0]
            return hook
        conv.register_backward_hook(save("conv"))
        relu.register_backward_hook(save("relu"))
        first.register_backward_hook(save("first"))
        x = torch.rand(1, 3, 6, 6, requires_grad=True)
        out = relu(conv(first(torch.rand(1, 3, 6, 6)) + x))
        out.sum().backward()
        first_input_grad = seen["first"]

        scaled = nn.Conv2d(3, 3, 3, padding=1)
        scaled.register_backward_hook(save("scaled"))
        scaled.register_forward_pre_hook(lambda module, args: (args[0] * 2,))
        scaled(x * 1).sum().backward()
    """)
    assert run.namespace["first_input_grad"] is None  # the first layer's input needs no gradient: None is right
    assert [f.code for f in run.findings if f.code == "HKL102"] == []


# -- HKL301: decided by the ops that used the hooked tensor --------------------------------------


def test_hkl301_loss_built_after_remove(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        model = nn.Linear(4, 2)
        x = torch.rand(3, 4, requires_grad=True)
        fired = []
        h = x.register_hook(lambda grad: fired.append(grad))  # REGISTER
        y = model(x)
        h.remove()  # REMOVE
        loss = y.sum()
        loss.backward()
    """)
    assert run.namespace["fired"] == []  # the real behaviour: the hook never ran
    finding = run.only("HKL301")
    assert finding.location.row == run.line_of("# REMOVE")
    assert "through `AddmmBackward0`, an op that used the tensor before the removal" in finding.message
    assert [r.location.row for r in finding.related][0] == run.line_of("# REGISTER")


def test_hkl301_context_manager_removes_before_backward(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        class capture_grad:
            def __init__(self, tensor):
                self.tensor, self.grads = tensor, []
            def __enter__(self):
                self.handle = self.tensor.register_hook(self.grads.append)
                return self
            def __exit__(self, *exc):
                self.handle.remove()  # REMOVE

        model = nn.Linear(4, 2)
        x = torch.rand(3, 4, requires_grad=True)
        with capture_grad(x) as captured:
            out = model(x)
        out.sum().backward()
        n_captured = len(captured.grads)
    """)
    assert run.namespace["n_captured"] == 0
    assert run.only("HKL301").location.row == run.line_of("# REMOVE")


def test_hkl301_quiet_for_the_fixed_forms(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        class capture_grad:
            def __init__(self, tensor):
                self.tensor, self.grads = tensor, []
            def __enter__(self):
                self.handle = self.tensor.register_hook(self.grads.append)
                return self
            def __exit__(self, *exc):
                self.handle.remove()

        model = nn.Linear(4, 2)
        x = torch.rand(3, 4, requires_grad=True)
        with capture_grad(x) as captured:
            model(x).sum().backward()      # the backward inside the block
        h = x.register_hook(lambda g: g * 2)
        h.remove()                         # removed before any graph used the tensor
        model(x).sum().backward()
        y = model(x)                       # a forward without the hook, the hook removed long before
        y.sum().backward()
        n_captured = len(captured.grads)
    """)
    assert run.namespace["n_captured"] == 1
    assert run.findings == []


# -- HKL304: by registration site, whatever the closure holds; judged at forward time too --------


def test_hkl304_fresh_closure_each_call(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        class Recorder:
            def __init__(self):
                self.values = []

        calls = []
        net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        def saliency(x):
            recorder = Recorder()
            def record(module, grad_input, grad_output):
                recorder.values.append(grad_output[0])
                calls.append(1)
            net[0].register_full_backward_hook(record)  # REGISTER
            net(x).sum().backward()
            return recorder.values
        for _ in range(3):
            saliency(torch.rand(2, 4, requires_grad=True))
    """)
    assert len(run.namespace["calls"]) == 1 + 2 + 3  # the real behaviour: the hooks stack up
    finding = run.only("HKL304")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "registered 3 times on `net.0` (Linear) from the same line" in finding.message
    assert "distinct hooks doing the same thing" in finding.message


def test_hkl304_model_gone_before_any_backward(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        runs = []
        def extract(model, x):
            features = []
            model[0].register_forward_hook(lambda m, i, o: features.append(o))  # REGISTER
            with torch.no_grad():
                model(x)
            runs.append(len(features))
            return features

        def main():
            model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
            for _ in range(5):
                extract(model, torch.rand(2, 4))

        main()   # the model is gone when the session ends
    """)
    assert run.namespace["runs"] == [1, 1, 1, 1, 1]  # each call's list sees one output...
    finding = run.only("HKL304")  # ...but every earlier hook still runs, appending to lists nobody reads
    assert finding.location.row == run.line_of("# REGISTER")
    assert "registered 5 times on `model.0` (Linear)" in finding.message
    assert "again after the module had run" in finding.message


def test_hkl304_quiet_when_the_count_does_not_grow(observe):
    """Several hooks of one code from one line, registered before any forward
    (one per name), and a handle replaced (the new registered, then the old
    removed) before the next forward: not a leak."""
    run = observe("""
        import functools
        import torch
        import torch.nn as nn

        net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        saved = {}
        def save(name, module, inputs, output):
            saved.setdefault(name, []).append(output)
        for name in ("a", "b", "c"):
            net[2].register_forward_hook(functools.partial(save, name))
        for _ in range(3):
            net(torch.rand(2, 4))

        handle = None
        for step in range(3):
            new = net[0].register_full_backward_hook(lambda m, gi, go, step=step: None)
            if handle is not None:
                handle.remove()
            handle = new
            net(torch.rand(2, 4, requires_grad=True)).sum().backward()
    """)
    assert run.findings == []


def test_hkl304_one_finding_for_a_site_on_many_modules(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        def capture(x):
            acts = []
            for layer in net:
                layer.register_forward_hook(lambda m, i, o: acts.append(o))  # REGISTER
            net(x)
            return acts
        for _ in range(3):
            capture(torch.rand(2, 4))
    """)
    finding = run.only("HKL304")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "registered 3 times" in finding.message
    assert "the same for 4 other modules: `net.1` (ReLU), `net.2` (Linear)" in finding.message


# -- HKL203: a `grad`-named argument edited in place ---------------------------------------------------

CLIP = """
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(),
                      nn.Linear(4, 2))
def {name}({arg}):
    {body}
for p in model.parameters():
    p.register_post_accumulate_grad_hook({name})  # REGISTER
x = torch.rand(3, 4) * 10
model(x).sum().backward()
largest_weight = max(p.abs().max().item() for p in model.parameters())
largest_grad = max(p.grad.abs().max().item() for p in model.parameters())
"""


def test_hkl203_grad_clamp_in_place_one_finding_listing_the_parameters(observe):
    run = observe(CLIP.format(name="clip_grad", arg="grad", body="grad.clamp_(-0.01, 0.01)"))
    # the real behaviour: the weights were clipped, the gradients were not
    assert run.namespace["largest_weight"] <= 0.01 and run.namespace["largest_grad"] > 0.01
    finding = run.only("HKL203")  # one finding for the eight parameters
    assert finding.location.row == run.line_of("# REGISTER")
    assert "it names its argument `grad`" in finding.message
    assert "the same for 7 other parameters: " in finding.message
    assert "`model.0.weight` (shape (4, 4))" in finding.message


@pytest.mark.parametrize("body", ["grad.zero_()", "grad.masked_fill_(grad > 0, 0.0)", "grad.copy_(grad * 0.5)",
                                  "grad[0] = 0.0", "grad.clip_(-0.01, 0.01)", "grad.sub_(grad.sign() * 0.01)"])
def test_hkl203_other_in_place_methods(observe, body):
    run = observe(CLIP.format(name="edit_grad", arg="grad", body=body))
    assert run.only("HKL203").location.row == run.line_of("# REGISTER")


def test_hkl203_data_edit_seen(observe):
    run = observe(CLIP.format(name="halve", arg="grad", body="grad.data.mul_(0.5)"))
    finding = run.only("HKL203")
    assert "through `.data`" in finding.message


def test_hkl203_weight_clipping_and_grad_edits_quiet(observe):
    weight_clipping = observe(CLIP.format(name="clip_weights", arg="p", body="p.data.clamp_(-0.01, 0.01)"))
    assert weight_clipping.namespace["largest_weight"] <= 0.01
    assert weight_clipping.findings == []
    grad_edit = observe(CLIP.format(name="clip_grad", arg="param", body="param.grad.clamp_(-0.01, 0.01)"))
    assert grad_edit.namespace["largest_grad"] <= 0.01
    assert grad_edit.findings == []


# -- PyTorch's own errors mapped to the rule that explains them -----------------------------------------


def test_hkl501_function_returns_too_few_gradients(observe):
    run = observe("""
        import torch

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, factor):
                ctx.factor = factor
                return x * factor

            @staticmethod
            def backward(ctx, grad_output):  # BACKWARD
                return grad_output * ctx.factor

        x = torch.ones(3, requires_grad=True)
        Scale.apply(x, 2.0).sum().backward()
    """, expect_error=RuntimeError)
    assert "returned an incorrect number of gradients (expected 2, got 1)" in str(run.error)
    finding = run.only("HKL501")
    assert finding.location.row == run.line_of("# BACKWARD")
    assert "`Scale.backward` returned 1 gradient, but `Scale.apply` received 2 inputs (`x`, `factor`)" \
        in finding.message


def test_hooklint_run_keeps_the_exit_status_and_adds_the_finding(write, tmp_path, capsys):
    import json

    from hooklint.cli import main

    script = write("scale.py", """
        import torch

        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, factor):
                return x * factor

            @staticmethod
            def backward(ctx, grad_output):
                return grad_output

        Scale.apply(torch.ones(3, requires_grad=True), 2.0).sum().backward()
    """)
    out = tmp_path / "findings.json"
    code = main(["run", "--output-format", "json", "-o", str(out), str(script)])
    captured = capsys.readouterr()
    assert code == 1  # the script's own status: it died
    assert "RuntimeError: function ScaleBackward returned an incorrect number of gradients" in captured.err
    assert [(f["code"], f["location"]["row"]) for f in json.loads(out.read_text())] == [("HKL501", 10)]
    assert "1 finding observed" in captured.err


def test_hkl402_legacy_hook_and_tensor_hook_return_values(observe):
    legacy = observe("""
        import torch
        import torch.nn as nn

        lin = nn.Linear(4, 2)
        lin.register_backward_hook(lambda m, gi, go: (gi[0],))  # REGISTER
        lin(torch.rand(3, 4, requires_grad=True)).sum().backward()
    """, expect_error=RuntimeError)
    assert "has returned an incorrect number of values (got 1, but expected 3)" in str(legacy.error)
    finding = legacy.only("HKL402")
    assert finding.location.row == legacy.line_of("# REGISTER")
    assert "returned 1 value, but a replacement `grad_input` must be a tuple of 3 entries" in finding.message

    tensor = observe("""
        import torch

        x = torch.ones(3, requires_grad=True)
        x.register_hook(lambda g: (g * 2, g))  # REGISTER
        x.sum().backward()
    """, expect_error=TypeError)
    assert "hook returned 'tuple'" in str(tensor.error)
    assert tensor.only("HKL402").location.row == tensor.line_of("# REGISTER")


def test_hkl403_in_place_edit_of_a_view_of_the_hooked_output(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        conv = nn.Conv2d(3, 3, 1)
        conv.register_full_backward_hook(lambda m, gi, go: None)  # REGISTER
        out = conv(torch.rand(1, 3, 4, 4, requires_grad=True))
        first = out[:, :1]
        first.add_(1)  # INPLACE
    """, expect_error=RuntimeError)
    assert "Output 0 of Slice is a view and is being modified inplace" in str(run.error)
    finding = run.only("HKL403")
    assert finding.location.row == run.line_of("# REGISTER")
    assert finding.related[0].location.row == run.line_of("# INPLACE")


def test_other_custom_function_view_errors_are_not_blamed_on_hooks(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        class Identity(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)
            @staticmethod
            def backward(ctx, g):
                return g

        conv = nn.Conv2d(3, 3, 1)
        conv.register_full_backward_hook(lambda m, gi, go: None)
        hooked = conv(torch.rand(1, 3, 4, 4, requires_grad=True))
        other = Identity.apply(torch.rand(3, requires_grad=True) * 1)
        other[:1].add_(1)
    """, expect_error=RuntimeError)
    assert run.findings == []


# -- one finding per hook, listing the parameters ------------------------------------------------------


def test_one_finding_per_hook_for_every_rule_that_reports_per_parameter(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
        def scale(grad):
            grad *= 0.5                      # in place: HKL401
        for p in model.parameters():
            p.register_hook(scale)  # REGISTER
        model(torch.rand(3, 4)).sum().backward()
    """)
    finding = run.only("HKL401")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "the same for 3 other parameters" in finding.message


def test_hkl201_one_finding_for_the_weight_and_the_bias(observe):
    run = observe("""
        import torch
        import torch.nn as nn

        conv = nn.Conv2d(3, 2, 3)
        seen = []
        def log_grads(module, grad_input, grad_output):
            seen.append((module.weight.grad is None, module.bias.grad is None))
        conv.register_full_backward_hook(log_grads)  # REGISTER
        conv(torch.rand(1, 3, 6, 6)).sum().backward()
    """)
    assert run.namespace["seen"] == [(True, True)]  # the hook ran before either gradient arrived
    finding = run.only("HKL201")
    assert finding.location.row == run.line_of("# REGISTER")
    assert "`conv.weight`" in finding.message and "the same for 1 other parameter: `conv.bias`" in finding.message


def test_observations_from_two_processes_fold_by_site():
    """What a per-rank merge needs: observations pickle, and the same problem at
    the same site from two runs (two processes, two ranks) is one finding."""
    import pickle

    import hooklint

    def run(params: slice):
        model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))

        def scale(grad):
            grad *= 0.5

        with hooklint.instrument() as session:
            for p in list(model.parameters())[params]:
                p.register_hook(scale)
            model(torch.rand(3, 4)).sum().backward()
        return session

    first, second = run(slice(0, 2)), run(slice(2, 4))
    shipped = pickle.loads(pickle.dumps(second.observations))
    first.merge(shipped)
    [finding] = first.findings
    assert finding.code == "HKL401" and "the same for 3 other parameters" in finding.message


# -- nested sessions: the helpers see the hooks an outer session wraps -----------------------------------


def _buggy_net():
    def zero_element(module, grad_input, grad_output):
        if module.weight.grad is not None:
            module.weight.grad[0, 0] = 0.0

    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    net[0].register_full_backward_hook(zero_element)
    return net


def test_assert_hooks_ok_inside_an_outer_session():
    import hooklint
    from hooklint.runtime.core import _WRAPPER_ATTR
    from hooklint.testing import assert_hooks_ok

    with hooklint.instrument() as outer:
        net = _buggy_net()
        with pytest.raises(AssertionError, match="HKL201"):
            assert_hooks_ok(net, torch.rand(2, 4))
        hooks = list(net[0]._backward_hooks.values())
        assert len(hooks) == 1  # wrapped once, for both sessions
        wrapper = hooks[0]
        assert getattr(wrapper, _WRAPPER_ATTR) is not None and not hasattr(wrapper.__wrapped__, _WRAPPER_ATTR)
    assert {f.code for f in outer.findings} == {"HKL201"}
    assert list(net[0]._backward_hooks.values())[0].__name__ == "zero_element"  # unwrapped at the end


def test_inner_session_sees_what_happens_while_it_is_active():
    import hooklint

    with hooklint.instrument() as outer:
        x = torch.ones(3, requires_grad=True)
        x.register_hook(lambda g: g.mul_(2))  # registered under the outer session only
        with hooklint.instrument() as inner:
            (x * 3).sum().backward()
        with hooklint.instrument() as quiet:
            pass
    assert [f.code for f in inner.findings] == ["HKL401"]
    assert [f.code for f in outer.findings] == ["HKL401"]
    assert quiet.findings == []


def test_assert_hooks_ok_under_pytest_hooklint(pytester):
    pytester.makepyfile(test_nested="""
        import pytest
        import torch
        from hooklint.testing import assert_hooks_ok

        def test_helper_fails_on_a_hook_the_plugin_wraps():
            def zero_element(module, grad_input, grad_output):
                if module.weight.grad is not None:
                    module.weight.grad[0, 0] = 0.0
            net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
            net[0].register_full_backward_hook(zero_element)
            with pytest.raises(AssertionError, match="HKL201 grad-edit-in-module-hook"):
                assert_hooks_ok(net, torch.rand(2, 4))
    """)
    # the plugin's own session ignores HKL201: only the helper's can make the test pass
    result = pytester.runpytest("--hooklint", "--hooklint-ignore=HKL201")
    result.assert_outcomes(passed=1)


# -- tracebacks show the user's frames ----------------------------------------------------------------

# The folder of hooklint's own modules: tracebacks must not show them.  Not
# "hooklint/" in a path: a clone made by `git clone` is a folder named
# hooklint, and the virtualenv's torch frames live under it
# (tests/test_folder_name.py runs these checks from such a folder).
_HOOKLINT_INIT = __import__("hooklint").__file__
HOOKLINT_PACKAGES = tuple({os.path.dirname(os.path.abspath(_HOOKLINT_INIT)) + os.sep,
                           os.path.dirname(os.path.realpath(_HOOKLINT_INIT)) + os.sep})

CRASH = """
import torch
import torch.nn as nn

def bad_hook(module, grad_input, grad_output):
    raise ValueError("boom in the hook")

net = nn.Linear(4, 2)
net.register_full_backward_hook(bad_hook)
net(torch.rand(3, 4, requires_grad=True)).sum().backward()
"""


def test_hooklint_run_traceback_has_no_hooklint_frames(write, tmp_path):
    from conftest import run_cli

    script = write("crash.py", CRASH)
    result = run_cli("run", str(script), cwd=tmp_path)
    assert result.returncode == 1
    assert 'crash.py", line 10, in <module>' in result.stderr
    assert 'crash.py", line 6, in bad_hook' in result.stderr and "ValueError: boom in the hook" in result.stderr
    program_output = result.stderr.split("hooklint run:")[0]
    # hooklint's own files, wherever the clone lives (a folder named `hooklint/` holds torch's too)
    assert not [p for p in HOOKLINT_PACKAGES if f'File "{p}' in program_output], result.stderr
    assert "hooklint_module_hook" not in program_output, result.stderr
    assert "torch/utils/hooks.py" in program_output  # torch's frames stay, as Python prints them


def test_instrument_traceback_has_no_hooklint_frames():
    import traceback

    import hooklint

    def bad_hook(grad):
        raise ValueError("boom")

    with pytest.raises(ValueError) as info:
        with hooklint.instrument():
            x = torch.ones(2, requires_grad=True)
            x.register_hook(bad_hook)
            x.sum().backward()
    files = [entry.filename for entry in traceback.extract_tb(info.value.__traceback__)]
    assert not [f for f in files if f.startswith(HOOKLINT_PACKAGES)], files
    assert files[-1] == __file__


def test_pytest_traceback_hides_the_wrappers(pytester):
    pytester.makepyfile(test_crash="""
        import torch

        def test_hook_raises():
            def bad_hook(grad):
                raise ValueError("boom in the hook")
            x = torch.ones(2, requires_grad=True)
            x.register_hook(bad_hook)
            x.sum().backward()
    """)
    result = pytester.runpytest("--hooklint")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "boom in the hook" in output and "def bad_hook" in output
    assert "hooklint_tensor_hook" not in output and "hooklint/runtime" not in output


def test_hkl407_forward_hook_replacing_the_output_with_a_count(observe):
    """A counter's early `return` replaces the module's output (thop's count_upsample);
    the finding is where the hook is defined."""
    seen = observe("""
        import torch
        import torch.nn as nn

        def zero_ops():
            return torch.zeros(1, dtype=torch.float64)

        def count_upsample(module, inputs, output):  # DEF
            if module.mode == "nearest":
                return zero_ops()
            module.total_ops += output.numel()

        net = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv2d(3, 4, 3))
        net[0].total_ops = 0
        net[0].register_forward_hook(count_upsample)
        net(torch.rand(1, 3, 8, 8))
    """, expect_error=RuntimeError)
    finding = seen.only("HKL407")
    assert finding.location.row == seen.line_of("# DEF")
    assert "returned a one-element tensor (torch.float64) where the output was (1, 3, 16, 16)" in finding.message

    fine = observe("""
        import torch
        import torch.nn as nn

        lin = nn.Linear(4, 4)
        lin.register_forward_hook(lambda m, i, o: o * 0.5)
        lin.register_forward_hook(lambda m, i, o: None)
        lin(torch.rand(2, 4))
    """)
    assert not [f for f in fine.findings if f.code == "HKL407"]
