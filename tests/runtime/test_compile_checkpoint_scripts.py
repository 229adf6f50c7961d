"""The three user-shaped programs of issue 17 (bench/trial_scripts), each with
its correct twin: a compiled model explained by a Grad-CAM helper from
another file (HKL701), a steering library whose context manager removes its
hook before the backward of a checkpointed model (HKL702), and a training
loop that wraps blocks with `checkpoint_wrapper` and logs activations
(HKL703).  Each rule fires on the buggy shape and stays quiet on the twin,
statically (`hooklint check --static-only`, the whole project) and at run
time (`hooklint run`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import run_cli

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

SCRIPTS = Path(__file__).resolve().parents[2] / "bench" / "trial_scripts"
CASES = [
    # (what is checked, the program `hooklint run` runs, the code)
    ("proj_compiled_gradcam", "proj_compiled_gradcam/run.py", "HKL701"),
    ("proj_steering_ckpt", "proj_steering_ckpt/run.py", "HKL702"),
    ("train_ckpt_wrapper_collect.py", "train_ckpt_wrapper_collect.py", "HKL703"),
]
TWINS = {
    "proj_compiled_gradcam": ("proj_compiled_gradcam_ok", "proj_compiled_gradcam_ok/run.py"),
    "proj_steering_ckpt": ("proj_steering_ckpt_ok", "proj_steering_ckpt_ok/run.py"),
    "train_ckpt_wrapper_collect.py": ("train_ckpt_wrapper_collect_ok.py", "train_ckpt_wrapper_collect_ok.py"),
}
_EXPECT = re.compile(r"#\s*expect:\s*(HKL\d{3})")
_CONCISE = re.compile(r"^(?P<path>[^:\n]+):(?P<row>\d+):\d+: (?P<code>HKL\d{3}) ", re.M)


def _expected(target: str, code: str) -> set[tuple[str, int]]:
    root = SCRIPTS / target
    files = [root] if root.is_file() else sorted(root.rglob("*.py"))
    out = set()
    for path in files:
        for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            match = _EXPECT.search(line)
            if match and match.group(1) == code:
                out.add((path.name, row))
    return out


def _found(output: str, code: str) -> set[tuple[str, int]]:
    return {(Path(m["path"]).name, int(m["row"])) for m in _CONCISE.finditer(output) if m["code"] == code}


@pytest.mark.parametrize(("target", "program", "code"), CASES, ids=[c[2] for c in CASES])
def test_static_check_finds_the_bug_and_not_in_the_twin(target, program, code):
    want = _expected(target, code)
    assert want, f"no `# expect: {code}` in {target}"
    result = run_cli("check", "--static-only", "--no-cache", "--output-format", "concise", target, cwd=SCRIPTS)
    assert _found(result.stdout, code) == want, result.stdout + result.stderr
    twin = TWINS[target][0]
    clean = run_cli("check", "--static-only", "--no-cache", "--output-format", "concise", "--select", code, twin,
                    cwd=SCRIPTS)
    assert clean.returncode == 0, clean.stdout + clean.stderr


@pytest.mark.parametrize(("target", "program", "code"), CASES, ids=[c[2] for c in CASES])
def test_hooklint_run_finds_the_bug_and_not_in_the_twin(target, program, code):
    want = _expected(target, code)
    path = SCRIPTS / program
    result = run_cli("run", "--output-format", "concise", "--fail-on-findings", path.name, cwd=path.parent,
                     timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    assert _found(result.stdout, code) == want, result.stdout + result.stderr
    twin = SCRIPTS / TWINS[target][1]
    clean = run_cli("run", "--output-format", "concise", "--fail-on-findings", "--select", code, twin.name,
                    cwd=twin.parent, timeout=600)
    assert clean.returncode == 0, clean.stdout + clean.stderr
