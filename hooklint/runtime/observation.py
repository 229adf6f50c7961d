"""What instrumentation saw, before it becomes a :class:`~hooklint.findings.Finding`.

An observation carries, besides the finding's text, what was expected and what
was observed: the assertion helpers print both.  The finding itself is built
by the rule class of its code, so codes, names, severities and URLs are the
ones `hooklint check` uses.

Observations of one problem from one place fold into one: ``key`` says which
problem at which site (code, source position, situation; never an object's
identity, so that observations from several processes fold the same way), and
``subject`` names what it was seen on (a parameter, a module).  One hook
registered on eight parameters from one line gives one observation, whose
message lists the eight parameters (:meth:`Observation.merge`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hooklint.findings import Finding, Origin, Related
from hooklint.runtime.frames import Site

_LISTED = 10  # names of further subjects written out in a message; the rest are counted


@dataclass
class Observation:
    code: str
    key: tuple  # two observations with the same key are the same finding, seen again or on another subject
    site: Site
    message: str
    help: str
    expected: str = ""
    observed: str = ""
    related: tuple[Related, ...] = ()
    count: int = 1
    # A message that already states how often it happened (HKL304's count).
    counts_itself: bool = False
    # What the message is about, as the message names it (`net.0.weight` (shape (4,))), and
    # its noun for the list of further subjects folded into this observation.
    subject: str = ""
    subject_noun: str = "target"
    # Further subjects with the same problem from the same site, with how often each was seen.
    others: dict[str, int] = field(default_factory=dict)
    # The text of the error PyTorch raises because of this problem (a part of it): a
    # script that fails with it failed because of this finding (``hooklint run``).
    raises: str = ""

    def explains(self, exc: BaseException) -> bool:
        """``exc`` (or an exception in its chain) is the error this problem makes PyTorch raise."""
        if not self.raises:
            return False
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            if self.raises in str(current):
                return True
            current = current.__cause__ or current.__context__
        return False

    def merge(self, other: "Observation") -> None:
        """Fold ``other`` (same key) into this observation: the same subject seen
        again counts once more (or, for a message that states its own count,
        the newer message replaces this one); another subject joins the list."""
        if other.subject == self.subject:
            if other.counts_itself:
                self.message, self.count, self.related = other.message, other.count, other.related
                self.expected, self.observed = other.expected, other.observed
            else:
                self.count += other.count
        elif other.subject in self.others:
            self.others[other.subject] = other.count if other.counts_itself else \
                self.others[other.subject] + other.count
        else:
            self.others[other.subject] = other.count
        for subject, count in other.others.items():
            if subject != self.subject:
                self.others[subject] = max(count, self.others.get(subject, 0))

    @property
    def full_message(self) -> str:
        message = self.message
        if self.others:
            names = list(self.others)
            listed = ", ".join(names[:_LISTED])
            more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
            noun = self.subject_noun + ("" if len(names) == 1 else "s")
            message += f"; the same for {len(names)} other {noun}: {listed}{more}"
        times = max([self.count, *self.others.values()]) if not self.counts_itself else 1
        if times > 1:
            message += f" (observed {times} times)"
        return message

    def finding(self) -> Finding | None:
        rule = rule_for(self.code)
        if rule is None:
            return None
        return rule.make(
            path=self.site.path,
            location=self.site.location,
            end_location=self.site.end_location,
            message=self.full_message,
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
