"""`hooklint check --static-only` over the whole corpus: cold and warm cache,
`-j 1` against `-j 2`, and the peak memory of each process.

    python bench/scale.py [--repeat N] [FOLDER ...]

Default folder: the corpus of bench/corpus.py (run it first to download it).
Each figure is the median of N runs (default 5) of the real command line in
a fresh process, interpreter start-up included; "cold" starts from an empty
cache folder, "warm" from the one the previous run left.  The machine may be
shared: the load average before and after is printed, and medians damp the
noise, but a busy second core shows directly in the `-j 2` figure.

Targets (issue 6): `-j 2` at least 1.7x faster than `-j 1` on 2 cores; a warm
run at most 0.1x a cold one; under 300 MB peak per process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import available_packages, corpus_files, count_lines  # noqa: E402

# Runs hooklint in this process and reports the peak resident memory of this
# process and of the largest of its worker processes, in KiB (Linux).
RUNNER = """
import json, resource, sys
from hooklint.cli import main
code = main(sys.argv[1:])
print(json.dumps({"exit": code,
                  "parent_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "worker_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}), file=sys.stderr)
"""


# As installed by pip: bytecode cached.  (Some sandboxes set
# PYTHONDONTWRITEBYTECODE, which makes every start compile hooklint again.)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run(folders: list[str], cwd: Path, jobs: int, *extra: str) -> dict:
    args = ["check", "--static-only", "--config", str(cwd / "pyproject.toml"), "-j", str(jobs),
            "--output-format", "concise", "-q", *extra, *folders]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUNNER, *args], cwd=cwd, capture_output=True, text=True, env=ENV)
    elapsed = time.perf_counter() - start
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
    try:
        stats = json.loads(last)
    except ValueError:
        raise SystemExit(f"hooklint failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}") from None
    if stats["exit"] not in (0, 1):
        raise SystemExit(f"hooklint exited {stats['exit']}:\n{proc.stderr[-2000:]}")
    stats["seconds"] = elapsed
    stats["findings"] = len(proc.stdout.splitlines())
    return stats


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if args.folders:
        folders = [str(Path(f).resolve()) for f in args.folders]
        files = [str(p) for f in folders for p in Path(f).rglob("*.py")]
    else:
        packages = available_packages()
        if not packages:
            print("no corpus: run `python bench/corpus.py --download-only` first", file=sys.stderr)
            return 1
        folders = [str(p.folder) for p in packages]
        files = corpus_files(packages)
    lines = count_lines(files)

    scratch = Path(tempfile.mkdtemp(prefix="hooklint-scale-"))
    cache = scratch / "cache"
    (scratch / "pyproject.toml").write_text(f'[tool.hooklint]\ncache-dir = "{cache.as_posix()}"\n')
    load_before = os.getloadavg()
    results: dict[str, list[dict]] = {"cold -j 1": [], "cold -j 2": [], "warm -j 1": [], "warm -j 2": []}
    try:
        run(folders, scratch, 2)  # writes the bytecode cache; not counted
        for _ in range(args.repeat):
            for jobs in (1, 2):
                shutil.rmtree(cache, ignore_errors=True)
                results[f"cold -j {jobs}"].append(run(folders, scratch, jobs))
                results[f"warm -j {jobs}"].append(run(folders, scratch, jobs))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()

    findings = {r["findings"] for rs in results.values() for r in rs}
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"corpus: {len(files)} files, {lines} lines in {len(folders)} folders; findings per run: "
          f"{sorted(findings)} (must be one value)")
    print(f"{'run':12s} {'median s':>9s} {'min s':>7s} {'max s':>7s} {'files/s':>9s} {'parent MB':>10s} "
          f"{'worker MB':>10s}")
    for label, runs in results.items():
        t = median_of(runs, "seconds")
        print(f"{label:12s} {t:9.2f} {min(r['seconds'] for r in runs):7.2f} {max(r['seconds'] for r in runs):7.2f} "
              f"{len(files) / t:9.0f} {max(r['parent_kib'] for r in runs) / 1024:10.0f} "
              f"{max(r['worker_kib'] for r in runs) / 1024:10.0f}")
    speedup = median_of(results["cold -j 1"], "seconds") / median_of(results["cold -j 2"], "seconds")
    warm_ratio = median_of(results["warm -j 2"], "seconds") / median_of(results["cold -j 2"], "seconds")
    warm_ratio_1 = median_of(results["warm -j 1"], "seconds") / median_of(results["cold -j 1"], "seconds")
    peak = max(max(r["parent_kib"], r["worker_kib"]) for rs in results.values() for r in rs) / 1024
    print(f"-j 2 vs -j 1 (cold): {speedup:.2f}x faster   (target >= 1.7x: {'met' if speedup >= 1.7 else 'MISSED'})")
    print(f"warm vs cold: {warm_ratio:.3f}x with -j 2, {warm_ratio_1:.3f}x with -j 1   "
          f"(target <= 0.1x: {'met' if max(warm_ratio, warm_ratio_1) <= 0.1 else 'MISSED'})")
    print(f"peak memory of any process: {peak:.0f} MB   (target < 300 MB: {'met' if peak < 300 else 'MISSED'})")
    print(f"medians of {args.repeat} runs each; wall time of the whole command, interpreter start-up included, "
          f"bytecode cached")
    return 0 if len(findings) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
