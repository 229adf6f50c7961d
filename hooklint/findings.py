"""Typed values that every layer produces and every formatter consumes.

The static, graph and runtime layers all report :class:`Finding` values; the
reporting layer renders them without knowing anything about rules.  Rows and
columns are 1-based everywhere (columns count characters, not bytes), as in
ruff's JSON output; the flake8 bridge converts to flake8's 0-based columns.
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

    def to_dict(self) -> dict[str, Any]:
        return {"message": self.message, "filename": self.path, "location": self.location.to_dict()}


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

    def sort_key(self) -> tuple:
        return (self.path, self.location.row, self.location.column, self.code, self.message)

    def with_changes(self, **changes: Any) -> "Finding":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """ruff's JSON keys, plus what hooklint adds (name, severity, help, origin, related)."""
        return {
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
            related=tuple(
                Related(r["message"], r["filename"], Location(**r["location"]))
                for r in data.get("related", ())
            ),
        )


class NoticeLevel(str, enum.Enum):
    INFO = "info"  # e.g. "class X analysed by running a forward (fx could not trace it)"
    SKIP = "skip"  # a file or model that was not analysed, with the reason
    ERROR = "error"  # a file that could not be read, a model file that crashed


@dataclass(frozen=True)
class Notice:
    """Something the user should know that is not a finding in their code."""

    path: str
    message: str
    level: NoticeLevel = NoticeLevel.INFO

    def to_dict(self) -> dict[str, Any]:
        return {"filename": self.path, "message": self.message, "level": self.level.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Notice":
        return cls(data["filename"], data["message"], NoticeLevel(data.get("level", "info")))


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
