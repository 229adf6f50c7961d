"""JUnit XML, for CI systems that show test reports (GitLab, Jenkins, Azure).

As ruff does: one ``<testsuite>`` per file with findings and one failing
``<testcase>`` per finding; a run without findings is one passing test case.
Characters XML 1.0 cannot hold (control characters from a user's file) are
replaced, so the report always parses.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from itertools import groupby

from hooklint.findings import Finding, Report
from hooklint.report import SourceLoader, file_location
from hooklint.report.paths import place

# XML 1.0 allows tab, LF, CR and everything from U+0020 except surrogates and U+FFFE/U+FFFF.
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _failure_text(f: Finding) -> str:
    lines = [f"{place(f.path, f.location, f.cell)}: {f.code} {f.message}"]
    if f.help:
        lines.append(f"help: {f.help}")
    if f.fix is not None:
        lines.append(f"fix ({f.fix.applicability.value}): {f.fix.message}")
    if f.url:
        lines.append(f"docs: {f.url}")
    return "\n".join(lines)


def render_junit(report: Report, sources: SourceLoader | None = None) -> str:
    """``line`` is the line in the file itself (in a notebook, in its JSON, when
    ``sources`` can tell); the test case's name has the cell."""
    findings = report.sorted_findings()
    suites = ET.Element("testsuites", name="hooklint", tests=str(len(findings) or 1),
                        failures=str(len(findings)), errors="0")
    for path, group in groupby(findings, key=lambda f: f.path):
        items = list(group)
        suite = ET.SubElement(suites, "testsuite", name=_xml_text(path), tests=str(len(items)),
                              failures=str(len(items)), errors="0", skipped="0")
        for f in items:
            at = place("", f.location, f.cell)[1:]
            in_file = file_location(sources, f.path, f.cell, f.location)
            attrs = {"file": _xml_text(path)}
            if in_file is not None:
                attrs["line"] = str(in_file.row)
            case = ET.SubElement(suite, "testcase", classname=_xml_text(path),
                                 name=f"{f.code} {f.name} at {at}", **attrs)
            failure = ET.SubElement(case, "failure", message=_xml_text(f.message), type=f.code)
            failure.text = _xml_text(_failure_text(f))
    if not findings:
        suite = ET.SubElement(suites, "testsuite", name="hooklint", tests="1", failures="0", errors="0",
                              skipped="0")
        ET.SubElement(suite, "testcase", classname="hooklint",
                      name=f"no findings ({report.files_checked} files checked)")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
