"""Typed values that every layer produces and every formatter consumes.

The static, graph and runtime layers all report :class:`Finding` values; the
reporting layer renders them without knowing anything about rules.  Rows and
columns are 1-based everywhere (columns count characters, not bytes), as in
ruff's JSON output; the flake8 bridge converts to flake8's 0-based columns.

In a Jupyter notebook a place is a code cell (``cell``: its 1-based position
among all the notebook's cells, as the notebook shows them) and a row and
column within that cell; ``cell`` is None in other files.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Iterable


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Applicability(str, enum.Enum):
    """How far a fix can be trusted (ruff's three levels)."""

    SAFE = "safe"  # applied by --fix
    UNSAFE = "unsafe"  # applied by --fix --unsafe-fixes; may change behaviour
    DISPLAY_ONLY = "display-only"  # shown, never applied


class Origin(str, enum.Enum):
    """Which layer observed the finding."""

    STATIC = "static"
    GRAPH = "graph"
    RUNTIME = "runtime"


@dataclass(frozen=True, order=True)
class Location:
    row: int
    column: int

    def to_dict(self) -> dict[str, int]:
        return {"row": self.row, "column": self.column}


@dataclass(frozen=True)
class Edit:
    """Replace the text between two locations (end exclusive) with ``content``."""

    content: str
    location: Location
    end_location: Location

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "location": self.location.to_dict(),
            "end_location": self.end_location.to_dict(),
        }


@dataclass(frozen=True)
class Fix:
    message: str
    edits: tuple[Edit, ...]
    applicability: Applicability

    def to_dict(self) -> dict[str, Any]:
        return {
            "applicability": self.applicability.value,
            "message": self.message,
            "edits": [e.to_dict() for e in self.edits],
        }


@dataclass(frozen=True)
class Related:
    """A second place that explains a finding (the registration of a hook, say)."""

    message: str
    path: str
    location: Location
    cell: int | None = None  # the notebook cell of ``location``

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message, "filename": self.path, "location": self.location.to_dict()}
        if self.cell is not None:
            out["cell"] = self.cell
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Related":
        return cls(data["message"], data["filename"], Location(**data["location"]), data.get("cell"))


@dataclass(frozen=True)
class Finding:
    code: str
    name: str
    message: str
    path: str
    location: Location
    end_location: Location
    severity: Severity
    help: str = ""  # how to fix it, one or two sentences
    fix: Fix | None = None
    origin: Origin = Origin.STATIC
    related: tuple[Related, ...] = ()
    url: str = ""
    cell: int | None = None  # notebooks: the code cell ``location`` is in (rows count from the cell's start)

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.location.row, self.location.column, self.code, self.message)

    def with_changes(self, **changes: Any) -> "Finding":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """ruff's JSON keys (``cell`` is null outside notebooks, as in ruff), plus what
        hooklint adds (name, severity, help, origin, related)."""
        return {
            "cell": self.cell,
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "severity": self.severity.value,
            "filename": self.path,
            "location": self.location.to_dict(),
            "end_location": self.end_location.to_dict(),
            "help": self.help,
            "fix": self.fix.to_dict() if self.fix else None,
            "url": self.url,
            "origin": self.origin.value,
            "related": [r.to_dict() for r in self.related],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        fix = data.get("fix")
        return cls(
            code=data["code"],
            name=data["name"],
            message=data["message"],
            path=data["filename"],
            location=Location(**data["location"]),
            end_location=Location(**data["end_location"]),
            severity=Severity(data["severity"]),
            help=data.get("help", ""),
            fix=None
            if not fix
            else Fix(
                message=fix["message"],
                applicability=Applicability(fix["applicability"]),
                edits=tuple(
                    Edit(e["content"], Location(**e["location"]), Location(**e["end_location"]))
                    for e in fix["edits"]
                ),
            ),
            url=data.get("url", ""),
            origin=Origin(data.get("origin", "static")),
            related=tuple(Related.from_dict(r) for r in data.get("related", ())),
            cell=data.get("cell"),
        )


class NoticeLevel(str, enum.Enum):
    INFO = "info"  # e.g. "class X analysed by running a forward (fx could not trace it)"
    WARNING = "warning"  # a problem in the user's configuration or comments, e.g. `# noqa: HKL999`
    SKIP = "skip"  # a file or model that was not analysed, with the reason
    ERROR = "error"  # a file that could not be read, a model file that crashed


@dataclass(frozen=True)
class Notice:
    """Something the user should know that is not a finding in their code."""

    path: str
    message: str
    level: NoticeLevel = NoticeLevel.INFO
    # Notices with the same non-empty key are said once per run (the first by
    # path), e.g. one warning per unknown code named in `# noqa` comments.
    once_key: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = {"filename": self.path, "message": self.message, "level": self.level.value}
        if self.once_key:
            out["once_key"] = self.once_key
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Notice":
        return cls(data["filename"], data["message"], NoticeLevel(data.get("level", "info")),
                   data.get("once_key", ""))


@dataclass
class Report:
    """Everything one run produced; what formatters receive."""

    findings: list[Finding] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    files_checked: int = 0
    fixed: int = 0  # number of findings removed by applied fixes

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=Finding.sort_key)

    def extend(self, findings: Iterable[Finding]) -> None:
        self.findings.extend(findings)

    def unique_notices(self) -> list[Notice]:
        """The notices sorted by (path, message), each ``once_key`` kept once."""
        seen: set[str] = set()
        out = []
        for n in sorted(self.notices, key=lambda n: (n.path, n.message)):
            if n.once_key:
                if n.once_key in seen:
                    continue
                seen.add(n.once_key)
            out.append(n)
        return out

    def count_notices(self, level: NoticeLevel) -> int:
        return sum(1 for n in self.unique_notices() if n.level is level)
