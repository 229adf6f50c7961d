"""hooklint/fix/diff.py: unified diffs anchored on unique lines for large
texts (difflib's matcher is close to quadratic when thousands of lines
change), difflib's own output for small ones."""

from __future__ import annotations

import difflib
import random

import pytest

from hooklint.fix import diff


def patched(a: list[str], rng: random.Random) -> list[str]:
    b = list(a)
    for _ in range(rng.randrange(0, 12)):
        k = rng.randrange(len(b) + 1)
        op = rng.choice("idr")
        if op == "i":
            b.insert(k, f"new {rng.randrange(9)}\n")
        elif b and k < len(b):
            if op == "d":
                del b[k]
            else:
                b[k] = f"changed {rng.randrange(9)}\n"
    return b


def apply_unified(a: list[str], text: list[str]) -> list[str]:
    """Apply a unified diff's hunks to ``a`` (what `patch` does)."""
    out, pos = [], 0
    for line in text[2:]:
        if line.startswith("@@"):
            start = int(line.split()[1][1:].split(",")[0])
            length = line.split()[1].split(",")
            first = start - 1 if len(length) == 1 or length[1] != "0" else start
            out += a[pos:first]
            pos = first
        elif line.startswith(" "):
            assert a[pos] == line[1:]
            out.append(line[1:])
            pos += 1
        elif line.startswith("-"):
            assert a[pos] == line[1:]
            pos += 1
        elif line.startswith("+"):
            out.append(line[1:])
    return out + a[pos:]


@pytest.mark.parametrize("seed", range(40))
def test_anchored_diff_turns_the_old_text_into_the_new(seed, monkeypatch):
    monkeypatch.setattr(diff, "_DIRECT", 0)  # the anchored path, on texts small enough to check
    rng = random.Random(seed)
    a = [f"line {rng.randrange(30)}\n" for _ in range(rng.randrange(0, 80))]
    b = patched(a, rng)
    text = list(diff.unified_diff(a, b, "f.py", "f.py"))
    assert apply_unified(a, text) == b
    assert bool(text) == (a != b)


def test_small_texts_get_difflibs_own_diff():
    a = [f"x{i}\n" for i in range(50)]
    b = a[:10] + ["y\n"] + a[12:]
    assert list(diff.unified_diff(a, b, "p", "p")) == list(difflib.unified_diff(a, b, fromfile="p", tofile="p"))


def test_thousands_of_changed_lines():
    a, b = [], []
    for i in range(5000):
        a += [f"l{i} = nn.Linear(2, 2)\n", f"l{i}.register_backward_hook(hook)\n"]
        b += [f"l{i} = nn.Linear(2, 2)\n", f"l{i}.register_full_backward_hook(hook)\n"]
    text = list(diff.unified_diff(a, b, "f.py", "f.py"))
    assert apply_unified(a, text) == b
    assert sum(1 for line in text if line.startswith("+l")) == 5000
