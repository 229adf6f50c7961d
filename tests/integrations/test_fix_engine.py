"""The fix engine on synthetic findings: offsets, overlaps, the re-parse gate,
rounds, line endings, encodings, and what is (never) written."""

from __future__ import annotations

import os

from hooklint.findings import Applicability, Edit, Finding, Fix, Location, Severity
from hooklint.fix.apply import LineStarts, apply_round, fix_text
from hooklint.fix.files import SourceFile, fix_files, split_lines, unified_diff

SAFE, UNSAFE, DISPLAY = Applicability.SAFE, Applicability.UNSAFE, Applicability.DISPLAY_ONLY
ONLY_SAFE = frozenset({SAFE})
ALL = frozenset({SAFE, UNSAFE})


def finding(edits, applicability=SAFE, code="HKL999", path="a.py", row=None) -> Finding:
    """A finding whose fix replaces ((row, col), (end_row, end_col), text) spans."""
    edit_objs = tuple(Edit(text, Location(*start), Location(*end)) for start, end, text in edits)
    at = Location(row, 1) if row else edit_objs[0].location
    return Finding(code=code, name="synthetic", message="m", path=path, location=at, end_location=at,
                   severity=Severity.WARNING, fix=Fix("rewrite", edit_objs, applicability))


def no_findings(_text):
    return []


class TestOffsets:
    def test_character_columns_not_bytes(self):
        text = "s = 'é'; x.old()\n"
        lines = LineStarts(text)
        assert text[lines.offset(Location(1, 12)):].startswith("old")

    def test_rows_split_only_on_python_line_breaks(self):
        # \x0c and \u2028 are not line breaks for Python (str.splitlines disagrees)
        text = "a = 1  # \x0c page\nb = '\u2028'\nx.old()\n"
        lines = LineStarts(text)
        assert text[lines.offset(Location(3, 3)):].startswith("old")

    def test_end_of_line_and_end_of_file_are_inside(self):
        text = "ab\ncd\n"
        lines = LineStarts(text)
        assert lines.offset(Location(1, 3)) == 2  # after "ab", before the newline
        assert lines.offset(Location(3, 1)) == len(text)
        assert lines.offset(Location(1, 4)) is None
        assert lines.offset(Location(4, 1)) is None
        assert lines.offset(Location(0, 1)) is None


class TestRound:
    def test_replaces_the_span(self):
        r = apply_round("x.old(f)\n", [finding([((1, 3), (1, 6), "new")])], ONLY_SAFE)
        assert r.text == "x.new(f)\n" and len(r.applied) == 1 and not r.rejected

    def test_applicability_gates(self):
        text = "x.old(f)\n"
        unsafe = finding([((1, 3), (1, 6), "new")], UNSAFE)
        display = finding([((1, 3), (1, 6), "new")], DISPLAY)
        assert apply_round(text, [unsafe, display], ONLY_SAFE).text == text
        assert apply_round(text, [unsafe], ALL).text == "x.new(f)\n"
        # display-only is never applied, whatever the caller allows
        assert apply_round(text, [display], frozenset(Applicability)).text == text

    def test_non_overlapping_fixes_apply_together(self):
        text = "a.old()\nb.old()\n"
        r = apply_round(text, [finding([((2, 3), (2, 6), "new")]), finding([((1, 3), (1, 6), "new")])],
                        ONLY_SAFE)
        assert r.text == "a.new()\nb.new()\n" and len(r.applied) == 2

    def test_overlapping_fix_waits(self):
        text = "x.old(f)\n"
        first = finding([((1, 1), (1, 6), "y.new")])
        second = finding([((1, 3), (1, 9), "other()")])
        r = apply_round(text, [second, first], ONLY_SAFE)
        assert r.text == "y.new(f)\n"
        assert r.applied == [first] and not r.rejected  # not rejected: retried next round

    def test_two_insertions_at_one_point_do_not_both_apply(self):
        text = "x = 1\n"
        a = finding([((1, 1), (1, 1), "a = 0\n")])
        b = finding([((1, 1), (1, 1), "b = 0\n")])
        assert len(apply_round(text, [a, b], ONLY_SAFE).applied) == 1

    def test_identical_fixes_apply_once(self):
        text = "x.old()\n"
        a = finding([((1, 3), (1, 6), "new")], code="HKL101")
        b = finding([((1, 3), (1, 6), "new")], code="HKL102")
        r = apply_round(text, [a, b], ONLY_SAFE)
        assert r.text == "x.new()\n" and sorted(f.code for f in r.applied) == ["HKL101", "HKL102"]

    def test_fix_that_breaks_syntax_is_dropped_and_reported(self):
        text = "x.old()\ny.old()\n"
        good = finding([((2, 3), (2, 6), "new")])
        bad = finding([((1, 3), (1, 6), "new(")], code="HKL998")
        r = apply_round(text, [bad, good], ONLY_SAFE)
        assert r.text == "x.old()\ny.new()\n"
        assert r.applied == [good]
        assert [x.finding.code for x in r.rejected] == ["HKL998"]
        assert "would not parse" in r.rejected[0].reason

    def test_edit_outside_the_file_is_rejected(self):
        r = apply_round("x = 1\n", [finding([((5, 1), (5, 2), "y")])], ONLY_SAFE)
        assert r.text == "x = 1\n" and "outside the file" in r.rejected[0].reason

    def test_fix_with_self_overlapping_edits_is_rejected(self):
        r = apply_round("x.old()\n", [finding([((1, 1), (1, 5), "a"), ((1, 3), (1, 7), "b")])], ONLY_SAFE)
        assert r.text == "x.old()\n" and "overlap each other" in r.rejected[0].reason

    def test_unparseable_file_is_left_alone(self):
        r = apply_round("def f(:\n    x.old()\n", [finding([((2, 7), (2, 10), "new")])], ONLY_SAFE)
        assert r.text.startswith("def f(:") and "does not parse before fixing" in r.rejected[0].reason


class TestLineEndings:
    def test_crlf_stays_crlf(self):
        text = "h = x.register_hook(f)\r\nh.remove()\r\ny.backward()\r\n"
        move = finding([((2, 1), (3, 1), ""), ((4, 1), (4, 1), "h.remove()\n")])
        r = apply_round(text, [move], ONLY_SAFE)
        assert r.text == "h = x.register_hook(f)\r\ny.backward()\r\nh.remove()\r\n"

    def test_cr_only_file(self):
        text = "a = 1\rb = 2\r"
        r = apply_round(text, [finding([((2, 1), (2, 1), "c = 0\n")])], ONLY_SAFE)
        assert r.text == "a = 1\rc = 0\rb = 2\r"

    def test_diff_keeps_line_endings_and_marks_missing_final_newline(self):
        diff = unified_diff("a.py", "x = 1\r\ny = 2", "x = 1\r\ny = 3")
        assert "-y = 2\n\\ No newline at end of file\n" in diff
        assert "+y = 3\n\\ No newline at end of file\n" in diff
        assert " x = 1\r\n" in diff
        assert split_lines("a\r\nb\rc\nd") == ["a\r\n", "b\r", "c\n", "d"]


class TestRounds:
    def test_overlapping_fix_applies_in_the_next_round(self):
        text = "x.old(f)\n"
        first = finding([((1, 1), (1, 6), "y.old")])

        def recheck(new_text):
            # after the first fix, the second finding is recomputed on the new text
            col = new_text.find("old") + 1
            return [finding([((1, col), (1, col + 3), "new")])] if col else []

        out = fix_text(text, [first, finding([((1, 3), (1, 6), "new")])], allowed=ONLY_SAFE, recheck=recheck)
        assert out.text == "y.new(f)\n" and out.rounds == 3 and out.converged and len(out.applied) == 2

    def test_applying_twice_changes_nothing_the_second_time(self):
        def check(text):
            col = text.find("old") + 1
            return [finding([((1, col), (1, col + 3), "new")])] if col else []

        once = fix_text("x.old()\n", check("x.old()\n"), allowed=ONLY_SAFE, recheck=check)
        twice = fix_text(once.text, check(once.text), allowed=ONLY_SAFE, recheck=check)
        assert once.changed and not twice.changed and twice.applied == []

    def test_fixes_that_undo_each_other_stop(self):
        def check(text):
            return [finding([((1, 1), (1, 2), "b" if text.startswith("a") else "a")])]

        out = fix_text("a = 1\n", check("a = 1\n"), allowed=ONLY_SAFE, recheck=check)
        assert not out.converged and out.rounds == 2

    def test_round_limit(self):
        def check(text):
            return [finding([((1, 1), (1, 1), "# more\n")])]

        out = fix_text("x = 1\n", check("x = 1\n"), allowed=ONLY_SAFE, recheck=check, max_rounds=3)
        assert out.rounds == 3 and not out.converged and out.text.count("# more") == 3
        assert out.rejected and "run --fix again" in out.rejected[0].reason


def _fix_files(findings, tmp_path, write=True, allowed=ONLY_SAFE):
    return fix_files(findings, allowed=allowed, locate=lambda p: str(tmp_path / p),
                     recheck_for=lambda _p: no_findings, write=write)


class TestFiles:
    def test_file_without_applicable_fix_is_never_opened(self, tmp_path):
        path = tmp_path / "a.py"
        path.write_text("x.old()\n")
        before = os.stat(path)
        results = _fix_files([finding([((1, 3), (1, 6), "new")], UNSAFE)], tmp_path)
        assert results == []
        after = os.stat(path)
        assert (after.st_mtime_ns, after.st_ino) == (before.st_mtime_ns, before.st_ino)

    def test_write_is_a_rename_and_leaves_no_temp_file(self, tmp_path):
        path = tmp_path / "a.py"
        path.write_text("x.old()\n")
        path.chmod(0o640)
        inode = os.stat(path).st_ino
        [result] = _fix_files([finding([((1, 3), (1, 6), "new")])], tmp_path)
        assert result.changed and path.read_text() == "x.new()\n"
        assert os.stat(path).st_ino != inode  # replaced by a new file, not rewritten in place
        assert os.stat(path).st_mode & 0o777 == 0o640
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]

    def test_diff_mode_writes_nothing(self, tmp_path):
        path = tmp_path / "a.py"
        path.write_text("x.old()\n")
        mtime = os.stat(path).st_mtime_ns
        [result] = _fix_files([finding([((1, 3), (1, 6), "new")])], tmp_path, write=False)
        assert result.outcome.text == "x.new()\n"
        assert os.stat(path).st_mtime_ns == mtime and path.read_text() == "x.old()\n"

    def test_bom_crlf_and_declared_encoding_are_kept(self, tmp_path):
        bom = tmp_path / "bom.py"
        bom.write_bytes(b"\xef\xbb\xbfs = '\xc3\xa9'\r\nx.old()\r\n")
        latin = tmp_path / "latin.py"
        latin.write_bytes(b"# -*- coding: latin-1 -*-\ns = '\xe9'\nx.old()\n")
        _fix_files([finding([((2, 3), (2, 6), "new")], path="bom.py"),
                    finding([((3, 3), (3, 6), "new")], path="latin.py")], tmp_path)
        assert bom.read_bytes() == b"\xef\xbb\xbfs = '\xc3\xa9'\r\nx.new()\r\n"
        assert latin.read_bytes() == b"# -*- coding: latin-1 -*-\ns = '\xe9'\nx.new()\n"

    def test_text_the_encoding_cannot_hold_is_not_written(self, tmp_path):
        path = tmp_path / "a.py"
        data = b"# coding: ascii\nx.old()\n"
        path.write_bytes(data)
        [result] = _fix_files([finding([((2, 3), (2, 6), "n\u00e9w")])], tmp_path)
        assert not result.changed and "cannot be written as ascii" in result.error
        assert path.read_bytes() == data

    def test_symlink_target_is_fixed_and_link_kept(self, tmp_path):
        real = tmp_path / "real.py"
        real.write_text("x.old()\n")
        link = tmp_path / "link.py"
        link.symlink_to(real)
        _fix_files([finding([((1, 3), (1, 6), "new")], path="link.py")], tmp_path)
        assert link.is_symlink() and real.read_text() == "x.new()\n"

    def test_failed_write_is_an_error_not_a_crash(self, tmp_path, monkeypatch):
        import hooklint.fix.files as files

        def refuse(*_args, **_kw):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(files, "replace_file_bytes", refuse)
        (tmp_path / "a.py").write_text("x.old()\n")
        [result] = _fix_files([finding([((1, 3), (1, 6), "new")])], tmp_path)
        assert not result.changed and result.error == "cannot write the fixes: Permission denied"
        assert (tmp_path / "a.py").read_text() == "x.old()\n"

    def test_source_file_reads_like_the_checker(self, tmp_path):
        path = tmp_path / "a.py"
        path.write_bytes(b"\xef\xbb\xbfx = 1\n")
        src = SourceFile.read(str(path))
        assert src.text == "x = 1\n" and src.encoding == "utf-8-sig"
