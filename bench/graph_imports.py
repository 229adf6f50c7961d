"""How many files of a real package the graph layer can import (definitions only).

    python bench/graph_imports.py [--package timm] [--json FILE] [--limit N]
                                  [--stub torchvision,PIL]

For every ``.py`` file of a package of the corpus (``bench/corpus.py``, already
downloaded), the graph worker's own loading path runs in one child process:
:func:`hooklint.graph.build.file_session` (the project's import roots, the
sanitizing import hook) and :func:`hooklint.graph.build.exec_definitions`,
under the worker's audit hook, with an alarm of 30 s per file.  Nothing is
built or traced: this measures the definitions-only import alone.

Each file ends as ``ok`` or as a failure, classified:

* ``missing dependency``: ``ModuleNotFoundError`` for a third-party module
  that is not installed (torchvision, PIL, huggingface_hub... are not; the
  project allows no more dependencies), reported separately, per module;
* ``dropped value``: a ``NameError`` (or an ``ImportError`` for a name),
  which in a definitions-only import means a top-level value was not kept;
* ``other``: anything else (first lines shown).

Prints the counts and the most common failures; ``--json`` writes every
file's result.

``--stub MODULES`` stands in for missing third-party packages with empty
stub modules (any attribute is a placeholder class), to see what fails
*beyond* them: a diagnostic of hooklint's own loading, not a claim that those
files work without their dependencies.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

# HOOKLINT_REPO: measure another checkout's hooklint (e.g. main, for a before/after figure)
REPO = Path(os.environ.get("HOOKLINT_REPO") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(REPO))

CORPUS = Path(os.environ.get("HOOKLINT_CORPUS", Path.home() / ".cache" / "hooklint-corpus")) / "src"
PER_FILE_SECONDS = 30


def package_folder(name: str) -> Path:
    matches = sorted(CORPUS.glob(f"{name}-*"))
    if not matches:
        raise SystemExit(f"graph_imports: {name} is not in {CORPUS} (run bench/corpus.py --download-only)")
    return matches[-1]


def install_stubs(names: list[str]) -> None:
    """Stand-ins for the named top-level packages that are not installed (the
    installed ones are left alone)."""
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import types

    names = [n for n in names if importlib.util.find_spec(n) is None]

    class PlaceholderMeta(type):
        def __getattr__(cls, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return type(attr, (Placeholder,), {})

        def __getitem__(cls, item):  # `Float[Tensor, "batch"]`, `Optional[Thing]`
            return cls

    class Placeholder(metaclass=PlaceholderMeta):
        def __init__(self, *args, **kwargs):
            pass

    class StubModule(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return type(attr, (Placeholder,), {})

    class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in names:
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None

        def create_module(self, spec):
            module = StubModule(spec.name)
            module.__path__ = []
            return module

        def exec_module(self, module):
            pass

    sys.meta_path.insert(0, StubFinder())


def child(root: str, files: list[str]) -> None:
    """Import each file's definitions in this process; one JSON line per file."""
    import signal

    stubs = os.environ.get("GRAPH_IMPORTS_STUBS")
    if stubs:
        install_stubs(stubs.split(","))

    import torch  # noqa: F401 - as the worker: torch first

    from hooklint.graph.build import exec_definitions, file_session, user_error
    from hooklint.graph.guard import Guard

    guard = Guard(os.environ.get("HOOKLINT_SCRATCH"))

    class Slow(BaseException):
        pass

    def alarm(_signum, _frame):
        raise Slow(f"took more than {PER_FILE_SECONDS} s")

    signal.signal(signal.SIGALRM, alarm)
    for path in files:
        started = time.perf_counter()
        record: dict = {"path": path}
        try:
            with file_session(Path(path), Path(root)) as session:
                signal.alarm(PER_FILE_SECONDS)
                try:
                    with guard.running_user_code():
                        exec_definitions(session)
                    record["status"] = "ok"
                except BaseException as exc:  # noqa: BLE001 - user code: classify it
                    sanitized = session.plan.sanitized
                    computed = getattr(sanitized, "computed_names", None)  # None before they were kept
                    message = user_error(exc, sanitized.skipped_names, computed) if computed is not None \
                        else user_error(exc, sanitized.skipped_names)
                    record.update(status="failed", error=message,
                                  type=type(exc).__name__, missing=getattr(exc, "name", None)
                                  if isinstance(exc, ModuleNotFoundError) else None)
                finally:
                    signal.alarm(0)
        except SyntaxError as exc:
            record.update(status="failed", error=f"SyntaxError: {exc}", type="SyntaxError", missing=None)
        record["seconds"] = round(time.perf_counter() - started, 3)
        print(json.dumps(record), flush=True)


def classify(record: dict, package_top: str) -> str:
    if record["status"] == "ok":
        return "ok"
    missing = record.get("missing")
    if missing and missing.split(".")[0] != package_top:
        return "missing dependency"
    error = record.get("error", "")
    # a definitions-only import raising NameError (or not finding a name another module
    # should define) lost a top-level value
    if record.get("type") == "NameError" or re.search(r"cannot import name '(\w+)'", error):
        return "dropped value"
    return "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", default="timm")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--limit", type=int, default=0, help="only the first N files (sorted)")
    parser.add_argument("--stub", default="", metavar="MODULES",
                        help="comma-separated third-party packages to replace with stubs (diagnostic)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1:])
        return 0
    folder = package_folder(args.package)
    files = sorted(str(p) for p in folder.rglob("*.py"))
    if args.limit:
        files = files[:args.limit]
    started = time.perf_counter()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hooklint-imports-") as scratch:
        # as the worker: the only place model code may write, and the temporary folder
        env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1",
                   GRAPH_IMPORTS_STUBS=args.stub, HOOKLINT_SCRATCH=scratch, TMPDIR=scratch,
                   XDG_CACHE_HOME=os.path.join(scratch, "cache"), TORCH_HOME=os.path.join(scratch, "torch"))
        proc = subprocess.run([sys.executable, __file__, "--child", str(folder), *files], capture_output=True,
                              text=True, env=env, cwd=folder, timeout=PER_FILE_SECONDS * len(files) + 120)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(records) != len(files):
        print(proc.stderr[-3000:], file=sys.stderr)
        print(f"graph_imports: the child answered for {len(records)} of {len(files)} files", file=sys.stderr)
        return 1
    top = args.package.replace("-", "_")
    kinds = collections.Counter(classify(r, top) for r in records)
    stubbed = f", stubs for {args.stub}" if args.stub else ""
    print(f"{args.package} ({folder.name}{stubbed}): {len(files)} files, definitions imported in "
          f"{time.perf_counter() - started:.1f} s")
    for kind in ("ok", "missing dependency", "dropped value", "other"):
        print(f"  {kind:<20} {kinds.get(kind, 0):>5}")
    missing = collections.Counter(r["missing"].split(".")[0] for r in records
                                  if classify(r, top) == "missing dependency")
    if missing:
        print("  missing third-party modules: " + ", ".join(f"{m} ({n})" for m, n in missing.most_common()))
    errors = collections.Counter(re.sub(r"\(\w+\.py:\d+\)", "(...)", r["error"])[:160] for r in records
                                 if classify(r, top) in ("dropped value", "other"))
    for error, count in errors.most_common(12):
        print(f"  {count:>4} x {error}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
