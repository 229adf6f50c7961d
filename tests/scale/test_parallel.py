"""`-j N`: the output does not depend on the number of processes."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from hooklint.rules import all_rules
from hooklint.rules.base import iter_rule_examples
from tests.conftest import FIXTURES, run_cli


def _run(cwd: Path, *args: str) -> tuple[int, str]:
    proc = run_cli("check", "--static-only", *args, cwd=cwd, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, proc.stdout


@pytest.fixture(scope="module")
def fixtures_copy(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fixtures")
    shutil.copytree(FIXTURES, folder / "fixtures")
    return folder


@pytest.fixture(scope="module")
def generated_tree(tmp_path_factory) -> Path:
    """300 files in nested folders: every rule example and fixture, some
    truncated (syntax errors), some renamed into deep folders, plus files
    with no hook at all."""
    root = tmp_path_factory.mktemp("tree")
    rng = random.Random(6)
    sources = [src for rule in all_rules() for _label, src, _bad in iter_rule_examples(rule)]
    sources += [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.rglob("*.py"))]
    for i in range(300):
        # spread over every rule's examples and the fixtures (new rules must not push the later families out)
        text = sources[i * len(sources) // 300]
        if i % 7 == 3:
            text = text[: rng.randrange(len(text) + 1)]
        if i % 11 == 5:
            text = "def plain(x):\n    return x * 2\n" * 20
        depth = rng.randrange(4)
        folder = root.joinpath(*[f"d{rng.randrange(3)}" for _ in range(depth)])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:03d}.py").write_text(text, encoding="utf-8")
    return root


@pytest.mark.parametrize("fmt", ["concise", "json", "full", "sarif"])
def test_fixtures_byte_identical_with_1_and_2_jobs(fixtures_copy, fmt):
    one = _run(fixtures_copy, "--no-cache", "-j", "1", "--output-format", fmt, "fixtures")
    two = _run(fixtures_copy, "--no-cache", "-j", "2", "--output-format", fmt, "fixtures")
    assert one == two
    assert one[0] == 1 and one[1].strip()


@pytest.mark.parametrize("fmt", ["concise", "json"])
def test_generated_tree_byte_identical_with_1_2_and_3_jobs_and_from_the_cache(generated_tree, fmt):
    outputs = [_run(generated_tree, "--no-cache", "-j", j, "--output-format", fmt, ".") for j in ("1", "2", "3")]
    shutil.rmtree(generated_tree / ".hooklint_cache", ignore_errors=True)
    cold = _run(generated_tree, "-j", "2", "--output-format", fmt, ".")
    warm = _run(generated_tree, "-j", "2", "--output-format", fmt, ".")
    assert outputs[0] == outputs[1] == outputs[2] == cold == warm
    assert "HKL001" in outputs[0][1] and "HKL401" in outputs[0][1]


def test_findings_are_sorted(generated_tree):
    _code, text = _run(generated_tree, "--no-cache", "-j", "2", "--output-format", "concise", ".")
    keys = []
    for line in text.splitlines():
        path, row, col, rest = line.split(":", 3)
        keys.append((path, int(row), int(col), rest.split()[0]))
    assert keys == sorted(keys) and len(keys) > 50


def test_jobs_option():
    from hooklint.cli import build_parser
    from hooklint.cli.check import build_options
    from hooklint.parallel import default_jobs

    parse = build_parser().parse_args
    assert build_options(parse(["check"])).jobs == default_jobs()
    assert build_options(parse(["check", "-j", "auto"])).jobs == default_jobs()
    assert build_options(parse(["check", "--jobs", "3"])).jobs == 3


@pytest.mark.parametrize("value, message", [("0", "the number of jobs must be at least 1"),
                                            ("two", "'two' is not a number of jobs")])
def test_bad_jobs_value_is_a_usage_error(tmp_path, value, message):
    proc = run_cli("check", "-j", value, ".", cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
