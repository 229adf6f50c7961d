"""Every fix hooklint offers, applied by the real `hooklint check --fix` to a
script, and the fixed script run (subprocess) on models with in-place ops
after the hooked module: Conv2d+ReLU(inplace=True), a VGG-like stack and a
ResNet-like block (`out += identity`, then ReLU(inplace=True)), written in the
scripts (torchvision has no CPU build here).  Each script checks the
gradients its hooks see against gradients computed another way and prints
one JSON line; the tests read it.

Also: the fix engine's guarantees for the multi-line HKL101 fix (atomic
write, the result parses, a second --fix changes nothing, one helper for many
registrations and for a registration added later, CRLF kept).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import run_cli

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

MODELS = '''\
import functools
import json
import sys

import torch
import torch.nn as nn


class VGGLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True),
        )
        self.classifier = nn.Linear(16, 5)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


class BasicBlock(nn.Module):
    def __init__(self, channels):
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


class ResNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
        self.layer1 = nn.Sequential(BasicBlock(8), BasicBlock(8))
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.layer1(self.stem(x)).mean((2, 3)))


def true_output_grads(model, modules, x, target):
    """d score / d output of each module, each output captured before any
    in-place op after the module can modify it (the module returns a clone)."""
    kept = {}

    def keep(module, inputs, output):
        kept[module] = output
        return output.clone()

    unique = list(dict.fromkeys(modules))
    handles = [m.register_forward_hook(keep) for m in unique]
    score = model(x)[:, target].sum()
    grads = dict(zip(unique, torch.autograd.grad(score, [kept[m] for m in unique])))
    for h in handles:
        h.remove()
    return [grads[m] for m in modules]


def close(a, b):
    return a.shape == b.shape and bool(torch.allclose(a, b, atol=1e-6))


def report(**values):
    print(json.dumps(values))
'''


def script(body: str) -> str:
    return MODELS + "\n\n" + textwrap.dedent(body)


def hooklint(cwd, *args):
    return run_cli("check", *args, cwd=cwd, timeout=300)


def run_script(path) -> tuple[dict | None, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONWARNINGS="default")
    r = subprocess.run([sys.executable, str(path)], cwd=path.parent, capture_output=True, text=True, timeout=300,
                       env=env)
    last = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else None
    return (json.loads(last) if last else None), r


# -- HKL101 ---------------------------------------------------------------------------------

GRADCAM_VGG = script('''
    grads = {}


    def save_conv0(module, grad_input, grad_output):
        grads["conv0"] = grad_output[0]


    class Saver:
        def __init__(self):
            self.grads = {}

        def save(self, name, module, grad_input, grad_output):
            self.grads[name] = grad_output[0]

        def save_last(self, module, grad_input, grad_output):
            self.grads["last"] = grad_output[0]


    torch.manual_seed(0)
    model = VGGLike()
    saver = Saver()
    handles = [
        model.features[0].register_backward_hook(save_conv0),
        model.features[2].register_backward_hook(functools.partial(saver.save, "conv2")),
        model.features[5].register_backward_hook(saver.save_last),
        model.features[0].register_backward_hook(lambda m, gi, go: grads.update({"lambda": go[0]})),
    ]
    x = torch.randn(2, 3, 16, 16)
    model(x)[:, 3].sum().backward()
    for handle in handles:
        handle.remove()
    seen = [grads["conv0"], saver.grads["conv2"], saver.grads["last"], grads["lambda"]]
    truth = true_output_grads(model, [model.features[i] for i in (0, 2, 5, 0)], x, 3)
    model(x)[:, 3].sum().backward()  # removed: nothing is recorded again
    report(ok=all(close(a, b) for a, b in zip(seen, truth)), hooks=len(seen), after_remove=len(grads))
''')

RESNET_BN2 = script('''
    grads = []


    def save(module, grad_input, grad_output):
        grads.append(grad_output[0])


    torch.manual_seed(0)
    model = ResNetLike()
    model.layer1[0].bn2.register_backward_hook(save)
    x = torch.randn(2, 3, 8, 8)
    model(x)[:, 1].sum().backward()
    seen = list(grads)
    truth = true_output_grads(model, [model.layer1[0].bn2], x, 1)
    report(ok=len(seen) == 1 and close(seen[0], truth[0]))
''')

# no in-place op after the hooked layers: the rename
OUT_OF_PLACE = script('''
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.head = nn.Linear(4, 2)

        def forward(self, x):
            return self.head(torch.relu(self.conv(x)).mean((2, 3)))


    grads = []


    def save(module, grad_input, grad_output):
        grads.append(grad_output[0])


    torch.manual_seed(0)
    model = Plain()
    model.conv.register_backward_hook(save)
    x = torch.randn(2, 3, 8, 8)
    model(x)[:, 0].sum().backward()
    seen = list(grads)
    truth = true_output_grads(model, [model.conv], x, 0)
    report(ok=len(seen) == 1 and close(seen[0], truth[0]))
''')

# the model arrives as an argument: no graph facts, the unsafe output hook
GRADCAM_CLASS = script('''
    class GradCAM:
        def __init__(self, model, target_layer):
            self.model = model
            self.gradients = None
            self.handle = target_layer.register_backward_hook(self.save_gradient)

        def save_gradient(self, module, grad_input, grad_output):
            self.gradients = grad_output[0]

        def __call__(self, x, target):
            self.model(x)[:, target].sum().backward()
            return self.gradients


    def main(model):
        cam = GradCAM(model, model.layer1[1].bn2)
        x = torch.randn(2, 3, 8, 8)
        grad = cam(x, 2)
        cam.handle.remove()
        truth = true_output_grads(model, [model.layer1[1].bn2], x, 2)
        report(ok=grad is not None and close(grad, truth[0]))


    if __name__ == "__main__":
        torch.manual_seed(0)
        main(ResNetLike())
''')


@pytest.fixture
def project(tmp_path):
    def make(name, text):
        path = tmp_path / name
        path.write_text(text)
        return path

    return make


def fixed_by(project, name, text, *args):
    """Write the script, check that it runs and its hooks see the right
    gradients, apply `hooklint check --fix ARGS`, and return the fixed path."""
    path = project(name, text)
    before, r = run_script(path)
    assert before is not None and before["ok"], r.stderr
    assert "non-full backward hook" in r.stderr  # torch's FutureWarning on the legacy API
    fixed = hooklint(path.parent, "--fix", "--select", "HKL101", *args, name)
    assert "Fixed" in fixed.stderr, fixed.stdout + fixed.stderr
    return path


class TestHKL101:
    def test_graph_linked_layers_get_the_safe_output_hook_and_the_script_runs(self, project):
        path = project("gradcam.py", GRADCAM_VGG)
        inode = os.stat(path).st_ino
        path = fixed_by(project, "gradcam.py", GRADCAM_VGG)
        text = path.read_text()
        assert ".register_backward_hook(" not in text
        assert "model.features[2].register_forward_hook(output_grad_hook(functools.partial(saver.save, \"conv2\")))" \
            in text
        assert "model.features[5].register_forward_hook(output_grad_hook(saver.save_last))" in text
        # the engine's guarantees for this multi-line fix: one helper for the four
        # registrations, written atomically (a new file replaced the old one, no
        # temporary file left), a text that parses, and a second --fix that changes nothing
        assert text.count("def output_grad_hook(hook):") == 1 and text.count("output_grad_hook(") == 5
        assert os.stat(path).st_ino != inode
        assert sorted(p.name for p in path.parent.iterdir() if p.name != ".hooklint_cache") == ["gradcam.py"]
        compile(text, "gradcam.py", "exec")
        after, r = run_script(path)
        assert after == {"ok": True, "hooks": 4, "after_remove": 2}, r.stderr
        assert "non-full backward hook" not in r.stderr
        stamp = (os.stat(path).st_mtime_ns, os.stat(path).st_ino)
        again = hooklint(path.parent, "--fix", "--unsafe-fixes", "gradcam.py")
        assert "Fixed" not in again.stderr and (os.stat(path).st_mtime_ns, os.stat(path).st_ino) == stamp

    def test_the_rename_that_0_1_0_offered_breaks_the_same_script(self, project):
        path = project("renamed.py", GRADCAM_VGG.replace("register_backward_hook", "register_full_backward_hook"))
        result, r = run_script(path)
        assert result is None and "is a view and is being modified inplace" in r.stderr

    def test_resnet_block_add_inplace_crlf_and_a_later_registration(self, project):
        path = project("resnet.py", "")
        path.write_bytes(RESNET_BN2.replace("\n", "\r\n").encode())
        before, r = run_script(path)
        assert before == {"ok": True}, r.stderr
        fixed = hooklint(path.parent, "--fix", "--select", "HKL101", "resnet.py")
        assert "Fixed 1 finding." in fixed.stderr, fixed.stderr
        data = path.read_bytes()
        assert b"def output_grad_hook(hook):\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
        assert b"model.layer1[0].bn2.register_forward_hook(output_grad_hook(save))\r\n" in data
        after, r = run_script(path)
        assert after == {"ok": True}, r.stderr
        # a registration added later reuses the helper the first --fix wrote
        path.write_bytes(data.replace(b"output_grad_hook(save))\r\n",
                                      b"output_grad_hook(save))\r\nmodel.layer1[1].bn2.register_backward_hook(save)\r\n"))
        again = hooklint(path.parent, "--fix", "--select", "HKL101", "resnet.py")
        assert "Fixed 1 finding." in again.stderr, again.stderr
        text = path.read_bytes().decode()
        assert text.count("def output_grad_hook") == 1
        assert "model.layer1[1].bn2.register_forward_hook(output_grad_hook(save))\r\n" in text

    def test_no_inplace_after_the_layer_gets_the_safe_rename(self, project):
        path = fixed_by(project, "plain.py", OUT_OF_PLACE)
        text = path.read_text()
        assert "model.conv.register_full_backward_hook(save)" in text and "output_grad_hook" not in text
        after, r = run_script(path)
        assert after == {"ok": True}, r.stderr

    def test_model_as_argument_gets_the_output_hook(self, project):
        """The graph follows the argument (`main(ResNetLike())` passes the model,
        `GradCAM(model, model.layer1[1].bn2)` the layer): it sees `out +=
        identity` after bn2, so the output-hook fix is applied by --fix."""
        path = fixed_by(project, "cam.py", GRADCAM_CLASS)
        text = path.read_text()
        assert "self.handle = target_layer.register_forward_hook(output_grad_hook(self.save_gradient))" in text
        after, r = run_script(path)
        assert after == {"ok": True}, r.stderr

    def test_model_as_argument_the_graph_cannot_follow_gets_the_unsafe_output_hook(self, project):
        text = GRADCAM_CLASS.replace("main(ResNetLike())", "main(ResNetLike() if torch.get_num_threads() else None)")
        path = project("cam.py", text)
        safe_only = hooklint(path.parent, "--fix", "--select", "HKL101", "cam.py")
        assert safe_only.returncode == 1 and path.read_text() == text  # unsafe: not applied
        path = fixed_by(project, "cam.py", text, "--unsafe-fixes")
        assert "self.handle = target_layer.register_forward_hook(output_grad_hook(self.save_gradient))" in \
            path.read_text()

    def test_hook_reading_grad_input_before_an_inplace_op_gets_no_fix(self, project):
        path = project("gi.py", RESNET_BN2.replace("grads.append(grad_output[0])", "grads.append(grad_input[0])"))
        r = hooklint(path.parent, "--diff", "--unsafe-fixes", "--select", "HKL101", "gi.py")
        assert r.returncode == 0 and r.stdout == "", r.stdout  # neither fix keeps it running and meaning the same


# -- HKL301: remove() moved after the backward pass ----------------------------------------------

SALIENCY = script('''
    torch.manual_seed(0)
    model = VGGLike()
    image = torch.randn(1, 3, 16, 16, requires_grad=True)
    grads = []
    handle = image.register_hook(grads.append)
    score = model(image)[0].max()
    handle.remove()
    torch.autograd.grad(score, image, retain_graph=True)
    truth, = torch.autograd.grad(score, image)
    report(hooked=len(grads), ok=len(grads) == 1 and close(grads[0], truth))
''')


def test_hkl301_moved_remove_lets_the_hook_see_the_input_gradient(project):
    path = project("saliency.py", SALIENCY)
    before, r = run_script(path)
    assert before == {"hooked": 0, "ok": False}, r.stderr  # the bug: the hook never fired
    fixed = hooklint(path.parent, "--fix", "--unsafe-fixes", "--select", "HKL301", "saliency.py")
    assert "Fixed 1 finding." in fixed.stderr, fixed.stderr
    assert "torch.autograd.grad(score, image, retain_graph=True)\nhandle.remove()\n" in path.read_text()
    after, r = run_script(path)
    assert after == {"hooked": 1, "ok": True}, r.stderr


# -- HKL303: module(...) instead of module.forward(...) -----------------------------------------

FEATURES = script('''
    torch.manual_seed(0)
    model = VGGLike()
    captured = {}


    def keep(module, inputs, output):
        captured["features"] = output
        output.register_hook(lambda grad: captured.setdefault("grad", grad))


    model.features.register_forward_hook(keep)
    x = torch.randn(2, 3, 16, 16)
    feats = model.features.forward(x)
    pooled = model.classifier(feats.mean((2, 3)))
    truth, = torch.autograd.grad(pooled[:, 0].sum(), feats, retain_graph=True)
    pooled[:, 0].sum().backward()
    report(captured=sorted(captured), ok="grad" in captured and close(captured["grad"], truth)
           and captured["features"] is feats)
''')

FULL_HOOK_BYPASSED = script('''
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.conv.forward(x))


    torch.manual_seed(0)
    block = Block()
    block.conv.register_full_backward_hook(lambda m, gi, go: None)
    block(torch.randn(1, 3, 8, 8)).sum().backward()
    report(ok=True)
''')


def test_hkl303_calling_the_module_runs_its_hooks(project):
    path = project("features.py", FEATURES)
    before, r = run_script(path)
    assert before == {"captured": [], "ok": False}, r.stderr  # the bug: the forward hook was skipped
    fixed = hooklint(path.parent, "--fix", "--unsafe-fixes", "--select", "HKL303", "features.py")
    assert "Fixed 1 finding." in fixed.stderr, fixed.stderr
    assert "feats = model.features(x)\n" in path.read_text()
    after, r = run_script(path)
    assert after == {"captured": ["features", "grad"], "ok": True}, r.stderr


@pytest.mark.parametrize("static_only", [True, False], ids=["static", "graph"])
def test_hkl303_no_fix_when_calling_the_module_would_break_its_forward(project, static_only):
    path = project("block.py", FULL_HOOK_BYPASSED)
    before, r = run_script(path)
    assert before == {"ok": True}, r.stderr
    args = ["--static-only"] if static_only else []
    diff = hooklint(path.parent, "--diff", "--unsafe-fixes", "--select", "HKL303", *args, "block.py")
    assert diff.returncode == 0 and diff.stdout == "", diff.stdout
    # what the fix would have done: the forward fails
    broken = project("broken.py", FULL_HOOK_BYPASSED.replace("self.conv.forward(x)", "self.conv(x)"))
    result, r = run_script(broken)
    assert result is None and "is a view and is being modified inplace" in r.stderr


# -- HKL401: a new tensor returned instead of an in-place edit -----------------------------------

HALVE_BRANCH = script('''
    def halve(grad):
        grad *= 0.5


    def hook_branch(module, inputs, output):
        output.register_hook(halve)


    def reference_hook(module, inputs, output):
        output.register_hook(lambda grad: grad * 0.5)


    def input_grad(forward_hook):
        torch.manual_seed(0)
        block = BasicBlock(4)
        handle = block.bn2.register_forward_hook(forward_hook)
        x = torch.randn(2, 4, 6, 6, requires_grad=True)
        block(x).sum().backward()
        handle.remove()
        return x.grad


    report(ok=close(input_grad(hook_branch), input_grad(reference_hook)))
''')


def test_hkl401_returned_gradient_leaves_the_identity_branch_alone(project):
    path = project("halve.py", HALVE_BRANCH)
    before, r = run_script(path)
    assert before == {"ok": False}, r.stderr  # the bug: `out += identity` shares the buffer, both halves halved
    fixed = hooklint(path.parent, "--fix", "--select", "HKL401", "halve.py")
    assert "Fixed 1 finding." in fixed.stderr, fixed.stderr  # safe
    assert "def halve(grad):\n    grad = grad * 0.5\n    return grad\n" in path.read_text()
    after, r = run_script(path)
    assert after == {"ok": True}, r.stderr


# -- HKL201: the display-only post-accumulate hook, pasted back into its loop --------------------

PRUNE_LOOP = script('''
    torch.manual_seed(0)
    model = VGGLike()
    masks = {name: (m.weight.abs() > 0.1).float() for name, m in model.features.named_children()
             if isinstance(m, nn.Conv2d)}

    for name, layer in model.features.named_children():
        if isinstance(layer, nn.Conv2d):
            mask = masks[name]

            def hook(module, grad_input, grad_output, mask=mask):
                module.weight.grad.data.mul_(mask)

            layer.register_full_backward_hook(hook)

    reference = VGGLike()
    reference.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 16, 16)
    for step in range(2):
        model.zero_grad()
        reference.zero_grad()
        model(x).sum().backward()
        reference(x).sum().backward()
    ok = all(torch.allclose(model.features[int(n)].weight.grad, reference.features[int(n)].weight.grad * m)
             for n, m in masks.items())
    report(ok=ok)
''')


def test_hkl201_display_code_pasted_into_its_loop_runs(project):
    path = project("prune.py", PRUNE_LOOP)
    before, r = run_script(path)
    # as written it does not even run: full backward hooks on convs that ReLU(inplace=True) follows (HKL403)
    assert before is None and "is a view and is being modified inplace" in r.stderr
    shown = hooklint(path.parent, "--output-format", "json", "--select", "HKL201", "--static-only", "prune.py")
    [finding] = json.loads(shown.stdout)
    assert finding["fix"]["applicability"] == "display-only" and finding["fix"]["edits"] == []
    code = finding["fix"]["message"].split("\n", 1)[1]
    assert code == ("def hook(param, mask=mask):\n"
                    "    param.grad.mul_(mask)\n"
                    "layer.weight.register_post_accumulate_grad_hook(hook)")
    original = ("        def hook(module, grad_input, grad_output, mask=mask):\n"
                "            module.weight.grad.data.mul_(mask)\n"
                "\n"
                "        layer.register_full_backward_hook(hook)\n")
    assert original in PRUNE_LOOP
    pasted = project("pasted.py", PRUNE_LOOP.replace(original, textwrap.indent(code, " " * 8) + "\n"))
    after, r = run_script(pasted)
    assert after == {"ok": True}, r.stderr
    # hooklint 0.1.0 showed the hook without its `mask=mask` default: every hook
    # then reads the loop's last mask, of another layer's shape
    old = code.replace("def hook(param, mask=mask):", "def hook(param):")
    dropped = project("dropped.py", PRUNE_LOOP.replace(original, textwrap.indent(old, " " * 8) + "\n"))
    result, r = run_script(dropped)
    assert result is None and "must match the size of tensor" in r.stderr
