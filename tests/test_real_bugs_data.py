"""bench/real_bugs.toml (published hook bugs, correct files, judgements), the
sealed bench/real_bugs_holdout.toml, and bench/real_bugs.py's argument parsing
and scoring, without any download (and without running hooklint on the
hold-out set)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "bench" / "real_bugs.toml"
HOLDOUT = REPO / "bench" / "real_bugs_holdout.toml"


def load_bench():
    spec = importlib.util.spec_from_file_location("real_bugs_bench", REPO / "bench" / "real_bugs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is built
    spec.loader.exec_module(module)
    return module


rb = load_bench()


@pytest.fixture(scope="module")
def raw():
    with open(DATA, "rb") as handle:
        return tomllib.load(handle)


@pytest.fixture(scope="module")
def holdout_raw():
    with open(HOLDOUT, "rb") as handle:
        return tomllib.load(handle)


@pytest.fixture(scope="module")
def data():
    return rb.load_data(DATA, rb.rule_codes())


@pytest.fixture(scope="module")
def both():
    """Both sets, loaded as `--all` loads them."""
    return rb.load_sets(["tuning", "holdout"], rb.rule_codes())


def test_data_file_is_valid(raw):
    assert rb.validate(raw, rb.rule_codes()) == []


def test_holdout_file_is_valid(holdout_raw):
    assert rb.validate(holdout_raw, rb.rule_codes(), holdout=True) == []


def test_ids_are_unique_across_both_files(raw, holdout_raw):
    assert rb.validate_sets({"tuning": raw, "holdout": holdout_raw}) == []


def test_holdout_is_sealed_and_sized(holdout_raw):
    header = HOLDOUT.read_text().splitlines()[0]
    assert "SEALED HOLD-OUT SET" in header
    cases = holdout_raw["case"]
    assert len(cases) >= 12  # the seventh half: 23 of 45 cases; a half under 12 measures too little to split (round 6 sealed 7)
    assert not any("needs" in c for c in cases)
    assert set(holdout_raw) <= {"case", "judgement"}


def test_both_sets_load_with_their_names(both):
    by_set = {name: [c for c in both.cases if c.corpus == name] for name in ("tuning", "holdout")}
    assert by_set["tuning"] and by_set["holdout"]
    assert {c.id for c in by_set["tuning"]} == {c.id for c in rb.load_data(DATA, rb.rule_codes()).cases}


def test_corpus_size(data):
    assert len(data.cases) >= 30
    assert len(data.correct) >= 15
    assert len({c.package for c in data.cases}) >= 15


def test_every_case_has_every_field(raw):
    for entry in raw["case"]:
        missing = [name for name in rb.CASE_FIELDS if name not in entry]
        assert not missing, (entry.get("id"), missing)


def test_case_codes_and_classes(both):
    known = rb.rule_codes() | rb.PLANNED_CODES
    for case in both.cases:
        assert case.bug_class in rb.CLASSES, case.id
        assert set(case.expected) <= known, case.id
        assert case.expected != ("HKL101",), case.id
        assert case.source.startswith("https://"), case.id
        assert all(first <= last for first, last in case.lines), case.id


def test_needs_name_defined_capabilities(data):
    for case in data.cases:
        assert set(case.needs) <= set(data.capabilities), case.id
    used = {cap for case in data.cases for cap in case.needs}
    assert used == set(data.capabilities), "every capability is needed by some case"


CODE_LINE = re.compile(r"^\s*((def|class)\s+\w+\s*[(:]"
                       r"|(import\s+[\w.]+(\s+as\s+\w+)?|from\s+[\w.]+\s+import\s+.*)\s*$"
                       r"|(if|for|with|while|try|else|elif)\b.*:\s*$)")


def test_descriptions_are_prose_not_code(both):
    """Descriptions are written in our words; no third-party code is copied
    beyond short identifiers."""
    for item in [*both.cases, *both.correct]:
        text = item.description
        assert len(text) >= 100, item.id
        assert "```" not in text, item.id
        for line in text.splitlines():
            assert not line.startswith("    "), (item.id, line)
            assert not CODE_LINE.match(line), (item.id, line)


@pytest.mark.parametrize(("line", "is_code"), [
    ("def save_gradient(self, module, grad_input, grad_output):", True),
    ("class ActivationsAndGradients:", True),
    ("import torch.nn as nn", True),
    ("from torch import nn", True),
    ("    if module.weight.grad is None:", True),
    ("for models with MaxPool1d are wrong (issue shap#477).", False),
    ("from its constructor argument, and its call() runs self.module.forward(*args).", False),
])
def test_code_line_pattern(line, is_code):
    assert bool(CODE_LINE.match(line)) is is_code


@pytest.mark.parametrize("path", [DATA, HOLDOUT], ids=["tuning", "holdout"])
def test_judgements_are_unique_and_explained(path):
    judgements = rb.load_data(path, rb.rule_codes(), corpus="holdout" if path == HOLDOUT else "tuning").judgements
    keys = [(j.package, j.version, j.path, j.line, j.code) for j in judgements]
    assert len(keys) == len(set(keys))
    assert all(len(j.reason) >= 20 for j in judgements)


# --- validate() reports what is wrong --------------------------------------

def good_case(**changes):
    case = {"id": "a-case", "package": "pkg", "buggy": "1.0", "fixed": "1.1", "path": "pkg/mod.py",
            "lines": [[3, 5]], "class": "leak", "expected": ["HKL304"], "source": "https://example.org/1",
            "description": "x" * 120}
    case.update(changes)
    return case


@pytest.mark.parametrize(("change", "message"), [
    ({"class": "leek"}, "unknown class 'leek'"),
    ({"lines": [[5, 3]]}, "lines must be a non-empty list"),
    ({"lines": []}, "lines must be a non-empty list"),
    ({"expected": ["HKL101"]}, "HKL101 alone cannot describe a bug"),
    ({"expected": ["HKL9"]}, "is not a rule code"),
    ({"expected": ["HKL999"]}, "HKL999 is not a hooklint rule"),
    ({"source": "issue 12"}, "source must be a URL"),
    ({"fixed": "1.0"}, "fixed and buggy are the same version"),
    ({"fixed": "", "fixed_lines": [[1, 2]]}, "without a fixed release"),
    ({"path": "../etc/passwd"}, "relative to the package root"),
    ({"needs": ["telepathy"]}, "needs 'telepathy'"),
    ({"id": "Not Kebab"}, "id must be kebab-case"),
])
def test_validate_reports_bad_cases(change, message):
    problems = rb.validate({"case": [good_case(**change)]}, {"HKL304", "HKL101"})
    assert any(message in p for p in problems), problems


def test_validate_reports_missing_fields_duplicates_and_bad_judgements():
    incomplete = good_case()
    del incomplete["source"]
    problems = rb.validate({
        "case": [incomplete, good_case()],
        "correct": [{"id": "ok", "package": "p", "version": "1", "path": "p.py", "description": "d",
                     "accept": {"HKL101": ""}}],
        "judgement": [{"package": "p", "version": "1", "path": "p.py", "line": 3, "code": "HKL304",
                       "verdict": "maybe", "reason": "r"}],
        "cases": [],
    }, {"HKL304", "HKL101"})
    text = "\n".join(problems)
    assert "missing field 'source'" in text
    assert "duplicate id" in text
    assert "accept.HKL101 needs a reason" in text
    assert 'verdict must be "true" or "false"' in text
    assert "unknown top-level keys: cases" in text


def test_a_good_case_is_accepted():
    assert rb.validate({"case": [good_case()]}, {"HKL304"}) == []


def test_a_case_no_rule_describes_is_accepted():
    """`expected = []`: the bug is real, no rule describes it yet (it counts as a miss)."""
    assert rb.validate({"case": [good_case(expected=[], **{"class": "handle-bookkeeping"})]}, {"HKL304"}) == []


@pytest.mark.parametrize(("raw_file", "message"), [
    ({"case": [good_case(needs=["x"])], "capabilities": {"x": "y"}}, "a hold-out case has no `needs`"),
    ({"case": [good_case()], "correct": []}, "unknown top-level keys: correct"),
    ({"case": [good_case(expected="HKL304")]}, "expected must be a list"),
])
def test_validate_reports_bad_holdout_files(raw_file, message):
    problems = rb.validate(raw_file, {"HKL304"}, holdout=True)
    assert any(message in p for p in problems), problems


def judgement(**changes):
    entry = {"package": "pkg", "version": "1.0", "path": "pkg/mod.py", "line": 3, "code": "HKL304",
             "verdict": "true", "reason": "hooks the caller's module and drops the handle"}
    entry.update(changes)
    return entry


def test_holdout_judgements_are_validated_and_counted(tmp_path):
    """A hold-out run scores the judgements of the hold-out file, as a tuning
    run scores those of the tuning file."""
    assert rb.validate({"case": [good_case()], "judgement": [judgement()]}, {"HKL304"}, holdout=True) == []
    problems = rb.validate({"case": [good_case()], "judgement": [judgement(verdict="maybe")]}, {"HKL304"},
                           holdout=True)
    assert any('verdict must be "true" or "false"' in p for p in problems), problems
    holdout = tmp_path / "holdout.toml"
    holdout.write_text(
        '[[case]]\nid = "a-case"\npackage = "pkg"\nbuggy = "1.0"\nfixed = "1.1"\npath = "pkg/mod.py"\n'
        'lines = [[3, 5]]\nclass = "leak"\nexpected = ["HKL304"]\nsource = "https://example.org/1"\n'
        f'description = "{"x" * 120}"\n\n'
        '[[judgement]]\npackage = "pkg"\nversion = "1.1"\npath = "pkg/mod.py"\nline = 4\ncode = "HKL304"\n'
        'verdict = "true"\nreason = "the fix left this registration as it was"\n')
    data = rb.load_sets(["holdout"], {"HKL304"}, paths={"holdout": holdout})
    assert [(j.version, j.line, j.verdict) for j in data.judgements] == [("1.1", 4, "true")]
    finding = {"path": "pkg/mod.py", "code": "HKL304", "location": {"row": 4, "column": 1}}
    releases = {("pkg", "1.0"): rb.Release("pkg", "1.0", root=tmp_path),
                ("pkg", "1.1"): rb.Release("pkg", "1.1", root=tmp_path, findings=[finding])}
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("")
    scored = rb.score(data, releases, data.cases, data.correct)
    assert scored["fp_list"] == [] and scored["tp"]["HKL304"] == 1 and scored["fp"]["HKL304"] == 0


def test_validate_sets_reports_a_finding_judged_both_ways():
    tuning = {"case": [good_case()], "judgement": [judgement()]}
    text = "\n".join(rb.validate_sets({"tuning": tuning, "holdout": {"judgement": [judgement(verdict="false")]}}))
    assert "judgement of HKL304 at pkg==1.0 pkg/mod.py:3: true in the tuning set, false in the holdout set" in text
    assert rb.validate_sets({"tuning": tuning, "holdout": {"judgement": [judgement()]}}) == []


def test_validate_sets_reports_ids_and_bugs_in_both_sets():
    tuning = {"case": [good_case()], "correct": [{"id": "ok-x"}]}
    holdout = {"case": [good_case(), good_case(id="other-id"), good_case(id="ok-x", path="pkg/other.py")]}
    text = "\n".join(rb.validate_sets({"tuning": tuning, "holdout": holdout}))
    assert "case 'a-case' is in both the tuning and the holdout set" in text
    assert "case 'other-id': the same bug is a case of the tuning set" in text
    assert "case 'ok-x' is in both" in text
    assert rb.validate_sets({"tuning": tuning, "holdout": {"case": [good_case(id="b", path="pkg/b.py")]}}) == []


# --- arguments ---------------------------------------------------------------

def test_parse_args_defaults():
    args = rb.parse_args([])
    assert args.selected == [] and args.list is False and args.json is None
    assert args.data == rb.DATA_FILE and args.cache is None and args.jobs >= 1
    assert args.sets == ["tuning"] and args.holdout_data == rb.HOLDOUT_FILE


@pytest.mark.parametrize(("argv", "sets"), [(["--holdout"], ["holdout"]), (["--all"], ["tuning", "holdout"])])
def test_parse_args_chooses_the_set(argv, sets):
    assert rb.parse_args(argv).sets == sets


def test_parse_args_subset_and_outputs(tmp_path):
    args = rb.parse_args(["--cases", " grad-cam-handles-dropped, ok-torchinfo-summary ,", "--list",
                          "--json", str(tmp_path / "out.json"), "-j", "3", "--cache", str(tmp_path)])
    assert args.selected == ["grad-cam-handles-dropped", "ok-torchinfo-summary"]
    assert args.list and args.jobs == 3 and args.json == tmp_path / "out.json" and args.cache == tmp_path


@pytest.mark.parametrize("argv", [["-j", "0"], ["--nope"], ["-j", "many"], ["--holdout", "--all"]])
def test_parse_args_rejects_bad_arguments(argv):
    with pytest.raises(SystemExit) as exc:
        rb.parse_args(argv)
    assert exc.value.code == 2


def test_unknown_case_id_fails_before_any_download(capsys, tmp_path):
    assert rb.main(["--cases", "no-such-case", "--cache", str(tmp_path / "cache")]) == 2
    assert "unknown ids: no-such-case" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_tuning_run_does_not_know_holdout_ids(capsys, tmp_path, holdout_raw):
    """The default run is the tuning corpus only: a hold-out id is unknown there."""
    sealed = holdout_raw["case"][0]["id"]
    assert rb.main(["--cases", sealed, "--cache", str(tmp_path / "cache")]) == 2
    assert f"unknown ids: {sealed}" in capsys.readouterr().err


def test_a_bad_holdout_file_fails_before_any_download(capsys, tmp_path):
    bad = tmp_path / "holdout.toml"
    bad.write_text(DATA.read_text())  # correct files and needs are not allowed in the hold-out file
    assert rb.main(["--holdout", "--holdout-data", str(bad), "--cache", str(tmp_path / "cache")]) == 2
    assert "hold-out" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()


def test_cache_folder_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HOOKLINT_REALBUGS", str(tmp_path))
    assert rb.cache_dir() == tmp_path


def test_package_root_strips_only_an_sdist_folder(tmp_path):
    sdist = tmp_path / "sdist"
    (sdist / "pkg-1.0" / "pkg").mkdir(parents=True)
    assert rb.package_root(sdist, "1.0") == sdist / "pkg-1.0"
    wheel = tmp_path / "wheel"
    (wheel / "pkg").mkdir(parents=True)
    assert rb.package_root(wheel, "1.0") == wheel


# --- scoring (fake releases, no download, no hooklint run) -----------------

def finding(path, row, code):
    return {"path": path, "filename": path, "location": {"row": row, "column": 1}, "code": code, "message": "m"}


def release(tmp_path, package, version, files, findings):
    root = tmp_path / f"{package}-{version}"
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return rb.Release(package, version, root=root, findings=findings, files=len(files))


def test_score_counts_found_missed_fixed_and_false_positives(tmp_path):
    found = rb.Case("found-one", "pkg", "1.0", "1.1", "pkg/a.py", ((10, 12),), "leak", ("HKL304",),
                    "https://example.org", "d", needs=())
    missed = rb.Case("missed-one", "pkg", "1.0", "", "pkg/b.py", ((5, 5),), "shared-handles", ("HKL305",),
                     "https://example.org", "d", needs=("class-attr-handles",))
    correct = rb.CorrectFile("ok-file", "other", "2.0", "other/c.py", "d", accept={"HKL101": "deprecated"})
    judged = rb.Judgement("pkg", "1.0", "pkg/z.py", 7, "HKL303", "false", "not a module")
    data = rb.Data([found, missed], [correct], [judged], {"class-attr-handles": "x"})
    releases = {
        ("pkg", "1.0"): release(tmp_path, "pkg", "1.0", ["pkg/a.py", "pkg/b.py", "pkg/z.py"], [
            finding("pkg/a.py", 11, "HKL304"),   # the bug: found
            finding("pkg/a.py", 11, "HKL101"),   # on the lines, other code: unjudged
            finding("pkg/b.py", 5, "HKL101"),    # missed-one: HKL101 alone does not find it
            finding("pkg/z.py", 7, "HKL303"),    # judged false
        ]),
        ("pkg", "1.1"): release(tmp_path, "pkg", "1.1", ["pkg/a.py"], [finding("pkg/a.py", 30, "HKL304")]),
        ("other", "2.0"): release(tmp_path, "other", "2.0", ["other/c.py"], [
            finding("other/c.py", 3, "HKL101"),  # accepted
            finding("other/c.py", 4, "HKL102"),  # false positive
        ]),
    }
    scored = rb.score(data, releases, data.cases, data.correct)
    by_id = {r.case.id: r for r in scored["cases"]}
    assert by_id["found-one"].status == "found"
    assert by_id["found-one"].fixed_status == "still reported"  # the fixed file still has an HKL304
    assert by_id["missed-one"].status == "missed"
    assert [f["code"] for f in by_id["missed-one"].on_lines] == ["HKL101"]
    assert scored["tp"] == {"HKL304": 1, "HKL101": 1}
    assert scored["fp"] == {"HKL304": 1, "HKL102": 1, "HKL303": 1}
    assert sorted(f["code"] for _, _, f in scored["unjudged"]) == ["HKL101", "HKL101"]


def test_score_fixed_lines_limit_what_counts_as_still_reported(tmp_path):
    case = rb.Case("narrow", "pkg", "1.0", "1.1", "pkg/a.py", ((10, 12),), "leak", ("HKL304",),
                   "https://example.org", "d", fixed_lines=((20, 25),))
    data = rb.Data([case], [], [], {})
    releases = {
        ("pkg", "1.0"): release(tmp_path, "pkg", "1.0", ["pkg/a.py"], []),
        ("pkg", "1.1"): release(tmp_path, "pkg", "1.1", ["pkg/a.py"], [finding("pkg/a.py", 40, "HKL304")]),
    }
    scored = rb.score(data, releases, data.cases, [])
    (result,) = scored["cases"]
    assert result.status == "missed" and result.fixed_status == "gone"
    assert [f["location"]["row"] for _, _, f in scored["unjudged"]] == [40]


def test_score_leaves_out_unavailable_releases(tmp_path):
    case = rb.Case("gone-pkg", "pkg", "1.0", "", "pkg/a.py", ((1, 1),), "leak", ("HKL304",),
                   "https://example.org", "d")
    data = rb.Data([case], [], [], {})
    scored = rb.score(data, {("pkg", "1.0"): rb.Release("pkg", "1.0", problem="no such version")},
                      data.cases, [])
    assert scored["cases"][0].status == "unavailable"


def test_a_case_no_rule_describes_is_a_miss_in_its_class(tmp_path):
    described = rb.Case("found-one", "pkg", "1.0", "", "pkg/a.py", ((10, 12),), "leak", ("HKL304",),
                        "https://example.org", "d")
    undescribed = rb.Case("no-rule", "pkg", "1.0", "1.1", "pkg/b.py", ((5, 5),), "handle-bookkeeping", (),
                          "https://example.org", "d", corpus="holdout")
    data = rb.Data([described, undescribed], [], [], {})
    releases = {
        ("pkg", "1.0"): release(tmp_path, "pkg", "1.0", ["pkg/a.py", "pkg/b.py"], [
            finding("pkg/a.py", 11, "HKL304"),
            finding("pkg/b.py", 5, "HKL101"),
        ]),
        ("pkg", "1.1"): release(tmp_path, "pkg", "1.1", ["pkg/b.py"], []),
    }
    scored = rb.score(data, releases, data.cases, [])
    by_id = {r.case.id: r for r in scored["cases"]}
    assert by_id["no-rule"].status == "missed" and by_id["no-rule"].fixed_status == "no rule"
    table = rb.recall(scored["cases"])
    assert table["per_class"]["handle-bookkeeping"] == {"found": 0, "cases": 1, "no_rule": 1}
    assert table["per_class"]["leak"] == {"found": 1, "cases": 1, "no_rule": 0}
    assert table["per_set"] == {"tuning": {"found": 1, "cases": 1, "no_rule": 0},
                                "holdout": {"found": 0, "cases": 1, "no_rule": 1}}
    assert table["overall"] == {"found": 1, "cases": 2, "no_rule": 1}
    assert rb.to_json(releases, scored, ["tuning", "holdout"])["sets"] == ["tuning", "holdout"]
