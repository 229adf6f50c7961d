"""``json`` (a list, ruff's keys) and ``json-lines`` (one object per line)."""

from __future__ import annotations

import json

from hooklint.findings import Report


def render_json(report: Report) -> str:
    return json.dumps([f.to_dict() for f in report.sorted_findings()], indent=2, ensure_ascii=False) + "\n"


def render_json_lines(report: Report) -> str:
    return "".join(json.dumps(f.to_dict(), ensure_ascii=False) + "\n" for f in report.sorted_findings())
