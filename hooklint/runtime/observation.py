"""What instrumentation saw, before it becomes a :class:`~hooklint.findings.Finding`.

An observation carries, besides the finding's text, what was expected and what
was observed: the assertion helpers print both.  The finding itself is built
by the rule class of its code, so codes, names, severities and URLs are the
ones `hooklint check` uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from hooklint.findings import Finding, Origin, Related
from hooklint.runtime.frames import Site


@dataclass
class Observation:
    code: str
    key: tuple  # two observations with the same key are the same finding seen again
    site: Site
    message: str
    help: str
    expected: str = ""
    observed: str = ""
    related: tuple[Related, ...] = ()
    count: int = 1
    # A message that already states how often it happened (HKL304's count).
    counts_itself: bool = False

    def finding(self) -> Finding | None:
        rule = rule_for(self.code)
        if rule is None:
            return None
        message = self.message
        if self.count > 1 and not self.counts_itself:
            message += f" (observed {self.count} times)"
        return rule.make(
            path=self.site.path,
            location=self.site.location,
            end_location=self.site.end_location,
            message=message,
            help=self.help,
            origin=Origin.RUNTIME,
            related=self.related,
        )


def rule_for(code: str):
    """The rule class for ``code``, or None when this build has no such rule (a
    family not written yet): the observation is then not reported."""
    from hooklint.rules import UnknownRuleError, get_rule

    try:
        return get_rule(code)
    except UnknownRuleError:
        return None
