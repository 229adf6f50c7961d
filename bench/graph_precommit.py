"""``hooklint check`` on a one-file change with a warm cache, as pre-commit runs it.

    python bench/graph_precommit.py [--project DIR] [--changed FILE,...] [--repeat N]

The project (default: tests/graph/projects/argparse_explainer, a training script,
a models package and hooking code in another package) is copied to a temporary
folder and checked once in full (``hooklint check .``: the graph layer builds the
models, the caches fill).  Then, for each file of ``--changed`` (default: every
Python file of the project), ``--repeat`` times: a comment line is appended to the
file (a new content, as an edit makes) and ``hooklint check FILE`` runs with the
real CLI, as pre-commit passes the changed files.  Prints the wall-clock time of
each run (best, median) per file, and whether the graph layer had to import
anything (a changed model file or entry script must be analysed again: that
costs a worker start and the model's build).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PROJECT = REPO / "tests" / "graph" / "projects" / "argparse_explainer"


def check(folder: Path, paths: list[str], *extra: str) -> tuple[float, str, float]:
    """(wall-clock s, output, CPU s of the check and its children: less sensitive to a busy machine)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hooklint", "check", *paths, "--output-format", "concise", *extra],
                          cwd=folder, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"graph_precommit: hooklint check {' '.join(paths)} exited {proc.returncode}:\n{proc.stderr}")
    return elapsed, proc.stdout + proc.stderr, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=DEFAULT_PROJECT)
    parser.add_argument("--changed", help="comma-separated files, relative to the project")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hooklint-precommit-") as tmp:
        folder = Path(tmp) / "project"
        shutil.copytree(args.project, folder, ignore=shutil.ignore_patterns(".hooklint_cache", "__pycache__"))
        if not (folder / "pyproject.toml").exists() and not (folder / "hooklint.toml").exists():
            (folder / "hooklint.toml").write_text("memory-limit = 12288\n")
        full, _, _ = check(folder, ["."])
        again, _, _ = check(folder, ["."])
        print(f"full check: cold {full:.2f} s, warm {again:.2f} s")
        print("per changed file: wall-clock best / median, CPU median; the same with --static-only")
        files = args.changed.split(",") if args.changed else sorted(
            str(p.relative_to(folder)) for p in folder.rglob("*.py") if ".hooklint_cache" not in p.parts)
        worst = 0.0
        for name in files:
            path = folder / name
            times, cpus, static_times, static_cpus = [], [], [], []
            for i in range(args.repeat):
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(f"# edit {i}\n")
                elapsed, _, cpu = check(folder, [name])
                times.append(elapsed)
                cpus.append(cpu)
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(f"# static edit {i}\n")
                elapsed, _, cpu = check(folder, [name], "--static-only")
                static_times.append(elapsed)
                static_cpus.append(cpu)
            best, median = min(times), statistics.median(times)
            worst = max(worst, median)
            print(f"{name}: {best:.2f} / {median:.2f} s, CPU {statistics.median(cpus):.2f} s; static-only "
                  f"{min(static_times):.2f} / {statistics.median(static_times):.2f} s, CPU "
                  f"{statistics.median(static_cpus):.2f} s  ({args.repeat} edits)")
        print(f"slowest median: {worst:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
