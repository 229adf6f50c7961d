"""Running what the user runs, with a fix or without it (proof worker only).

One request runs one program (:class:`hooklint.fix.entries.Entry`: a
script's ``__main__`` block, ``python -m module``, ``pytest ...``) in the
process the proof worker forks for it, so in its sandbox: no network, writes
only in its scratch folder, the worker's timeout and memory limit.  No
program is started: the entry runs in this process (the sandbox refuses
``execve``), as ``python`` would run it (``__main__``, ``sys.argv``, the
script's folder first on ``sys.path``, the project root as working folder)
or as ``pytest.main`` does.

The file being fixed is never written: an import hook serves its text (the
original or the fixed one, each with the probes below) under its real path,
so that the user's tree stays as it is, and tracebacks name the real file.

The text has each proven registration's hook wrapped in a probe,
``register_backward_hook(__hooklint_probe__(0, save))``: it counts the
registration, records what each call of the hook receives (the module's
class, the shapes of ``grad_input``, a fingerprint of ``grad_output[0]``:
shape, sums, evenly spaced samples), then calls the hook.  The parent
(:mod:`hooklint.fix.verify`) compares the original run with the fixed one.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib.abc
import importlib.machinery
import linecache
import os
import sys
import types
from collections import Counter
from typing import Any, Callable, Iterable

PROBE = "__hooklint_probe__"
MAX_RECORDED_CALLS = 32  # per probe: the first calls are compared value by value, the rest counted
SAMPLES = 64
MAX_READ_STAMPS = 500


class Recorder:
    """The probes' records, by probe id."""

    def __init__(self) -> None:
        self.registered: Counter = Counter()
        self.counts: Counter = Counter()
        self.calls: dict[int, list[dict[str, Any]]] = {}
        self.returned: dict[int, int] = {}  # probe -> index of the first call whose hook returned a value

    def probe(self, probe_id: int, hook: Any) -> Any:
        self.registered[probe_id] += 1
        if not callable(hook):
            return hook  # the registration fails as it would without hooklint

        def probe(*args, **kwargs):
            index = self.counts[probe_id]
            self.counts[probe_id] += 1
            if index < MAX_RECORDED_CALLS:
                self.calls.setdefault(probe_id, []).append(_call_record(args))
            result = hook(*args, **kwargs)
            if result is not None and probe_id not in self.returned:
                self.returned[probe_id] = index
            return result

        for name in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(probe, name, getattr(hook, name))
            except (AttributeError, TypeError):
                pass
        return probe

    def to_dict(self) -> dict[str, Any]:
        return {"registered": {str(k): v for k, v in self.registered.items()},
                "counts": {str(k): v for k, v in self.counts.items()},
                "calls": {str(k): v for k, v in self.calls.items()},
                "returned": {str(k): v for k, v in self.returned.items()}}


def fingerprint(value: Any) -> dict[str, Any] | None:
    """Enough of a tensor to compare two runs with a tolerance, small enough to send."""
    import torch

    if not isinstance(value, torch.Tensor):
        return None
    with torch.no_grad():
        flat = value.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        flat = flat.to(torch.float64)
        count = flat.numel()
        if count:
            index = torch.linspace(0, count - 1, min(count, SAMPLES)).round().long()
            sample = flat[index].tolist()
        else:
            sample = []
        return {"shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""),
                "sum": float(flat.sum()) if count else 0.0, "abs": float(flat.abs().sum()) if count else 0.0,
                "sample": sample}


def _first_tensor(grads: Any) -> Any:
    if isinstance(grads, (tuple, list)):
        return grads[0] if grads else None
    return grads


def _call_record(args: tuple) -> dict[str, Any]:
    import torch

    module = args[0] if args else None
    grad_input = args[1] if len(args) > 1 else None
    grad_output = args[2] if len(args) > 2 else None
    shapes = None
    if isinstance(grad_input, (tuple, list)):
        shapes = [list(g.shape) if isinstance(g, torch.Tensor) else None for g in grad_input]
    return {"module": type(module).__name__, "grad_input": shapes,
            "grad_output": fingerprint(_first_tensor(grad_output))}


# ---------------------------------------------------------------- serving the file's text


class _ServedLoader(importlib.machinery.SourceFileLoader):
    """The file's module from ``text``: never from its bytecode cache, never written."""

    def __init__(self, fullname: str, path: str, text: str):
        super().__init__(fullname, path)
        self.text = text

    def get_data(self, path):
        if os.path.realpath(path) == os.path.realpath(self.path):
            return self.text.encode("utf-8")
        raise OSError("hooklint serves this module's source, not its bytecode")

    def set_data(self, path, data, *, _mode=0o666):
        return None


class ServedFinder(importlib.abc.MetaPathFinder):
    """Imports of the files in ``texts`` get the text given, under the real path."""

    def __init__(self, texts: dict[str, str]):
        self.texts = {os.path.realpath(path): text for path, text in texts.items()}
        # only imports whose last name can be one of these files are looked up twice
        self.names = {os.path.basename(os.path.dirname(p)) if p.endswith("__init__.py")
                      else os.path.basename(p)[:-3] for p in self.texts}

    def find_spec(self, fullname, path=None, target=None):
        if fullname.rpartition(".")[2] not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin:
            return None
        text = self.texts.get(os.path.realpath(spec.origin))
        if text is None:
            return None
        spec.loader = _ServedLoader(fullname, spec.origin, text)
        return spec


class ReadLog:
    """The project's files a run opened (data files, configs, its modules) and
    folders it listed: the cache of a verdict depends on them too."""

    def __init__(self, roots: list[str]):
        self.roots = tuple(os.path.realpath(r) + os.sep for r in roots)
        self.active = True
        self.paths: set[str] = set()
        self.overflow = False

    def __call__(self, event: str, args: tuple) -> None:
        if event not in ("open", "os.listdir", "os.scandir") or not self.active or not args:
            return
        path = args[0]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError, OSError):
            return
        if not real.startswith(self.roots) or "site-packages" in real:
            return
        if len(self.paths) >= MAX_READ_STAMPS:
            self.overflow = True
            return
        self.paths.add(real)


# ---------------------------------------------------------------- one run


def short_error(exc: BaseException) -> str:
    """``Type: message``, the first sentence of a long message, and the innermost
    line of the user's code it came from: "(helpers.py:6: out.relu_())"."""
    import traceback

    from hooklint.graph.trace import is_user_file, one_line

    text = one_line(exc, limit=400).replace(" while analysing it", "")  # the guard's words, for the graph layer
    if len(text) > 160:
        cut = text.find(". ", 60)
        text = text[:cut + 1] if 0 < cut < 240 else text[:157] + "..."
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)
              and os.sep + "_pytest" + os.sep not in f.filename and os.sep + "pluggy" + os.sep not in f.filename]
    if frames:
        frame = frames[-1]
        code = (frame.line or "").strip()
        text += f" ({os.path.basename(frame.filename)}:{frame.lineno}" + (
            f": {code}" if code and len(code) <= 60 else "") + ")"
    return text


def _exit_outcome(code: Any) -> dict[str, Any]:
    if code is None or code == 0:
        return {"outcome": "ok"}
    if isinstance(code, int):
        return {"outcome": "error", "detail": f"it exits with status {code}"}
    return {"outcome": "error", "detail": f"it exits with status 1 ({str(code)[:160]})"}


def _seed() -> None:
    import random

    import torch

    random.seed(0)
    torch.manual_seed(0)
    try:
        import numpy

        numpy.random.seed(0)
    except Exception:  # noqa: BLE001 - numpy is optional
        pass


def _run_script(path: str, args: list[str], texts: dict[str, str]) -> dict[str, Any]:
    from hooklint.static.source import read_source

    text = texts.get(os.path.realpath(path))
    if text is None:
        try:
            text = read_source(path)
        except Exception as exc:  # noqa: BLE001
            return {"outcome": "unusable", "detail": f"it cannot be read ({exc})"}
    code = compile(text, path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        exec(code, main.__dict__)  # noqa: S102 - the user's program, in the sandbox
    except SystemExit as exc:
        return _exit_outcome(exc.code)
    return {"outcome": "ok"}


def _run_module(module: str, args: list[str], files: list[str]) -> dict[str, Any]:
    import runpy
    from pathlib import Path

    from hooklint.graph.roots import package_root

    sys.argv = [module, *args]
    sys.path.insert(0, os.getcwd())
    for path in files:  # the folder above its top package (an installed or src-layout package)
        top = str(package_root(Path(path))[1])
        if top not in sys.path:
            sys.path.insert(1, top)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return _exit_outcome(exc.code)
    return {"outcome": "ok"}


class _PytestWatch:
    """The first failure of a pytest run, with the exception and the user's line."""

    def __init__(self) -> None:
        self.failure: str | None = None
        self.ran = 0

    def pytest_exception_interact(self, node, call, report):
        if self.failure is None and call.excinfo is not None:
            self.failure = f"`{node.nodeid}` fails: {short_error(call.excinfo.value)}"

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.ran += 1
        if report.failed and self.failure is None:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1:]
            self.failure = f"`{report.nodeid}` fails: {message}"

    def pytest_internalerror(self, excrepr, excinfo):
        if self.failure is None:
            self.failure = f"pytest fails: {short_error(excinfo.value)}"

    def pytest_collectreport(self, report):
        if report.failed and self.failure is None:
            text = str(report.longrepr).strip().splitlines()
            self.failure = f"collecting `{report.nodeid}` fails: {text[-1] if text else 'error'}"


def _run_pytest(args: list[str]) -> dict[str, Any]:
    try:
        import pytest
    except ImportError:
        return {"outcome": "unusable", "detail": "pytest is not installed where hooklint runs"}
    watch = _PytestWatch()
    # -x: the first failure is the reason; plain asserts: pytest's rewriting hook would read the
    # test files from disk, past the import hook that serves the fixed text; no cache folder, no
    # random test order (pytest-randomly reseeds each test differently)
    options = ["-x", "-q", "--assert=plain", "-p", "no:cacheprovider", "-p", "no:randomly",
               "-W", "ignore::DeprecationWarning"]
    sys.argv = ["pytest", *args]
    sys.path.insert(0, os.getcwd())  # as `python -m pytest` from the project root
    try:
        code = int(pytest.main([*options, *args], plugins=[watch]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 3
    if code == 0:
        return {"outcome": "ok", "tests": watch.ran}
    if code == 5:
        return {"outcome": "unusable", "detail": "it collects no test"}
    if code == 4 and watch.failure is None:
        return {"outcome": "unusable", "detail": "pytest refuses its arguments (usage error)"}
    return {"outcome": "error", "detail": watch.failure or f"pytest exits with status {code}"}


def run_entry(entry: dict[str, Any], texts: dict[str, str]) -> dict[str, Any]:
    kind = entry["kind"]
    args = list(entry.get("args", []))
    if kind == "script":
        return _run_script(entry["target"], args, texts)
    if kind == "module":
        return _run_module(entry["target"], args, list(entry.get("files", [])))
    return _run_pytest(args)


def _module_file(entry: dict[str, Any]) -> list[str]:
    """The file ``python -m module`` ran (as ``__main__``: no module of its own)."""
    if entry.get("kind") != "module":
        return []
    import importlib.util

    try:
        spec = importlib.util.find_spec(entry["target"])
    except (ImportError, ValueError, AttributeError):
        return []
    return [spec.origin] if spec is not None and spec.origin and spec.origin.endswith(".py") else []


def user_deps(roots: list[str], before: set[str], also: Iterable[str]) -> dict[str, str]:
    """The digest of each of the user's modules this run imported, and of the
    files in ``also`` (the file whose text was served: its digest on disk; the
    entry's own files: a script runs as ``__main__``, which is no new module)."""
    from hooklint.graph.cache import file_digest

    prefixes = tuple(os.path.realpath(r) + os.sep for r in roots)
    out: dict[str, str] = {}
    for name in set(sys.modules) - before:
        origin = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(origin, str):
            continue
        real = os.path.realpath(origin)
        if not real.startswith(prefixes) or "site-packages" in real:
            continue
        digest = file_digest(real)
        if digest:
            out[real] = digest
    for path in also:
        digest = file_digest(path)
        if digest:
            out[os.path.realpath(path)] = digest
    return out


def run_program(request: dict[str, Any], send: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """One run of ``request["entry"]`` with ``request["texts"]`` served: the
    outcome ("ok", "error" with the one-line reason, "timeout", "unusable"),
    the probes' records, and what the run depended on."""
    from hooklint.graph.worker import OverBudget, Worker

    worker = Worker(send)
    worker.budget = float(request.get("budget", 60.0))
    entry = request["entry"]
    root = request["root"]
    texts = {os.path.realpath(path): text for path, text in request.get("texts", {}).items()}
    recorder = Recorder()
    setattr(builtins, PROBE, recorder.probe)
    sys.meta_path.insert(0, ServedFinder(texts))
    for path, text in texts.items():
        linecache.cache[os.path.realpath(path)] = (len(text), None, text.splitlines(keepends=True),
                                                    os.path.realpath(path))
    roots = [root, *request.get("pythonpath", [])]
    sys.path[:0] = [p for p in request.get("pythonpath", []) if p not in sys.path]
    reads = ReadLog(roots)
    sys.addaudithook(reads)
    before = set(sys.modules)
    os.chdir(root)
    _seed()
    what = f"running {entry['label']}" + (" with the fix" if request.get("fixed") else " without the fix")
    try:
        with worker.step(what):
            outcome = run_entry(entry, texts)
    except OverBudget:
        outcome = {"outcome": "timeout", "detail": f"did not finish within the {worker.budget:g} s timeout"}
    except BaseException as exc:  # noqa: BLE001 - the user's program failed: that is the result
        from hooklint.graph.guard import Blocked

        blocked = isinstance(exc, Blocked) or isinstance(exc.__context__, Blocked)
        outcome = {"outcome": "error", "detail": short_error(exc), "blocked": blocked}
    reads.active = False
    stamps: dict[str, list[int] | None] = {}
    for path in sorted(reads.paths):
        try:
            info = os.stat(path)
        except OSError:
            stamps[path] = None  # missing (a data file not there yet): the verdict holds until it appears
            continue
        stamps[path] = [info.st_mtime_ns, info.st_size]
    deps = user_deps(roots, before, [*texts, *entry.get("files", []), *_module_file(entry)])
    return {**outcome, **recorder.to_dict(), "deps": deps, "reads": stamps,
            "reads_complete": not reads.overflow,
            "texts": {p: hashlib.sha256(t.encode("utf-8", "surrogatepass")).hexdigest() for p, t in texts.items()}}
