"""``hooklint check`` on a one-file change with a warm cache, as pre-commit runs it.

    python bench/graph_precommit.py [--project DIR] [--changed FILE,...] [--repeat N]

The project (default: tests/graph/projects/argparse_explainer, a training script,
a models package and hooking code in another package) is copied to a temporary
folder and checked once in full (``hooklint check .``: the graph layer builds the
models, the caches fill).  Then, for each file of ``--changed`` (default: every
Python file of the project), ``--repeat`` times, two kinds of edit, each followed
by ``hooklint check FILE`` with the real CLI, as pre-commit passes the changed files:

* ``comment``: a comment line appended to the file;
* ``code``: a real code edit.  In a file with a module class whose ``__init__``
  has an integer default (``width=8``), that default goes up by one (the layers
  built from it change size: the model must be built again); elsewhere a
  statement that changes nothing (``print('bench edit N')``) is appended.

The comment edit is also checked with ``--static-only``.  Prints, per file and
kind, the wall-clock time (best, median), the CPU time of the command and its
children (median; less sensitive to a busy machine), how many of the runs
imported the user's code (the graph layer analysed the file again), and the
load average around them.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
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


# an integer default of a module class's __init__ (`def __init__(self, width=8, ...)`)
_INIT_DEFAULT = re.compile(r"(def __init__\(self[^)]*?=\s*)(\d+)")


def code_edit(text: str, i: int) -> str:
    """A real code edit: an __init__'s integer default one higher (layers change
    size), or a module-level statement that changes nothing."""
    if "Module" in text:
        match = _INIT_DEFAULT.search(text)
        if match is not None:
            return text[:match.start(2)] + str(int(match.group(2)) + 1) + text[match.end(2):]
    return text + f"print('bench edit {i}')\n"


IMPORTED = "importing your code"


@dataclass
class Runs:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    imported: int = 0
    load: list[float] = field(default_factory=list)

    def add(self, elapsed: float, output: str, cpu: float) -> None:
        self.wall.append(elapsed)
        self.cpu.append(cpu)
        self.imported += IMPORTED in output
        self.load.append(os.getloadavg()[0])

    def row(self) -> str:
        return (f"{min(self.wall):.2f} / {statistics.median(self.wall):.2f} s, "
                f"CPU {statistics.median(self.cpu):.2f} s, imported {self.imported}/{len(self.wall)}, "
                f"load {min(self.load):.1f}-{max(self.load):.1f}")


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
        import hooklint

        package = Path(hooklint.__file__).parent
        if sys.flags.dont_write_bytecode and not (package / "__pycache__").is_dir():
            print(f"note: no bytecode for {package} and PYTHONDONTWRITEBYTECODE is set: each run compiles "
                  f"hooklint (~0.2 s of CPU an installed hooklint does not spend); `python -m compileall "
                  f"{package}` first")
        full, _, _ = check(folder, ["."])
        again, _, _ = check(folder, ["."])
        print(f"full check: cold {full:.2f} s, warm {again:.2f} s; load average {os.getloadavg()[0]:.1f}")
        print("per changed file and kind of edit: wall-clock best / median, CPU median, runs that imported "
              "the user's code, load average (1 min) after the runs")
        files = args.changed.split(",") if args.changed else sorted(
            str(p.relative_to(folder)) for p in folder.rglob("*.py") if ".hooklint_cache" not in p.parts)
        worst: dict[str, float] = {}
        for name in files:
            path = folder / name
            runs = {"comment": Runs(), "comment, --static-only": Runs(), "code": Runs()}
            original = path.read_text(encoding="utf-8")
            check(folder, [name])  # the facts of this file as it is (the last file's edits may have changed a dep)
            for i in range(args.repeat):
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(f"# edit {i}\n")
                runs["comment"].add(*check(folder, [name]))
                with open(path, "a", encoding="utf-8") as handle:
                    handle.write(f"# static edit {i}\n")
                runs["comment, --static-only"].add(*check(folder, [name], "--static-only"))
                path.write_text(code_edit(path.read_text(encoding="utf-8"), i), encoding="utf-8")
                runs["code"].add(*check(folder, [name]))
            path.write_text(original, encoding="utf-8")
            for kind, found in runs.items():
                print(f"{name} [{kind}]: {found.row()}  ({args.repeat} edits)")
                worst[kind] = max(worst.get(kind, 0.0), statistics.median(found.wall))
        print("slowest median: " + ", ".join(f"{kind} {value:.2f} s" for kind, value in worst.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
