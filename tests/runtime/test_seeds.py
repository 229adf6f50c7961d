"""`hooklint run` on every seed script: the findings each seed's bug deserves
at run time, and none for the fixed twins.

The run-time expectations differ from the static ones (the inline `# HKLxxx`
comments) where running shows more or less than reading:

- seed 000: `grad_mod` reads `fc1.weight.grad` before it is accumulated (fc1's
  input needs no grad) at every step: HKL201 at the registration in
  `apply_grad_mod`; and `fc3` gets `grad_mod` twice (the answer's two snippets
  combined), so it runs twice per backward: HKL304.
- seed 001: both in-place tensor hooks (HKL401, at their registrations), the
  legacy hook registered after the forward never runs (HKL302; never having
  run, its `grad_input` cannot be observed), the hook removed before backward
  (HKL301, at the `remove()`).
- seed 002: the bias never gets a gradient (HKL503, at `LinearFunction.backward`).
- seed 003: the script feeds the conv an input that requires grad, so the
  hook runs after the weight's AccumulateGrad and its edit holds: nothing to
  observe (the first-layer case is tested in test_observed_rules.py).
- seed 004: each of the three legacy hooks is bound to the wrong op (HKL101
  from PyTorch's warning, HKL102 from the shapes).
"""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SEEDS = FIXTURES / "seeds"

EXPECTED = {
    "seed000_conditional_grad_hook.py": [(61, "HKL201"), (61, "HKL304")],
    "seed001_four_hooks.py": [(23, "HKL401"), (36, "HKL401"), (114, "HKL302"), (122, "HKL301")],
    "seed002_custom_function.py": [(26, "HKL503")],
    "seed003_freeze_element.py": [],
    "seed004_autograd_and_hooks.py": [(90, "HKL101"), (90, "HKL102"), (100, "HKL101"), (100, "HKL102"),
                                      (104, "HKL101"), (104, "HKL102")],
}
FIXED = sorted(p.name for p in SEEDS.glob("*_fixed.py"))


def _run(tmp_path, capsys, name: str):
    from hooklint.cli import main

    out = tmp_path / "findings.json"
    code = main(["run", "--select", "ALL", "--output-format", "json", "-o", str(out), str(SEEDS / name)])
    captured = capsys.readouterr()
    return code, json.loads(out.read_text()), captured


def test_every_seed_script_has_an_expectation():
    scripts = {p.name for p in SEEDS.glob("seed*.py")}
    assert scripts == set(EXPECTED) | set(FIXED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_seed_findings(tmp_path, capsys, name):
    code, findings, captured = _run(tmp_path, capsys, name)
    assert code == 0, captured.err
    got = sorted((f["location"]["row"], f["code"]) for f in findings)
    assert got == EXPECTED[name], "\n".join(f"{f['location']['row']}: {f['code']} {f['message']}" for f in findings)
    assert all(f["origin"] == "runtime" and f["filename"].endswith(name) for f in findings)
    assert "hooklint: internal error" not in captured.err


@pytest.mark.parametrize("name", FIXED)
def test_fixed_seed_clean(tmp_path, capsys, name):
    code, findings, captured = _run(tmp_path, capsys, name)
    assert code == 0, captured.err
    assert findings == [], [f["message"] for f in findings]
    assert "no hook problems observed" in captured.err


def test_seed_output_is_the_scripts_own(tmp_path, capsys):
    _code, _findings, captured = _run(tmp_path, capsys, "seed002_custom_function.py")
    assert captured.out == "weight.grad set: True bias.grad: None\n"
