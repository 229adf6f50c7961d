"""What the graph layer changes on real application repositories, and what it builds.

    python bench/app_repos.py [--only NAME,...] [--mirror DIR] [--work DIR] [--json FILE]

Run it with the Python of an environment that has each repository's dependencies
(torch, torchvision, ...) and hooklint installed (docs/real-world.md says which one
was used).  For every repository of ``bench/app_repos.toml``:

1. its commit is exported from the git mirror (``--mirror``, default /work/.mirror)
   into ``--work`` (default ~/.cache/hooklint-app-repos), with a ``hooklint.toml``
   raising ``memory-limit`` (a CUDA build of torch maps gigabytes of address space);
2. ``hooklint check`` runs three times with the real CLI: ``--static-only``, cold
   (empty cache) and warm; the findings are compared (file, line, column, code):
   *added* or *removed* by the graph layer, *sharpened* (same place, another message,
   severity or fix), *left* (the same);
3. ``hooklint graph --output-format json`` gives the classes the graph layer
   analysed; the ``truth`` snippets, run in a child process, give the classes the
   repository's hooking scripts build.  Coverage is the share of the latter found
   among the former (classes of ``torch.nn`` itself are not counted).

Prints one table per repository and a summary; ``--json`` writes everything.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "bench" / "app_repos.toml"

_TRUTH_CHILD = r"""
import inspect, json, os, sys
root = os.path.realpath(sys.argv[1])
sys.path[:0] = [os.getcwd(), root]
MODELS = []
errors = []
for snippet in json.loads(sys.argv[2]):
    try:
        exec(compile(snippet, "<truth>", "exec"), {"MODELS": MODELS, "__name__": "__truth__"})
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}"[:300])
classes = set()
for model in MODELS:
    for module in model.modules():
        cls = type(module)
        if cls.__module__.startswith("torch."):
            continue
        try:
            path = os.path.realpath(inspect.getsourcefile(cls) or "")
        except TypeError:
            path = ""
        where = os.path.relpath(path, root) if path.startswith(root + os.sep) else cls.__module__.split(".")[0]
        classes.add((cls.__name__, where))
print(json.dumps({"classes": sorted(classes), "errors": errors}))
"""


def export(entry: dict, mirror: Path, work: Path) -> Path:
    target = work / entry["name"]
    if target.exists() and (target / ".hooklint-bench-commit").read_text().strip() == entry["commit"]:
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    git_dir = mirror / entry["mirror"] / "repo"
    if (git_dir / ".git").is_dir():
        git_dir = git_dir / ".git"
    archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", entry["commit"]], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    (target / "hooklint.toml").write_text("memory-limit = 12288\n")
    (target / ".hooklint-bench-commit").write_text(entry["commit"] + "\n")
    return target


def hooklint(args: list[str], cwd: Path) -> tuple[dict, float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hooklint", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=3600)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"app_repos: `hooklint {' '.join(args)}` in {cwd} exited {proc.returncode}:\n"
                         f"{proc.stderr[-2000:]}")
    try:
        data = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except ValueError:
        data = {"raw": proc.stdout}
    if isinstance(data, list):
        data = {"findings": data}
    data["_stderr"] = proc.stderr
    return data, elapsed


def findings_of(report: dict) -> dict[tuple, dict]:
    out = {}
    for item in report.get("findings", []):
        location = item.get("location", {})
        key = (item.get("filename"), location.get("row"), location.get("column"), item.get("code"))
        out[key] = item
    return out


def _fix_kind(item: dict) -> str:
    fix = item.get("fix") or {}
    return fix.get("applicability", "") if fix else ""


def compare(static: dict, graph: dict) -> dict[str, list]:
    out: dict[str, list] = {"added": [], "removed": [], "sharpened": [], "left": []}
    a, b = findings_of(static), findings_of(graph)
    for key in sorted(set(a) | set(b), key=lambda k: tuple(str(x) for x in k)):
        if key not in a:
            out["added"].append((key, b[key]["message"], _fix_kind(b[key])))
        elif key not in b:
            out["removed"].append((key, a[key]["message"], _fix_kind(a[key])))
        elif (a[key]["message"], a[key].get("severity"), _fix_kind(a[key])) != (
                b[key]["message"], b[key].get("severity"), _fix_kind(b[key])):
            out["sharpened"].append((key, b[key]["message"], f"{_fix_kind(a[key]) or '-'} -> {_fix_kind(b[key]) or '-'}"))
        else:
            out["left"].append((key, a[key]["message"], _fix_kind(a[key])))
    return out


def analysed_classes(graph: dict, root: Path, entries_only: bool = False) -> set[tuple[str, str]]:
    """Classes of the models the graph layer analysed (``entries_only``: those a
    script's entry point built, whose source is the statement, in backquotes)."""
    out = set()
    real = os.path.realpath(root)
    for found in graph.get("files", []) + [{"models": graph.get("factories", [])}]:
        for model in found.get("models", []):
            if entries_only and not model.get("source", "").startswith("`"):
                continue
            for module in model.get("modules", []):
                qual = module.get("class_qualname", "")
                if qual.startswith("torch."):
                    continue
                file = module.get("class_file")
                if file and os.path.realpath(file).startswith(real + os.sep):
                    where = os.path.relpath(os.path.realpath(file), real)
                else:
                    where = qual.split(".")[0]
                out.add((module["class_name"], where))
    return out


def truth_classes(entry: dict, root: Path) -> tuple[set[tuple[str, str]], list[str]]:
    if not entry.get("truth"):
        return set(), []
    cwd = root / entry.get("truth_cwd", ".")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", _TRUTH_CHILD, str(root), json.dumps(entry["truth"])], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=1800)
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return set(), [proc.stderr[-500:]]
    return {tuple(c) for c in data["classes"]}, data["errors"]


def run_repo(entry: dict, mirror: Path, work: Path) -> dict:
    root = export(entry, mirror, work)
    paths = entry.get("check", ["."])
    shutil.rmtree(root / ".hooklint_cache", ignore_errors=True)
    static, t_static = hooklint(["check", *paths, "--static-only", "--no-cache", "--output-format", "json"], root)
    cold, t_cold = hooklint(["check", *paths, "--output-format", "json"], root)
    warm, t_warm = hooklint(["check", *paths, "--output-format", "json"], root)
    graph, _ = hooklint(["graph", *paths, "--output-format", "json"], root)
    verdicts = compare(static, cold)
    if findings_of(warm).keys() != findings_of(cold).keys():
        print(f"app_repos: {entry['name']}: the warm run gave other findings than the cold one", file=sys.stderr)
    analysed = analysed_classes(graph, root)
    from_entries = analysed_classes(graph, root, entries_only=True)
    truth, truth_errors = truth_classes(entry, root)
    found = truth & analysed
    notices = [n for n in graph.get("notices", [])]
    return {
        "name": entry["name"], "kind": entry["kind"], "commit": entry["commit"],
        "times": {"static": round(t_static, 2), "cold": round(t_cold, 2), "warm": round(t_warm, 2)},
        "verdicts": {k: [[list(map(str, key)), msg, fix] for key, msg, fix in v] for k, v in verdicts.items()},
        "truth": sorted(truth), "found": sorted(found), "missing": sorted(truth - analysed),
        "found_by_entries": sorted(truth & from_entries),
        "truth_errors": truth_errors, "analysed": sorted(analysed),
        "notices": [f"{n.get('level')}: {n.get('path')}: {n.get('message')}"[:400] for n in notices],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated names")
    parser.add_argument("--mirror", type=Path, default=Path(os.environ.get("HOOKLINT_MIRROR", "/work/.mirror")))
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "hooklint-app-repos")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    entries = tomllib.loads(CONFIG.read_text())["repo"]
    if args.only:
        wanted = set(args.only.split(","))
        entries = [e for e in entries if e["name"] in wanted]
    results = []
    for entry in entries:
        result = run_repo(entry, args.mirror, args.work)
        results.append(result)
        counts = {k: len(v) for k, v in result["verdicts"].items()}
        share = f"{len(result['found'])}/{len(result['truth'])}" if result["truth"] else "n/a"
        print(f"{result['name']} ({result['commit'][:8]}, {result['kind']})")
        print(f"  verdicts: {counts['added']} added, {counts['removed']} removed, {counts['sharpened']} sharpened, "
              f"{counts['left']} left")
        print(f"  classes the hooking scripts build, analysed: {share}"
              + (f"; missing: {', '.join(c for c, _ in result['missing'][:8])}" if result["missing"] else ""))
        if result["truth_errors"]:
            print(f"  (truth snippets failed: {result['truth_errors'][0][:200]})")
        t = result["times"]
        print(f"  time: static {t['static']} s, cold {t['cold']} s, warm {t['warm']} s")
        for kind in ("added", "removed", "sharpened"):
            for key, message, fix in result["verdicts"][kind]:
                print(f"    {kind}: {key[0]}:{key[1]} {key[3]} [{fix}] {message[:220]}")
    truth = sum(len(r["truth"]) for r in results)
    found = sum(len(r["found"]) for r in results)
    by_entries = sum(len(r["found_by_entries"]) for r in results)
    changed = sum(len(r["verdicts"][k]) for r in results for k in ("added", "removed", "sharpened"))
    print(f"\n{len(results)} repositories: {found}/{truth} classes the hooking scripts build were analysed "
          f"({100 * found / truth if truth else 0:.0f}%; {by_entries} in the models the scripts' entry points "
          f"built, the rest in models built from the model files alone); {changed} verdicts changed")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
