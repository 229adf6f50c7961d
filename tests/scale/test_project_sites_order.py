"""The project index keeps its call sites by name up to date as summaries come
(hooklint.static.project.ProjectIndex._by_last): the same lists, in the same
order, as built from every summary at once, whatever order the files came in."""

from __future__ import annotations

import random

from hooklint.rules import rule_entries
from hooklint.static.checker import check_text
from hooklint.static.project import ProjectIndex
from tests.conftest import FIXTURES

CODES = frozenset(entry.code for entry in rule_entries())


def _summaries() -> list[dict]:
    out = []
    for path in sorted(FIXTURES.rglob("*.py")):
        result = check_text(str(path), path.read_text(encoding="utf-8"), CODES, summarize=True, prefilter=False)
        if result.summary is not None and result.summary["sites"]:
            out.append(result.summary)
    return out


def _by_last(index: ProjectIndex) -> dict[str, list[tuple[int, int]]]:
    index._candidates("nothing.at.all")  # builds it when not built yet
    return {name: [(id(summary), id(site)) for summary, site in pairs] for name, pairs in index._by_last.items()}


def test_sites_added_later_keep_the_order_of_a_fresh_index():
    summaries = _summaries()
    assert len(summaries) > 20
    # two summaries of one path: the one added later goes after, as the summaries themselves are ordered
    summaries.append(dict(summaries[3]))
    for seed in range(3):
        shuffled = summaries[:]
        random.Random(seed).shuffle(shuffled)
        growing = ProjectIndex(shuffled[:5])
        _by_last(growing)
        for summary in shuffled[5:]:
            growing.add(summary)
        fresh = ProjectIndex(shuffled)
        assert [s["path"] for s in growing.summaries()] == [s["path"] for s in fresh.summaries()]
        assert _by_last(growing) == _by_last(fresh)
        assert sum(map(len, _by_last(fresh).values())) == sum(len(s["sites"]) for s in summaries)
