"""`hooklint check --fix --verify` and `--diff --verify`: each fix proven by
running the file's `__main__` block where it has one, and on the model the
graph layer builds, before it is applied (hooklint.fix.verify).

A fix that passes its proof is applied and says how it was proven; one that
fails is not applied and the output says why, in one line (and the fixed
script, applied without --verify, does crash the same way); one that cannot
be proven is not applied unless it is safe by construction; proofs are
bounded by the timeout and cached.  Programs other than the file's own
`__main__` block: tests/integrations/test_fix_verify_entries.py.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import run_cli
from hooklint.findings import Applicability
from hooklint.graph.facts import FileFacts, ModelFacts, ModuleFacts, Op, TensorSpec

MODEL = '''\
import time

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Linear(4, 8)
        self.layer2 = nn.Linear(8, 2)

    def forward(self, x):
        y = self.relu(self.conv(x)).mean((2, 3))
        return self.layer2(torch.tanh(self.layer1(y)))


grads = []


def save(module, grad_input, grad_output):
    grads.append(grad_output[0])


def backward_hook(module, gin, gout):  # seed 001: a hook written for nn.Linear's legacy grad_input
    gin0, gin1, gin2 = gin
    return gin0, gin1 * 2, gin2 * 3


def slow(module, grad_input, grad_output):
    time.sleep(600)


net = Net()
'''

PASSES = MODEL + "net.conv.register_backward_hook(save)\n"
FAILS = MODEL + "net.layer1.register_backward_hook(backward_hook)\n"
BOTH = MODEL + "net.conv.register_backward_hook(save)\nnet.layer1.register_backward_hook(backward_hook)\n"
RUN = '''
if __name__ == "__main__":
    net(torch.randn(2, 3, 8, 8, requires_grad=True)).sum().backward()
    print("ran", len(grads))
'''

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def hooklint(cwd, *args, **kw):
    return run_cli("check", "--select", "HKL101,HKL401", *args, cwd=cwd, timeout=300, **kw)


def run_script(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(path)], cwd=path.parent, capture_output=True, text=True, timeout=300)


@pytest.fixture
def write(tmp_path):
    def make(name, text):
        path = tmp_path / name
        path.write_text(text)
        return path

    return make


def test_a_fix_that_passes_its_proof_is_applied(write):
    path = write("cam.py", PASSES + RUN)
    r = hooklint(path.parent, "--fix", "--verify", "cam.py")
    assert "Fixed 1 finding." in r.stderr, r.stderr
    assert ("cam.py: HKL101 fix at 37:10 verified by running `cam.py`'s __main__ block: it runs as it does without "
            "the fix, and `save` receives the same grad_output in its one call (on Conv2d); on the built model too: "
            "the fixed code runs a forward and backward of Net() on float32[2, 3, 32, 32], and `save` receives the "
            "gradient of its output on `conv` (Conv2d)") in r.stderr, r.stderr
    assert "net.conv.register_forward_hook(output_grad_hook(save))" in path.read_text()
    ran = run_script(path)
    assert ran.returncode == 0 and ran.stdout.strip() == "ran 1", ran.stderr


def test_a_fix_that_fails_its_proof_is_not_applied(write):
    pytest.importorskip("torch")
    path = write("seed.py", FAILS + RUN)
    r = hooklint(path.parent, "--fix", "--unsafe-fixes", "--verify", "seed.py")
    assert r.returncode == 1 and path.read_text() == FAILS + RUN
    assert ("seed.py: HKL101 fix at 37:12 not applied: its proof failed: `seed.py`'s __main__ block fails with the "
            "fix: ValueError: not enough values to unpack (expected 3, got 1) (seed.py:28: gin0, gin1, gin2 = gin)"
            ) in r.stderr, r.stderr
    assert "Fixed" not in r.stderr
    # the script runs as written, and the unproven fix breaks it as the proof said
    assert run_script(path).returncode == 0
    hooklint(path.parent, "--fix", "--unsafe-fixes", "seed.py")
    assert "net.layer1.register_full_backward_hook(backward_hook)" in path.read_text()
    broken = run_script(path)
    assert broken.returncode != 0 and "ValueError: not enough values to unpack (expected 3, got 1)" in broken.stderr


def test_diff_verify_shows_only_the_fixes_that_pass(write):
    path = write("both.py", BOTH)
    r = hooklint(path.parent, "--diff", "--unsafe-fixes", "--verify", "both.py")
    assert r.returncode == 1
    assert "+net.conv.register_forward_hook(output_grad_hook(save))" in r.stdout
    assert "-net.layer1.register_backward_hook(backward_hook)" not in r.stdout
    # no program runs this file: the notice says the proof is the built model's only, and why
    assert ("HKL101 fix at 37:10 verified on the built model only (the file has no entry hooklint could run: no "
            "`__main__` block, no top-level code that runs a model, no script or test that imports it, no "
            "`verify-entry`): the fixed code runs a forward and backward of Net()") in r.stderr, r.stderr
    assert ("HKL101 fix at 38:12 not applied: its proof failed: `backward_hook` raises with the fixed registration: "
            "ValueError: not enough values to unpack (expected 3, got 1)") in r.stderr
    assert "Would fix 1 finding in 1 file." in r.stderr
    assert path.read_text() == BOTH


GRADCAM_CLASS = MODEL + '''
class GradCAM:
    def __init__(self, model, target_layer):
        self.gradients = None
        target_layer.register_backward_hook(self.save_gradient)

    def save_gradient(self, module, grad_input, grad_output):
        self.gradients = grad_output[0]


def halve(grad):
    grad *= 0.5
'''


def test_unverified_fixes_apply_only_when_safe_by_construction(write):
    path = write("cam.py", GRADCAM_CLASS + "\nnet.conv.weight.register_hook(halve)\n")
    r = hooklint(path.parent, "--fix", "--unsafe-fixes", "--verify", "cam.py")
    text = path.read_text()
    # HKL101 on a module the graph cannot name: no proof, and not safe by construction
    assert "target_layer.register_backward_hook(self.save_gradient)" in text
    assert ("HKL101 fix at 41:22 not applied: unverified (no model the graph analysis built contains "
            "`target_layer`; the file has no entry hooklint could run: no `__main__` block, no top-level code that "
            "runs a model, no script or test that imports it, no `verify-entry`); without --verify, --fix "
            "--unsafe-fixes applies it") in r.stderr, r.stderr
    # HKL401's rewrite of a tensor hook does not depend on a model: applied, and said so
    assert "    grad = grad * 0.5\n    return grad\n" in text
    assert "HKL401 fix at 48:5 applied without a proof (the rewritten tensor hook is not tied to a module); " \
           "it is safe by construction" in r.stderr
    assert "Fixed 1 finding." in r.stderr


def test_a_proof_is_bounded_by_the_timeout(write):
    path = write("slow.py", MODEL + "net.conv.register_backward_hook(slow)\n")
    r = hooklint(path.parent, "--diff", "--verify", "--timeout", "20", "slow.py")
    assert r.stdout == "" and "No fixes to apply." in r.stderr
    assert "HKL101 fix at 37:10 not applied: unverified (the proof timed out after 20 s while proving the " \
           "HKL101 fix at 37:10: the original registration; the file has no entry" in r.stderr, r.stderr


def test_verdicts_are_cached(write, tmp_path):
    path = write("cam.py", PASSES)
    first = hooklint(path.parent, "--diff", "--verify", "cam.py")
    assert "HKL101 fix at 37:10 verified" in first.stderr, first.stderr
    # a torch that cannot be imported: graph facts and verdicts can only come from the cache
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('no torch in this test')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])}
    second = hooklint(path.parent, "--diff", "--verify", "cam.py", env=env)
    assert first.stdout == second.stdout and "HKL101 fix at 37:10 verified" in second.stderr, second.stderr
    third = hooklint(path.parent, "--diff", "--verify", "--no-cache", "cam.py", env=env)
    assert "verified" not in third.stderr and third.stdout == ""


@pytest.mark.parametrize("args", [["--verify"], ["--fix", "--verify", "--static-only"]])
def test_usage_errors(write, args):
    path = write("cam.py", PASSES)
    r = hooklint(path.parent, *args, "cam.py")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--verify" in r.stderr
    assert "Traceback" not in r.stderr


# -- the plan of a proof, without torch ---------------------------------------------------------

def test_plan_of_the_output_hook_fix():
    from hooklint.fix.verify import plan_fix
    from hooklint.static.checker import check_text
    from hooklint.static.context import FileContext

    text = textwrap.dedent('''\
        import torch.nn as nn

        class Net(nn.Module):
            pass

        def save(module, grad_input, grad_output):
            print(grad_output[0])

        net = Net()
        handle = net.features[0].register_backward_hook(save)
    ''')
    relu = Op("ReluBackward0 (in place)", "features.1")
    conv = ModuleFacts(path="features.0", class_name="Conv2d", class_qualname="torch.nn.Conv2d", calls=1,
                       output_needs_grad=True, output_inplace=relu)
    facts = FileFacts("a.py", models=[ModelFacts("Net", None, None, "Net()", call_line=9,
                                                 inputs=(TensorSpec("float32", (2, 3, 8, 8)),),
                                                 modules=(ModuleFacts("", "Net", "a.Net", calls=1), conv))])
    [finding] = check_text("a.py", text, frozenset({"HKL101"}), graph=facts).findings
    assert finding.fix.applicability is Applicability.SAFE  # the graph shows the in-place ReLU
    tree = ast.parse(text)
    ctx = FileContext("a.py", text, tree, graph=facts)
    [proof] = plan_fix(ctx, text, finding)
    assert proof["original_call"] == "__hooklint_module__.register_backward_hook(__hooklint_hook__)"
    assert proof["fixed_call"] == "__hooklint_module__.register_forward_hook(output_grad_hook(__hooklint_hook__))"
    assert proof["helper"].startswith("def output_grad_hook(hook):")
    assert proof["paths"] == ["features.0"] and proof["model"]["source"] == "Net()"
    assert proof["rows"] == [10, 10] and proof["fixed_rows"][0] == proof["fixed_rows"][1] > 10
    assert proof["hook_text"] == "save" and not proof["reads_grad_input"]
    fixed_lines = proof["fixed_text"].splitlines()
    assert fixed_lines[proof["fixed_rows"][0] - 1] == \
        "handle = net.features[0].register_forward_hook(output_grad_hook(save))"


LEGACY_GRADCAM = '''\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.block = Block()
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.block(F.relu(self.stem(x))).mean(dim=(2, 3)))


class LegacyGradCAM:
    def __init__(self, model, target_layer):
        self.model = model
        target_layer.register_forward_hook(self.forward_hook)
        target_layer.register_backward_hook(self.backward_hook)

    def forward_hook(self, module, inp, out):
        self.fmap = out.detach()

    def backward_hook(self, module, grad_input, grad_output):
        self.grad = grad_input[0].detach()

    def generate(self, x):
        out = self.model(x)
        out[:, 0].sum().backward()
        return F.relu((self.grad.mean(dim=(2, 3), keepdim=True) * self.fmap).sum(1))


if __name__ == "__main__":
    net = Net()
    cam = LegacyGradCAM(net, net.block)
    print(tuple(cam.generate(torch.randn(1, 3, 16, 16)).shape))
'''


def test_a_fix_that_changes_what_an_unreachable_hook_reads_is_unverified(write):
    # the hook is a method of a Grad-CAM object the built-model proof cannot build: it checks only what
    # the hook receives, and with the full hook `grad_input[0]` is Block's input (8 channels), not the
    # 16 channels of the last op's input that the code after it multiplies with the activations
    path = write("legacy_cam.py", LEGACY_GRADCAM.replace('if __name__ == "__main__":', "if False:"))
    r = hooklint(path.parent, "--fix", "--unsafe-fixes", "--verify", "legacy_cam.py")
    assert ("HKL101 fix at 31:22 not applied: unverified (the fix changes the `grad_input` `backward_hook` "
            "reads on `block` from (2, 16, 32, 32) to (2, 8, 32, 32), and `backward_hook` itself could not be "
            "run here to show that its code still works; the file has no entry") in r.stderr, r.stderr


def test_running_the_main_block_shows_the_fix_breaks_the_hooks_code(write):
    # the script's own __main__ block builds the Grad-CAM object and runs the hook's code: the proof
    # that runs it shows the failure the built-model proof could only suspect
    path = write("legacy_cam.py", LEGACY_GRADCAM)
    assert run_script(path).returncode == 0
    r = hooklint(path.parent, "--fix", "--unsafe-fixes", "--verify", "legacy_cam.py")
    assert path.read_text() == LEGACY_GRADCAM
    assert ("HKL101 fix at 31:22 not applied: its proof failed: `legacy_cam.py`'s __main__ block fails with the "
            "fix: RuntimeError: The size of tensor a (8) must match the size of tensor b (16) at non-singleton "
            "dimension 1 (legacy_cam.py:42)") in r.stderr, r.stderr
    # the file was checked: the summary counts the fix left out, and does not suggest the flag given
    assert "Also 1 fix not applied (see above)." in r.stderr and "not checked" not in r.stderr
    assert "more with `--unsafe-fixes`" not in r.stderr
    # applied without a proof, the fix does break the script
    hooklint(path.parent, "--fix", "--unsafe-fixes", "legacy_cam.py")
    assert "target_layer.register_full_backward_hook(self.backward_hook)" in path.read_text()
    broken = run_script(path)
    assert broken.returncode != 0 and "must match the size of tensor b (16)" in broken.stderr, broken.stderr


def test_a_notebook_fix_is_unverified_with_the_reason(write):
    # the proofs work on a script's text; in a notebook the finding's row is a cell's, and the message
    # was "could not find the registration again" (bench/trial.py, hook_debugging.ipynb)
    import json

    cells = ["import torch\nimport torch.nn as nn", "net = nn.Sequential(nn.Linear(4, 4), nn.Tanh())\ngrads = []",
             "def log(module, grad_input, grad_output):\n    grads.append(grad_output[0])\n\n"
             "net[0].register_backward_hook(log)",
             "net(torch.randn(2, 4)).sum().backward()\nprint('ran', len(grads))"]
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}", "metadata": {}, "outputs": [],
                           "source": text} for i, text in enumerate(cells)],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = write("debug.ipynb", json.dumps(notebook))
    r = hooklint(path.parent, "--fix", "--unsafe-fixes", "--verify", "debug.ipynb")
    assert ("debug.ipynb: HKL101 fix at 4:8 not applied: unverified (fixes in notebooks are not proven yet: run the "
            "fixed cells to check it)") in r.stderr, r.stderr
    assert json.loads(path.read_text()) == notebook
    # without --verify the fix is applied, the notebook still loads and its cells run with the fixed hook
    hooklint(path.parent, "--fix", "--unsafe-fixes", "debug.ipynb")
    fixed = json.loads(path.read_text())
    source = "\n".join("".join(c["source"]) for c in fixed["cells"])
    assert "net[0].register_forward_hook(output_grad_hook(log))" in source
    ran = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and ran.stdout.strip() == "ran 1", ran.stderr
