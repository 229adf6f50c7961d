"""Hypothesis strategies for hostile Python input, and the checks every result
of the static pass must pass.  Used by test_properties.py."""

from __future__ import annotations

import signal
import time
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

from hooklint.findings import NoticeLevel
from hooklint.rules import all_rules
from hooklint.rules.base import iter_rule_examples
from hooklint.static.source import python_lines

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KNOWN_CODES = frozenset(r.code for r in all_rules())
ALL_CODES = KNOWN_CODES

# Wall-clock budget for one example; generous because CI machines are shared.
EXAMPLE_SECONDS = 10.0


@lru_cache(maxsize=1)
def seed_sources() -> tuple[str, ...]:
    """Real hook code to mutate: every rule example and fixture."""
    out = [src for rule in all_rules() for _label, src, _bad in iter_rule_examples(rule)]
    for path in sorted(FIXTURES.rglob("*.py")):
        out.append(path.read_text(encoding="utf-8"))
    return tuple(out)


# Pieces that stress the tokenizer, the parser and the rules' assumptions.
TOKENS = (
    "(", ")", "[", "]", "{", "}", ":", ",", ".", "\n", "    ", "\t", "\\\n", "#", "'", '"', '"""', "f'{",
    "\x00", "\r", "\r\n", "\x0c", "\ufeff", "\u2028", "\x85", "é", "\U0001f600", "\udcff",
    "lambda", "lambda *a, **k: a", "def ", "async def ", "class ", "return", "yield", "await ", "global x",
    "nonlocal x", "*", "**", "@", "=", ":=", "del ", "match x:\n case _: pass", "type X = int",
    "register_hook", "register_full_backward_hook", "register_backward_hook", "register_forward_hook",
    "register_forward_pre_hook", "register_post_accumulate_grad_hook", ".forward(", ".remove()",
    ".backward()", "torch.autograd.Function", "@staticmethod\n", "ctx.needs_input_grad[1]",
    "\uff52egister_hook",  # fullwidth r: NFKC makes it register_hook
    "super().forward(", "self", "grad_input", "grad_output", "nn.Module", "import torch\n",
)


@st.composite
def mutated_source(draw) -> str:
    """A real hook file or example, then a few edits: deletions, duplications,
    insertions of hostile tokens, swapped or re-indented lines."""
    text = draw(st.sampled_from(seed_sources()))
    for _ in range(draw(st.integers(0, 8))):
        if not text:
            text = draw(st.sampled_from(TOKENS))
            continue
        op = draw(st.sampled_from(("delete", "duplicate", "insert", "swap", "indent", "truncate")))
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 200)))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(TOKENS) | st.text(max_size=8)) + text[i:]
        elif op == "truncate":
            text = text[:i]
        else:
            lines = text.split("\n")
            a = draw(st.integers(0, len(lines) - 1))
            b = draw(st.integers(0, len(lines) - 1))
            if op == "swap":
                lines[a], lines[b] = lines[b], lines[a]
            else:
                lines[a] = draw(st.sampled_from(("", " ", "    ", "\t", "        "))) + lines[a].lstrip()
            text = "\n".join(lines)
    return text


HOOK_LINE = "x.register_hook(lambda g: g.mul_(2))"


DEEP_KINDS = ("parens", "lists", "defs", "lambdas", "binop", "attrs", "calls", "ifs", "many_hooks", "long_line",
              "fstrings")


def deep_text(kind: str, n: int) -> str:
    """Deep nesting and long chains around real hook calls: parser limits,
    recursion in the rules, quadratic behaviour."""
    if kind == "parens":
        return f"import torch\nx = {'(' * n}torch.ones(1){')' * n}\n{HOOK_LINE}\n"
    if kind == "lists":
        return f"y = {'[' * n}{HOOK_LINE}{']' * n}\n"
    if kind == "defs":
        depth = min(n, 120)  # Python's limit is 100 levels of indentation
        body = "".join(f"{'    ' * i}def f{i}(grad):\n" for i in range(depth))
        return "import torch\n" + body + "    " * depth + "return grad.mul_(2)\n" + HOOK_LINE.replace(
            "lambda g: g.mul_(2)", "f0") + "\n"
    if kind == "lambdas":
        return f"h = {'lambda g: ' * n}g\nx.register_hook(h)\n"
    if kind == "binop":
        return f"import torch\nx = torch.ones(1, requires_grad=True)\ny = {' + '.join(['x'] * (n * 10))}\n" \
               f"{HOOK_LINE}\ny.sum().backward()\n"
    if kind == "attrs":
        return f"a{'.b' * (n * 5)}.register_full_backward_hook(lambda m, gi, go: gi)\n"
    if kind == "calls":
        return f"y = {'f(' * n}x.register_hook(print){')' * n}\n"
    if kind == "ifs":
        depth = min(n, 120)
        return "".join(f"{' ' * i}if c:\n" for i in range(depth)) + " " * depth + HOOK_LINE + "\n"
    if kind == "many_hooks":
        return "import torch.nn as nn\nm = nn.Linear(2, 2)\n" + "".join(
            f"h{i} = m.register_full_backward_hook(lambda mod, gi, go: gi)\nh{i}.remove()\n" for i in range(n))
    if kind == "long_line":
        return "x = 1" + " or 1" * (n * 20) + "; " + HOOK_LINE + "\n"
    return f"s = f'{'{' * min(n, 200)}x{'}' * min(n, 200)}'\n{HOOK_LINE}\n"


def deep_source() -> st.SearchStrategy[str]:
    return st.builds(deep_text, st.sampled_from(DEEP_KINDS), st.integers(1, 3000))


ENCODING_HEADERS = (
    b"", b"# -*- coding: latin-1 -*-\n", b"# coding: utf-16\n", b"# coding: no-such-codec\n",
    b"\xef\xbb\xbf", b"\xef\xbb\xbf# coding: latin-1\n", b"\xff\xfe", b"\xfe\xff", b"#!/usr/bin/env python\n"
    b"# vim: set fileencoding=cp1252 :\n", b"# coding: utf-8\n\x00",
)


@st.composite
def hostile_bytes(draw) -> bytes:
    """Odd encodings and raw bytes around real hook code."""
    head = draw(st.sampled_from(ENCODING_HEADERS))
    body = draw(mutated_source())
    encoding = draw(st.sampled_from(("utf-8", "latin-1", "utf-16", "cp1252", "utf-8-sig")))
    data = body.encode(encoding, errors="replace")
    noise = draw(st.binary(max_size=64))
    at = draw(st.integers(0, len(data)))
    return head + data[:at] + noise + data[at:]


# ------------------------------------------------------------------ checks


class ExampleTimeout(Exception):
    pass


@contextmanager
def time_limit(seconds: float = EXAMPLE_SECONDS):
    """Fail an example that runs too long: SIGALRM ends Python-level loops; a
    slow call in C that does return is caught by the elapsed-time check."""

    def expired(signum, frame):
        raise ExampleTimeout(f"one example ran for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.perf_counter() - start
    assert elapsed < seconds, f"one example took {elapsed:.1f} s"


def assert_well_formed(result, text: str | None, display: str, codes: frozenset[str] = ALL_CODES) -> None:
    """Findings any reporter can render: known codes, 1-based locations inside
    the file, a message; notices with a level and the file's path."""
    assert result.path == display
    lines = python_lines(text) if text is not None else None
    for f in result.findings:
        assert f.code in KNOWN_CODES and f.code in codes, f.code
        assert f.path == display
        assert f.message.strip(), f
        assert f.location.row >= 1 and f.location.column >= 1, f
        assert (f.end_location.row, f.end_location.column) >= (f.location.row, f.location.column), f
        if lines is not None:
            last = max(len(lines), 1) + 1  # a syntax error may point just past the last line
            for loc in (f.location, f.end_location):
                assert loc.row <= last, (loc, len(lines), f.message)
                width = len(lines[loc.row - 1]) if loc.row <= len(lines) else 0
                assert loc.column <= width + 1, (loc, width, f.message)
        for related in f.related:
            assert related.location.row >= 1 and related.location.column >= 1
        if f.fix is not None:
            for edit in f.fix.edits:
                assert edit.location.row >= 1 and edit.location.column >= 1
                assert (edit.end_location.row, edit.end_location.column) >= (edit.location.row,
                                                                              edit.location.column)
    for n in result.notices:
        assert n.path == display and n.message.strip() and isinstance(n.level, NoticeLevel)
