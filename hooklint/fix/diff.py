"""Unified diffs of a file and its fixed text, in time that grows with the file.

``difflib.unified_diff`` compares the two line lists with a
``SequenceMatcher``, whose search for the longest matching block is close
to quadratic when many lines change (5,000 fixed registrations in one file:
8 s of the 9 s a ``--diff`` took).  Fixes change lines here and there and
leave most lines as they were, many of them unique in the file (the
definitions, the other statements).  So the lines that occur exactly once
in both texts are matched first, those in the same order kept as anchors
(patience diff), and ``SequenceMatcher`` runs only on the short stretches
between two anchors.  Small texts go straight to ``SequenceMatcher``: the
output is then exactly difflib's, and on large ones it is a valid unified
diff of the same two texts."""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from typing import Iterator, Sequence

# Below this many line pairs SequenceMatcher alone is fast enough.
_DIRECT = 250_000


class _AnchoredMatcher(difflib.SequenceMatcher):
    """A SequenceMatcher whose matching blocks are found between anchors."""

    def get_matching_blocks(self):  # type: ignore[override]
        if self.matching_blocks is not None:
            return self.matching_blocks
        a, b = self.a, self.b
        blocks: list[tuple[int, int, int]] = []
        ai = bi = 0
        for aj, bj in _anchors(a, b) + [(len(a), len(b))]:
            if aj > ai and bj > bi:
                inner = difflib.SequenceMatcher(None, a[ai:aj], b[bi:bj], autojunk=False)
                blocks.extend((ai + x, bi + y, n) for x, y, n in inner.get_matching_blocks() if n)
            if aj < len(a):
                blocks.append((aj, bj, 1))
            ai, bi = aj + 1, bj + 1
        merged: list[list[int]] = []
        for x, y, n in blocks:  # adjacent blocks as one, as SequenceMatcher reports them
            if merged and merged[-1][0] + merged[-1][2] == x and merged[-1][1] + merged[-1][2] == y:
                merged[-1][2] += n
            else:
                merged.append([x, y, n])
        self.matching_blocks = [difflib.Match(x, y, n) for x, y, n in merged] + [difflib.Match(len(a), len(b), 0)]
        return self.matching_blocks


def _anchors(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """(i, j) pairs of lines that occur once in ``a`` and once in ``b``, equal,
    and in the same order in both: the longest such chain (patience sort)."""
    count_a, count_b = Counter(a), Counter(b)
    where_b = {line: j for j, line in enumerate(b) if count_b[line] == 1}
    pairs = [(i, where_b[line]) for i, line in enumerate(a) if count_a[line] == 1 and line in where_b]
    # longest increasing subsequence of the j's (pairs are sorted by i)
    tails: list[int] = []  # tails[k]: the smallest j ending a chain of length k + 1
    tail_at: list[int] = []  # index into pairs of that chain's end
    back: list[int] = [-1] * len(pairs)
    for n, (_i, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            tail_at.append(n)
        else:
            tails[k] = j
            tail_at[k] = n
        back[n] = tail_at[k - 1] if k else -1
    chain: list[tuple[int, int]] = []
    n = tail_at[-1] if tail_at else -1
    while n != -1:
        chain.append(pairs[n])
        n = back[n]
    chain.reverse()
    return chain


def _range(start: int, stop: int) -> str:
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start if not length else start + 1},{length}"


def unified_diff(a: Sequence[str], b: Sequence[str], fromfile: str, tofile: str, n: int = 3) -> Iterator[str]:
    """``difflib.unified_diff(a, b, fromfile, tofile, n=n)`` (lines keep their ends)."""
    if len(a) * len(b) <= _DIRECT:
        yield from difflib.unified_diff(a, b, fromfile=fromfile, tofile=tofile, n=n)
        return
    started = False
    for group in _AnchoredMatcher(None, a, b, autojunk=False).get_grouped_opcodes(n):
        if not started:
            started = True
            yield f"--- {fromfile}\n"
            yield f"+++ {tofile}\n"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in a[i1:i2]:
                    yield " " + line
                continue
            if tag in ("replace", "delete"):
                for line in a[i1:i2]:
                    yield "-" + line
            if tag in ("replace", "insert"):
                for line in b[j1:j2]:
                    yield "+" + line
