"""The flake8 plugin, through the real `flake8` command: it is found by its
entry point, reports what `hooklint check --static-only` reports at the same
line:column, and honours noqa and hooklint's configuration."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import run_cli

BAD = """\
import torch.nn as nn

def hook(module, grad_input, grad_output):
    print(grad_input)

s = "é"; net = nn.Sequential(nn.Linear(4, 2), nn.ReLU())
net.register_backward_hook(hook)
"""

LINE = re.compile(r"^(?P<path>[^:]+):(?P<row>\d+):(?P<col>\d+): (?P<code>[A-Z]+\d+) (?P<msg>.*)$")


def flake8(cwd, *args, input=None):
    # HOOKLINT_STRICT (set by conftest) is inherited: a rule's exception fails the test
    return subprocess.run([sys.executable, "-m", "flake8", "--isolated", *args], cwd=cwd, input=input,
                          capture_output=True, text=True, timeout=120)


def parsed(stdout):
    return [LINE.match(line).groupdict() for line in stdout.splitlines()]


@pytest.fixture
def project(tmp_path):
    (tmp_path / "bad.py").write_text(BAD, encoding="utf-8")
    return tmp_path


def test_plugin_is_registered():
    r = flake8(".", "--version")
    assert "hooklint: " in r.stdout, r.stdout + r.stderr


def test_same_findings_and_positions_as_hooklint(project):
    r = flake8(project, "--select", "HKL", "bad.py")
    assert r.returncode == 1, r.stderr
    got = [(d["row"], d["col"], d["code"], d["msg"]) for d in parsed(r.stdout)]
    ours = run_cli("check", "--static-only", "--output-format", "concise", "bad.py", cwd=project)
    want = [(d["row"], d["col"], d["code"], d["msg"].removeprefix("[-] ").removeprefix("[*] "))
            for d in parsed(ours.stdout)]
    assert got == want and [g[:3] for g in got] == [("7", "5", "HKL101"), ("7", "5", "HKL102")]


def test_reported_by_default_next_to_flake8s_own_codes(project):
    (project / "bad.py").write_text(BAD + "import os\n", encoding="utf-8")
    r = flake8(project, "bad.py")
    codes = {d["code"] for d in parsed(r.stdout)}
    assert {"HKL101", "HKL102", "F401"} <= codes, r.stdout


def test_noqa(project):
    (project / "bad.py").write_text(BAD.replace("(hook)\n", "(hook)  # noqa: HKL102\n"), encoding="utf-8")
    r = flake8(project, "--select", "HKL", "bad.py")
    assert [d["code"] for d in parsed(r.stdout)] == ["HKL101"]


def test_hooklint_configuration_applies(project):
    (project / "pyproject.toml").write_text('[tool.hooklint]\nignore = ["HKL101"]\n')
    r = flake8(project, "--select", "HKL", "bad.py")
    assert [d["code"] for d in parsed(r.stdout)] == ["HKL102"]


def test_stdin(project):
    r = flake8(project, "--select", "HKL", "-", input=BAD)
    assert [(d["path"], d["code"]) for d in parsed(r.stdout)] == [("stdin", "HKL101"), ("stdin", "HKL102")]


def test_clean_file(project):
    (project / "clean.py").write_text("import torch\nx = torch.ones(2, requires_grad=True)\n")
    r = flake8(project, "--select", "HKL", "clean.py")
    assert r.returncode == 0 and r.stdout == ""


INFO_ONLY = """\
class Saliency:
    def __init__(self, model, target_layer):
        self.model = model
        self.handle = target_layer.register_full_backward_hook(self.save)

    def save(self, module, grad_input, grad_output):
        self.grad = grad_output[0]

    def remove(self):
        self.handle.remove()
"""


def test_fail_on_decides_what_flake8_sees(tmp_path):
    """flake8 fails on every code it prints: info findings (HKL405) stay out
    unless `fail-on = "info"`, as they do not fail `hooklint check`."""
    (tmp_path / "saliency.py").write_text(INFO_ONLY)
    ours = run_cli("check", "--static-only", "--output-format", "concise", "saliency.py", cwd=tmp_path)
    assert ours.returncode == 0 and "HKL405" in ours.stdout, ours.stdout + ours.stderr
    r = flake8(tmp_path, "--select", "HKL", "saliency.py")
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
    (tmp_path / "hooklint.toml").write_text('fail-on = "info"\n')
    r = flake8(tmp_path, "--select", "HKL", "saliency.py")
    assert r.returncode == 1 and ":4:36: HKL405 " in r.stdout, r.stdout + r.stderr
