"""Property tests: whatever text or bytes the static pass is given, it returns
well-formed findings, in bounded time, without raising.

Tests run with HOOKLINT_STRICT=1 (tests/conftest.py): an exception inside a
rule propagates and fails the example instead of becoming a notice.  The
profile (tests/scale/conftest.py) fixes the seed in CI; set
HYPOTHESIS_PROFILE=thorough for a longer random search.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hooklint.static.checker import check_file, check_text, may_contain_findings
from tests.scale.hostile import (
    ALL_CODES,
    assert_well_formed,
    deep_source,
    hostile_bytes,
    mutated_source,
    time_limit,
)

DISPLAY = "hostile.py"


def _check(text: str, prefilter: bool = False):
    with time_limit():
        return check_text(DISPLAY, text, ALL_CODES, prefilter=prefilter)


@given(mutated_source())
@example("x.register_hook(lambda g: g.mul_(2)\x00)\n")
@example("\ufeffx.register_hook(print)\r\n\x0c\n")
@example("def f(\n" * 300)
def test_property_mutated_real_code(text):
    assert_well_formed(_check(text), text, DISPLAY)


@given(deep_source())
@example("x = " + "(" * 5000 + ")" * 5000 + "\nx.register_hook(print)\n")
@example("import torch\nx = torch.ones(1)\ny = " + " + ".join(["x"] * 100_000) + "\nx.register_hook(lambda g: g.mul_(2))\n")
def test_property_deep_and_long_code(text):
    assert_well_formed(_check(text), text, DISPLAY)


@given(hostile_bytes())
@example(b"\x00\x00register_hook")
@example(b"\xff\xfe" + "x.register_hook(lambda g: g.mul_(2))\n".encode("utf-16-le"))
@example(b"# coding: utf-8\n\xc3\x28 = 1\nx.register_hook(print)\n")
def test_property_odd_encodings_and_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("bytes") / DISPLAY
    path.write_bytes(data)
    with time_limit():
        result = check_file(str(path), ALL_CODES, display_path=DISPLAY, prefilter=False)
    assert_well_formed(result, None, DISPLAY)


@given(st.one_of(mutated_source(), deep_source()))
def test_property_the_prefilter_loses_no_finding(text):
    """The text shortcut skips a file only when a full parse finds nothing
    either (syntax errors aside: HKL001 is documented to need a trigger word)."""
    with time_limit():
        full = check_text(DISPLAY, text, ALL_CODES, prefilter=False)
        short = check_text(DISPLAY, text, ALL_CODES, prefilter=True)
    keep = [f for f in full.findings if f.code != "HKL001"]
    assert [f for f in short.findings if f.code != "HKL001"] == keep
    if keep:
        assert may_contain_findings(text, ALL_CODES)


# Texts built to make a regular expression backtrack: the prefilter's patterns
# run on every file that contains a trigger word.
@pytest.mark.parametrize("text", [
    ("." + " " * 40 + "#" * 40 + "\n") * 2000,
    ". # # # # # # # # # #" * 5000,
    "def" + " \\\n\t" * 20000 + "backwar",
    ("forward." + "\n" * 50) * 2000,
    "super()" + ".forward" * 20000,
    ("x.forward" + " )" * 50 + "# c\n") * 2000,
    "Function def " * 30000,
], ids=["comments", "hashes", "continuations", "newlines", "super", "parens", "def"])
def test_prefilter_patterns_stay_linear(text):
    with time_limit(2.0):
        may_contain_findings(text, ALL_CODES)
        may_contain_findings(text + "\nregister" + "_hook", ALL_CODES)


def test_every_trigger_pattern_compiles_and_is_anchored_on_text():
    from hooklint.rules import all_rules

    for rule in all_rules():
        if rule.trigger_pattern is not None:
            assert rule.triggers, f"{rule.code}: a pattern is tried only after a trigger word"
            re.compile(rule.trigger_pattern)
