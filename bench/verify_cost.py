"""What `hooklint check --diff --verify` costs on top of `hooklint check --diff`.

    python bench/verify_cost.py [--repeat N]

Four files, each written into a fresh temporary project:

* ``gradcam``: a Grad-CAM-like script, a VGG-like model defined in the file
  and four legacy ``register_backward_hook`` registrations on its convolutions
  (module-level function, ``functools.partial`` of a method, bound method,
  lambda), each followed by ``nn.ReLU(inplace=True)``: four HKL101 fixes;
* ``resnet18``: torchvision's ResNet-18 written out in the file (BasicBlock,
  [2, 2, 2, 2]), with a legacy hook on ``layer4[1].bn2`` (``out +=
  identity`` follows it) and one on ``layer4[1].conv1``: two fixes;
* ``small`` and ``small_main``: a two-layer model with one legacy hook, the
  second with a ``__main__`` block that runs 20 training steps: the fix is
  proven on the built model only in the first, also by running the script
  (twice: without and with the fix) in the second, so the difference is what
  running an entry costs.

None of these files has an entry but ``small_main``: the other proofs are
the built model's.

For each file: ``--diff`` (the static pass and the graph analysis) and
``--diff --verify`` (the same, then one proof per fix: the model built and
run forward and backward three times in a worker), both cold (``--no-cache``)
and warm (the cache filled by a first run).  Wall-clock, best of
``--repeat`` runs, each command in a fresh process.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

GRADCAM = '''
import functools

import torch
import torch.nn as nn


class VGGLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(128, 10)

    def forward(self, x):
        return self.classifier(self.features(x).mean((2, 3)))


grads = {}


def save(module, grad_input, grad_output):
    grads["first"] = grad_output[0]


class Saver:
    def __init__(self):
        self.grads = {}

    def save(self, name, module, grad_input, grad_output):
        self.grads[name] = grad_output[0]

    def last(self, module, grad_input, grad_output):
        self.grads["last"] = grad_output[0]


model = VGGLike()
saver = Saver()
model.features[0].register_backward_hook(save)
model.features[2].register_backward_hook(functools.partial(saver.save, "conv2"))
model.features[7].register_backward_hook(saver.last)
model.features[5].register_backward_hook(lambda m, gi, go: grads.update({"conv5": go[0]}))
'''

RESNET18 = '''
import torch
import torch.nn as nn


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = nn.Sequential(BasicBlock(64, 64), BasicBlock(64, 64))
        self.layer2 = nn.Sequential(BasicBlock(64, 128, 2), BasicBlock(128, 128))
        self.layer3 = nn.Sequential(BasicBlock(128, 256, 2), BasicBlock(256, 256))
        self.layer4 = nn.Sequential(BasicBlock(256, 512, 2), BasicBlock(512, 512))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


gradients = []


def save_gradient(module, grad_input, grad_output):
    gradients.append(grad_output[0])


model = ResNet18()
model.layer4[1].bn2.register_backward_hook(save_gradient)
model.layer4[1].conv1.register_backward_hook(save_gradient)
'''

SMALL = '''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.layer(x)))


grads = []


def save(module, grad_input, grad_output):
    grads.append(grad_output[0].norm())


net = Net()
net.layer.register_backward_hook(save)
'''

SMALL_MAIN = SMALL + '''

if __name__ == "__main__":
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(20):
        optimizer.zero_grad()
        net(torch.randn(8, 16)).pow(2).mean().backward()
        optimizer.step()
    print(len(grads))
'''

FILES = {"gradcam": GRADCAM, "resnet18": RESNET18, "small": SMALL, "small_main": SMALL_MAIN}


def timed(args: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "hooklint", "check", "--select", "HKL101", *args], cwd=cwd,
                       capture_output=True, text=True, timeout=900)
    return time.perf_counter() - start, r


def measure(name: str, text: str, repeat: int) -> list[tuple[str, float, str]]:
    rows = []
    for label, args, warm in (("--diff, cold", ["--diff", "--no-cache"], False),
                              ("--diff --verify, cold", ["--diff", "--verify", "--no-cache"], False),
                              ("--diff, warm", ["--diff"], True),
                              ("--diff --verify, warm", ["--diff", "--verify"], True)):
        best = None
        outcome = ""
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as folder:
                project = Path(folder)
                (project / "pyproject.toml").write_text("[tool.hooklint]\n")
                (project / f"{name}.py").write_text(textwrap.dedent(text))
                if warm:
                    timed([a for a in args] + [f"{name}.py"], project)  # fills the cache
                elapsed, r = timed(args + [f"{name}.py"], project)
            best = elapsed if best is None else min(best, elapsed)
            verified = len(re.findall(r" verified( [^:]*)?: ", r.stderr))
            by_running = r.stderr.count(" verified by running ")
            refused = r.stderr.count(" not applied: ")
            outcome = f"{r.stdout.count('+++ ')} file(s) in the diff" + (
                f"; {verified} fix(es) verified ({by_running} by running the script), {refused} not applied"
                if "--verify" in args else "")
        rows.append((label, best or 0.0, outcome))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, load average {load:.2f}")
    for name, text in FILES.items():
        print(f"\n{name}:")
        for label, seconds, outcome in measure(name, text, args.repeat):
            print(f"  {label:<24} {seconds:6.2f} s   {outcome}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nload average at the end {load:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
