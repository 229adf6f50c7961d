"""``-j N``: checking files in worker processes, and the cache of static results.

The parent process answers what it can from the cache (``hooklint.results_cache``)
and hands the rest to a pool of worker processes, a few files per task.  Each
worker reads, prefilters, parses and checks its files and sends back plain
results; the parent puts them back in input order, so the output is the same
byte for byte whatever ``-j`` is (formatters sort findings anyway).

A worker that dies (a crash in the interpreter, the out-of-memory killer)
breaks the pool; the files it left unanswered are then checked one by one,
each in a fresh process, and a file that kills its process again gets an
error notice while every other file is still checked.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

from hooklint.engine import CheckOptions, check_one, display_path, ignored_codes, internal_error_result
from hooklint.findings import Notice, NoticeLevel
from hooklint.results_cache import Record, StaticCache, cache_for, read_for_cache
from hooklint.static.checker import FileResult, check_text, read_checkable
from hooklint.static.source import SourceError

if TYPE_CHECKING:  # imported when a pool starts: a warm run needs neither
    from concurrent.futures import Future
    from multiprocessing.context import BaseContext

# Below this many files to check, starting worker processes costs more than it saves.
MIN_PARALLEL_FILES = 16
# Files per task: large enough that the parent's bookkeeping stays small
# (measured: 4 files per task cost the parent 0.2 s of CPU over the corpus,
# 32 files 0.1 s), small enough that each worker gets several tasks.
MAX_FILES_PER_TASK = 32
TASKS_PER_WORKER = 8


def default_jobs() -> int:
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def job_count(text: str) -> int:
    if text == "auto":
        return default_jobs()
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of jobs (or `auto`)") from None
    if value < 1:
        raise argparse.ArgumentTypeError("the number of jobs must be at least 1")
    return value


def add_check_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--jobs", type=job_count, default=None, metavar="N",
                        help="Check files in N processes (default: `auto`, the number of cores). "
                             "The output does not depend on N.")


def configure_check(options: CheckOptions, args: argparse.Namespace) -> None:
    options.jobs = args.jobs or default_jobs()
    # `--diff` promises to change nothing on disk, the cache folder included
    if options.config.cache and not getattr(args, "no_cache", False) and not getattr(args, "diff", False):
        options.extra["static_cache"] = cache_for(options.config, options.prefilter, options.codes)


# ---------------------------------------------------------------- one file


@dataclasses.dataclass
class Outcome:
    index: int
    result: FileResult | None  # None: same bytes as the cached entry
    record: Record | None  # set when the result may be cached


def check_task(index: int, path: str, options: CheckOptions, graph: Any, expected_sha: str | None,
               for_cache: bool) -> Outcome:
    """Check one file; read it here (not in check_file) when the cache needs its hash."""
    if graph is not None or not for_cache:
        return Outcome(index, _guarded_check(path, options, graph), None)
    try:
        data, record = read_for_cache(path)
    except SourceError:
        return Outcome(index, _guarded_check(path, options, None), None)  # reports why it cannot be read
    if expected_sha is not None and record.sha256 == expected_sha:
        return Outcome(index, None, record)
    try:
        text, notebook = read_checkable(path, data)
    except SourceError:
        return Outcome(index, _guarded_check(path, options, None), None)  # reports the decoding problem
    try:
        result = check_text(path, text, options.codes, display_path=display_path(path),
                            ignored=ignored_codes(path, options), prefilter=options.prefilter,
                            target=options.config.target(), notebook=notebook)
    except Exception as exc:  # noqa: BLE001 - one file's failure must not end the run
        if os.environ.get("HOOKLINT_STRICT"):
            raise
        return Outcome(index, internal_error_result(path, exc), None)
    return Outcome(index, result, record)


def _guarded_check(path: str, options: CheckOptions, graph: Any) -> FileResult:
    try:
        return check_one(path, options, graph)
    except Exception as exc:  # noqa: BLE001 - one file's failure must not end the run
        if os.environ.get("HOOKLINT_STRICT"):
            raise
        return internal_error_result(path, exc)


# ---------------------------------------------------------------- workers

_WORKER_STATE: dict[str, Any] = {}


def _init_worker(options: CheckOptions, graph_facts: dict[str, Any]) -> None:
    # Ctrl-C is the parent's to handle (one "interrupted" line), not a
    # traceback from every worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER_STATE["options"] = options
    _WORKER_STATE["graph"] = graph_facts


def _run_tasks(tasks: list[tuple[int, str, str | None, bool]]) -> list[Outcome]:
    options = _WORKER_STATE["options"]
    graph = _WORKER_STATE["graph"]
    return [check_task(i, path, options, graph.get(path), sha, for_cache) for i, path, sha, for_cache in tasks]


def _context() -> BaseContext:
    """fork where it is safe (no other thread holds a lock the child would
    inherit): no re-import, so a worker starts in milliseconds."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def _portable(options: CheckOptions) -> CheckOptions:
    """What a worker needs: no callables, no cache object."""
    return dataclasses.replace(options, graph_provider=None, extra={})


def _in_pool(tasks: list[tuple[int, str, str | None, bool]], jobs: int, options: CheckOptions,
             graph_facts: dict[str, Any]) -> tuple[list[Outcome], list[tuple[int, str, str | None, bool]]]:
    """Run tasks in a pool; returns the outcomes and the tasks left unanswered
    when a worker died."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    # The biggest files first: a big file handed out last would leave the other workers idle at the end.
    by_size = sorted(tasks, key=_file_size, reverse=True)
    per_task = max(1, min(MAX_FILES_PER_TASK, len(tasks) // (jobs * TASKS_PER_WORKER)))
    chunks = [by_size[i:i + per_task] for i in range(0, len(by_size), per_task)]
    outcomes: list[Outcome] = []
    pending: dict[Future, list] = {}
    lost: list[tuple[int, str, str | None, bool]] = []
    needed = {path for _i, path, _s, _c in tasks}
    graph = {p: g for p, g in graph_facts.items() if p in needed}
    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=_context(), initializer=_init_worker,
                                   initargs=(_portable(options), graph))
    try:
        for chunk in chunks:
            pending[executor.submit(_run_tasks, chunk)] = chunk
        for future in as_completed(pending):
            try:
                outcomes.extend(future.result())
            except BrokenProcessPool:
                lost.extend(pending[future])
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return outcomes, lost


def _file_size(task: tuple[int, str, str | None, bool]) -> int:
    try:
        return os.stat(task[1]).st_size
    except OSError:
        return 0


def _resilient(tasks: list[tuple[int, str, str | None, bool]], jobs: int, options: CheckOptions,
               graph_facts: dict[str, Any]) -> list[Outcome]:
    """Run tasks in a pool; when a worker dies, run the unanswered tasks again
    in halves until the file that kills its process is alone."""
    outcomes, lost = _in_pool(tasks, jobs, options, graph_facts)
    if not lost:
        return outcomes
    if len(lost) == 1 and len(tasks) == 1:
        index, path = lost[0][0], lost[0][1]
        shown = display_path(path)
        return [Outcome(index, FileResult(shown, notices=[Notice(
            shown, "the static check of this file ended its process abruptly (a crash or the out-of-memory "
            "killer); the file was not checked; please report it", NoticeLevel.ERROR)]), None)]
    lost.sort()
    half = max(len(lost) // 2, 1)
    for part in (lost[:half], lost[half:]):
        if part:
            outcomes += _resilient(part, min(jobs, len(part)), options, graph_facts)
    return outcomes


# ---------------------------------------------------------------- a run


def check_parallel(files: list[str], options: CheckOptions, graph_facts: dict[str, Any]) -> list[FileResult]:
    """Check ``files`` with ``options.jobs`` processes and the static cache when
    ``options.extra["static_cache"]`` is set; results in input order."""
    cache: StaticCache | None = options.extra.get("static_cache")
    results: list[FileResult | None] = [None] * len(files)
    tasks: list[tuple[int, str, str | None, bool]] = []
    for index, path in enumerate(files):
        expected = None
        if cache is not None and graph_facts.get(path) is None:
            hit, expected = cache.lookup(path)
            if hit is not None:
                results[index] = hit
                continue
        tasks.append((index, path, expected, cache is not None))

    if options.jobs > 1 and len(tasks) >= MIN_PARALLEL_FILES:
        outcomes = _resilient(tasks, min(options.jobs, len(tasks)), options, graph_facts)
    else:
        outcomes = [check_task(i, path, options, graph_facts.get(path), sha, for_cache)
                    for i, path, sha, for_cache in tasks]

    for outcome in outcomes:
        path = files[outcome.index]
        if outcome.result is None:  # unchanged bytes under a new stat signature
            assert cache is not None and outcome.record is not None
            reused = cache.reuse(path, outcome.record)
            results[outcome.index] = reused if reused is not None else _guarded_check(path, options, None)
            continue
        results[outcome.index] = outcome.result
        if cache is not None and outcome.record is not None:
            cache.store(path, outcome.record, outcome.result)
    if cache is not None:
        cache.save()
    done = [r for r in results if r is not None]
    assert len(done) == len(files), "a file without a result"
    if cache is not None and cache.error:
        done.append(FileResult(str(cache.folder), notices=[Notice(str(cache.folder), cache.error)]))
    return done
