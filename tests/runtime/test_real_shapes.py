"""Run time on code shaped like real code: the clean programs of
`tests/runtime/programs/` (a training loop with a post-accumulate-grad
pruning mask, Grad-CAM with a forward hook and `output.register_hook` whose
handles are removed, a feature extractor removing its handles in `finally`,
saliency, gradient logging, an optimizer fused into backward) give no finding
under `hooklint run`; the models of `fixtures/models/`, run forward and
backward, give what the graph layer reports for them (the `# graph:`
expectations of the fixtures)."""

from __future__ import annotations

import json
import re
import runpy
import warnings
from pathlib import Path

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

PROGRAMS = sorted((Path(__file__).parent / "programs").glob("*.py"))


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_clean_program_clean_under_hooklint_run(program, tmp_path, capsys):
    from hooklint.cli import main

    out = tmp_path / "findings.json"
    code = main(["run", "--select", "ALL", "--output-format", "json", "-o", str(out), str(program)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    findings = json.loads(out.read_text())
    assert findings == [], [f["message"] for f in findings]
    assert captured.out.strip(), "the program ran and printed its result"


# Each hooked instance the fixture defines, run forward and backward.
DRIVERS = {
    "legacy_hooks.py": ["net(torch.rand(3, 4, requires_grad=True)).sum().backward()",
                        "mean(torch.rand(3, 4, requires_grad=True)).sum().backward()"],
    "linear_layers.py": ["layer(torch.rand(5, 4, requires_grad=True)).sum().backward()",
                         "no_bias(torch.rand(5, 4, requires_grad=True)).sum().backward()",
                         "net(torch.rand(5, 4, requires_grad=True)).sum().backward()"],
    "residual.py": ["block(torch.rand(2, 4, 6, 6, requires_grad=True)).sum().backward()",
                    "stem(torch.rand(2, 3, 6, 6, requires_grad=True)).sum().backward()",
                    "residual(torch.rand(2, 8, requires_grad=True)).sum().backward()"],
}


def _graph_expectations(path: Path) -> list[tuple[int, str]]:
    """The codes the graph layer reports per line: after `# graph:` when the line
    has one, else the static expectation (`# HKL101, HKL102`)."""
    expected = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if "#" not in line or line.lstrip().startswith("#"):
            continue  # expectations end a line of code
        comment = line.split("#", 1)[1]
        graph = re.search(r"graph:\s*((?:HKL\d{3}[,\s]*)+)", comment)
        codes = graph.group(1) if graph else comment
        expected += [(number, code) for code in re.findall(r"HKL\d{3}", codes)]
    return sorted(expected)


@pytest.mark.parametrize("name", sorted(DRIVERS))
def test_fixture_models_run_as_the_graph_layer_reports(name):
    import hooklint

    path = FIXTURES / "models" / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hooklint.instrument(select=["ALL"]) as session:
            namespace = runpy.run_path(str(path))
            for call in DRIVERS[name]:
                try:
                    eval(call, {**namespace, "torch": torch})  # noqa: S307 - the test's own driver lines
                except RuntimeError as exc:  # HKL403: PyTorch refuses the forward
                    session.observe_exception(exc)
    got = sorted((f.location.row, f.code) for f in session.findings)
    assert got == _graph_expectations(path), "\n".join(f"{f.location.row}: {f.code} {f.message}"
                                                       for f in session.findings)
