"""Run the static rules over one file: read, prefilter, parse, check, apply noqa.

This module and everything it imports must not import torch: the static pass
runs in pre-commit environments that have no torch, and it never executes the
code it reads.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import unicodedata
import warnings
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from hooklint.findings import Applicability, Finding, Location, Notice, NoticeLevel, Related
from hooklint.rules import rule_class, rule_entries
from hooklint.rules.base import Rule
from hooklint.static.garbage import collected_after
from hooklint.static.source import SourceError, decode_source, read_regular_file

try:  # the regex parser, to read what a trigger pattern can match (renamed in Python 3.11)
    import re._constants as _sre_constants
    import re._parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_constants  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext
    from hooklint.static.notebook import Notebook

# hooklint.static.notebook.NOTEBOOK_SUFFIX.  Notebooks and `# noqa` comments are read by modules imported
# when a file needs them: most files are ruled out by the prefilter and need neither.
_NOTEBOOK_SUFFIX = ".ipynb"

# ast.parse's feature_version accepts nothing older.
OLDEST_FEATURE_VERSION = (3, 7)


# Python's AST can take 240 bytes of memory per character of source: 12 GB and
# a minute of parsing for a 50 MB generated file.  The largest file among the
# 15,000 of torch, its dependencies and 19 hook-heavy packages is 1.4 MB.
MAX_PARSED_CHARS = 4 * 2 ** 20


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    parsed: bool = False  # False when the text prefilter showed no rule can fire
    # For the project pass (hooklint.parallel), not part of the stored result:
    # the file's call-graph summary, and the questions its rules asked about
    # other files with the answers they got (hooklint.static.project).
    summary: dict[str, Any] | None = None
    asked: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "findings": [f.to_dict() for f in self.findings],
            "notices": [n.to_dict() for n in self.notices],
            "parsed": self.parsed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FileResult":
        return cls(
            data["path"],
            [Finding.from_dict(f) for f in data["findings"]],
            [Notice.from_dict(n) for n in data["notices"]],
            data["parsed"],
        )


@lru_cache(maxsize=64)
def _static_rules(codes: frozenset[str]) -> tuple[Rule, ...]:
    """The rules with a static check among ``codes``, by code: their modules (and
    the analysis they use) are imported here, once a file passed the prefilter."""
    return tuple(rule_class(entry.code)() for entry in rule_entries() if entry.code in codes and entry.static)


def load_rules(codes: frozenset[str]) -> None:
    """Load the static rules among ``codes`` (with the analysis they import) and
    compile the prefilter, before any file needs them (see hooklint.parallel)."""
    _prefilter(codes)
    _rule_filter(codes)
    _static_rules(codes)
    from hooklint.static import context  # noqa: F401 - the checker's own import of the analysis


@dataclass(frozen=True)
class _Prefilter:
    # (anchor, words): every word of a group contains its anchor, so a text without the anchor (one scan)
    # has none of the group's words; any word admits the file
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    # (words, pattern) of rules with a pattern: a word and the pattern admit the file.  Those whose words are
    # all among the plain words are left out: a text they could admit was admitted by the words already.
    patterned: tuple[tuple[tuple[str, ...], _Branches], ...]


@lru_cache(maxsize=64)
def _prefilter(codes: frozenset[str]) -> _Prefilter:
    words: set[str] = set()
    patterned: dict[tuple[tuple[str, ...], str], _Branches] = {}
    # rules judged by the driver after the others (HKL003) have trigger words too
    for rule in rule_entries():
        if rule.code not in codes or not (rule.static or rule.triggers):
            continue
        if rule.trigger_pattern is None:
            words.update(rule.triggers)
        else:
            key = (tuple(sorted(rule.triggers)), rule.trigger_pattern)
            patterned.setdefault(key, _branches(rule.trigger_pattern))
    ordered = sorted(patterned.items(), key=lambda kv: kv[0])
    return _Prefilter(_anchored_groups(words),
                      tuple((key[0], branches) for key, branches in ordered if not set(key[0]) <= words))


_META = frozenset(".^$*+?{}[]()|\\")
# a flag group opening the whole pattern, `(?m)`: it applies to every branch
_GLOBAL_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")
_GROUP_REF = re.compile(r"\\([1-9][0-9]?)")
# `{2}`, `{1,40}`, `{,3}`: a repeat count (any other `{` is a literal brace)
_COUNT = re.compile(r"\{[0-9]*,?[0-9]*\}")


class _Scan:
    r"""One branch of a trigger pattern and the cheapest way to find out whether
    a text holds a match of it, with the same answer as ``re.search``.

    Python's regex engine tries a pattern at every position of the text unless
    it starts with a literal (then it jumps from one occurrence of the literal
    to the next).  Two shapes have no literal in front of the text they need,
    and cost the most of a cold run's prefilter (0.5 to 1.6 s each over the
    corpus of bench/corpus.py), so they are searched differently:

    - ``\\bword...``: the branch without its ``\\b`` is searched (from its
      literal), and each place it matches is checked with the whole branch
      (``match`` at that position reads the character before it).
    - ``(?m)^...X...``, where ``X`` is the first literal of the branch and
      nothing before it can match a line break: the part from ``X`` on (up to
      a back-reference) is searched, and the whole branch is matched at the
      start of each line where that part matches, once per line.
    - any other branch with nothing literal in front (``(?<![\w.])(\w+...)
      = [A-Z]\w*\(\1``, a slot swap) whose matches stay on one line and
      that looks ahead nowhere: the part from its first literal on is
      searched, and the whole branch is searched in each line where that
      part matches (``search(text, line_start, line_end)``: a lookbehind
      still reads the text before the line).  Two such branches cost 4.5 s
      of a cold run's prefilter over the corpus as written, 0.1 s so.

    A fourth shape is split: ``\\A(?=[\\s\\S]*?P1)(?=[\\s\\S]*?P2)...[\\s\\S]*?Q``
    (the text holds a match of each of P1, P2, ..., Q, anywhere) is the
    search of each part on its own, each the cheapest way: as written, the
    lazy ``[\\s\\S]*?`` retried every part at every position of the text
    (0.09 s each of HKL344's, HKL345's and HKL414's patterns over the 113
    to 145 corpus files their words admit; 0.01 s split).

    Any other branch is searched as written."""

    __slots__ = ("whole", "probe", "kind", "literal", "parts")

    def __init__(self, branch: str, flags: str = ""):
        self.whole = re.compile(flags + branch)
        self.probe: re.Pattern[str] | None = None
        self.kind = ""
        self.parts: tuple[_Branches, ...] = ()
        # text every match holds, searched for before the regex engine is asked ("" when none is known)
        self.literal = ""
        if set(flags) & set("iLx"):
            return  # the pattern's letters (or its spaces) are not the text's: searched as written
        self.literal = _literal_prefix(branch)
        parts = _conjunction(branch)
        if parts is not None:
            self.kind, self.parts = "all", tuple(_branches(flags + part) for part in parts)
            return
        if branch.startswith("\\b") and len(branch) > 2 and branch[2] != "\\":
            probe = _compiled(flags + branch[2:])
            if probe is not None and probe.groups == self.whole.groups and not _GROUP_REF.search(branch):
                self.probe, self.kind, self.literal = probe, "boundary", _literal_prefix(branch[2:])
        elif branch.startswith("^") and "m" in flags:
            tail = _line_tail(branch)
            if tail is not None:
                probe = _compiled(flags + tail[1])
                if probe is not None and _line_local(flags + tail[0]):
                    self.probe, self.kind, self.literal = probe, "line", _literal_prefix(tail[1])
        elif not self.literal and _line_confined(flags + branch):
            tail = _line_tail(branch)
            if tail is not None:
                probe = _compiled(flags + tail[1])
                if probe is not None:
                    self.probe, self.kind, self.literal = probe, "inline", _literal_prefix(tail[1])

    def search(self, text: str) -> bool:
        if self.parts:
            return all(part.search(text) for part in self.parts)
        probe = self.probe
        if probe is None:
            return self.whole.search(text) is not None
        whole, pos = self.whole, 0
        if self.kind == "boundary":
            while (found := probe.search(text, pos)) is not None:
                if whole.match(text, found.start()) is not None:
                    return True
                pos = found.start() + 1
            return False
        if self.kind == "inline":
            while (found := probe.search(text, pos)) is not None:
                start = text.rfind("\n", 0, found.start()) + 1
                end = text.find("\n", found.start())
                if whole.search(text, start, len(text) if end < 0 else end) is not None:
                    return True
                if end < 0:
                    return False
                pos = end + 1
            return False
        while (found := probe.search(text, pos)) is not None:
            start = text.rfind("\n", 0, found.start()) + 1
            if whole.match(text, start) is not None:
                return True
            end = text.find("\n", found.start())
            if end < 0:
                return False
            pos = end + 1  # every other place on this line starts the same line
        return False


_ANYWHERE = "[\\s\\S]*?"  # any text, as short as it can be: `X` after it is "X anywhere after here"


def _conjunction(branch: str) -> list[str] | None:
    """``\\A(?=[\\s\\S]*?P1)...(?=[\\s\\S]*?Pn)`` then optionally ``[\\s\\S]*?Q``:
    [P1, ..., Pn, Q], each a pattern the text must hold a match of somewhere
    (at the text's start, each lookahead and the tail may match at any
    position: their leftmost matches exist exactly when ``re.search`` finds
    them).  None for any other shape, or when a part refers to a group by
    number or name (its groups would be numbered anew)."""
    lookahead = "(?=" + _ANYWHERE
    if not branch.startswith("\\A" + lookahead) or _GROUP_REF.search(branch) or "(?P" in branch:
        return None
    rest, parts = branch[2:], []
    while rest.startswith(lookahead):
        end = _group_end(rest)
        if end is None:
            return None
        parts.append(rest[len(lookahead):end])
        rest = rest[end + 1:]
    if rest:
        if not rest.startswith(_ANYWHERE) or len(rest) == len(_ANYWHERE):
            return None
        parts.append(rest[len(_ANYWHERE):])
    # a part that is one non-capturing group (`(?:a|b)`) is its alternatives, each searched from its literal
    parts = [part[3:-1] if part.startswith("(?:") and _group_end(part) == len(part) - 1 else part for part in parts]
    if not all(parts) or any(_compiled(part) is None for part in parts):
        return None
    return parts


def _structure(text: str):
    """(index, character, group depth after it) of each ``(``, ``)`` and
    ``|`` of a regex that is neither escaped nor inside a character class:
    the skeleton both splitting a pattern into branches and finding a
    group's end read."""
    depth, i, in_class = 0, 0, False
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]" or text[i - 1] == "["
        elif c == "[":
            in_class = True
            if text.startswith("[^]", i) or text.startswith("[]", i):
                i += 1
        elif c in "()|":
            depth += (c == "(") - (c == ")")
            yield i, c, depth
        i += 1


def _group_end(text: str) -> int | None:
    """The index of the ``)`` closing the group ``text`` opens with."""
    return next((i for i, c, depth in _structure(text) if c == ")" and depth == 0), None)


@lru_cache(maxsize=1024)
def _scan(branch: str, flags: str) -> _Scan:
    """One ``_Scan`` per branch text: rules share branches (`\\.forward[ \\t]*=[^=]`, a slot swap), and
    ``_admitted`` searches a text once for a branch every rule that holds it asks about."""
    return _Scan(branch, flags)


def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def _line_tail(branch: str) -> tuple[str, str] | None:
    """(head, tail): the branch cut before its first literal character outside
    any group, class or repeat; the tail ends before a back-reference.  None
    when there is no such literal or the tail holds a back-reference inside a
    group."""
    i, depth, in_class = 0, 0, False
    while i < len(branch):
        c = branch[i]
        if c == "\\":
            if depth == 0 and not in_class and i + 1 < len(branch) and not branch[i + 1].isalnum() \
                    and not _repeated(branch, i + 2):
                return _cut(branch, i)
            i += 2
            continue
        if in_class:
            in_class = c != "]" or branch[i - 1] == "["
        elif c == "[":
            in_class = True
            if branch.startswith("[^]", i) or branch.startswith("[]", i):
                i += 1
        elif c == "{" and _COUNT.match(branch, i):
            i = branch.index("}", i)  # a repeat count: its digits are not text
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and c not in _META and not _repeated(branch, i + 1):
            return _cut(branch, i)
        i += 1
    return None


def _repeated(branch: str, after: int) -> bool:
    return after < len(branch) and branch[after] in "*+?{"


def _cut(branch: str, at: int) -> tuple[str, str] | None:
    head, tail = branch[:at], branch[at:]
    ref = _GROUP_REF.search(tail)
    # a reference inside a group of the tail leaves it unbalanced: it does not compile, and the branch is
    # searched as written
    return head, tail if ref is None else tail[:ref.start()]


def _line_local(pattern: str) -> bool:
    """Can no match of ``pattern`` hold a line break?  (Read from its parse
    tree; anything not known to exclude ``\\n`` counts as holding one.)"""
    try:
        parsed = _sre_parse.parse(pattern)
    except re.error:
        return False
    dotall = bool(parsed.state.flags & re.DOTALL)
    return _items_line_local(list(parsed), dotall)


def _line_confined(pattern: str) -> bool:
    """Does every match of ``pattern`` in a text lie within one line, and is it
    found as well in that line cut out (``search(text, start, end)``, which
    ends the text at the line break)?  Its matches hold no line break, it
    looks ahead nowhere (a lookahead could read past the line), and it has
    no ``$`` without MULTILINE nor ``\\Z`` (both tell the end of the line
    from the end of the text).  A lookbehind reads the text before the line
    in both searches; ``\\b`` sees the end of the line as the line break."""
    try:
        parsed = _sre_parse.parse(pattern)
    except re.error:
        return False
    flags = parsed.state.flags
    if flags & (re.IGNORECASE | re.LOCALE | re.VERBOSE):
        return False
    return _items_line_confined(list(parsed), bool(flags & re.DOTALL), bool(flags & re.MULTILINE))


def _items_line_confined(items: list[Any], dotall: bool, multiline: bool) -> bool:
    c = _sre_constants
    for op, arg in items:
        if op in (c.ASSERT, c.ASSERT_NOT):
            if arg[0] >= 0:  # (direction, pattern): a lookahead
                return False
            continue
        if op is c.AT:
            if arg is c.AT_END_STRING or (arg is c.AT_END and not multiline):
                return False
            continue
        if op is c.GROUPREF:
            continue  # the text of a group checked where it is
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            ok = _items_line_confined(list(arg[2]), dotall, multiline)
        elif op is c.SUBPATTERN:
            ok = _items_line_confined(list(arg[3]), dotall, multiline)
        elif op is c.BRANCH:
            ok = all(_items_line_confined(list(sub), dotall, multiline) for sub in arg[1])
        else:
            ok = op in (c.LITERAL, c.NOT_LITERAL, c.ANY, c.IN) and _items_line_local([(op, arg)], dotall)
        if not ok:
            return False
    return True


_NEWLINE = ord("\n")


def _items_line_local(items: list[Any], dotall: bool) -> bool:
    c = _sre_constants
    for op, arg in items:
        if op in (c.AT, c.ASSERT, c.ASSERT_NOT, c.GROUPREF):
            continue  # zero width, or a group of this very pattern (checked where it is)
        if op is c.LITERAL:
            ok = arg != _NEWLINE
        elif op is c.NOT_LITERAL:
            ok = arg == _NEWLINE
        elif op is c.ANY:
            ok = not dotall
        elif op is c.IN:
            ok = _set_line_local(arg)
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            ok = _items_line_local(list(arg[2]), dotall)
        elif op is c.SUBPATTERN:
            ok = _items_line_local(list(arg[3]), dotall)
        elif op is c.BRANCH:
            ok = all(_items_line_local(list(sub), dotall) for sub in arg[1])
        else:
            ok = False
        if not ok:
            return False
    return True


def _set_line_local(members: list[Any]) -> bool:
    c = _sre_constants
    if members and members[0][0] is c.NEGATE:
        return any(op is c.LITERAL and arg == _NEWLINE for op, arg in members[1:])
    for op, arg in members:
        if op is c.LITERAL:
            ok = arg != _NEWLINE
        elif op is c.RANGE:
            ok = not arg[0] <= _NEWLINE <= arg[1]
        elif op is c.CATEGORY:
            ok = arg in (c.CATEGORY_WORD, c.CATEGORY_DIGIT)
        else:
            ok = False
        if not ok:
            return False
    return True


def _branches(pattern: str) -> _Branches:
    """A pattern's top-level alternatives (a flag group opening the pattern,
    `(?m)`, applies to each), each searched the cheapest way (``_Scan``) after
    the literal text it starts with is found by one scan (HKL701's pattern cost
    0.14 s over the corpus as one regex, 0.07 s so).  Patterns with inline
    flags elsewhere, named back-references or back-references into another
    alternative stay whole."""
    flags_match = _GLOBAL_FLAGS.match(pattern)
    flags = flags_match.group() if flags_match else ""
    body = pattern[len(flags):]
    if "(?P=" in body or re.search(r"\(\?[aiLmsux-]", body):
        return _Branches.of([_scan(body, flags)])
    parts, start = [], 0
    for i, c, depth in _structure(body):
        if c == "|" and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    groups_before = 0
    for part in parts:
        if groups_before and _GROUP_REF.search(part):
            return _Branches.of([_scan(body, flags)])  # its numbers count the groups of the branches before it
        groups_before += re.compile(flags + part).groups
    return _Branches.of([_scan(part, flags) for part in parts])


@dataclass(frozen=True)
class _Branches:
    """A pattern's branches in groups whose literals share an anchor (HKL315's
    sixteen registration APIs all hold `_hook`): a text without the anchor (one
    scan) is not searched for any of the group's branches."""
    groups: tuple[tuple[str, tuple[_Scan, ...]], ...]

    @classmethod
    def of(cls, scans: list[_Scan]) -> "_Branches":
        by_literal: dict[str, list[_Scan]] = {}
        for scan in scans:
            by_literal.setdefault(scan.literal, []).append(scan)
        plain = tuple(by_literal.pop("", ()))
        groups = tuple((anchor, tuple(s for word in words for s in by_literal[word]))
                       for anchor, words in _anchored_groups(set(by_literal)))
        return cls(((("", plain),) if plain else ()) + groups)

    def search(self, text: str, memo: dict[_Scan, bool] | None = None) -> bool:
        """``memo``: what the branches of other patterns found in this same text."""
        if memo is None:
            return any(anchor in text and any(scan.literal in text and scan.search(text) for scan in scans)
                       for anchor, scans in self.groups)
        for anchor, scans in self.groups:
            if anchor not in text:
                continue
            for scan in scans:
                found = memo.get(scan)
                if found is None:
                    found = memo[scan] = scan.literal in text and scan.search(text)
                if found:
                    return True
        return False


def _literal_prefix(part: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "\\" and i + 1 < len(part) and not part[i + 1].isalnum():
            char, i = part[i + 1], i + 2
        elif c in _META:
            break
        else:
            char, i = c, i + 1
        if i < len(part) and part[i] in "*?{":
            break  # the last character is optional or repeated
        out.append(char)
    return "".join(out)


# An anchor shorter than this is in nearly every file: it would rule nothing out.  (Longer ones are not
# tried: choosing among every substring of every word cost 9 ms, paid by every run.)
_MIN_ANCHOR, _MAX_ANCHOR = 4, 8


def _anchored_groups(words: set[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The words in groups sharing a substring (``_hook`` for the hook APIs),
    largest group first: the words are searched for only in texts that
    contain their group's anchor.  (One anchor common to every word was `_`
    once `register_module_forward` joined them: every file has one, and each
    of the 21 words was then searched for in every file, a fifth of a run.)"""
    left = set(words)
    groups = []
    while left:
        best, covered = "", {min(left)}
        pieces = {word[start:start + size] for word in left
                  for size in range(_MIN_ANCHOR, min(len(word), _MAX_ANCHOR) + 1)
                  for start in range(len(word) - size + 1)}
        for piece in sorted(pieces):
            having = {w for w in left if piece in w}
            if (len(having), len(piece)) > (len(covered), len(best)):
                best, covered = piece, having
        anchor = min(covered) if len(covered) == 1 or not best else best
        groups.append((anchor, tuple(sorted(covered))))
        left -= covered
    return tuple(groups)


def may_contain_findings(text: str, codes: frozenset[str]) -> bool:
    """The text shortcut: a file that contains none of the enabled rules'
    trigger words (or whose words are there but not the rule's pattern) cannot
    produce a finding, so it need not be parsed."""
    if _admits(text, codes):
        return True
    # Python reads identifiers in NFKC form: a fullwidth `ｒegister_hook` is `register_hook`
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        return _admits(unicodedata.normalize("NFKC", text), codes)
    return False


def _admits(text: str, codes: frozenset[str]) -> bool:
    pre = _prefilter(codes)
    if any(anchor in text and any(word in text for word in words) for anchor, words in pre.groups):
        return True
    return any(any(word in text for word in rule_words) and branches.search(text)
               for rule_words, branches in pre.patterned)


@dataclass(frozen=True)
class _RuleFilter:
    """Each rule's own triggers, for the rules run on a file the prefilter admitted."""
    # (anchor, words): as _Prefilter.groups, over every rule's words
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    # (code, words, pattern branches or None)
    rules: tuple[tuple[str, frozenset[str], _Branches | None], ...]


@lru_cache(maxsize=64)
def _rule_filter(codes: frozenset[str]) -> _RuleFilter:
    """Every rule's own triggers, over the rules the prefilter reads: those with a
    static check, and those judged by the driver that have trigger words (HKL003)."""
    words: set[str] = set()
    branches: dict[str, _Branches] = {}
    rules = []
    for rule in rule_entries():
        if rule.code not in codes or not (rule.static or rule.triggers):
            continue
        words.update(rule.triggers)
        pattern = None
        if rule.trigger_pattern is not None:
            pattern = branches.setdefault(rule.trigger_pattern, _branches(rule.trigger_pattern))
        rules.append((rule.code, frozenset(rule.triggers), pattern))
    return _RuleFilter(_anchored_groups(words), tuple(rules))


def admitted_rules(text: str, codes: frozenset[str]) -> frozenset[str]:
    """The rules among ``codes`` whose own triggers the text holds: the only ones
    that can flag it (the contract of `triggers`, which `--select` of one rule
    relies on too).  A file another rule admits is checked by these alone:
    rules whose words it lacks cost a third of a cold run on the corpus, for
    no finding."""
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return _admitted(text, codes) & _static_codes(codes)


def _admitted(text: str, codes: frozenset[str]) -> frozenset[str]:
    """The rules among ``codes`` whose own triggers (and pattern) ``text`` holds,
    the driver's rules with trigger words included: the text passes the
    prefilter exactly when one does (``_admits`` is the union of the same
    conditions)."""
    filt = _rule_filter(codes)
    present = {word for anchor, words in filt.groups if anchor in text for word in words if word in text}
    out = []
    matched: dict[int, bool] = {}
    found: dict[_Scan, bool] = {}
    for code, words, branches in filt.rules:
        if words.isdisjoint(present):
            continue
        if branches is not None:
            key = id(branches)
            if key not in matched:
                matched[key] = branches.search(text, found)
            if not matched[key]:
                continue
        out.append(code)
    return frozenset(out)


def _admission(text: str, codes: frozenset[str]) -> tuple[bool, frozenset[str]]:
    """(does the text pass the prefilter, the static rules its triggers admit):
    ``may_contain_findings`` and ``admitted_rules`` in one reading of the text.
    Asked one after the other they searched every admitted file's text for the
    trigger words twice (1.2 s of CPU of a cold run over the corpus of
    bench/corpus.py, a tenth of it).  A text Python reads as written (ASCII, or
    already in NFKC form, nearly every file) gets both answers from the same
    search; any other keeps the two readings (the prefilter tries the text as
    written, then in NFKC form; the rules run on the NFKC form)."""
    if text.isascii() or unicodedata.is_normalized("NFKC", text):
        admitted = _admitted(text, codes)
        return bool(admitted), admitted & _static_codes(codes)
    if not may_contain_findings(text, codes):
        return False, frozenset()
    return True, admitted_rules(text, codes)


def _syntax_finding(display_path: str, message: str, row: int, column: int) -> Finding:
    from hooklint.rules.syntax_error import SyntaxErrorRule

    return SyntaxErrorRule.make(path=display_path, location=Location(max(row, 1), max(column, 1)),
                                message=message)


def python_version_label(version: tuple[int, int]) -> str:
    return f"Python {version[0]}.{version[1]}"


class _NewerSyntax(Exception):
    """The text does not parse on the running Python, whose version is older
    than the project's target: maybe not an error in the user's code."""

    def __init__(self, error: SyntaxError):
        self.error = error


def parse_for_target(text: str, filename: str, target: tuple[int, int] | None) -> ast.Module:
    """Parse as the target Python would.

    Raises SyntaxError (with a message naming the target when the syntax is
    valid on the running Python but newer than the target), ``_NewerSyntax``
    when the text does not parse here but the target is newer than the
    running Python, and ValueError/MemoryError/RecursionError as ast.parse."""
    running = sys.version_info[:2]
    with warnings.catch_warnings():
        # invalid escape sequences etc. in user code are not our business
        warnings.simplefilter("ignore")
        if target is not None and target < running:
            try:
                return ast.parse(text, filename=filename, feature_version=max(target, OLDEST_FEATURE_VERSION))
            except SyntaxError as old:
                try:
                    ast.parse(text, filename=filename)
                except SyntaxError:
                    raise  # a syntax error whatever the version: the plain one is reported
                old.msg = (f"{old.msg} (the project's target is {python_version_label(target)}: "
                           f"`target-version`, or `requires-python` in pyproject.toml)")
                raise old from None
        try:
            return ast.parse(text, filename=filename)
        except SyntaxError as exc:
            if target is not None and target > running:
                raise _NewerSyntax(exc) from None
            raise


def _newer_syntax_notice(display: str, exc: SyntaxError, target: tuple[int, int], cell: int | None = None) -> Notice:
    running = sys.version_info[:2]
    what = "not checked" if cell is None else f"cell {cell} not checked (the other cells are)"
    return Notice(display, (
        f"{what}: it does not parse on {python_version_label(running)}, which hooklint runs on "
        f"(line {exc.lineno or 1}: {exc.msg}), and the project targets {python_version_label(target)}, "
        f"whose newer syntax this may be; run hooklint on {python_version_label(target)} or later to check it"),
        NoticeLevel.SKIP)


def check_text(
    path: str,
    text: str,
    codes: frozenset[str],
    *,
    display_path: str | None = None,
    ignored: frozenset[str] = frozenset(),
    graph: Any = None,
    prefilter: bool = True,
    target: tuple[int, int] | None = None,
    notebook: Notebook | None = None,
    on_disk: bool = True,
    project_answers: dict[str, Any] | None = None,
    summarize: bool = False,
    noqa: bool = True,
) -> FileResult:
    """Check one text.  ``target``: the Python version whose syntax is valid
    (None: the running Python's).  ``notebook``: set when ``text`` is a
    notebook's Python text (:mod:`hooklint.static.notebook`); findings are then
    placed in cells.  ``on_disk``: False when the file at ``path`` may not hold
    this text (stdin).  ``noqa``: False ignores every ``# noqa`` comment
    (``--ignore-noqa``)."""
    display = display_path or path
    # Given a file name, CPython reads that file back to place some syntax
    # errors: a notebook's file is JSON, and stdin's named file is not the text.
    parse_name = display if on_disk and notebook is None else "<unknown>"
    result = FileResult(display)
    active = frozenset(codes - ignored)
    if not active:
        return result
    if notebook is not None and notebook.skip_reason:
        result.notices.append(Notice(display, notebook.skip_reason, NoticeLevel.SKIP))
        return result
    runs = active
    if prefilter and graph is None:
        passes, admitted = _admission(text, active)
        if not passes:
            return result
        # rules judged by the driver (HKL003) run whatever the text; the others only where their own triggers are
        runs = active - _static_codes(active) | admitted
    # After the prefilter: a file it rules out has no finding for a `# noqa` to
    # silence, and scanning every file's text again cost a third of the run.
    if noqa:
        result.notices.extend(_unknown_noqa_notices(display, text, notebook))
    if len(text) > MAX_PARSED_CHARS:
        result.notices.append(Notice(display, f"the file has {len(text) / 2 ** 20:.1f} M characters, more than the "
                                     f"{MAX_PARSED_CHARS // 2 ** 20} M hooklint parses (generated code?); not checked",
                                     NoticeLevel.SKIP))
        return result
    with collected_after() as collecting:
        return _check_parsed(path, text, active, result, display, parse_name, graph, target, notebook,
                             project_answers, summarize, noqa, release=not collecting, runs=runs)


def _check_parsed(path: str, text: str, active: frozenset[str], result: FileResult, display: str,
                  parse_name: str, graph: Any, target: tuple[int, int] | None, notebook: Notebook | None,
                  project_answers: dict[str, Any] | None, summarize: bool, noqa: bool, release: bool,
                  runs: frozenset[str] | None = None) -> FileResult:
    """check_text after the prefilter (under ``hooklint.static.garbage.collected_after``).  ``release``:
    break the analysis's reference cycles when done, for a caller that keeps the collector off.  ``runs``:
    the rules to run (default ``active``); the others are still decided (HKL003), having no finding."""
    parsed = _parse(text, display, parse_name, target, notebook, active, result)
    if parsed is None:
        return result
    tree, text, syntax_findings = parsed
    result.parsed = True
    from hooklint.static.context import FileContext  # the analysis is loaded once a file needs it

    ctx = FileContext(path, text, tree, display_path=display, graph=graph, project_answers=project_answers)
    try:
        findings = _run_rules(ctx, active, result, runs)
        if summarize:
            result.summary = _summary_of(ctx, result)
        if "project" in ctx.__dict__:
            result.asked = ctx.project.asked
    finally:
        ctx.close(release)
    if noqa:
        if UNUSED_NOQA in active:
            findings = findings + _unused_noqa(display, text, findings, active, graph)
        findings = apply_noqa(text, findings)
    result.findings = _placed(findings, notebook, display) + syntax_findings
    return result


def _parse(text: str, display: str, parse_name: str, target: tuple[int, int] | None, notebook: Notebook | None,
           active: frozenset[str], result: FileResult) -> tuple[ast.Module, str, list[Finding]] | None:
    """(tree, the text it is of, HKL001 findings of broken notebook cells), or
    None when nothing more can be checked (the findings and notices are then in
    ``result``)."""
    syntax_findings: list[Finding] = []
    for attempt in (1, 2):
        try:
            return parse_for_target(text, parse_name, target), text, syntax_findings
        except _NewerSyntax as newer:
            if notebook is None or attempt == 2:
                result.notices.append(_newer_syntax_notice(display, newer.error, target or (0, 0)))
                break
        except SyntaxError as exc:
            if notebook is None or attempt == 2:
                if "HKL001" in active:
                    result.findings.append(_syntax_finding(display, f"SyntaxError: {exc.msg}", exc.lineno or 1,
                                                           exc.offset or 1))
                break
        except (ValueError, MemoryError, RecursionError) as exc:  # null bytes, absurd nesting
            if notebook is None or attempt == 2:
                if "HKL001" in active:
                    result.findings.append(_syntax_finding(display, f"cannot parse: {exc}", 1, 1))
                break
        assert notebook is not None
        text, syntax_findings, skipped = _drop_broken_cells(text, notebook, display, target, active)
        result.notices.extend(skipped)
    result.findings = _placed(result.findings, notebook, display) + syntax_findings
    return None


UNUSED_NOQA = "HKL003"


def _unused_noqa(display: str, text: str, findings: list[Finding], active: frozenset[str], graph: Any) -> list[Finding]:
    """HKL003: ``# noqa`` codes of enabled rules this run decided (rules that
    read the model graph only when it was analysed) with no finding on their line."""
    from hooklint.findings import Origin
    from hooklint.rules.unused_noqa import UnusedNoqaRule

    decided = frozenset(
        rule.code for rule in rule_entries() if rule.code in active
        and (rule.static or rule.code in ("HKL001", "HKL002"))
        and (graph is not None or Origin.GRAPH.value not in rule.origins))
    return UnusedNoqaRule.report(display, text, findings, decided)


def _unknown_noqa_notices(display: str, text: str, notebook: Notebook | None) -> list[Notice]:
    out = []
    from hooklint.static.noqa import unknown_noqa_codes

    for row, code in unknown_noqa_codes(text, _known_codes()):
        if notebook is not None:
            cell, row, _col = notebook.to_cell(row, 1)
            where = f"cell {cell}, line {row}"
        else:
            where = f"line {row}"
        out.append(Notice(display, f"{where}: `# noqa` names {code}, which is not a hooklint rule (`hooklint rule "
                                   f"--all` lists them), so it suppresses nothing", NoticeLevel.WARNING,
                          once_key=f"unknown-noqa-code:{code}"))
    return out


@lru_cache(maxsize=64)
def _static_codes(codes: frozenset[str]) -> frozenset[str]:
    return frozenset(entry.code for entry in rule_entries() if entry.code in codes and entry.static)


@lru_cache(maxsize=1)
def _known_codes() -> frozenset[str]:
    return frozenset(rule.code for rule in rule_entries())


def _drop_broken_cells(text: str, notebook: Notebook, display: str, target: tuple[int, int] | None,
                       active: frozenset[str]) -> tuple[str, list[Finding], list[Notice]]:
    """Jupyter compiles each cell on its own: a cell with a syntax error fails
    alone and the others still run.  When the joined text does not parse, each
    cell that does not parse alone is reported (HKL001, placed in its cell) and
    blanked, so that the rest of the notebook is still checked."""
    lines = text.split("\n")
    findings: list[Finding] = []
    notices: list[Notice] = []
    for cell in notebook.cells:
        if not cell.lines:
            continue
        cell_text = "".join(line + "\n" for line in cell.lines)
        try:
            parse_for_target(cell_text, "<unknown>", target)
            continue
        except _NewerSyntax as newer:
            notices.append(_newer_syntax_notice(display, newer.error, target or (0, 0), cell.number))
        except SyntaxError as exc:
            if "HKL001" in active:
                row = min(max(exc.lineno or 1, 1), len(cell.lines))
                col = exc.offset or 1 if (exc.lineno or 1) <= len(cell.lines) else len(cell.lines[-1]) + 1
                findings.append(replace(_syntax_finding(display, f"SyntaxError: {exc.msg}", row, col),
                                        cell=cell.number))
        except (ValueError, MemoryError, RecursionError) as exc:
            if "HKL001" in active:
                findings.append(replace(_syntax_finding(display, f"cannot parse: {exc}", 1, 1), cell=cell.number))
        for i in range(len(cell.lines)):
            lines[cell.first_row - 1 + i] = ""
    return "\n".join(lines), findings, notices


def _placed(findings: list[Finding], notebook: Notebook | None, display: str) -> list[Finding]:
    """Findings on a notebook's Python text -> findings placed in its cells."""
    if notebook is None:
        return findings
    return [place_in_cell(f, notebook, display) for f in findings]


def place_in_cell(f: Finding, notebook: Notebook, display: str) -> Finding:
    if f.cell is not None:
        return f
    cell, row, col = notebook.to_cell(f.location.row, f.location.column)
    end_cell, end_row, end_col = notebook.to_cell(f.end_location.row, f.end_location.column)
    end = Location(end_row, end_col) if end_cell == cell else Location(row, col)
    fix = f.fix
    if fix is not None and fix.edits:
        edits = []
        for edit in fix.edits:
            a = notebook.to_cell(edit.location.row, edit.location.column)
            b = notebook.to_cell(edit.end_location.row, edit.end_location.column)
            if a[0] != cell or b[0] != cell:
                # a notebook's cells are separate sources: a fix that crosses
                # cells is shown, never applied
                fix = replace(fix, edits=(), applicability=Applicability.DISPLAY_ONLY)
                break
            edits.append(replace(edit, location=Location(a[1], a[2]), end_location=Location(b[1], b[2])))
        else:
            fix = replace(fix, edits=tuple(edits))
    if fix is not None:
        fix = replace(fix, message=notebook.describe_rows(fix.message))
    related = tuple(_place_related(r, notebook, display) for r in f.related)
    return replace(f, cell=cell, location=Location(row, col), end_location=end, fix=fix, related=related,
                   message=notebook.describe_rows(f.message), help=notebook.describe_rows(f.help))


def _place_related(r: Related, notebook: Notebook, display: str) -> Related:
    if r.path != display or r.cell is not None:
        return r
    cell, row, col = notebook.to_cell(r.location.row, r.location.column)
    return replace(r, cell=cell, location=Location(row, col), message=notebook.describe_rows(r.message))


def _run_rules(ctx: FileContext, active: frozenset[str], result: FileResult,
               runs: frozenset[str] | None = None) -> list[Finding]:
    display = ctx.display_path
    findings: list[Finding] = []
    for rule in _static_rules(active):
        if runs is not None and rule.code not in runs:
            continue
        try:
            findings.extend(rule.check(ctx))
        except RecursionError:
            result.notices.append(Notice(display, f"{rule.code}: skipped, the file nests too deeply to analyse",
                                         NoticeLevel.SKIP))
        except Exception as exc:  # noqa: BLE001 - one rule's bug must not hide the others' findings
            if os.environ.get("HOOKLINT_STRICT"):
                raise
            result.notices.append(Notice(
                display, f"internal error in {rule.code} ({type(exc).__name__}: {exc}); please report it",
                NoticeLevel.ERROR))
    return findings


def _summary_of(ctx: FileContext, result: FileResult) -> dict[str, Any] | None:
    try:
        return ctx.summary
    except RecursionError:
        return None
    except Exception as exc:  # noqa: BLE001 - the file's findings stand without it
        if os.environ.get("HOOKLINT_STRICT"):
            raise
        result.notices.append(Notice(ctx.display_path, f"internal error in the call-graph summary "
                                     f"({type(exc).__name__}: {exc}); please report it", NoticeLevel.ERROR))
        return None


def apply_noqa(text: str, findings: list[Finding]) -> list[Finding]:
    if not findings:
        return findings
    from hooklint.static.noqa import parse_noqa

    noqa = parse_noqa(text)
    return [f for f in findings if not noqa.suppresses(f.code, f.location.row)]


def read_checkable(path: str, data: bytes | None = None) -> tuple[str, Notebook | None]:
    """The Python text of a file (and, for a notebook, its cell map); reads the
    file unless ``data`` is given.  Raises SourceError."""
    if data is None:
        data = read_regular_file(path)[0]
    if path.lower().endswith(_NOTEBOOK_SUFFIX):  # hooklint.static.notebook.is_notebook, without importing it
        from hooklint.static.notebook import read_notebook

        try:
            raw = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SourceError("decode", f"not a valid notebook: not utf-8 text (byte {data[exc.start]:#04x})") \
                from None
        notebook = read_notebook(raw)
        return notebook.text, notebook
    return decode_source(data), None


def check_file(
    path: str,
    codes: frozenset[str],
    *,
    display_path: str | None = None,
    ignored: frozenset[str] = frozenset(),
    graph: Any = None,
    prefilter: bool = True,
    target: tuple[int, int] | None = None,
    data: bytes | None = None,
    project_answers: dict[str, Any] | None = None,
    summarize: bool = False,
    noqa: bool = True,
) -> FileResult:
    """Check a file (a Jupyter notebook when its name ends in ``.ipynb``);
    ``data``: its bytes when already read."""
    display = display_path or path
    try:
        text, notebook = read_checkable(path, data)
    except SourceError as err:
        return source_error_result(display, err, codes, ignored)
    return check_text(path, text, codes, display_path=display, ignored=ignored, graph=graph, prefilter=prefilter,
                      target=target, notebook=notebook, on_disk=data is None, project_answers=project_answers,
                      summarize=summarize, noqa=noqa)


def source_error_result(display: str, err: SourceError, codes: frozenset[str],
                        ignored: frozenset[str] = frozenset()) -> FileResult:
    """HKL002 (cannot read) or HKL001 (cannot decode, not a notebook) for a file."""
    result = FileResult(display)
    code = "HKL002" if err.kind == "io" else "HKL001"
    if code in codes and code not in ignored:
        from hooklint.rules.io_error import IoErrorRule
        from hooklint.rules.syntax_error import SyntaxErrorRule

        rule = IoErrorRule if code == "HKL002" else SyntaxErrorRule
        result.findings.append(rule.make(path=display, location=Location(err.row, err.column), message=err.message))
    return result
