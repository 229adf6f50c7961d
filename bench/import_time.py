"""What hooklint's own imports cost a one-file static check.

    python bench/import_time.py [--runs N] [FILE]

Runs `hooklint check --static-only --no-cache FILE` N times (default 9), each
in a fresh interpreter, and prints the median over the runs of:

* hooklint's imports: the time spent importing `hooklint` and `hooklint.*`
  modules, each counted once at its outermost import (so the standard-library
  and third-party modules they import are included, as `-X importtime`'s
  cumulative column counts them);
* every import the command made after the interpreter started (hooklint's,
  and what its code imports later: `tabulate`, `concurrent.futures`...);
* the whole command's wall-clock and CPU (user + system) time.

`python -X importtime` misses what `importlib.import_module` imports (the
rules registry and the subcommands load their modules that way), so each run
times `importlib._bootstrap._find_and_load` instead, through which both the
`import` statement and `importlib.import_module` go.  FILE defaults to a
fixture with hook registrations (the prefilter admits it, so the rules that
analyse it are loaded).  Target (issue 15): under 0.1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILE = ROOT / "fixtures" / "rules" / "containers.py"

# Run in the measured interpreter: time every import by its outermost caller.
PROBE = r"""
import sys, time, json, runpy
import importlib._bootstrap as bootstrap

records = []  # (name, seconds, CPU seconds, depth)
depth = [0]
original = bootstrap._find_and_load

def timed_find_and_load(name, import_):
    depth[0] += 1
    start, cpu = time.perf_counter(), time.process_time()
    try:
        return original(name, import_)
    finally:
        depth[0] -= 1
        records.append((name, time.perf_counter() - start, time.process_time() - cpu, depth[0]))

bootstrap._find_and_load = timed_find_and_load
out = sys.argv.pop(1)
sys.argv[0] = "hooklint"
try:
    runpy.run_module("hooklint", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    bootstrap._find_and_load = original
    with open(out, "w") as handle:
        json.dump(records, handle)
"""


def one_run(file: Path, scratch: Path) -> dict[str, float]:
    out = scratch / "imports.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # from the repository, as a user runs it (its pyproject.toml read, its files the project's context)
    subprocess.run([sys.executable, "-c", PROBE, str(out), "check", "--static-only", "--no-cache",
                    os.path.relpath(file, ROOT)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    records = json.loads(out.read_text())
    outermost = [(name, seconds, cpu) for name, seconds, cpu, depth in records if depth == 0]
    own = [(seconds, cpu) for name, seconds, cpu in outermost if _is_own(name)]
    return {
        "hooklint": sum(seconds for seconds, _cpu in own),
        "hooklint_cpu": sum(cpu for _seconds, cpu in own),
        "all": sum(seconds for _name, seconds, _cpu in outermost),
        "modules": float(sum(1 for record in records if _is_own(record[0]))),
        "wall": wall,
        "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "self": _self_times(records),  # type: ignore[dict-item]
    }


def _is_own(name: str) -> bool:
    return name == "hooklint" or name.startswith("hooklint.")


def _self_times(records: list[list]) -> dict[str, float]:
    """Each module's CPU time without the modules it imported (records come
    in the order imports finish: a module's imports just before it, one
    level deeper)."""
    children: dict[int, float] = {}
    out: dict[str, float] = {}
    for name, _seconds, cpu, depth in records:
        out[name] = cpu - children.pop(depth + 1, 0.0)
        children[depth] = children.get(depth, 0.0) + cpu
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--top", type=int, default=0, help="Also list the N modules that cost most themselves.")
    args = parser.parse_args()
    file = args.file.resolve()
    if not file.is_file() or not file.is_relative_to(ROOT):
        parser.error(f"not a file of this repository: {args.file}")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="hooklint-imports-") as scratch:
        one_run(file, Path(scratch))  # writes the bytecode caches; not counted
        runs = [one_run(file, Path(scratch)) for _ in range(args.runs)]
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "self"}
    print(f"hooklint check --static-only --no-cache {os.path.relpath(file, ROOT)}: {args.runs} runs, "
          f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
    print(f"hooklint's imports (median):  {median['hooklint'] * 1000:6.1f} ms wall, "
          f"{median['hooklint_cpu'] * 1000:.1f} ms CPU ({int(median['modules'])} hooklint modules; runs "
          f"{min(r['hooklint'] for r in runs) * 1000:.1f} to {max(r['hooklint'] for r in runs) * 1000:.1f} ms wall)")
    print(f"every import after start:     {median['all'] * 1000:6.1f} ms wall")
    print(f"the whole command:            {median['wall'] * 1000:6.1f} ms wall, {median['cpu'] * 1000:.1f} ms CPU")
    print(f"target: under 100 ms of hooklint's imports: {'met' if median['hooklint'] < 0.1 else 'MISSED'}")
    if args.top:
        names = {name for r in runs for name in r["self"]}
        selfs = {name: statistics.median(r["self"].get(name, 0.0) for r in runs) for name in names}
        print(f"the {args.top} modules that cost most CPU themselves (median ms):")
        for name, seconds in sorted(selfs.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"  {seconds * 1000:6.2f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
