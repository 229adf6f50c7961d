"""What a pre-commit run of `hooklint check` costs with the project context.

    python bench/precommit_check.py [--repeat N] [--keep DIR]

pre-commit runs `hooklint check --static-only --force-exclude <staged files>`
(.pre-commit-hooks.yaml).  A staged file whose hook registration may run
again (HKL304, HKL306) is judged with the call sites of the whole project
(docs/developing.md, "Cross-file analysis"): the project's other files are
searched for callers, from the results cache when they did not change.  This
script measures that cost on a large project: a git repository holding a
copy of the installed torch package's Python sources (2,000+ real files, many
with hooks) next to a small library and the training script that calls it
in a loop.

It prints, for one staged file (the library), the wall-clock and CPU time
of the command as pre-commit runs it (a fresh process each time; medians;
on a loaded machine the CPU time is the steadier figure):

* cold: no cache at all (a fresh clone's first commit);
* warm: the cache written by the previous one-file runs only;
* warm after `hooklint check .`: the cache holds every file;
* stale: the caller was edited since the cache was written;

and, for scale, the same command on a staged file that asks no cross-file
question (interpreter start-up, imports, configuration: the floor); then,
in one process (no interpreter start-up), the one-file check with the
project context and without it (the run's files only), to show what the
context itself costs.  Target: warm under 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LIBRARY = '''\
def add_feature_hooks(model, names, store):
    for name in names:
        layer = model.get_submodule(name)
        layer.register_forward_hook(lambda m, i, o, name=name: store.setdefault(name, []).append(o))
'''
CALLER = '''\
from lib.features import add_feature_hooks


def features_per_epoch(model, loader, epochs):
    store = {}
    for epoch in range(epochs):
        add_feature_hooks(model, ["layer3", "layer4"], store)
        for images, _labels in loader:
            model(images)
    return store
'''
STAGED = "lib/features.py"


def torch_sources() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("torch")  # locating it does not import it
    if spec and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    return None


def build(project: Path) -> int:
    """The project; returns its number of Python files."""
    (project / "lib").mkdir(parents=True)
    (project / "lib" / "__init__.py").write_text("")
    (project / "lib" / "features.py").write_text(LIBRARY)
    (project / "scripts").mkdir()
    (project / "scripts" / "train.py").write_text(CALLER)
    (project / "pyproject.toml").write_text("[tool.hooklint]\n")
    source = torch_sources()
    if source is not None:
        shutil.copytree(source, project / "vendor" / "torch",
                        ignore=lambda folder, names: [n for n in names if not n.endswith(".py")
                                                      and not os.path.isdir(os.path.join(folder, n))])
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    return sum(1 for _ in project.rglob("*.py"))


CPU: list[float] = []  # CPU seconds (user + system) of each command, next to its wall-clock time


def hooklint(project: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    import resource

    env = dict(os.environ, NO_COLOR="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hooklint", "check", *args], cwd=project, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return elapsed, proc


def staged_check(project: Path, staged: str = STAGED) -> tuple[float, str, int]:
    elapsed, proc = hooklint(project, "--static-only", "--force-exclude", "--output-format", "concise", staged)
    if proc.returncode == 2:
        raise SystemExit(f"hooklint failed: {proc.stderr}")
    return elapsed, proc.stdout, proc.returncode


def clear_cache(project: Path) -> None:
    shutil.rmtree(project / ".hooklint_cache", ignore_errors=True)


def median_of(repeat: int, setup, measure) -> tuple[str, set[str]]:
    """("wall s (CPU s)" medians, the outputs seen)."""
    times, cpu, outputs = [], [], set()
    for _ in range(repeat):
        setup()
        elapsed, out, code = measure()
        times.append(elapsed)
        cpu.append(CPU[-1])
        outputs.add(f"exit {code}: {out}")
    return f"{statistics.median(times):5.2f} s ({statistics.median(cpu):4.2f} s CPU)", outputs


def in_process(project: Path, repeat: int) -> tuple[float, float]:
    """(with the project context, without it): one-file check times in this process, warm cache."""
    from hooklint.config import load_config
    from hooklint.engine import CheckOptions, find_project_root, run_check
    from hooklint.results_cache import cache_for

    cwd = os.getcwd()
    os.chdir(project)
    try:
        results = []
        for with_context in (True, False):
            times = []
            for _ in range(repeat + 1):
                config = load_config(start=project / "lib")
                options = CheckOptions(paths=[STAGED], config=config, codes=frozenset(config.enabled_codes()),
                                       static_only=True)
                options.config.force_exclude = True
                options.project_root = find_project_root(config, options.paths) if with_context else None
                options.extra["static_cache"] = cache_for(config, True, options.codes)
                start = time.perf_counter()
                run_check(options)
                times.append(time.perf_counter() - start)
            results.append(statistics.median(times[1:]))  # the first run warms the cache of this variant
        return results[0], results[1]
    finally:
        os.chdir(cwd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", metavar="DIR", help="Build the project in DIR and keep it.")
    args = parser.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="hooklint-precommit-"))
    project = base / "project"
    try:
        if project.exists():
            shutil.rmtree(project)
        files = build(project)
        print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"a project of {files} Python files; one staged file, {STAGED}; medians of {args.repeat}")
        cold, cold_out = median_of(args.repeat, lambda: clear_cache(project), lambda: staged_check(project))
        print(f"cold (no cache)                   {cold}")
        warm, warm_out = median_of(args.repeat, lambda: None, lambda: staged_check(project))
        print(f"warm (one-file runs only)         {warm}")
        hooklint(project, "--static-only", "-q", ".")
        full, full_out = median_of(args.repeat, lambda: None, lambda: staged_check(project))
        print(f"warm after `hooklint check .`     {full}")
        caller = project / "scripts" / "train.py"
        flips = iter(range(10 ** 6))

        def edit_caller() -> None:
            caller.write_text(CALLER + f"\n# edit {next(flips)}\n")
        stale, stale_out = median_of(args.repeat, edit_caller, lambda: staged_check(project))
        print(f"stale (the caller edited)         {stale}")
        outputs = cold_out | warm_out | full_out | stale_out
        print(f"same output and exit code in all {4 * args.repeat} runs: {len(outputs) == 1}")
        floor, _ = median_of(args.repeat, lambda: None, lambda: staged_check(project, "scripts/train.py"))
        print(f"the floor, warm: a staged file that asks no cross-file question {floor}")
        with_context, without = in_process(project, args.repeat)
        print(f"in one process, warm: {with_context * 1000:.0f} ms with the project context, "
              f"{without * 1000:.0f} ms with the run's files only")
        return 0 if len(outputs) == 1 else 1
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
