"""`--output-format sarif / github / junit` (and the rule URL in every format):
SARIF validated against the published 2.1.0 schema, GitHub annotations
escaped as the Actions toolkit does, JUnit parsed with xml.etree."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, run_cli
from hooklint.findings import (Applicability, Edit, Finding, Fix, Location, Notice, NoticeLevel, Related, Report,
                               Severity)
from hooklint.report import rule_catalog
from hooklint.report.github import escape_data, escape_property, render_github
from hooklint.report.junit import render_junit
from hooklint.report.sarif import render_sarif

SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))

# HKL101 (with a fix) and HKL102 (with a related location) on one line
BAD = """\
import torch.nn as nn

def hook(module, grad_input, grad_output):
    print(grad_input)

net = nn.Sequential(nn.Linear(4, 2), nn.ReLU())
net.register_backward_hook(hook)
"""


def validate_sarif(log: dict) -> None:
    validator = jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


@pytest.fixture
def project(tmp_path):
    (tmp_path / ".git").mkdir()  # the repository root that paths are relative to
    sub = tmp_path / "pkg dir"
    sub.mkdir()
    (sub / "bad.py").write_text(BAD)
    (sub / "clean.py").write_text("import torch\n")
    return tmp_path


def check(cwd, *args):
    return run_cli("check", "--static-only", *args, cwd=cwd)


class TestSarif:
    def test_cli_output_validates_and_points_at_rules(self, project):
        r = check(project / "pkg dir", "--output-format", "sarif", ".")
        assert r.returncode == 1, r.stderr
        log = json.loads(r.stdout)
        validate_sarif(log)
        run = log["runs"][0]
        rules = run["tool"]["driver"]["rules"]
        assert {"HKL101", "HKL102"} <= {rule["id"] for rule in rules}
        for rule in rules:
            assert rule["helpUri"].endswith(f"/docs/rules/{rule['id']}.md")
            assert rule["help"]["markdown"].startswith(f"# {rule['id']} {rule['name']}")
            assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        results = run["results"]
        assert [res["ruleId"] for res in results] == ["HKL101", "HKL102"]
        for res in results:
            assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
            loc = res["locations"][0]["physicalLocation"]
            # relative to the repository root (run from a subfolder), percent-encoded
            assert loc["artifactLocation"] == {"uri": "pkg%20dir/bad.py", "uriBaseId": "%SRCROOT%"}
            assert loc["region"] == {"startLine": 7, "startColumn": 5, "endLine": 7, "endColumn": 27}
        assert results[0]["level"] == "warning" and results[1]["level"] == "error"
        [fix] = results[0]["fixes"]
        [replacement] = fix["artifactChanges"][0]["replacements"]
        assert replacement["insertedContent"]["text"] == "register_full_backward_hook"
        assert results[1]["relatedLocations"][0]["physicalLocation"]["region"]["startLine"] == 4
        assert run["columnKind"] == "unicodeCodePoints"
        assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == project.resolve().as_uri() + "/"

    def test_no_findings_validates(self, project):
        r = check(project, "--output-format", "sarif", "pkg dir/clean.py")
        assert r.returncode == 0
        log = json.loads(r.stdout)
        validate_sarif(log)
        assert log["runs"][0]["results"] == []

    def test_notices_fixes_and_unknown_rules_validate(self, tmp_path):
        finding = Finding("HKL999", "not-in-catalog", "m", str(tmp_path / "x.py"), Location(3, 1), Location(3, 1),
                          Severity.INFO, fix=Fix("insert", (Edit("y\n", Location(3, 1), Location(3, 1)),),
                                                 Applicability.DISPLAY_ONLY),
                          related=(Related("there", "/elsewhere/y.py", Location(1, 2)),), url="https://e.x/HKL999")
        report = Report([finding], [Notice("x.py", "cannot read", NoticeLevel.ERROR), Notice("", "info")])
        log = json.loads(render_sarif(report, rule_catalog(), root=tmp_path))
        validate_sarif(log)
        run = log["runs"][0]
        assert run["invocations"][0]["executionSuccessful"] is False
        assert run["results"][0]["level"] == "note"
        assert run["tool"]["driver"]["rules"][run["results"][0]["ruleIndex"]]["id"] == "HKL999"
        # outside the repository root: an absolute URI
        assert run["results"][0]["relatedLocations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
            "file:///elsewhere/y.py"

    def test_schema_rejects_what_is_wrong(self):
        """The validation can fail: a result without a message is invalid."""
        log = json.loads(render_sarif(Report(), {}))
        log["runs"][0]["results"] = [{"ruleId": "HKL101"}]
        with pytest.raises(AssertionError):
            validate_sarif(log)


class TestGithub:
    def test_escaping(self):
        assert escape_data("50% a\r\nb") == "50%25 a%0D%0Ab"
        assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"

    def test_annotation_line(self, tmp_path):
        f = Finding("HKL102", "legacy-hook-grad-input", "100% wrong: a, b\nnext", str(tmp_path / "we:ird,name.py"),
                    Location(7, 5), Location(7, 27), Severity.ERROR, help="use x", url="https://docs/HKL102.md")
        out = render_github(Report([f]), root=tmp_path)
        assert out == ("::error title=HKL102 legacy-hook-grad-input,file=we%3Aird%2Cname.py,line=7,col=5,endLine=7,"
                       "endColumn=27::100%25 wrong: a, b%0Anext%0Ause x%0ADocs: https://docs/HKL102.md\n")

    def test_cli(self, project):
        r = check(project / "pkg dir", "--output-format", "github", ".")
        assert r.returncode == 1
        lines = r.stdout.splitlines()
        assert len(lines) == 2
        pattern = re.compile(r"^::(warning|error) title=(HKL\d{3}) [a-z-]+,file=pkg dir/bad\.py,line=7,col=5,"
                             r"endLine=7,endColumn=27::[^\r\n]+$")
        assert [pattern.match(line).group(1, 2) for line in lines] == [("warning", "HKL101"), ("error", "HKL102")]


class TestJunit:
    def test_cli_parses(self, project):
        r = check(project, "--output-format", "junit", ".")
        assert r.returncode == 1
        root = ET.fromstring(r.stdout)
        assert root.tag == "testsuites" and root.get("tests") == "2" and root.get("failures") == "2"
        [suite] = root.findall("testsuite")
        assert suite.get("name") == "pkg dir/bad.py"
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == ["HKL101 legacy-backward-hook at 7:5",
                                                 "HKL102 legacy-hook-grad-input at 7:5"]
        failure = cases[0].find("failure")
        assert failure.get("type") == "HKL101" and "docs/rules/HKL101.md" in failure.text

    def test_clean_run_is_one_passing_case(self):
        root = ET.fromstring(render_junit(Report(files_checked=3)))
        [case] = root.iter("testcase")
        assert case.find("failure") is None and root.get("failures") == "0"

    def test_control_characters_do_not_break_the_xml(self):
        f = Finding("HKL101", "legacy-backward-hook", "bad \x1b[31m\x00 <tag> & \"q\"", "a\x0b.py", Location(1, 1),
                    Location(1, 2), Severity.WARNING)
        root = ET.fromstring(render_junit(Report([f])))
        assert root.find("testsuite/testcase/failure").get("message") == "bad \ufffd[31m\ufffd <tag> & \"q\""


@pytest.mark.parametrize("fmt", ["full", "json", "json-lines", "sarif", "github", "junit"])
def test_every_format_carries_the_rule_docs(project, fmt):
    r = check(project, "--output-format", fmt, "pkg dir/bad.py")
    assert r.returncode == 1
    for code in ("HKL101", "HKL102"):
        assert f"https://github.com/hooklint/hooklint/blob/main/docs/rules/{code}.md" in r.stdout


def test_output_file(project):
    r = check(project, "--output-format", "sarif", "-o", "hooklint.sarif", "pkg dir/bad.py")
    assert r.returncode == 1 and r.stdout == ""
    validate_sarif(json.loads(Path(project / "hooklint.sarif").read_text(encoding="utf-8")))


def test_full_format_frames_the_right_line_after_a_form_feed(tmp_path):
    """Rows count Python's line breaks only (\\x0c is not one; str.splitlines() says it is)."""
    (tmp_path / "ff.py").write_text("import torch.nn as nn  # \x0c page\nm = nn.Linear(2, 2)\n"
                                    "m.register_backward_hook(lambda mod, gi, go: None)\n")
    r = check(tmp_path, "ff.py")
    assert "3 | m.register_backward_hook(lambda mod, gi, go: None)\n  |   ^^^^" in r.stdout, r.stdout
