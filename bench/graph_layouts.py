"""What the graph layer changes, and costs, on real project layouts.

    python bench/graph_layouts.py [--layouts NAME,...] [--repeat N] [--json FILE]

Each layout is a project copied to a temporary folder and checked the way a
user checks it, with the real CLI in a subprocess:

* ``static``: ``hooklint check PATHS --static-only``;
* ``cold``: ``hooklint check PATHS`` with an empty ``.hooklint_cache`` (the
  graph layer imports the models in its worker, builds and traces them);
* ``warm``: the same command again (facts, and failures, from the cache; best
  of ``--repeat``);
* ``verify``: ``hooklint check PATHS --diff --verify --unsafe-fixes --no-cache``
  (every fix offered, each proved by running the model; ``fixes verified``
  counts the proofs that passed out of those made); ``n/a`` when this
  hooklint has no ``--verify``.

and the verdicts are compared, finding by finding (file, line, column, rule):
*added* by the graph, *removed* by it (proven safe, as a legacy hook on a
layer whose ``grad_input`` starts with its input gradient), *refined* (the
same finding, with the graph's answer: the op, its line, the module path).

Layouts: the Grad-CAM file that used to hang the worker, a ResNet-18 with the
same hook, a Grad-CAM class and a helper that receive the layer as an
argument, ``models.py`` + ``train.py`` (the hook in the script, the class in
the module), a src layout with a test fixture, a ``__main__`` example
(tests/graph/projects/), and timm from the corpus (``bench/corpus.py``; it
needs torchvision, which is not installed: a layout whose imports fail, to
price that failure and its cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROJECTS = REPO / "tests" / "graph" / "projects"
CORPUS = Path(os.environ.get("HOOKLINT_CORPUS", Path.home() / ".cache" / "hooklint-corpus")) / "src"


@dataclass
class Layout:
    name: str
    description: str
    source: Path
    paths: list[str]


def layouts() -> list[Layout]:
    out = [
        Layout("gradcam", "Grad-CAM file, legacy hook on a Sequential stage (the hang)", PROJECTS / "gradcam",
               ["gradcam_hang.py"]),
        Layout("resnet18", "ResNet-18 built by its factory, same hook", PROJECTS / "resnet_gradcam", ["."]),
        Layout("cam-helper", "Grad-CAM class and helper given the layer as an argument", PROJECTS / "gradcam_class",
               ["."]),
        Layout("train-script", "models.py + train.py, hooks in the script", PROJECTS / "flat_train", ["."]),
        Layout("src-layout", "src/ package, relative imports, script + fixture", PROJECTS / "src_layout", ["."]),
        Layout("main-block", "model built only in `if __name__ == '__main__':`", PROJECTS / "main_block", ["."]),
    ]
    timm = sorted(CORPUS.glob("timm-*"))
    if timm:
        out.append(Layout("timm", f"{timm[-1].name} from the corpus (needs torchvision: not installed)",
                          timm[-1], ["timm"]))
    return out


@dataclass
class Result:
    name: str
    description: str
    files: int = 0
    imported: int = 0
    static_s: float = 0.0
    cold_s: float = 0.0
    warm_s: float = 0.0
    verify_s: float | None = None
    proofs: str = ""  # "verified/proved" fixes of the --verify run
    static_findings: int = 0
    graph_findings: int = 0
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    refined: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)


def _hooklint(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, NO_COLOR="1")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hooklint", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=1800)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(f"graph_layouts: `hooklint {' '.join(args)}` in {folder} exited {proc.returncode}:\n"
                         f"{proc.stderr[-2000:]}")
    return proc, elapsed


def _findings(proc: subprocess.CompletedProcess) -> dict[tuple, dict]:
    return {(f["filename"], f["location"]["row"], f["location"]["column"], f["code"]): f
            for f in json.loads(proc.stdout or "[]")}


def has_verify() -> bool:
    proc = subprocess.run([sys.executable, "-m", "hooklint", "check", "--help"], capture_output=True, text=True,
                          timeout=120)
    return "--verify" in proc.stdout


def measure(layout: Layout, repeat: int, verify: bool) -> Result:
    result = Result(layout.name, layout.description)
    with tempfile.TemporaryDirectory(prefix="hooklint-layout-") as tmp:
        folder = Path(tmp) / layout.source.name
        shutil.copytree(layout.source, folder, ignore=shutil.ignore_patterns(".hooklint_cache", "__pycache__"))
        result.files = sum(1 for p in layout.paths for _ in (folder / p).rglob("*.py")) if any(
            (folder / p).is_dir() for p in layout.paths) else len(layout.paths)
        common = ("--output-format", "json", "--isolated") if layout.name == "timm" else ("--output-format", "json")
        static, result.static_s = _hooklint(folder, "check", *layout.paths, "--static-only", "--no-cache", *common)
        cold, result.cold_s = _hooklint(folder, "check", *layout.paths, *common)
        result.notices = [line for line in cold.stderr.splitlines() if line.startswith("hooklint:")]
        warm_times = []
        for _ in range(repeat):
            warm, elapsed = _hooklint(folder, "check", *layout.paths, *common)
            warm_times.append(elapsed)
            if _findings(warm).keys() != _findings(cold).keys():
                raise SystemExit(f"graph_layouts: {layout.name}: the warm run gave other findings than the cold one")
        result.warm_s = min(warm_times)
        graph_run = subprocess.run([sys.executable, "-m", "hooklint", "graph", *layout.paths, "--output-format",
                                    "json"], cwd=folder, capture_output=True, text=True, timeout=1800)
        try:
            result.imported = sum(1 for f in json.loads(graph_run.stdout)["files"] if not f.get("error"))
        except (ValueError, KeyError):
            result.imported = 0
        if verify:
            proof, result.verify_s = _hooklint(folder, "check", *layout.paths, "--diff", "--verify", "--unsafe-fixes",
                                               "--no-cache")
            verdicts = [line for line in proof.stderr.splitlines() if " fix at " in line]
            result.proofs = f"{sum(' verified: ' in line for line in verdicts)}/{len(verdicts)}"
    before, after = _findings(static), _findings(cold)
    result.static_findings, result.graph_findings = len(before), len(after)
    label = "{0}:{1}:{2} {3}".format
    result.added = [label(*k) for k in after if k not in before]
    result.removed = [label(*k) for k in before if k not in after]
    result.refined = [label(*k) for k, f in after.items() if k in before and f.get("origin") == "graph"
                      and f["message"] != before[k]["message"]]
    return result


def table(results: list[Result], verify: bool) -> str:
    from tabulate import tabulate

    rows = []
    for r in results:
        rows.append((r.name, r.files, r.imported, f"{r.static_s:.2f}", f"{r.cold_s:.2f}", f"{r.warm_s:.2f}",
                     f"{r.verify_s:.2f}" if r.verify_s is not None else "n/a", r.proofs or "n/a", r.static_findings, r.graph_findings,
                     len(r.added), len(r.refined), len(r.removed)))
    headers = ("layout", "files", "analysed", "static s", "cold s", "warm s", "--verify s", "fixes verified", "static findings",
               "graph findings", "added", "refined", "removed")
    return tabulate(rows, headers=headers, tablefmt="github")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", help="comma-separated names (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="warm runs (the best is reported)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    chosen = layouts()
    if args.layouts:
        wanted = set(args.layouts.split(","))
        chosen = [layout for layout in chosen if layout.name in wanted]
    verify = has_verify()
    results = []
    for layout in chosen:
        result = measure(layout, args.repeat, verify)
        results.append(result)
        print(f"{layout.name}: {layout.description}", file=sys.stderr)
        for kind in ("added", "refined", "removed"):
            for item in getattr(result, kind):
                print(f"  {kind}: {item}", file=sys.stderr)
        for notice in result.notices[:5]:
            print(f"  {notice[:200]}", file=sys.stderr)
    print(table(results, verify))
    changed = sum(len(r.added) + len(r.refined) + len(r.removed) for r in results)
    total = sum(r.graph_findings + len(r.removed) for r in results)
    print(f"\nverdicts the graph changed: {changed} of {total} (added, refined or removed as proven safe)")
    if not verify:
        print("--verify: not in this hooklint yet (the fixes' proof); its column is n/a")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
