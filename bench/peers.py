"""Static hooklint next to its peers over the same files: a bare `ast.parse`,
ruff, flake8 and TorchFix.

    python bench/peers.py [--packages a,b] [--repeat N] [--skip TOOL,...]

The files are the corpus of bench/corpus.py (run it first); every tool is
given the same explicit list of files, runs with its default parallelism
(hooklint `-j` = cores, ruff's threads, flake8's `-j auto`, TorchFix's `-j`
= cores; `ast.parse` is one process) and ignores configuration files found
in the corpus (`--isolated` where the tool has it).  "cold" runs start
without a cache; "warm" runs reuse the cache the previous run wrote (ruff and
hooklint have one).  Each figure is the median of N runs (TorchFix: one run,
it is slow).

The peers are installed in their own virtual environments, never as
hooklint dependencies (TorchFix registers a flake8 plugin, so flake8 gets a
venv without it):

    python -m venv bench/.venv-peers && bench/.venv-peers/bin/pip install -r bench/requirements-peers.txt
    python -m venv bench/.venv-torchfix && bench/.venv-torchfix/bin/pip install -r bench/requirements-torchfix.txt

(`--setup` does exactly that, for the tools `--skip` leaves: TorchFix's venv
is neither made nor needed with `--skip torchfix`.)  Targets (issue 6): static hooklint no slower
than ruff's default rules (by the clock, and by CPU: the `CPU, cold` line),
at least 100x faster than TorchFix, faster than flake8.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from corpus import PACKAGES, available_packages, corpus_files, count_lines  # noqa: E402

PEERS_VENV = BENCH / ".venv-peers"
TORCHFIX_VENV = BENCH / ".venv-torchfix"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

PARSE_ONLY = """
import ast, sys, warnings
warnings.simplefilter("ignore")
for path in open(sys.argv[1], encoding="utf-8").read().splitlines():
    try:
        with open(path, "rb") as handle:
            ast.parse(handle.read(), filename=path)
    except (SyntaxError, ValueError):
        pass
"""


def needed_venvs(skip: list[str]) -> list[tuple[Path, str]]:
    """The virtual environments the tools not skipped run from (TorchFix's only
    when TorchFix runs: it takes minutes to install and to run)."""
    venvs = [(PEERS_VENV, "requirements-peers.txt")]
    if not any(w in "torchfix" for w in skip):
        venvs.append((TORCHFIX_VENV, "requirements-torchfix.txt"))
    return venvs


def setup(venvs: list[tuple[Path, str]]) -> None:
    for venv, requirements in venvs:
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            (venv / ".gitignore").write_text("*\n")  # never committed
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-r",
                        str(BENCH / requirements)], check=True)


def tools(list_file: Path, files: list[str], scratch: Path) -> dict[str, tuple[list[str], str | None]]:
    """label -> (command, folder to delete before each run or None)."""
    hooklint = [sys.executable, "-m", "hooklint", "check", "--static-only", "--isolated", "-q",
                "--output-format", "concise"]
    ruff = [str(PEERS_VENV / "bin" / "ruff"), "check", "--isolated", "--output-format", "concise", "--exit-zero"]
    return {
        "ast.parse (1 process)": ([sys.executable, "-c", PARSE_ONLY, str(list_file)], None),
        "hooklint static, cold": ([*hooklint, "--no-cache", *files], None),
        "hooklint static, warm": ([*hooklint, *files], "keep"),
        "ruff (default rules), cold": ([*ruff, "--no-cache", *files], None),
        "ruff (default rules), warm": ([*ruff, "--cache-dir", str(scratch / "ruff-cache"), *files], "keep"),
        "ruff --select ALL, cold": ([*ruff, "--no-cache", "--select", "ALL", *files], None),
        "flake8 (pycodestyle, pyflakes)": ([str(PEERS_VENV / "bin" / "flake8"), "--isolated", "--exit-zero",
                                            *files], None),
        "TorchFix": ([str(TORCHFIX_VENV / "bin" / "torchfix"), *files], None),
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall-clock s, CPU s of the command and its processes, output lines).
    The CPU time is what a loaded machine distorts least (ruff's threads and
    hooklint's workers summed)."""
    cpu = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    elapsed = time.perf_counter() - start
    cpu = _children_cpu() - cpu
    if proc.returncode not in (0, 1):
        tail = proc.stderr.decode(errors="replace")[-1500:]
        raise SystemExit(f"{command[0]} exited {proc.returncode}:\n{tail}")
    return elapsed, cpu, len(proc.stdout.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packages", default="", help="Comma-separated subset of the corpus packages.")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip", default="", help="Comma-separated words: tools whose label contains one are "
                        "skipped (e.g. torchfix).")
    parser.add_argument("--setup", action="store_true", help="Create or update the peers' virtual environments.")
    args = parser.parse_args()
    skip = [w.strip().lower() for w in args.skip.split(",") if w.strip()]
    venvs = needed_venvs(skip)
    if args.setup:
        setup(venvs)
    missing = [v for v, _ in venvs if not (v / "bin" / "python").exists()]
    if missing:
        print(f"missing {', '.join(map(str, missing))}: run with --setup", file=sys.stderr)
        return 1
    packages = available_packages()
    if args.packages:
        wanted = {p.strip() for p in args.packages.split(",") if p.strip()}
        unknown = wanted - set(PACKAGES)
        if unknown:
            parser.error(f"not in the corpus: {', '.join(sorted(unknown))}")
        packages = [p for p in packages if p.name in wanted]
    if not packages:
        print("no corpus: run `python bench/corpus.py --download-only` first", file=sys.stderr)
        return 1
    src = packages[0].folder.parent  # type: ignore[union-attr]
    files = [os.path.relpath(f, src) for f in corpus_files(packages)]
    lines = count_lines([str(src / f) for f in files])

    scratch = Path(tempfile.mkdtemp(prefix="hooklint-peers-"))
    list_file = scratch / "files.txt"
    list_file.write_text("\n".join(files) + "\n", encoding="utf-8")
    results: dict[str, tuple[float, int, int]] = {}
    cpu_times: dict[str, float] = {}
    load_before = os.getloadavg()
    try:
        for label, (command, keep) in tools(list_file, files, scratch).items():
            if any(w in label.lower() for w in skip):
                continue
            shutil.rmtree(src / ".hooklint_cache", ignore_errors=True)
            runs = 1 if "TorchFix" in label else args.repeat
            if keep:
                timed(command, src)  # fills the cache; not counted
            times, cpus, counts = [], [], set()
            for _ in range(runs):
                t, c, n = timed(command, src)
                times.append(t)
                cpus.append(c)
                counts.add(n)
            results[label] = (statistics.median(times), max(counts), runs)
            cpu_times[label] = statistics.median(cpus)
            print(f"  {label}: {results[label][0]:.2f} s, CPU {cpu_times[label]:.2f} s", file=sys.stderr)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(src / ".hooklint_cache", ignore_errors=True)
    load_after = os.getloadavg()

    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"corpus: {len(files)} files, {lines} lines ({', '.join(p.label for p in packages)})")
    base = results.get("hooklint static, cold", (None,))[0]
    print(f"{'tool':34s} {'median s':>9s} {'CPU s':>7s} {'runs':>4s} {'files/s':>9s} {'lines/s':>10s} "
          f"{'vs hooklint cold':>17s} {'output lines':>12s}")
    for label, (t, n, runs) in results.items():
        ratio = f"{t / base:.2f}x" if base else "-"
        print(f"{label:34s} {t:9.2f} {cpu_times[label]:7.2f} {runs:4d} {len(files) / t:9.0f} {lines / t:10.0f} "
              f"{ratio:>17s} {n:12d}")
    if base:
        checks = [("no slower than ruff's default rules (cold)", "ruff (default rules), cold", 1.0),
                  ("at least 100x faster than TorchFix", "TorchFix", 100.0),
                  ("faster than flake8", "flake8 (pycodestyle, pyflakes)", 1.0)]
        for text, label, factor in checks:
            if label in results:
                ratio = results[label][0] / base
                print(f"target: {text}: {'met' if ratio >= factor else 'MISSED'} ({ratio:.2f}x)")
        for kind in ("cold", "warm"):
            label = f"ruff (default rules), {kind}"
            if label in cpu_times and f"hooklint static, {kind}" in cpu_times:
                ours = cpu_times[f"hooklint static, {kind}"]
                verdict = f"; target {'met' if ours <= cpu_times[label] else 'MISSED'}" if kind == "cold" else ""
                print(f"CPU, {kind}: hooklint {ours:.2f} s, ruff {cpu_times[label]:.2f} s "
                      f"({ours / cpu_times[label]:.2f}x){verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
