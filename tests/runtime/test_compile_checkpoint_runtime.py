"""Run-time HKL701, HKL702, HKL703: what instrumentation observes under
torch.compile and activation checkpointing, through `hooklint.instrument()`,
`hooklint run`, `hooklint.testing.assert_hooks_ok` and the pytest plugin; and
that instrumenting a compiled model changes neither its graphs nor its
recompilations."""

from __future__ import annotations

import pytest

from conftest import run_cli

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

NET = """
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.out = nn.Linear(4, 2)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))

def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))

x4 = torch.rand(3, 4)
x8 = torch.rand(4, 8)
"""


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# ----------------------------------------------------------------- HKL701


def test_late_module_hooks_on_a_compiled_model_are_reported(observe):
    observed = observe(NET + """
model = Net()
compiled = torch.compile(model, backend="aot_eager")
compiled(x4).sum().backward()
features = []
model.fc.register_forward_hook(lambda m, i, o: features.append(o))  # LATE FORWARD
model.out.register_full_backward_hook(lambda m, gi, go: None)  # LATE BACKWARD
for _ in range(3):
    compiled(x4).sum().backward()
assert features == []
""", select=["HKL701"])
    found = {f.location.row: f for f in observed.findings}
    assert set(found) == {observed.line_of("LATE FORWARD"), observed.line_of("LATE BACKWARD")}
    forward = found[observed.line_of("LATE FORWARD")]
    assert "forward hook `<lambda>` was registered on `model.fc` (Linear) after compiled code" in forward.message
    assert "3 compiled calls ran since, and the hook never fired" in forward.message
    assert "skip_nnmodule_hook_guards" in forward.message


def test_hooks_that_fire_under_compile_are_not_reported(observe):
    observed = observe(NET + """
model = Net()
model.fc.register_forward_hook(lambda m, i, o: None)  # before compiling: traced, fires
compiled = torch.compile(model, backend="aot_eager")
compiled(x4).sum().backward()
model.fc.weight.register_hook(lambda g: g)  # tensor hooks fire under compile
model.fc.weight.register_post_accumulate_grad_hook(lambda p: None)
model.register_forward_hook(lambda m, i, o: None)  # the root of a user class: run outside dynamo
for _ in range(2):
    compiled(x4).sum().backward()
""", select=["HKL701"])
    assert observed.findings == []


def test_late_hook_on_a_model_called_by_a_compiled_function(observe):
    observed = observe(NET + """
model = Net()

@torch.compile(backend="aot_eager")
def step(inputs):
    return model(inputs).sum()

step(x4).backward()
model.register_forward_pre_hook(lambda m, args: None)  # ROOT
step(x4).backward()
""", select=["HKL701"])
    assert [f.location.row for f in observed.findings] == [observed.line_of("ROOT")]


def test_a_late_hook_a_recompilation_picks_up_is_not_reported(observe):
    observed = observe(NET + """
model = Net()
compiled = torch.compile(model, backend="aot_eager")
compiled(x4)
model.fc.register_forward_hook(lambda m, i, o: None)
torch._dynamo.reset()
compiled(x4)
""", select=["HKL701"])
    assert observed.findings == []


# ----------------------------------------------------------------- HKL702


def test_output_changing_hook_removed_before_the_recompute(observe):
    observed = observe(NET + """
model = mlp()
handle = model[0].register_forward_hook(lambda m, i, o: o * 3.0)
out = checkpoint(model, x8, use_reentrant=False)
handle.remove()  # REMOVED
out.sum().backward()  # BACKWARD
""", select=["HKL702"])
    finding = observed.only("HKL702")
    assert finding.location.row == observed.line_of("REMOVED")
    assert "changed the module's output in a checkpointed forward and was removed here" in finding.message
    assert f":{observed.line_of('BACKWARD')} recomputed the region" in finding.message


@pytest.mark.parametrize("variant", ["kept", "observe-only", "no-checkpoint", "last-layer"])
def test_no_removal_finding_when_the_gradients_are_right(observe, variant):
    hook, layer, call, order = "lambda m, i, o: o * 3.0", 0, "checkpoint(model, x8, use_reentrant=False)", "early"
    if variant == "kept":
        order = "late"
    elif variant == "observe-only":
        hook = "lambda m, i, o: seen.append(o.detach())"
    elif variant == "no-checkpoint":
        call = "model(x8)"
    else:
        layer = 4  # the recompute stops inside the last layer: its forward hooks never run again
    removal = "handle.remove()\nout.sum().backward()" if order == "early" else "out.sum().backward()\nhandle.remove()"
    observed = observe(NET + f"""
model = mlp()
seen = []
handle = model[{layer}].register_forward_hook({hook})
out = {call}
{removal}
""", select=["HKL702"])
    assert observed.findings == []


def test_input_changing_pre_hook_removed_under_reentrant_checkpointing(observe):
    observed = observe(NET + """
model = mlp()
handle = model[2].register_forward_pre_hook(lambda m, args: (args[0] * 2,))
out = checkpoint(model, x8.clone().requires_grad_(), use_reentrant=True)
handle.remove()  # REMOVED
out.sum().backward()
""", select=["HKL702"])
    assert observed.only("HKL702").location.row == observed.line_of("REMOVED")


# ----------------------------------------------------------------- HKL703


def test_collector_run_again_in_the_recompute(observe):
    observed = observe(NET + """
model = mlp()
stored = []
model[0].register_forward_hook(lambda m, i, o: stored.append(o.detach()))  # COLLECT
for _ in range(3):
    checkpoint(model, x8, use_reentrant=False).sum().backward()
assert len(stored) == 6
""", select=["HKL703"])
    finding = observed.only("HKL703")
    assert finding.location.row == observed.line_of("COLLECT")
    assert "ran again in the non-reentrant checkpoint's recompute" in finding.message
    assert "3 calls at recomputes for 3 at forwards" in finding.message
    assert "`stored.append(...)`" in finding.message


def test_idempotent_and_unrecomputed_hooks_are_not_reported(observe):
    observed = observe(NET + """
model = mlp()
stats = {}
model[0].register_forward_hook(lambda m, i, o: stats.__setitem__("0", o.detach()))  # overwrites
calls = []
model.register_forward_hook(lambda m, i, o: calls.append(1))  # the root: not rerun (early stop)
model[4].register_forward_hook(lambda m, i, o: calls.append(1))  # the last layer: not rerun
checkpoint(model, x8, use_reentrant=False).sum().backward()
model[0].register_forward_hook(lambda m, i, o: calls.append(1))  # no checkpointing below
model(x8).sum().backward()
""", select=["HKL703"])
    assert observed.findings == []


def test_counter_under_reentrant_checkpointing(observe):
    observed = observe(NET + """
model = mlp()
state = {"n": 0}

def count(module, inputs, output):
    state["n"] += 1

model.register_forward_hook(count)  # COUNT
checkpoint(model, x8.clone().requires_grad_(), use_reentrant=True).sum().backward()
assert state["n"] == 2
""", select=["HKL703"])
    finding = observed.only("HKL703")
    assert finding.location.row == observed.line_of("COUNT")
    assert "reentrant checkpoint's recompute" in finding.message and "`state['n'] += 1`" in finding.message


# ----------------------------------------------------------------- the other entry points


SCRIPT = NET + """
model = Net()
compiled = torch.compile(model, backend="aot_eager")
compiled(x4)
model.fc.register_forward_hook(lambda m, i, o: None)  # LATE
compiled(x4)

ck = mlp()
acts = []
ck[0].register_forward_hook(lambda m, i, o: acts.append(o))  # COLLECT
checkpoint(ck, x8, use_reentrant=False).sum().backward()
print("done")
"""


def test_hooklint_run_reports_them(write, tmp_path):
    script = write("train.py", SCRIPT)
    result = run_cli("run", "--output-format", "concise", "--fail-on-findings", str(script), cwd=tmp_path,
                     timeout=300)
    assert result.returncode == 1, result.stderr
    assert "done" in result.stdout
    lines = SCRIPT.splitlines()
    late = next(i for i, line in enumerate(lines, 1) if "# LATE" in line)
    collect = next(i for i, line in enumerate(lines, 1) if "# COLLECT" in line)
    assert f"train.py:{late}:1: HKL701 " in result.stdout, result.stdout
    assert f"train.py:{collect}:1: HKL703 " in result.stdout, result.stdout


def test_assert_hooks_ok_fails_on_a_stateful_hook_in_a_checkpointed_model():
    from torch.utils.checkpoint import checkpoint

    from hooklint.testing import assert_hooks_ok

    class Checkpointed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh(), torch.nn.Linear(4, 4))

        def forward(self, x):
            return checkpoint(self.block, x, use_reentrant=False)

    model = Checkpointed()
    seen = []
    model.block[0].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    with pytest.raises(AssertionError, match="HKL703"):
        assert_hooks_ok(model, torch.rand(2, 4))
    clean = Checkpointed()
    clean.block[0].register_forward_hook(lambda m, i, o: None)
    assert_hooks_ok(clean, torch.rand(2, 4))


PLUGIN_TESTS = """
import torch

def _net():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))

def test_late_hook():
    torch._dynamo.reset()
    model = _net()
    compiled = torch.compile(model, backend="aot_eager")
    compiled(torch.rand(2, 4))
    model[0].register_forward_hook(lambda m, i, o: None)
    compiled(torch.rand(2, 4))

def test_hook_before_compiling():
    torch._dynamo.reset()
    model = _net()
    model[0].register_forward_hook(lambda m, i, o: None)
    compiled = torch.compile(model, backend="aot_eager")
    compiled(torch.rand(2, 4))
    compiled(torch.rand(2, 4))
"""


def test_pytest_plugin_fails_the_test_with_a_late_hook(pytester):
    pytester.makepyfile(test_compiled=PLUGIN_TESTS)
    result = pytester.runpytest("--hooklint", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*HKL701 hook-after-compile: forward hook `test_late_hook.<lambda>` was "
                                 "registered on*after compiled code containing that module had run*",
                                 "*at: test_compiled.py:11:*",
                                 "*FAILED test_compiled.py::test_late_hook*"])


# ----------------------------------------------------------------- compilation unchanged


def _compile_counts(instrumented: bool) -> tuple[dict, dict]:
    import hooklint
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    grads = []

    def run():
        model[0].register_forward_hook(lambda m, i, o: None)
        model[2].weight.register_hook(lambda g: grads.append(g.shape))
        compiled = torch.compile(model, backend="aot_eager")
        for n in (3, 3, 5, 7, 3):
            compiled(torch.rand(n, 4)).sum().backward()

    if instrumented:
        with hooklint.instrument():
            run()
    else:
        run()
    return dict(counters["stats"]), {key: value for key, value in counters["graph_break"].items()}


def test_instrumentation_changes_no_graph_and_no_recompilation():
    plain = _compile_counts(False)
    instrumented = _compile_counts(True)
    assert plain == instrumented
    assert plain[0]["unique_graphs"] >= 2  # the new shape recompiled: the comparison covers recompilation


def test_a_session_imports_neither_dynamo_nor_fsdp():
    """HKL701 patches dynamo when the program imports it: importing it at the
    session's start would import FSDP's modules before the distributed layer
    watches for them, and cost every session a second."""
    import subprocess
    import sys

    code = ("import sys, torch, hooklint\n"
            "with hooklint.instrument():\n"
            "    print('torch._dynamo' in sys.modules,\n"
            "          'torch.distributed.fsdp._fully_shard._fsdp_param' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["False", "False"], result.stdout + result.stderr
