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
from typing import Any, Callable

from hooklint.config import Config
from hooklint.findings import Notice, NoticeLevel
from hooklint.graph.cache import GraphCache, content_key, file_key
from hooklint.graph.facts import FileFacts, ModelFacts
from hooklint.graph.plan import plan_digest, planned
from hooklint.sandbox import NOTICE_KEY, Status, incomplete_notice, refusal, worker_environment
from hooklint.sandbox.scratch import make_scratch
from hooklint.sandbox.zygote import KILL_GRACE, SCRATCH_VARIABLES
from hooklint.static.notebook import analysis_text
from hooklint.static.source import SourceError

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


# KILL_GRACE: how long past its own time budget a step may run before the process
# running it is killed (the worker's alarm cannot stop code that never returns to Python).
# With a child per file, the worker kills the child at KILL_GRACE; this parent
# kills the whole worker only if that did not happen this much later.
WORKER_GRACE = 10.0


@dataclass
class Reply:
    status: str  # "ok", "timeout", "crash"
    result: dict[str, Any] | None = None
    stage: str = ""
    detail: str = ""
    deps: dict[str, str] = field(default_factory=dict)  # the user's modules imported so far


class WorkerProcess:
    """One worker subprocess (:mod:`hooklint.graph.worker`): sandboxed, it forks
    a fresh child for each request; restarted by the pool after it dies."""

    # What runs in it; `hooklint check --verify` starts its own (hooklint.fix.verify_worker).
    module = "hooklint.graph.worker"

    def __init__(self, memory_limit: int, cwd: Path, sandbox: str = "auto"):
        self.memory_limit = memory_limit
        self.cwd = cwd
        self.sandbox_mode = sandbox
        self.proc: subprocess.Popen | None = None
        self.fd = -1
        self.buffer = b""
        self.stderr = None
        self.stderr_from = 0
        self.scratch: str | None = None
        self.torch = ""
        self.sandbox: Status | None = None  # what the worker's sandbox enforces, once ready
        self.refused: str | None = None  # `require` and an incomplete sandbox: why
        self.isolation = "fork"
        self.spent = False  # one request per process ("process" isolation) and it was used

    def start(self) -> str | None:
        """Start and wait until torch is imported; an error message if it cannot be."""
        read_fd, write_fd = os.pipe()
        self.stderr = tempfile.TemporaryFile()
        self.scratch = make_scratch()
        env = worker_environment(dict(os.environ), self.sandbox_mode)
        env.update({
            "HOOKLINT_RESULT_FD": str(write_fd),
            "HOOKLINT_SANDBOX": self.sandbox_mode,
            # the worker dies with this process (and checks it still runs once it can)
            "HOOKLINT_PARENT_PID": str(os.getpid()),
            # the only place model code may write; deleted when the worker ends
            "HOOKLINT_SCRATCH": self.scratch,
            "PYTHONDONTWRITEBYTECODE": "1",
            # one thread: the worker is one of many processes on small CI machines, and it forks
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            # no GPU, no downloads: model code gets neither while hooklint imports it
            "CUDA_VISIBLE_DEVICES": "",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        })
        for name, sub in SCRATCH_VARIABLES.items():
            env[name] = os.path.join(self.scratch, sub) if sub else self.scratch
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
        if message is not None and "sandbox" in message:
            self.sandbox = Status.from_dict(message["sandbox"])
        if message is None or message.get("event") != "ready":
            if message is not None and message.get("kind") == "sandbox":
                self.refused = refusal(self.sandbox.missing if self.sandbox else [message.get("message", "")])
            reason = message.get("message") if message else self._death()
            self.kill()
            return reason or "the worker did not start"
        self.torch = message.get("torch", "")
        self.isolation = message.get("isolation", "process")
        return None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, request: dict[str, Any], timeout: float) -> Reply:
        """Send a request; ``timeout`` applies to each step the worker announces."""
        assert self.proc is not None and self.proc.stdin is not None
        stage = ""
        deps: dict[str, str] = {}
        self.stderr_from = self._stderr_size()
        if self.isolation == "process":
            self.spent = True
        try:
            self.proc.stdin.write((json.dumps({**request, "budget": timeout}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return Reply("crash", detail=self._death())
        # the worker stops a child at timeout + KILL_GRACE; this process steps in only if it does not
        grace = KILL_GRACE + (WORKER_GRACE if self.isolation == "fork" else 0.0)
        deadline = time.monotonic() + timeout + grace
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
                deadline = time.monotonic() + timeout + grace
            elif event == "dep":
                deps[message.get("path", "")] = message.get("sha256", "")
            elif event == "result":
                return Reply("ok", result=message, stage=stage, deps=deps)
            elif event == "ended":  # the child for this request died or was stopped; the worker goes on
                if message.get("how") == "timeout":
                    return Reply("timeout", stage=stage, deps=deps)
                hint = self._stderr_hint()
                detail = message.get("detail", "ended")
                return Reply("crash", stage=stage, detail=f"{detail}{': ' + hint if hint else ''}", deps=deps)

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

    def _stderr_size(self) -> int:
        if self.stderr is None:
            return 0
        try:
            return os.fstat(self.stderr.fileno()).st_size
        except OSError:
            return 0

    def _stderr_hint(self) -> str:
        """The fatal error the worker printed during the current request."""
        if self.stderr is None:
            return ""
        try:
            self.stderr.seek(self.stderr_from)
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

    def __init__(self, memory_limit: int, cwd: Path, run: GraphRun, sandbox: str = "auto",
                 worker_class: type[WorkerProcess] = WorkerProcess):
        self.worker_class = worker_class
        self.memory_limit = memory_limit
        self.cwd = cwd
        self.run = run
        self.sandbox_mode = sandbox
        self.worker: WorkerProcess | None = None
        self.fatal: str | None = None
        self.refused: str | None = None  # `require` found the sandbox incomplete: the line to show
        self.sandbox: Status | None = None  # what the last worker's sandbox enforced

    def get(self) -> WorkerProcess | None:
        if self.fatal is not None:
            return None
        if self.worker is not None and self.worker.spent:
            self.worker.close()
        if self.worker is None or not self.worker.alive:
            if self.worker is not None:
                self.worker.close_pipes()
            worker = self.worker_class(self.memory_limit, self.cwd, self.sandbox_mode)
            self.run.workers_started += 1
            error = worker.start()
            self.sandbox = worker.sandbox or self.sandbox
            if error is not None:
                self.fatal = error
                self.refused = worker.refused
                return None
            self.worker = worker
        return self.worker

    def sandbox_notices(self, where: str) -> list[Notice]:
        """The refusal (``require``), or what the sandbox lacks (once per run)."""
        if self.refused is not None:
            return [Notice(where, self.refused, NoticeLevel.ERROR, once_key=NOTICE_KEY)]
        text = incomplete_notice(self.sandbox) if self.sandbox is not None else None
        return [Notice(where, text, NoticeLevel.WARNING, once_key=NOTICE_KEY)] if text else []

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
    # the sandbox can change facts (what model code may do while it is built)
    return GraphCache(folder, version, {"models": config.models, "memory-limit": config.memory_limit,
                                        "timeout": timeout, "pythonpath": config.pythonpath,
                                        "sandbox": config.sandbox})


def _failure(reply: Reply, timeout: float) -> tuple[str, str]:
    """(error kind, message) for a request the worker did not answer."""
    during = f" while {reply.stage}" if reply.stage else ""
    if reply.status == "timeout":
        return "timeout", (f"graph analysis timed out after {timeout:g} s{during}; the model code was stopped "
                           f"(raise `timeout` in [tool.hooklint] or pass --timeout)")
    return "crash", f"graph analysis failed: the model code crashed the worker ({reply.detail}){during}"


def _cached_file_facts_or_none(value: Any) -> "FileFacts | None":
    """Facts of a cached entry; None for a "not a candidate" entry or one that
    does not decode (another shape: a forged or damaged entry)."""
    try:
        found = _cached_file_facts(value)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None
    return found if isinstance(found, FileFacts) else None


def _cached_file_facts(value: dict[str, Any]) -> "FileFacts | str":
    return "not a candidate" if value.get("not_candidate") else FileFacts.from_dict(value)


def provide_graph_facts(files: list[str], config: Config, *, use_cache: bool = True, timeout: float | None = None,
                        run: GraphRun | None = None, announce: Callable[[list[str]], None] | None = None,
                        progress: Callable[[int, int, str], None] | None = None,
                        ) -> tuple[dict[str, FileFacts], list[Notice]]:
    """Graph facts for the files that can benefit, and what the user should know.

    ``announce(files)`` is called once, before the first of the user's files
    is imported (never when everything comes from the cache);
    ``progress(done, total, path)`` before each file is imported."""
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
        hit = cache.get(key, _cached_file_facts) if cache and key else None
        if hit == "not a candidate":
            run.not_candidates.append(path)
            continue
        if hit is not None:
            found = hit
            found.path = _display(path)
            found.cached = True
            facts[path] = found
            run.cached.append(path)
            candidates.append(path)
            continue
        try:
            text = analysis_text(path)
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
            found = _cached_file_facts_or_none(entry.value) if entry is not None else None
            if found is not None:
                found.path = _display(path)
                found.cached = True
                facts[path] = found
                run.cached.append(path)
                if key is not None and cache is not None and entry is not None:
                    # this content, next time (with the deps' digests of now: no tokenizing next time)
                    cache.put(key, entry.value, entry.deps, environment=entry.environment, stamps=entry.stamps)
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
        factory_models = cache.get(factory_key, lambda hit: [ModelFacts.from_dict(m) for m in hit])
    if todo or (config.models and factory_models is None):
        if announce is not None:
            announce([_display(path) for path in todo])
        pool = WorkerPool(config.memory_limit, config.root, run, config.sandbox)
        try:
            for done, path in enumerate(todo):
                if progress is not None:
                    progress(done, len(todo), _display(path))
                facts[path] = _analyse_file(pool, path, config, timeout, cache, run, planned_keys.get(path))
            if progress is not None and todo:
                progress(len(todo), len(todo), "")
            if config.models and factory_models is None:
                factory_models = _analyse_factories(pool, config, timeout, cache, factory_key, notices)
        finally:
            pool.close()
        where = _display(todo[0]) if todo else "configuration"
        notices.extend(pool.sandbox_notices(where))
        if pool.fatal is not None:
            if pool.refused is None:
                notices.append(Notice(where, f"graph analysis skipped: the worker could not import torch "
                                             f"({pool.fatal}); {INSTALL_HINT}; static rules only", NoticeLevel.INFO))
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
    notices.extend(_cached_info(list(facts.values())))
    return facts, _notebook_rows(notices, facts)


def _notebook_rows(notices: list[Notice], facts: dict[str, FileFacts]) -> list[Notice]:
    """The rows a notebook's notices name ("computed at the top level (line 4)")
    as cells and lines in them."""
    from dataclasses import replace

    from hooklint.static.checker import read_checkable
    from hooklint.static.notebook import is_notebook

    notebooks = {}
    for path, found in facts.items():
        if is_notebook(path):
            try:
                notebooks[found.path] = read_checkable(path)[1]
            except SourceError:
                continue
    if not notebooks:
        return notices
    return [replace(n, message=notebooks[n.path].describe_rows(n.message)) if n.path in notebooks else n
            for n in notices]


def cached_facts_for_text(path: str, data: bytes, config: Config, version: str | None = None) -> FileFacts | None:
    """The facts cached for ``path`` if it held ``data`` (an editor's buffer),
    or None.  Only reads the cache: never parses a model file, never starts the
    worker (the language server calls this on every change).  ``version``:
    torch's, when the caller knows it already."""
    version = version or torch_version()
    cache = _cache_for(config, version, True, config.timeout) if version is not None else None
    if cache is None:
        return None
    hit = cache.get(content_key(cache, path, data), _cached_file_facts)
    if hit is None or hit == "not a candidate":
        return None
    found = hit
    found.path = _display(path)
    found.cached = True
    return found


def _cached_info(found: list[FileFacts]) -> list[Notice]:
    """What a warm run says about the models whose facts came from the cache:
    their details were said when they were analysed, so one line for the run."""
    files = [item for item in found if item.cached and item.error is None and _model_parts(item)]
    if not files:
        return []
    names = ", ".join(item.path for item in files[:_LISTED_FILES])
    more = f" and {len(files) - _LISTED_FILES} more" if len(files) > _LISTED_FILES else ""
    return [Notice(files[0].path, f"graph: from the cache, models of {len(files)} file{'s' if len(files) != 1 else ''} "
                   f"({names}{more}) analysed without a full fx trace or not at all, as said when they were "
                   "analysed (`hooklint graph FILE` shows them; --no-cache analyses again)", NoticeLevel.INFO)]


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
    stamps: dict[str, list[int]] = {}
    if reply.status != "ok" or reply.result is None:
        kind, message = _failure(reply, timeout)
        found = FileFacts(display, error=message, error_kind=kind)
        deps = reply.deps
    else:
        data = dict(reply.result["facts"])
        data["path"] = display
        found = FileFacts.from_dict(data)
        deps = reply.result.get("deps") or reply.deps
        stamps = reply.result.get("imported") or {}
    if cache is not None and (found.error is None or found.error_kind in _CACHED_FAILURES):
        key = file_key(cache, path)
        for each in (key, plan_key):
            if each is not None:
                # an import failure may be a package that is not installed yet: installing one retries
                cache.put(each, found.to_dict(), deps, environment=found.error_kind == "import", stamps=stamps)
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
        cache.put(key, [m.to_dict() for m in models], reply.result.get("deps", {}),
                  stamps=reply.result.get("imported"))
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
    parts = _model_parts(found)
    if parts and not found.cached:  # a cached file's are folded into one line (_cached_info)
        out.append(Notice(found.path, "graph: " + "; ".join(parts), NoticeLevel.INFO))
    return out


def _model_parts(found: FileFacts) -> list[str]:
    """The informational remarks about one file's models (how each was analysed)."""
    parts = []
    for model in found.models:
        if model.method != "fx":
            parts.append(f"{model.label} analysed by running a forward (fx could not trace it: {model.fx_error})")
        elif not model.autograd:
            parts.append(f"{model.label} traced with fx only ({model.note})")
    reported = [u for u in found.unanalysed if u.reason != "defines no forward (a base class)" and u.kind != "timeout"]
    if reported:
        parts.append("not analysed: " + "; ".join(f"{u.class_name} ({u.reason})" for u in reported))
    return parts


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
    pool = WorkerPool(config.memory_limit, config.root, GraphRun(), config.sandbox)
    try:
        worker = pool.get()
        if worker is None:
            if pool.refused is not None:
                return WorkerCall(error=pool.refused, kind="sandbox")
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


__all__ = ["provide_graph_facts", "cached_facts_for_text", "run_in_worker", "WorkerCall", "GraphRun", "torch_version",
           "INSTALL_HINT"]
