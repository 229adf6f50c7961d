"""Throughput of hooklint's static pass next to a bare `ast.parse` of the same files.

    python bench/static_throughput.py [FOLDER ...] [--repeat N]

Default folder: the installed torch package's own Python sources (real
PyTorch code, full of hooks), or hooklint's fixtures if torch is absent.
Files are read into memory first, so both timings measure CPU work only.
Prints files/s, lines/s and the ratio static/ast.parse, with the text
prefilter on (what `hooklint check` does) and off (`--no-prefilter`: every
file parsed and analysed).  Target: the static pass at most 3x ast.parse.
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hooklint.config import resolve_codes  # noqa: E402
from hooklint.files import Walker  # noqa: E402
from hooklint.static.checker import check_text  # noqa: E402
from hooklint.static.source import SourceError, decode_source  # noqa: E402


def default_folder() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("torch")  # locating it does not import it
    if spec and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return Path(__file__).resolve().parent.parent / "fixtures"


def load(folders: list[Path]) -> list[tuple[str, str]]:
    out = []
    for folder in folders:
        for path in Walker(folder, [], respect_gitignore=False).files([str(folder)]):
            try:
                out.append((path, decode_source(Path(path).read_bytes())))
            except (SourceError, OSError):
                continue
    return out


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folders = args.folders or [default_folder()]
    files = load(folders)
    lines = sum(text.count("\n") + 1 for _p, text in files)
    codes = frozenset(resolve_codes(None, [], []))

    def parse_all():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for path, text in files:
                try:
                    ast.parse(text, filename=path)
                except (SyntaxError, ValueError):
                    pass

    def static(prefilter: bool):
        def run():
            n = 0
            for path, text in files:
                n += len(check_text(path, text, codes, prefilter=prefilter).findings)
            return n
        return run

    t_parse = best_of(args.repeat, parse_all)
    t_pre = best_of(args.repeat, static(True))
    t_full = best_of(args.repeat, static(False))
    parsed = sum(check_text(p, t, codes).parsed for p, t in files)
    findings = static(True)()

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    print(f"corpus: {', '.join(map(str, folders))}: {len(files)} files, {lines} lines; "
          f"{parsed} files ({parsed / max(len(files), 1):.0%}) pass the text prefilter; {findings} findings")
    rows = [("ast.parse only", t_parse), ("hooklint static (prefilter)", t_pre),
            ("hooklint static (--no-prefilter)", t_full)]
    for label, t in rows:
        print(f"{label:34s} {t:8.3f} s  {len(files) / t:9.0f} files/s  {lines / t:11.0f} lines/s  "
              f"{t / t_parse:5.2f}x ast.parse")
    ok = t_full <= 3 * t_parse
    print(f"target (full static pass <= 3x ast.parse): {'met' if ok else 'MISSED'} "
          f"({t_full / t_parse:.2f}x); statistics over {args.repeat} runs, best taken")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
