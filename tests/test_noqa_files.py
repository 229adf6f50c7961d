"""noqa parsing and file selection (gitignore semantics) as units."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hooklint import files
from hooklint.files import GitIgnore, Walker, glob_match
from hooklint.static.noqa import parse_noqa


def test_noqa_forms():
    text = "\n".join([
        "a  # noqa",
        "b  # noqa: HKL101",
        "c  # noqa:HKL101,hkl102",
        "d  # NOQA: HKL101 HKL201",
        "e  # noqa: E501",
        "f = '# noqa'",
    ])
    noqa = parse_noqa(text)
    assert noqa.suppresses("HKL999", 1)
    assert noqa.suppresses("HKL101", 2) and not noqa.suppresses("HKL102", 2)
    assert noqa.suppresses("HKL102", 3)
    assert noqa.suppresses("HKL201", 4)
    assert not noqa.suppresses("HKL101", 5)
    assert not noqa.suppresses("HKL101", 6)


def test_file_level_noqa_must_be_its_own_comment():
    assert parse_noqa("x = 1\n# hooklint: noqa\n").suppresses("HKL101", 1)
    assert not parse_noqa("x = 1  # hooklint: noqa is discussed here\n").suppresses("HKL101", 5)
    only = parse_noqa("# hooklint: noqa: HKL101, HKL102\n")
    assert only.suppresses("HKL102", 9) and not only.suppresses("HKL201", 9)


@pytest.mark.parametrize(
    "pattern, path, is_dir, expected",
    [
        ("build", "build", True, True),
        ("build", "src/build/x.py", False, True),
        ("build/", "build", False, False),
        ("build/", "build/x.py", False, True),
        ("/top.py", "top.py", False, True),
        ("/top.py", "sub/top.py", False, False),
        ("*.py", "a/b/c.py", False, True),
        ("fixtures/*", "fixtures/a.py", False, True),
        ("fixtures/*", "other/fixtures/a.py", False, False),
        ("**/gen_*.py", "a/b/gen_x.py", False, True),
        ("a/**/z.py", "a/b/c/z.py", False, True),
        ("data[0-9].py", "data7.py", False, True),
    ],
)
def test_glob_match(pattern, path, is_dir, expected):
    assert glob_match(pattern, path, is_dir) is expected


def test_gitignore_negation_and_nesting(tmp_path):
    (tmp_path / ".gitignore").write_text("*.py\n!keep.py\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").write_text("!also.py\n")
    for name in ("drop.py", "keep.py", "sub/also.py", "sub/drop.py"):
        (tmp_path / name).write_text("")
    files = Walker(tmp_path, []).files([str(tmp_path)])
    assert sorted(p.split("/")[-2:][-1] if "sub" not in p else "sub/" + p.rsplit("/", 1)[1] for p in files) == [
        "keep.py", "sub/also.py"]


def test_symlink_loop_does_not_hang(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.py").write_text("")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a")
    files = Walker(tmp_path, []).files([str(tmp_path)])
    assert [f.rsplit("/", 2)[-2:] for f in files] == [["a", "m.py"]]


def test_gitignore_object_without_rules():
    assert not GitIgnore().ignores("x.py", False)


def test_anchored_exclude_matches_at_the_root_only(tmp_path):
    for name in ("setup.py", "pkg/setup.py", "pkg/mod.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    files = Walker(tmp_path, ["/setup.py"]).files([str(tmp_path)])
    assert sorted(f[len(str(tmp_path)) + 1:] for f in files) == ["pkg/mod.py", "pkg/setup.py"]


# The two matchers of hooklint/files.py: tame patterns go through a regular
# expression, wild ones (several `*` in a component, several `**`) through
# the matcher without backtracking.  On tame patterns both must agree.
_COMPONENT = st.lists(st.sampled_from(["a", "b", "*", "?", "[ab]", "[!a]", "[^b]", "."]), min_size=1, max_size=4).map("".join)
_PATTERN = st.builds(
    lambda lead, parts, trail: lead + "/".join(parts) + trail,
    st.sampled_from(["", "/", "**/"]),
    st.lists(st.one_of(_COMPONENT, st.just("**")), min_size=1, max_size=3),
    st.sampled_from(["", "/", "/**"]),
)
_PATH = st.lists(st.lists(st.sampled_from(["a", "b", "."]), min_size=1, max_size=4).map("".join),
                 min_size=1, max_size=4).map("/".join)


@settings(max_examples=2000, derandomize=True, deadline=None)
@given(_PATTERN, _PATH, st.booleans())
def test_the_matcher_without_backtracking_agrees_with_the_regex(pattern, path, is_dir):
    regex = files._regex(pattern)
    if regex is None:
        return
    glob = files._compile(pattern)
    if glob.dir_only and not is_dir:
        path = path.rsplit("/", 1)[0] if "/" in path else ""
    if not path:
        return
    assert files._glob_match_parts(glob, path.split("/")) == bool(regex.match(path)), (pattern, path)


def test_a_wild_pattern_takes_no_exponential_time():
    """`*a*a*...*b` on a long name: a backtracking regex takes minutes
    (bench/globs.py prints the figures); this matcher answers at once."""
    wild = "*a" * 12 + "*b"
    assert files._regex(wild) is None
    assert not glob_match(wild, "src/" + "a" * 80 + ".py")
    assert glob_match(wild, "src/" + "a" * 80 + "b")
    walker_set = files.PatternSet([wild, "a/**/**/**/**/z"])
    assert not walker_set.match("x/" + "a" * 80)
    assert walker_set.match("a/b/c/d/e/z/f.py")
