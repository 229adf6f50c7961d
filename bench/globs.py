"""Excludes and .gitignore globs that make a backtracking regex engine take
exponential time, through the real walker.

    python bench/globs.py [--files N] [--timeout S]

A tree of N files with long names, walked (`hooklint check --show-files`)
three times: with the default excludes, with a 26-character exclude glob of
many `*` (`--extend-exclude`), and with the same glob in a .gitignore.
Prints the wall time of each walk; a walk that exceeds --timeout is shown
as such (hooklint 0.1.0 translated globs to regular expressions and took
minutes on the last two)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WILD = "*a" * 12 + "*b"  # 25 characters of wildcards, plus the `/` anchor below


def walk(folder: Path, *extra: str, timeout: float) -> str:
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "hooklint", "check", "--show-files", "--isolated", *extra, "."],
                              cwd=folder, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"over {timeout:g} s (stopped)"
    elapsed = time.perf_counter() - start
    files = len(proc.stdout.splitlines())
    return f"{elapsed:.2f} s ({files} files listed, exit {proc.returncode})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(args.files):
            folder = root / f"pkg{i % 40}"
            folder.mkdir(exist_ok=True)
            (folder / ("a" * 60 + f"_{i}.py")).write_text("x = 1\n")
        print(f"{args.files} files with 60-character names; glob {('/' + WILD)!r} ({len(WILD) + 1} characters)")
        print(f"  default excludes:        {walk(root, timeout=args.timeout)}")
        print(f"  --extend-exclude glob:   {walk(root, '--extend-exclude', '/' + WILD, timeout=args.timeout)}")
        (root / ".gitignore").write_text("/" + WILD + "\n" + "**/" + WILD + "\n")
        print(f"  the glob in .gitignore:  {walk(root, timeout=args.timeout)}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    sys.exit(main())
