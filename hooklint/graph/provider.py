"""The parent side of the graph layer: which files to import, the cache, the
worker process, and the notices the user sees.  Never imports torch."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hooklint.config import Config
from hooklint.findings import Notice, NoticeLevel
from hooklint.graph.cache import GraphCache, file_key
from hooklint.graph.facts import FileFacts, ModelFacts
from hooklint.graph.plan import plan_digest, planned
from hooklint.static.source import SourceError, read_source

INSTALL_HINT = "pip install 'hooklint[torch]'"
STARTUP_TIMEOUT = 120.0  # importing torch on a cold disk can be slow


def torch_version() -> str | None:
    """The installed torch's version, without importing it."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


@dataclass
class GraphRun:
    """What one provider call did (``hooklint graph`` shows it; tests check it)."""

    imported: list[str] = field(default_factory=list)  # files the worker imported
    cached: list[str] = field(default_factory=list)  # files answered from the cache
    not_candidates: list[str] = field(default_factory=list)  # files with nothing to analyse
    factories: list[ModelFacts] = field(default_factory=list)
    workers_started: int = 0


# How long past its own time budget a step may run before the worker is killed
# (the worker's alarm cannot stop code that never returns to Python).
KILL_GRACE = 5.0


@dataclass
class Reply:
    status: str  # "ok", "timeout", "crash"
    result: dict[str, Any] | None = None
    stage: str = ""
    detail: str = ""
    deps: dict[str, str] = field(default_factory=dict)  # the user's modules imported so far


class WorkerProcess:
    """One worker subprocess; restarted by the pool after a crash or a timeout."""

    # What runs in it; `hooklint check --verify` starts its own (hooklint.fix.verify_worker).
    module = "hooklint.graph.worker"

    def __init__(self, memory_limit: int, cwd: Path):
        self.memory_limit = memory_limit
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.fd = -1
        self.buffer = b""
        self.stderr = None
        self.scratch: str | None = None
        self.torch = ""

    def start(self) -> str | None:
        """Start and wait until torch is imported; an error message if it cannot be."""
        read_fd, write_fd = os.pipe()
        self.stderr = tempfile.TemporaryFile()
        self.scratch = tempfile.mkdtemp(prefix="hooklint-worker-")
        env = dict(os.environ)
        env.update({
            "HOOKLINT_RESULT_FD": str(write_fd),
            # the only place model code may write; deleted when the worker ends
            "HOOKLINT_SCRATCH": self.scratch,
            "TMPDIR": self.scratch,
            "XDG_CACHE_HOME": os.path.join(self.scratch, "cache"),
            "HF_HOME": os.path.join(self.scratch, "huggingface"),
            "TORCH_HOME": os.path.join(self.scratch, "torch"),
            "MPLCONFIGDIR": os.path.join(self.scratch, "matplotlib"),
            "PYTHONDONTWRITEBYTECODE": "1",
            # one thread: the worker is one of many processes on small CI machines
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            # no GPU, no downloads: model code gets neither while hooklint imports it
            "CUDA_VISIBLE_DEVICES": "",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        })
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, str(self.memory_limit)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.stderr, pass_fds=(write_fd,),
                env=env, cwd=self.cwd, start_new_session=True)
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            return f"cannot start the worker: {exc}"
        os.close(write_fd)
        self.fd = read_fd
        message = self._next(STARTUP_TIMEOUT)
        if message is None or message.get("event") != "ready":
            reason = message.get("message") if message else self._death()
            self.kill()
            return reason or "the worker did not start"
        self.torch = message.get("torch", "")
        return None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, request: dict[str, Any], timeout: float) -> Reply:
        """Send a request; ``timeout`` applies to each step the worker announces."""
        assert self.proc is not None and self.proc.stdin is not None
        stage = ""
        deps: dict[str, str] = {}
        try:
            self.proc.stdin.write((json.dumps({**request, "budget": timeout}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return Reply("crash", detail=self._death())
        deadline = time.monotonic() + timeout + KILL_GRACE
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return Reply("timeout", stage=stage, deps=deps)
            message = self._next(remaining)
            if message is None:
                if self.alive:  # no message before the deadline
                    continue
                return Reply("crash", stage=stage, detail=self._death(), deps=deps)
            event = message.get("event")
            if event == "stage":
                stage = message.get("what", "")
                deadline = time.monotonic() + timeout + KILL_GRACE
            elif event == "dep":
                deps[message.get("path", "")] = message.get("sha256", "")
            elif event == "result":
                return Reply("ok", result=message, stage=stage, deps=deps)

    def _next(self, timeout: float) -> dict[str, Any] | None:
        """The next message, or None at end of file or when ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            return None

    def _death(self) -> str:
        """Why the worker ended: its exit status and the last thing it printed."""
        if self.proc is None:
            return "the worker is not running"
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the worker stopped answering"
        if code < 0:
            try:
                what = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                what = f"killed by signal {-code}"
        else:
            what = f"exited with status {code}"
        hint = self._stderr_hint()
        return f"{what}{': ' + hint if hint else ''}"

    def _stderr_hint(self) -> str:
        if self.stderr is None:
            return ""
        try:
            self.stderr.seek(0)
            lines = self.stderr.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        for line in lines:
            if line.startswith("Fatal Python error:"):
                where = next((x.strip() for x in lines if x.strip().startswith("File ") and "hooklint" not in x
                              and "torch" not in x), "")
                return line[len("Fatal Python error:"):].strip() + (f" ({where})" if where else "")
        return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.wait()
        self.close_pipes()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self.close_pipes()

    def close_pipes(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


class WorkerPool:
    """A worker reused across files, replaced when one crashes or hangs."""

    def __init__(self, memory_limit: int, cwd: Path, run: GraphRun):
        self.memory_limit = memory_limit
        self.cwd = cwd
        self.run = run
        self.worker: WorkerProcess | None = None
        self.fatal: str | None = None

    def get(self) -> WorkerProcess | None:
        if self.fatal is not None:
            return None
        if self.worker is None or not self.worker.alive:
            if self.worker is not None:
                self.worker.close_pipes()
            worker = WorkerProcess(self.memory_limit, self.cwd)
            self.run.workers_started += 1
            error = worker.start()
            if error is not None:
                self.fatal = error
                return None
            self.worker = worker
        return self.worker

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None


# ---------------------------------------------------------------- the provider


def _display(path: str) -> str:
    from hooklint.engine import display_path

    return display_path(path)


def _cache_for(config: Config, version: str, use_cache: bool, timeout: float) -> GraphCache | None:
    if not use_cache or not config.cache:
        return None
    folder = Path(config.cache_dir)
    if not folder.is_absolute():
        folder = config.root / folder
    return GraphCache(folder, version, {"models": config.models, "memory-limit": config.memory_limit,
                                        "timeout": timeout, "pythonpath": config.pythonpath})


def _failure(reply: Reply, timeout: float) -> tuple[str, str]:
    """(error kind, message) for a request the worker did not answer."""
    during = f" while {reply.stage}" if reply.stage else ""
    if reply.status == "timeout":
        return "timeout", (f"graph analysis timed out after {timeout:g} s{during}; the model code was stopped "
                           f"(raise `timeout` in [tool.hooklint] or pass --timeout)")
    return "crash", f"graph analysis failed: the model code crashed the worker ({reply.detail}){during}"


def provide_graph_facts(files: list[str], config: Config, *, use_cache: bool = True, timeout: float | None = None,
                        run: GraphRun | None = None) -> tuple[dict[str, FileFacts], list[Notice]]:
    """Graph facts for the files that can benefit, and what the user should know."""
    from hooklint.graph.project import ProjectIndex

    run = run if run is not None else GraphRun()
    timeout = timeout if timeout is not None else config.timeout
    notices: list[Notice] = []
    version = torch_version()
    cache = _cache_for(config, version, use_cache, timeout) if version is not None else None
    candidates: list[str] = []
    facts: dict[str, FileFacts] = {}
    todo: list[str] = []
    planned_keys: dict[str, str | None] = {}
    index = ProjectIndex()
    for path in files:
        # the cache first: an unchanged file (and unchanged modules it imported) needs no parse
        key = file_key(cache, path) if cache else None
        hit = cache.get(key) if cache and key else None
        if hit is not None and hit.get("not_candidate"):
            run.not_candidates.append(path)
            continue
        if hit is not None:
            found = FileFacts.from_dict(hit)
            found.path = _display(path)
            found.cached = True
            facts[path] = found
            run.cached.append(path)
            candidates.append(path)
            continue
        try:
            text = read_source(path)
        except SourceError:
            continue  # the static pass reports unreadable files
        lookups = index.lookups
        plan = planned(text, path, config.root, config.pythonpath, index)
        if plan is not None:
            candidates.append(path)
            # the same definitions and constructions, on the same lines, as a cached analysis
            # (a comment or the training loop edited): its facts still hold
            pkey = cache.key({"file": os.path.realpath(path), "plan": plan_digest(plan, text)}) if cache else None
            planned_keys[path] = pkey
            entry = cache.get_entry(pkey) if cache and pkey else None
            if entry is not None and isinstance(entry[0], dict) and not entry[0].get("not_candidate"):
                found = FileFacts.from_dict(entry[0])
                found.path = _display(path)
                found.cached = True
                facts[path] = found
                run.cached.append(path)
                if key is not None and cache is not None:
                    cache.put(key, entry[0], entry[1], environment=entry[2])  # this content, next time
                continue
            todo.append(path)
        else:
            run.not_candidates.append(path)
            if cache is not None and key is not None and index.lookups == lookups:
                # decided from the file alone (no import of the project was looked at)
                cache.put(key, {"not_candidate": True}, {})
    if not candidates and not config.models:
        return {}, notices
    if version is None:
        where = _display(candidates[0]) if candidates else "configuration"
        count = len(candidates)
        notices.append(Notice(where, f"graph analysis skipped ({count} model file{'s' if count != 1 else ''}): "
                                     f"torch is not installed ({INSTALL_HINT}); static rules only",
                              NoticeLevel.INFO))
        return {}, notices
    factory_models: list[ModelFacts] | None = None
    factory_key = cache.key({"factories": config.models}) if cache and config.models else None
    if factory_key is not None and cache is not None:
        hit = cache.get(factory_key)
        if hit is not None:
            factory_models = [ModelFacts.from_dict(m) for m in hit]
    if todo or (config.models and factory_models is None):
        pool = WorkerPool(config.memory_limit, config.root, run)
        try:
            for path in todo:
                facts[path] = _analyse_file(pool, path, config, timeout, cache, run, planned_keys.get(path))
            if config.models and factory_models is None:
                factory_models = _analyse_factories(pool, config, timeout, cache, factory_key, notices)
        finally:
            pool.close()
        if pool.fatal is not None:
            notices.append(Notice(_display(todo[0]) if todo else "configuration",
                                  f"graph analysis skipped: the worker could not import torch ({pool.fatal}); "
                                  f"{INSTALL_HINT}; static rules only", NoticeLevel.INFO))
            for path in todo:
                facts.pop(path, None)
    if cache is not None and cache.error:
        notices.append(Notice(str(cache.folder), cache.error, NoticeLevel.INFO))
    run.factories = factory_models or []
    _share_models(facts, run.factories)
    from hooklint.graph.crossfile import link_across_files

    link_across_files(facts, files, config.root, config.pythonpath)
    notices.extend(_grouped_import_failures(list(facts.values())))
    for found in facts.values():
        notices.extend(_file_notices(found))
    return facts, notices


_LISTED_FILES = 3


def _grouped_import_failures(found: list[FileFacts]) -> list[Notice]:
    """Files whose definitions fail to import for the same reason (a package of
    the project that needs a module that is not installed): one line for all."""
    by_reason: dict[tuple[str, bool], list[FileFacts]] = {}
    for item in found:
        if item.error is not None and item.error_kind == "import":
            by_reason.setdefault((item.error, item.cached), []).append(item)
    out = []
    for (reason, cached), group in by_reason.items():
        note = _CACHED_NOTE if cached else ""
        if len(group) == 1:
            out.append(Notice(group[0].path, f"graph analysis skipped: {reason}{note}", NoticeLevel.SKIP))
            continue
        others = group[1:]
        names = ", ".join(g.path for g in others[:_LISTED_FILES])
        more = f" and {len(others) - _LISTED_FILES} more" if len(others) > _LISTED_FILES else ""
        reason = reason.replace("importing its definitions failed", "importing their definitions failed", 1)
        out.append(Notice(group[0].path, f"graph analysis skipped for this file and {len(others)} other"
                                         f"{'s' if len(others) > 1 else ''} ({names}{more}): {reason}{note}",
                          NoticeLevel.SKIP))
    return out


# Failures worth keeping until the file (or a module it imports) changes: the
# same code fails the same way.  An internal error or a worker that cannot
# start says nothing about the file.
_CACHED_FAILURES = frozenset({"import", "timeout", "crash", "memory"})


def _analyse_file(pool: WorkerPool, path: str, config: Config, timeout: float, cache: GraphCache | None,
                  run: GraphRun, plan_key: str | None = None) -> FileFacts:
    display = _display(path)
    worker = pool.get()
    if worker is None:
        return FileFacts(display, error=pool.fatal, error_kind="worker")
    run.imported.append(path)
    reply = worker.request({"kind": "file", "path": os.path.abspath(path), "root": str(config.root),
                            "pythonpath": config.pythonpath}, timeout)
    if reply.status != "ok" or reply.result is None:
        kind, message = _failure(reply, timeout)
        found = FileFacts(display, error=message, error_kind=kind)
        deps = reply.deps
    else:
        data = dict(reply.result["facts"])
        data["path"] = display
        found = FileFacts.from_dict(data)
        deps = reply.result.get("deps") or reply.deps
    if cache is not None and (found.error is None or found.error_kind in _CACHED_FAILURES):
        key = file_key(cache, path)
        for each in (key, plan_key):
            if each is not None:
                # an import failure may be a package that is not installed yet: installing one retries
                cache.put(each, found.to_dict(), deps, environment=found.error_kind == "import")
    return found


def _analyse_factories(pool: WorkerPool, config: Config, timeout: float, cache: GraphCache | None,
                       key: str | None, notices: list[Notice]) -> list[ModelFacts]:
    where = str(config.source or "configuration")
    worker = pool.get()
    if worker is None:
        return []
    reply = worker.request({"kind": "factories", "specs": config.models, "root": str(config.root),
                            "pythonpath": config.pythonpath}, timeout)
    if reply.status != "ok" or reply.result is None:
        _kind, message = _failure(reply, timeout)
        notices.append(Notice(where, message.replace("graph analysis", "analysing the factories in `models`"),
                              NoticeLevel.ERROR))
        return []
    for error in reply.result.get("errors", []):
        notices.append(Notice(where, f"model factory `{error['spec']}`: {error['reason']}", NoticeLevel.ERROR))
    models = [ModelFacts.from_dict(m) for m in reply.result.get("models", [])]
    if cache is not None and key is not None and not reply.result.get("errors"):
        cache.put(key, [m.to_dict() for m in models], reply.result.get("deps", {}))
    return models


def _share_models(facts: dict[str, FileFacts], factory_models: list[ModelFacts]) -> None:
    """Give each file the models (from other files or factories) that contain
    modules of classes it defines, so that hooks registered in those classes
    can be linked to real module facts."""
    by_real = {os.path.realpath(path): found for path, found in facts.items()}
    models = [m for found in facts.values() for m in found.models] + factory_models
    for model in models:
        files = {os.path.realpath(m.class_file) for m in model.modules if m.class_file}
        for real in files:
            found = by_real.get(real)
            if found is None or model in found.models:
                continue
            found.borrowed.append(model)
    for real, found in by_real.items():
        # a class that could not be built on its own is covered by a model that contains it
        covered = {m.class_name for model in found.borrowed for m in model.modules
                   if m.class_file and os.path.realpath(m.class_file) == real}
        found.unanalysed = [u for u in found.unanalysed if u.class_name not in covered or u.kind == "timeout"]


_CACHED_NOTE = "; cached: not retried until the file changes (--no-cache to retry now)"


def _file_notices(found: FileFacts) -> list[Notice]:
    """What the user hears about one file: an error of the whole file, a model
    stopped after its time (errors), and one info line for models whose
    analysis was not complete or not by fx."""
    cached = _CACHED_NOTE if found.cached else ""
    if found.error is not None:
        if found.error_kind in ("import", "worker"):
            return []  # said once for all the files that failed the same way, or for the whole run
        return [Notice(found.path, found.error + (cached if found.error_kind in _CACHED_FAILURES else ""),
                       NoticeLevel.ERROR)]
    out = [Notice(found.path, u.reason + cached, NoticeLevel.ERROR) for u in found.unanalysed if u.kind == "timeout"]
    parts = []
    for model in found.models:
        if model.method != "fx":
            parts.append(f"{model.label} analysed by running a forward (fx could not trace it: {model.fx_error})")
        elif not model.autograd:
            parts.append(f"{model.label} traced with fx only ({model.note})")
    reported = [u for u in found.unanalysed if u.reason != "defines no forward (a base class)" and u.kind != "timeout"]
    if reported:
        parts.append("not analysed: " + "; ".join(f"{u.class_name} ({u.reason})" for u in reported))
    if parts:
        out.append(Notice(found.path, "graph: " + "; ".join(parts), NoticeLevel.INFO))
    return out


@dataclass
class WorkerCall:
    """What :func:`run_in_worker` got back."""

    value: Any = None  # what the function returned, when it ran
    error: str | None = None  # why not: a one-line message
    kind: str = ""  # "timeout", "crash", "worker" (torch unusable), "internal", "memory"


def run_in_worker(function: str, args: dict[str, Any], config: Config, *, timeout: float | None = None) -> WorkerCall:
    """Run ``function`` (``"hooklint.<module>:<name>"``, called as ``name(worker,
    **args)``) in a graph worker: the process that may import torch and the
    user's code, with the same guard, memory limit and per-step time budget
    (``timeout``, default the configured one).  ``args`` and the result travel
    as JSON.  See :mod:`hooklint.graph.instances` for building the user's
    models there."""
    timeout = timeout if timeout is not None else config.timeout
    pool = WorkerPool(config.memory_limit, config.root, GraphRun())
    try:
        worker = pool.get()
        if worker is None:
            return WorkerCall(error=f"the worker could not import torch ({pool.fatal})", kind="worker")
        reply = worker.request({"kind": "call", "function": function, "args": args}, timeout)
    finally:
        pool.close()
    if reply.status != "ok" or reply.result is None:
        kind, message = _failure(reply, timeout)
        return WorkerCall(error=message, kind=kind)
    if "error" in reply.result:
        return WorkerCall(error=reply.result["error"], kind=reply.result.get("error_kind", "internal"))
    return WorkerCall(value=reply.result.get("value"))


__all__ = ["provide_graph_facts", "run_in_worker", "WorkerCall", "GraphRun", "torch_version", "INSTALL_HINT"]
