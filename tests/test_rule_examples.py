"""Each rule's own VALID and INVALID snippets, and its docs' Example / Use
instead blocks, run as tests (Fixit's model: the examples are the tests)."""

from __future__ import annotations

import pytest

from conftest import codes_at, lint
from hooklint.rules import all_rules
from hooklint.rules.base import REQUIRED_SECTIONS, Rule, expected_findings

RULES = all_rules()
# rules the static pass reports: those with a check, and those the driver
# judges itself (HKL001, HKL003), which carry examples
STATIC_RULES = [r for r in RULES if r.check is not Rule.check or r.VALID or r.INVALID]


def _examples():
    for rule in STATIC_RULES:
        for i, src in enumerate(rule.VALID):
            yield pytest.param(rule, src, None, id=f"{rule.code}-valid-{i}")
        for i, inv in enumerate(rule.INVALID):
            yield pytest.param(rule, inv.code, inv, id=f"{rule.code}-invalid-{i}")


@pytest.mark.parametrize(("rule", "source", "invalid"), list(_examples()))
def test_rule_example(rule, source, invalid):
    findings = [f for f in lint(source, "ALL") if f.code == rule.code]
    want = [(row, code) for row, code in expected_findings(source) if code == rule.code]
    if invalid is None:
        assert not findings, f"{rule.code} flagged a VALID example: {[f.message for f in findings]}"
    else:
        assert want, f"{rule.code} INVALID example has no `# {rule.code}` expectation"
        assert codes_at(findings) == sorted(want), [f"{f.location.row}: {f.message}" for f in findings]


@pytest.mark.parametrize("rule", STATIC_RULES, ids=lambda r: r.code)
def test_docs_examples(rule):
    """The docs' "Example" must trigger the rule and "Use instead" must not."""
    bad = rule.code_blocks("Example")
    good = rule.code_blocks("Use instead")
    assert bad and good, f"{rule.code} docs need python code blocks under Example and Use instead"
    if rule.code in ("HKL001", "HKL002"):
        return  # syntax/io errors: the examples describe files, not hook code
    for src in bad:
        assert any(f.code == rule.code for f in lint(src, "ALL")), f"{rule.code} does not flag its own Example"
    for src in good:
        hits = [f for f in lint(src, "ALL") if f.code == rule.code]
        assert not hits, f"{rule.code} flags its own 'Use instead': {[f.message for f in hits]}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_rule_metadata(rule):
    import re

    assert re.fullmatch(r"HKL\d{3}", rule.code)
    assert re.fullmatch(r"[a-z]+(-[a-z]+)*", rule.name), rule.name
    assert rule.summary and not rule.summary.endswith(".")
    sections = rule.doc_sections()
    missing = [s for s in REQUIRED_SECTIONS if s not in sections]
    assert not missing, f"{rule.code} docs lack sections {missing}"
    if rule.check is not Rule.check and not rule.code.startswith("HKL0"):
        assert rule.triggers, f"{rule.code} has a static check but no trigger words"
        assert rule.VALID and rule.INVALID, f"{rule.code} needs VALID and INVALID examples"


def test_codes_and_names_unique():
    codes = [r.code for r in RULES]
    names = [r.name for r in RULES]
    assert len(codes) == len(set(codes)) and len(names) == len(set(names))
