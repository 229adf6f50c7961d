"""`hooklint check --fix / --unsafe-fixes / --diff / --show-fixes` in a
subprocess, on the real rules' fixes: diff output, the fixed file re-checked
clean for the rule, idempotence, and no write on files without fixes."""

from __future__ import annotations

import os

import pytest

from conftest import lint, run_cli
from hooklint.findings import Applicability
from hooklint.fix.apply import fix_text
from hooklint.rules import all_rules

# HKL401, safe: a tensor hook edits its gradient in place; the fix returns a new one
SAFE_401 = """\
import torch

def scale(grad):
    grad *= 2

x = torch.ones(4, requires_grad=True)
x.register_hook(scale)
"""

SAFE_401_FIXED = SAFE_401.replace("    grad *= 2\n", "    grad = grad * 2\n    return grad\n")

# HKL101, unsafe: the hook returns a replacement for grad_input (the rename)
UNSAFE_101 = """\
import torch.nn as nn

def scale(module, grad_input, grad_output):
    return tuple(g * 2 for g in grad_input)

layer = nn.Linear(4, 2)
layer.register_backward_hook(scale)
"""

CLEAN = """\
import torch.nn as nn

layer = nn.Linear(4, 2)
layer.register_full_backward_hook(lambda m, gi, go: None)
"""


def check(cwd, *args):
    return run_cli("check", "--static-only", "--select", "ALL", *args, cwd=cwd)


def stamp(path):
    st = os.stat(path)
    return st.st_mtime_ns, st.st_ino, path.read_bytes()


def user_files(project):
    """The project's files, not hooklint's cache folder (written by every check but --diff)."""
    return {p.name: stamp(p) for p in project.iterdir() if p.name != ".hooklint_cache"}


@pytest.fixture
def project(tmp_path):
    (tmp_path / "safe.py").write_text(SAFE_401)
    (tmp_path / "unsafe.py").write_text(UNSAFE_101)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


class TestDiff:
    def test_prints_the_safe_fix_and_changes_nothing(self, project):
        before = user_files(project)
        r = check(project, "--diff", ".")
        assert r.returncode == 1, r.stderr
        assert r.stdout == (
            "--- safe.py\n"
            "+++ safe.py\n"
            "@@ -1,7 +1,8 @@\n"
            " import torch\n"
            " \n"
            " def scale(grad):\n"
            "-    grad *= 2\n"
            "+    grad = grad * 2\n"
            "+    return grad\n"
            " \n"
            " x = torch.ones(4, requires_grad=True)\n"
            " x.register_hook(scale)\n"
        )
        assert "Would fix 1 finding in 1 file. 1 more with `--unsafe-fixes`." in r.stderr
        assert user_files(project) == before

    def test_unsafe_fixes_join_the_diff(self, project):
        r = check(project, "--diff", "--unsafe-fixes", "--show-fixes", ".")
        assert r.returncode == 1
        assert "--- unsafe.py" in r.stdout and "+layer.register_full_backward_hook(scale)" in r.stdout
        assert "Would fix 2 findings:\n- safe.py:\n    1 \u00d7 HKL401 (hook-mutates-argument)\n- unsafe.py:" \
            in r.stderr

    def test_nothing_to_fix_exits_0(self, project):
        r = check(project, "--diff", "clean.py")
        assert r.returncode == 0 and r.stdout == ""
        assert "No fixes to apply." in r.stderr


class TestFix:
    def test_safe_fix_applied_unsafe_left(self, project):
        clean_before = stamp(project / "clean.py")
        unsafe_before = stamp(project / "unsafe.py")
        r = check(project, "--fix", "--output-format", "concise", ".")
        assert r.returncode == 1, r.stderr  # the unsafe finding remains
        assert (project / "safe.py").read_text() == SAFE_401_FIXED
        assert r.stdout.startswith("unsafe.py:7:7: HKL101 [-]")
        assert "safe.py:" not in r.stdout.replace("unsafe.py:", "")
        assert "Fixed 1 finding." in r.stderr
        assert stamp(project / "clean.py") == clean_before
        assert stamp(project / "unsafe.py") == unsafe_before

    def test_unsafe_fixes_then_clean_and_idempotent(self, project):
        r = check(project, "--fix", "--unsafe-fixes", "--show-fixes", ".")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Fixed 2 findings:" in r.stderr and "All checks passed" in r.stderr
        again = check(project, ".")
        assert again.returncode == 0 and "HKL101" not in again.stdout
        before = user_files(project)
        second = check(project, "--fix", "--unsafe-fixes", ".")
        assert second.returncode == 0
        assert user_files(project) == before

    def test_crlf_file_stays_crlf(self, tmp_path):
        path = tmp_path / "crlf.py"
        path.write_bytes(SAFE_401.replace("\n", "\r\n").encode())
        r = check(tmp_path, "--fix", "crlf.py")
        assert r.returncode == 0, r.stdout + r.stderr
        data = path.read_bytes()
        assert b"    return grad\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")

    def test_noqa_finding_is_not_fixed(self, tmp_path):
        path = tmp_path / "a.py"
        path.write_text(SAFE_401.replace("    grad *= 2\n", "    grad *= 2  # noqa: HKL401\n"))
        before = stamp(path)
        r = check(tmp_path, "--fix", "a.py")
        assert r.returncode == 0 and stamp(path) == before

    def test_per_file_ignore_holds_between_rounds(self, tmp_path):
        (tmp_path / "pyproject.toml").write_text('[tool.hooklint]\nper-file-ignores = {"a.py" = ["HKL401"]}\n')
        path = tmp_path / "a.py"
        path.write_text(SAFE_401)
        before = stamp(path)
        r = run_cli("check", "--static-only", "--fix", "a.py", cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert stamp(path) == before


def _rules_with_fixed_examples():
    for rule in all_rules():
        for i, inv in enumerate(rule.INVALID):
            if inv.fixed is not None:
                yield pytest.param(rule, inv, id=f"{rule.code}-invalid-{i}")


@pytest.mark.parametrize(("rule", "invalid"), list(_rules_with_fixed_examples()))
def test_rule_examples_fix_to_their_fixed_text(rule, invalid):
    """Each rule's INVALID example with a `fixed` text becomes exactly that text
    under --unsafe-fixes, and the fixed text has no fixable finding left."""
    allowed = frozenset({Applicability.SAFE, Applicability.UNSAFE})

    def recheck(text):
        return lint(text, "ALL")

    out = fix_text(invalid.code, recheck(invalid.code), allowed=allowed, recheck=recheck)
    assert out.text == invalid.fixed
    assert out.converged and not out.rejected
    assert not [f for f in recheck(out.text) if f.code == rule.code and f.fix
                and f.fix.applicability in allowed]


# -- the other rules with fixes, through the CLI ---------------------------------------------

HKL401_SAFE = """\
import torch

def grad_hook(grad):
    grad *= 1.6

x = torch.ones(4, requires_grad=True)
x.register_hook(grad_hook)
"""

HKL301_UNSAFE = """\
import torch

x = torch.ones(4, requires_grad=True)
h = x.register_hook(lambda grad: grad * 1.6)
z = torch.sum(torch.pow(x, 2))
h.remove()
z.backward()
"""

HKL201_DISPLAY = """\
import torch.nn as nn

def freeze_single(index):
    def callback(module, grad_input, grad_output):
        module.weight.grad.data[index] = 0
    return callback

conv = nn.Conv2d(3, 1, 3)
conv.register_full_backward_hook(freeze_single((0, 1, 2, 1)))
"""


def codes_in(project, name, code):
    return [f for f in lint((project / name).read_text(), "ALL") if f.code == code]


class TestRuleFixes:
    def test_hkl401_diff_fix_clean_idempotent(self, tmp_path):
        path = tmp_path / "h.py"
        path.write_text(HKL401_SAFE)
        diff = check(tmp_path, "--diff", "h.py")
        assert diff.returncode == 1
        assert "-    grad *= 1.6\n+    grad = grad * 1.6\n+    return grad\n" in diff.stdout
        assert path.read_text() == HKL401_SAFE
        r = check(tmp_path, "--fix", "h.py")  # safe: the hook has no other return
        assert "Fixed 1 finding." in r.stderr, r.stderr
        assert path.read_text() == HKL401_SAFE.replace("    grad *= 1.6\n", "    grad = grad * 1.6\n    return grad\n")
        assert codes_in(tmp_path, "h.py", "HKL401") == []
        before = stamp(path)
        again = check(tmp_path, "--fix", "--unsafe-fixes", "h.py")
        assert "Fixed" not in again.stderr and stamp(path) == before

    def test_hkl301_is_unsafe_and_moves_remove_after_backward(self, tmp_path):
        path = tmp_path / "r.py"
        path.write_text(HKL301_UNSAFE)
        before = stamp(path)
        safe_only = check(tmp_path, "--fix", "r.py")
        assert safe_only.returncode == 1 and stamp(path) == before  # unsafe: not applied by --fix alone
        diff = check(tmp_path, "--diff", "--unsafe-fixes", "r.py")
        # difflib may show the move either way round: one line out, the same line in
        changed = sorted(line for line in diff.stdout.splitlines()[2:] if line[:1] in "+-")
        assert diff.returncode == 1 and changed in (["+h.remove()", "-h.remove()"], ["+z.backward()", "-z.backward()"])
        assert stamp(path) == before
        r = check(tmp_path, "--fix", "--unsafe-fixes", "r.py")
        assert r.returncode == 0, r.stdout + r.stderr
        assert path.read_text().endswith("z.backward()\nh.remove()\n")
        assert codes_in(tmp_path, "r.py", "HKL301") == []
        fixed = stamp(path)
        check(tmp_path, "--fix", "--unsafe-fixes", "r.py")
        assert stamp(path) == fixed

    def test_hkl201_fix_is_shown_never_applied(self, tmp_path):
        path = tmp_path / "f.py"
        path.write_text(HKL201_DISPLAY)
        before = stamp(path)
        shown = check(tmp_path, "f.py")
        assert "suggested fix (not applied automatically)" in shown.stdout
        assert "register_post_accumulate_grad_hook" in shown.stdout
        diff = check(tmp_path, "--diff", "--unsafe-fixes", "f.py")
        assert diff.returncode == 0 and diff.stdout == ""
        r = check(tmp_path, "--fix", "--unsafe-fixes", "f.py")
        assert r.returncode == 1 and "HKL201" in r.stdout
        assert stamp(path) == before


def test_usage_docs_show_the_helper_hkl101_writes():
    from pathlib import Path

    from hooklint.static.output_grad_hook import helper_source

    usage = (Path(__file__).resolve().parents[2] / "docs" / "usage.md").read_text(encoding="utf-8")
    assert "```python\n" + helper_source() + "\n\nhandle = " in usage
