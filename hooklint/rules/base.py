"""The shape every rule has: metadata, docs, examples and (optionally) a static check.

A rule is one class in one place (Fixit's model).  Its docstring is its
documentation, written under ruff's headings; its ``VALID`` and ``INVALID``
snippets are at once examples and tests (``tests/test_rule_examples.py`` runs
every one of them).  In ``INVALID`` snippets the offending lines end in a
``# HKLxxx`` comment, the same inline-expectation convention as ``fixtures/``.

Rules never format output and formatters never import rules: a rule turns
analysis facts into :class:`~hooklint.findings.Finding` values and that is all.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, Iterator

from hooklint.findings import Finding, Fix, Location, Origin, Related, Severity

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

DOCS_URL = "https://github.com/hooklint/hooklint/blob/main/docs/rules/{code}.md"

DOC_SECTIONS = (
    "What it does",
    "Why is this bad?",
    "Known problems",
    "Example",
    "Use instead",
    "Fix safety",
    "References",
)
REQUIRED_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety")

_SECTION_RE = re.compile(r"^## (.+?)\s*$", re.M)


@dataclass(frozen=True)
class Invalid:
    """An example the rule must flag.

    The expected findings are the ``# HKLxxx`` comments at the ends of lines.
    ``fixed`` is the text after applying the rule's fixes (``--unsafe-fixes``),
    when the rule offers one.
    """

    code: str
    fixed: str | None = None


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]  # one line, shown by `hooklint rule --all`
    severity: ClassVar[Severity] = Severity.ERROR
    default_enabled: ClassVar[bool] = True
    # Layers that can report this rule; a rule may be observed statically,
    # from the model graph, at run time, or several of these.
    origins: ClassVar[tuple[Origin, ...]] = (Origin.STATIC,)
    # Substrings that any file this rule can flag statically must contain.
    # The driver skips parsing files that contain none of the enabled rules'
    # triggers, so a rule that forgets one loses findings (and a test fails).
    triggers: ClassVar[tuple[str, ...]] = ()
    # For rules whose trigger words are common (`forward`): a regular
    # expression that any file this rule can flag also matches, tried only on
    # files that contain a trigger word.  It must not backtrack badly on any
    # text (hostile input goes through it): no nested ambiguous repeats.
    trigger_pattern: ClassVar[str | None] = None
    fix_applicability: ClassVar[str] = "none"  # documented in "Fix safety"
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[Invalid, ...]] = ()

    # -- static analysis -------------------------------------------------
    def check(self, ctx: "FileContext") -> Iterable[Finding]:
        """Yield findings for one parsed file.  Rules without a static part yield nothing."""
        return ()

    # -- helpers for subclasses ---------------------------------------------
    @classmethod
    def finding(
        cls,
        ctx: "FileContext",
        node: ast.AST,
        message: str,
        *,
        help: str = "",
        fix: Fix | None = None,
        related: Iterable[Related] = (),
        origin: Origin = Origin.STATIC,
        name_only: bool = False,
    ) -> Finding:
        """A finding at ``node``; ``name_only`` narrows ``a.b.method`` to ``method``."""
        start, end = ctx.name_span(node) if name_only else ctx.span(node)
        return cls.make(
            path=ctx.display_path,
            location=start,
            end_location=end,
            message=message,
            help=help,
            fix=fix,
            related=related,
            origin=origin,
        )

    @classmethod
    def make(
        cls,
        *,
        path: str,
        location: Location,
        end_location: Location | None = None,
        message: str,
        help: str = "",
        fix: Fix | None = None,
        related: Iterable[Related] = (),
        origin: Origin = Origin.STATIC,
    ) -> Finding:
        """Build a finding of this rule anywhere (graph and runtime layers use this)."""
        return Finding(
            code=cls.code,
            name=cls.name,
            message=message,
            path=path,
            location=location,
            end_location=end_location or location,
            severity=cls.severity,
            help=help,
            fix=fix,
            origin=origin,
            related=tuple(related),
            url=cls.url(),
        )

    # -- documentation --------------------------------------------------------
    @classmethod
    def url(cls) -> str:
        return DOCS_URL.format(code=cls.code, name=cls.name)

    @classmethod
    def doc_sections(cls) -> dict[str, str]:
        """The docstring split under its ``## Heading`` lines, in source order."""
        import inspect  # only for docs: keep it off the checking path's imports

        text = inspect.cleandoc(cls.__doc__ or "")
        sections: dict[str, str] = {}
        matches = list(_SECTION_RE.finditer(text))
        for i, match in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
            sections[match.group(1)] = text[match.end() : end].strip("\n")
        return sections

    @classmethod
    def code_blocks(cls, section: str) -> list[str]:
        body = cls.doc_sections().get(section, "")
        return [m.group(1) for m in re.finditer(r"```python\n(.*?)```", body, re.S)]


_EXPECT_RE = re.compile(r"#\s*(HKL\d{3}(?:\s*,\s*HKL\d{3})*)\s*$")


def expected_findings(source: str) -> list[tuple[int, str]]:
    """(line, code) pairs from inline ``# HKLxxx`` expectation comments."""
    out = []
    for lineno, line in enumerate(source.splitlines(), start=1):
        match = _EXPECT_RE.search(line)
        if match:
            for code in match.group(1).split(","):
                out.append((lineno, code.strip()))
    return out


def strip_expectations(source: str) -> str:
    """The snippet as a reader should see it, without the expectation comments."""
    return "\n".join(_EXPECT_RE.sub("", line).rstrip() for line in source.splitlines()) + (
        "\n" if source.endswith("\n") else ""
    )


def iter_rule_examples(rule: type[Rule]) -> Iterator[tuple[str, str, bool]]:
    """(label, source, is_invalid) for every example a rule carries, docs included."""
    for i, src in enumerate(rule.VALID):
        yield f"{rule.code}-valid-{i}", src, False
    for i, inv in enumerate(rule.INVALID):
        yield f"{rule.code}-invalid-{i}", inv.code, True
