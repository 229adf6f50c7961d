"""What the sandbox and one process per file cost (docs/sandbox.md).

    python bench/sandbox_cost.py [--files N] [--repeat R]

1. *setting up the sandbox*: ``enter_worker`` alone (namespaces, read-only
   mounts, tmpfs scratch, Landlock rules, seccomp filter) in a fresh Python,
   timed inside it;
2. *worker start*: from starting ``python -m hooklint.graph.worker`` to its
   ``ready`` event (torch imported), with ``sandbox`` off and auto;
3. *per file*: ``provide_graph_facts`` without cache over a project of N
   small model files that each import the project's own package of layers
   (so each child imports it again): a child forked per file (sandbox auto,
   and off), and a fresh worker process per file (``HOOKLINT_ISOLATION=process``).

Run with ``PYTHONPATH=<an older checkout>`` (one without ``hooklint.sandbox``)
to time that checkout's single shared worker on the same project.  Figures
are wall-clock medians of R runs (and the CPU time of the child processes,
user + system, for the per-file runs); the machine's load shows in them.
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
import textwrap
import time
from pathlib import Path

LAYERS = '''
import torch
import torch.nn as nn


class Block{i}(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1)
        self.norm = nn.BatchNorm2d(width)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x))) + x
'''

MODEL = '''
import torch.nn as nn

from layers import {imports}


class Net{i}(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = nn.Sequential({blocks})
        self.head = nn.Linear(8, 10)
        self.stem.register_backward_hook(self.keep)

    def keep(self, module, grad_input, grad_output):
        self.grad = grad_output[0]

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))
'''


def make_project(folder: Path, files: int, layers: int = 8) -> list[str]:
    (folder / "pyproject.toml").write_text("[tool.hooklint]\n")
    package = folder / "layers"
    package.mkdir()
    names = [f"Block{i}" for i in range(layers)]
    (package / "__init__.py").write_text("".join(f"from layers.block{i} import Block{i}\n" for i in range(layers)))
    for i in range(layers):
        (package / f"block{i}.py").write_text(textwrap.dedent(LAYERS.format(i=i)))
    paths = []
    for i in range(files):
        path = folder / f"model_{i:03d}.py"
        path.write_text(textwrap.dedent(MODEL.format(i=i, imports=", ".join(names),
                                                     blocks=", ".join(f"{n}(8)" for n in names))))
        paths.append(str(path))
    return paths


def has_sandbox() -> bool:
    """Whether the hooklint imported has the sandbox (an editable install's finder
    can supply ``hooklint.sandbox`` from elsewhere: the folders must match)."""
    import hooklint

    try:
        import hooklint.sandbox
    except ImportError:
        return False
    return Path(hooklint.sandbox.__file__).parent.parent == Path(hooklint.__file__).parent


def setup_cost(repeat: int) -> list[float]:
    code = ("import json, sys, time\n"
            "from hooklint.sandbox.confine import enter_worker\n"
            "start = time.perf_counter()\n"
            "status = enter_worker(sys.argv[1], 0, 'auto', 0)\n"
            "print(json.dumps([time.perf_counter() - start, status.missing]))\n")
    out = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="hooklint-bench-") as scratch:
            done = subprocess.run([sys.executable, "-c", code, scratch], capture_output=True, text=True, check=True)
        seconds, missing = json.loads(done.stdout)
        if missing:
            print(f"  (sandbox incomplete here: {'; '.join(missing)})")
        out.append(seconds)
    return out


def start_cost(mode: str, root: Path) -> float:
    from hooklint.graph.provider import WorkerProcess

    worker = WorkerProcess(4096, root, mode) if has_sandbox() else WorkerProcess(4096, root)
    start = time.perf_counter()
    error = worker.start()
    took = time.perf_counter() - start
    worker.close()
    if error:
        raise SystemExit(f"the worker did not start: {error}")
    return took


def files_cost(paths: list[str], root: Path, mode: str | None, isolation: str | None) -> tuple[float, float]:
    from hooklint.config import Config
    from hooklint.graph.provider import GraphRun, provide_graph_facts

    config = Config(root=root)
    if mode is not None:
        config.sandbox = mode
    saved = os.environ.get("HOOKLINT_ISOLATION")
    if isolation:
        os.environ["HOOKLINT_ISOLATION"] = isolation
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        facts, _notices = provide_graph_facts(paths, config, use_cache=False, run=GraphRun())
    finally:
        if saved is None:
            os.environ.pop("HOOKLINT_ISOLATION", None)
        else:
            os.environ["HOOKLINT_ISOLATION"] = saved
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    bad = [p for p, f in facts.items() if f.error or not f.models]
    if bad or len(facts) != len(paths):
        raise SystemExit(f"analysis failed for {bad or 'some files'}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import hooklint

    print(f"hooklint from {Path(hooklint.__file__).parent}; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="hooklint-sandbox-bench-") as tmp:
        root = Path(tmp)
        paths = make_project(root, args.files)
        if not has_sandbox():
            runs = [files_cost(paths, root, None, None) for _ in range(args.repeat)]
            starts = [start_cost("auto", root) for _ in range(args.repeat)]
            print(f"worker start (shared worker, no sandbox): {statistics.median(starts):.2f} s")
            _print_files("one shared worker", runs, args.files, statistics.median(starts))
            return
        setup = setup_cost(args.repeat)
        print(f"setting up the sandbox (enter_worker): {statistics.median(setup) * 1000:.1f} ms")
        starts = {"off": [], "auto": []}
        for _ in range(args.repeat):
            for mode in starts:
                starts[mode].append(start_cost(mode, root))
        for mode, values in starts.items():
            print(f"worker start to `ready`, sandbox {mode}: {statistics.median(values):.2f} s "
                  f"(runs: {', '.join(f'{v:.2f}' for v in values)})")
        variants = {"child forked per file, sandbox auto": ("auto", None),
                    "child forked per file, sandbox off": ("off", None),
                    "worker process per file, sandbox auto": ("auto", "process")}
        results = {name: [] for name in variants}
        for _ in range(args.repeat):
            for name, (mode, isolation) in variants.items():
                results[name].append(files_cost(paths, root, mode, isolation))
        for name, runs in results.items():
            _print_files(name, runs, args.files, statistics.median(starts[variants[name][0]]))


def _print_files(name: str, runs: list[tuple[float, float]], files: int, start: float) -> None:
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    print(f"{files} files, {name}: {wall:.2f} s wall, {cpu:.2f} s CPU; "
          f"per file after the worker start: {(wall - start) / files * 1000:.0f} ms "
          f"(runs: {', '.join(f'{r[0]:.2f}' for r in runs)})")


if __name__ == "__main__":
    main()
