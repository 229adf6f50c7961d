"""Rule documentation, rendered from the rule classes: ``hooklint rule HKL101``,
``docs/rules/*.md`` (``python -m hooklint.docs`` regenerates them) and the
SARIF rule descriptions all come from here."""

from __future__ import annotations

import sys
from pathlib import Path

from hooklint.rules import all_rules
from hooklint.rules.base import DOC_SECTIONS, Rule

_LAYER_WORDS = {"static": "static analysis", "graph": "model graph (torch.fx)", "runtime": "run time"}


def _meta_lines(rule: type[Rule]) -> list[str]:
    layers = ", ".join(_LAYER_WORDS[o.value] for o in rule.origins)
    return [
        f"- Severity: {rule.severity.value}",
        f"- Enabled by default: {'yes' if rule.default_enabled else 'no (select it explicitly)'}",
        f"- Reported by: {layers}",
        f"- Fix: {rule.fix_applicability}",
    ]


def render_rule_markdown(rule: type[Rule]) -> str:
    sections = rule.doc_sections()
    lines = [f"# {rule.code} {rule.name}", "", rule.summary + ".", ""]
    lines += _meta_lines(rule)
    for heading in DOC_SECTIONS:
        body = sections.get(heading)
        if body:
            lines += ["", f"## {heading}", body]
    lines.append("")
    return "\n".join(lines)


def render_rule_terminal(rule: type[Rule]) -> str:
    return render_rule_markdown(rule)


def render_index() -> str:
    lines = [
        "# hooklint rules",
        "",
        "Generated from the rule classes by `python -m hooklint.docs`; do not edit by hand.",
        "",
        "| code | name | severity | default | layers | summary |",
        "|---|---|---|---|---|---|",
    ]
    for rule in all_rules():
        layers = ", ".join(o.value for o in rule.origins)
        summary = rule.summary.replace("|", "\\|")
        default = "on" if rule.default_enabled else "off"
        lines.append(
            f"| [{rule.code}]({rule.code}.md) | {rule.name} | {rule.severity.value} | "
            f"{default} | {layers} | {summary} |"
        )
    lines.append("")
    return "\n".join(lines)


def expected_docs() -> dict[str, str]:
    out = {"README.md": render_index()}
    for rule in all_rules():
        out[f"{rule.code}.md"] = render_rule_markdown(rule)
    return out


def write_docs(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    wanted = expected_docs()
    for name, text in wanted.items():
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    for stale in folder.glob("HKL*.md"):
        if stale.name not in wanted:
            stale.unlink()
            written.append(stale)
    return written


CATALOG_PATH = Path(__file__).resolve().parent / "rules" / "catalog.py"


def render_catalog() -> str:
    """``hooklint/rules/catalog.py``: what the driver reads of each rule without
    importing its module (selection, the prefilter, ``# noqa`` codes)."""
    from hooklint.rules import catalog_rows

    lines = [
        '"""Every rule as the driver needs it before importing the rule: generated from',
        "the rule classes by `python -m hooklint.docs`; do not edit by hand (tests/test_docs.py",
        "fails when it is stale).  A check imports a rule's module, and the analysis it",
        'uses, only when a file passes the prefilter."""',
        "",
        "# (code, name, module, class, enabled by default, origins, triggers, trigger pattern, static check)",
    ]
    import pprint

    lines.append("RULES = " + pprint.pformat(tuple(catalog_rows()), width=116))
    lines.append("")
    return "\n".join(lines)


def write_catalog(path: Path = CATALOG_PATH) -> bool:
    text = render_catalog()
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    folder = Path(args[0]) if args else Path(__file__).resolve().parent.parent / "docs" / "rules"
    for path in write_docs(folder):
        print(f"wrote {path}")
    if not args and write_catalog():
        print(f"wrote {CATALOG_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
