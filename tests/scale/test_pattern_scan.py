"""The prefilter searches a trigger pattern's branches in cheaper ways than
``re.search`` (hooklint.static.checker._Scan): the answer must be the same,
for every pattern the rules declare and for the shapes the shortcuts handle."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from hooklint.rules import rule_entries
from hooklint.static.checker import _branches, _line_confined, _line_local, _Scan
from tests.conftest import FIXTURES

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
try:
    from corpus import available_packages, corpus_files
finally:
    sys.path.pop(0)

PATTERNS = sorted({entry.trigger_pattern for entry in rule_entries() if entry.trigger_pattern})

# texts around the edges of each shortcut: the first line, the last line without a newline, several
# candidates on one line, a candidate inside a longer word, a match across lines (not line-local)
EDGES = [
    "",
    "x",
    "model.layer = Wrapper(model.layer)",
    "model.layer = Wrapper(model.layer)\n",
    "import torch\nmodel.layer = Wrapper(model.layer, 1)",
    "if ok: model.layer = Wrapper(model.layer)\n",
    "a = B(c); model.layer = Wrapper(model.layer)\n",
    "  m.blocks[i] = Catcher(m.blocks[i])\n",
    "m.x = Y(m.z) = Z(m.x)\n",
    "m.x = Y(\nm.x)\n",
    "setattr(model, name, Catcher(getattr(model, name)))\n",
    "for k in dir(obj):\n    pass\n",
    "for k in subdir(obj):\n    pass\n",
    "os.listdir(x) + dir(y)\n",
    "vars(self).items()\n",
    "torch.compile(model, fullgraph=True)\n",
    "torch.compile(model, no_fullgraph=True)\n",
    "torch.compile(model, fullgraph\n    =True)\n",
    "torch.compile(model, fullgraph  # why\n  = True)\n",
    "x.forward = f\n",
    "x.forward == f\n",
    "class MyHook:\n    def my_hook(self):\n        pass\n",
]


def _texts_from(folder: Path, limit: int) -> list[str]:
    out = []
    for path in sorted(folder.rglob("*.py"))[:limit]:
        try:
            out.append(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
def test_each_trigger_pattern_is_searched_as_re_search_would(pattern):
    branches = _branches(pattern)
    compiled = re.compile(pattern)
    texts = EDGES + _texts_from(FIXTURES, 10_000)
    for text in texts:
        assert branches.search(text) == (compiled.search(text) is not None), (pattern, text[:200])


def test_the_shortcuts_are_taken_for_the_costly_shapes():
    """Patterns of these shapes cost 0.5 to 1.6 s each over the corpus when
    searched as written; the shortcuts must not silently fall back."""
    kinds = {scan.kind for pattern in PATTERNS for _anchor, scans in _branches(pattern).groups for scan in scans}
    assert {"boundary", "line", "inline", "all"} <= kinds
    swap = _Scan(r"(?<![\w.])(\w+(?:\.\w+)*\[[^\]\n]{1,40}\])[ \t]*=[ \t]*[A-Z]\w*\([ \t]*\1")
    assert swap.kind == "inline" and swap.literal == "="
    line = _Scan(r"^[ \t]*(\w+(?:\.\w+)+)[ \t]*=[ \t]*[A-Z]\w*\([ \t]*\1", "(?m)")
    assert line.kind == "line" and line.literal == "="
    assert _Scan(r"\bfullgraph\s*=").kind == "boundary" and _Scan(r"\bfullgraph\s*=").literal == "fullgraph"
    both = _Scan(r"\A(?=[\s\S]*?(?<![\w.])self\.\w+ = \[\])[\s\S]*?partial\(")
    assert both.kind == "all" and len(both.parts) == 2
    # a part referring to a group by number would be numbered anew: searched as written
    assert _Scan(r"\A(?=[\s\S]*?(a)\1)[\s\S]*?b").kind == ""


@pytest.mark.parametrize("pattern", [
    r"(?m)^[ \t]*(\w+)[ \t]*=[ \t]*[A-Z]\w*\([ \t]*\1",
    r"(?m)^x[^\n]*y",
    r"(?m)^\s*x = (a)\1",            # \s can match a line break: not line-local, searched as written
    r"(?ms)^.*x = 1",                # DOTALL: `.` matches a line break
    r"(?m)^(a|b)=(c\1)",             # the tail's back-reference sits inside a group
    r"\b(?:dir|vars)\(|__dict__",
    r"\bx(y)\1|z(w)\2",              # a back-reference into its own branch, after a branch with a group
    r"(?m)^a=b|^c=d",
    r"(?i)\bHook\b",
    r"(?<![\w.])(\w+(?:\.\w+)*\[[^\]\n]{1,40}\])[ \t]*=[ \t]*[A-Z]\w*\([ \t]*\1",
    r"(?<![\w.])(\w+)=c",          # the lookbehind reads the text before the line
    r"(?<=\n)a=c",
    r"(?m)\w+=c$",                  # `$` at the line's end, as at the cut-out line's
    r"\w+=c$",                      # without MULTILINE `$` is the text's end: searched as written
    r"\w+=c(?!a)",                  # a lookahead: searched as written
    r"\w+=c\b",
    r"[a-z]+\s=c",                  # `\s` can match a line break: searched as written
    r"\A(?=[\s\S]*?a=c)(?=[\s\S]*?\nx)[\s\S]*?(?:b|=c)",  # each part anywhere, the tail too
    r"\A(?=[\s\S]*?(?<![\w.])b=c)(?=[\s\S]*?x)",      # lookaheads only; a lookbehind in a part
    r"(?m)\A(?=[\s\S]*?^x)[\s\S]*?a$",                  # a global flag applies to every part
    r"\A(?=[\s\S]*?[(]a)(?=[\s\S]*?[)]\()b",          # not the shape (the tail lacks its `[\s\S]*?`)
])
def test_hand_written_patterns_agree_with_re_search(pattern):
    texts = EDGES + ["a=c", "x = 11\n", "b=cb", "q\na=ca\n", "zww", "xyy", "c=d", "HOOK!", "ahook",
                     "  x y\n", "x\ny", "\nx = aa", "\n\nx = a\na", "a.b=c\n", ".b=c\n", "xb=ca", "xb=c\nd", "b=c\n", "m[i] = W(m[i])\nq", "x.m[i] = W(m[i])", " m[i] = W(m[i])"]
    branches, compiled = _branches(pattern), re.compile(pattern)
    for text in texts:
        assert branches.search(text) == (compiled.search(text) is not None), (pattern, text)


def test_line_confinement_is_read_from_the_parse_tree():
    assert _line_confined(r"(?<![\w.])(\w+(?:\.\w+)*\[[^\]\n]{1,40}\])[ \t]*=[ \t]*[A-Z]\w*\([ \t]*\1")
    assert _line_confined(r"(?m)a$") and _line_confined(r"(?<=\n)a\b")
    assert not _line_confined(r"a$") and not _line_confined(r"a\Z")
    assert not _line_confined(r"a(?=b)") and not _line_confined(r"a(?!b)")
    assert not _line_confined(r"(?s)a.b") and not _line_confined(r"a\sb") and not _line_confined(r"(?i)a")


def test_line_locality_is_read_from_the_parse_tree():
    assert _line_local(r"(?m)^[ \t]*(\w+(?:\.\w+)*\[[^\]\n]{1,60}\])[ \t]*")
    assert _line_local(r"(?m)^a.b")
    assert not _line_local(r"(?ms)^a.b")
    assert not _line_local(r"(?m)^\s*a")
    assert not _line_local(r"(?m)^[^x]a")
    assert not _line_local("(?m)^a\nb")


@pytest.mark.slow
def test_the_shortcuts_agree_with_re_search_on_the_corpus():
    """Every rule's pattern over the real-code corpus of bench/corpus.py (when downloaded)."""
    files = corpus_files(available_packages())
    if not files:
        pytest.skip("the corpus of bench/corpus.py is not downloaded")
    texts = [Path(f).read_text(encoding="utf-8", errors="replace") for f in files]
    for pattern in PATTERNS:
        branches, compiled = _branches(pattern), re.compile(pattern)
        wrong = [f for f, text in zip(files, texts) if branches.search(text) != (compiled.search(text) is not None)]
        assert not wrong, (pattern, wrong[:5])
