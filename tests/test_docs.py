"""docs/rules/ is generated from the rule classes; it must not go stale."""

from __future__ import annotations

from conftest import ROOT
from hooklint.docs import expected_docs


def test_rule_docs_up_to_date():
    folder = ROOT / "docs" / "rules"
    wanted = expected_docs()
    stale = [name for name, text in wanted.items()
             if not (folder / name).exists() or (folder / name).read_text(encoding="utf-8") != text]
    extra = sorted(p.name for p in folder.glob("HKL*.md") if p.name not in wanted)
    assert not stale and not extra, (
        f"docs/rules is stale ({stale or ''} {extra or ''}); run `python -m hooklint.docs`"
    )


def test_rule_catalog_up_to_date():
    """The driver selects rules and prefilters files from the generated catalog,
    without importing the rules: a stale catalog would lose findings."""
    from hooklint.docs import CATALOG_PATH, render_catalog

    assert CATALOG_PATH.read_text(encoding="utf-8") == render_catalog(), (
        "hooklint/rules/catalog.py is stale; run `python -m hooklint.docs`")


def test_readme_links_every_rule():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    from hooklint.rules import all_rules

    missing = [r.code for r in all_rules() if f"docs/rules/{r.code}.md" not in readme]
    assert not missing, f"README does not link the docs of {missing}"
