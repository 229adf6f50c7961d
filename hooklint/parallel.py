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
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hooklint.engine import CheckOptions, check_one, display_path, ignored_codes, internal_error_result
from hooklint.files import Walker
from hooklint.findings import Notice, NoticeLevel
from hooklint.static.checker import FileResult, check_text, read_checkable
from hooklint.static.project import (
    APPLY_KEY,
    EXTERNAL_KEY,
    HOOKS_QUERY,
    MODULE_CLASS_QUERY,
    SELF_REMOVING_QUERY,
    ProjectIndex,
    parse_key,
    site_facts_of_source,
    summarize_source,
)
from hooklint.static.source import SourceError, read_regular_file

if TYPE_CHECKING:  # imported when a pool starts: a warm run needs neither
    from concurrent.futures import Future
    from multiprocessing.context import BaseContext

    from hooklint.results_cache import Record, StaticCache  # (hashing and the cache folder: runs with a cache)

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
        from hooklint.results_cache import cache_for

        options.extra["static_cache"] = cache_for(options.config, options.prefilter, options.codes,
                                                  ignore_noqa=options.ignore_noqa)


# ---------------------------------------------------------------- one file


@dataclasses.dataclass
class Outcome:
    index: int
    result: FileResult | None  # None: same bytes as the cached entry
    record: Record | None  # set when the result may be cached


# (index, path, expected sha256, read for the cache, answers about the project, summarize)
CheckTask = tuple[int, str, "str | None", bool, "dict[str, Any] | None", bool]


def check_task(index: int, path: str, options: CheckOptions, graph: Any, expected_sha: str | None,
               for_cache: bool, answers: dict[str, Any] | None = None, summarize: bool = False) -> Outcome:
    """Check one file; read it here (not in check_file) when the cache needs its hash."""
    if graph is not None or not for_cache:
        return Outcome(index, _guarded_check(path, options, graph, answers, summarize), None)
    from hooklint.results_cache import read_for_cache

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
                            target=options.config.target(), notebook=notebook, project_answers=answers,
                            summarize=summarize, noqa=not options.ignore_noqa)
    except Exception as exc:  # noqa: BLE001 - one file's failure must not end the run
        if os.environ.get("HOOKLINT_STRICT"):
            raise
        return Outcome(index, internal_error_result(path, exc), None)
    return Outcome(index, result, record)


def _guarded_check(path: str, options: CheckOptions, graph: Any, answers: dict[str, Any] | None = None,
                   summarize: bool = False) -> FileResult:
    try:
        return check_one(path, options, graph, project_answers=answers, summarize=summarize)
    except Exception as exc:  # noqa: BLE001 - one file's failure must not end the run
        if os.environ.get("HOOKLINT_STRICT"):
            raise
        return internal_error_result(path, exc)


@dataclasses.dataclass
class ScanOutcome:
    index: int
    summary: dict[str, Any] | None  # the file names one of the names: its call-graph summary
    record: Record | None  # set when read for the cache


# (index, path, names, read for the cache)
ScanTask = tuple[int, str, tuple[str, ...], bool]


def scan_task(index: int, path: str, names: tuple[str, ...], for_cache: bool) -> ScanOutcome:
    """The project pass's second phase for a file the prefilter ruled out: does
    its text name a function or class whose call sites matter?  If so, its
    summary (its call sites); it is never checked by the rules."""
    try:
        if for_cache:
            from hooklint.results_cache import read_for_cache

            data, record = read_for_cache(path)
        else:
            data, record = read_regular_file(path)[0], None
    except SourceError:
        return ScanOutcome(index, None, None)
    if not any(name in data for name in _encoded(names)):
        return ScanOutcome(index, None, record)
    try:
        text = read_checkable(path, data)[0]
        summary = summarize_source(path, text, display_path(path), names)
    except SourceError:
        summary = None
    except Exception:  # noqa: BLE001 - a summary that cannot be made only loses call sites
        if os.environ.get("HOOKLINT_STRICT"):
            raise
        summary = None
    return ScanOutcome(index, summary, record)


@lru_cache(maxsize=8)
def _encoded(names: tuple[str, ...]) -> tuple[bytes, ...]:
    """The names as bytes, once per search (every task of a round has the same names)."""
    return tuple(name.encode() for name in names)


@dataclasses.dataclass
class RefineOutcome:
    index: int
    facts: dict[tuple[int, int, str], list[Any] | None]  # by (line, column, via) of the site
    record: Record | None


# (index, path, positions of the sites, read for the cache)
RefineTask = tuple[int, str, tuple[tuple[int, int, str], ...], bool]


def refine_task(index: int, path: str, positions: tuple[tuple[int, int, str], ...], for_cache: bool) -> RefineOutcome:
    """The facts of some call sites of a file (the project pass asks for the
    sites on the chains of callers it follows; see ProjectIndex.missing)."""
    try:
        if for_cache:
            from hooklint.results_cache import read_for_cache

            data, record = read_for_cache(path)
        else:
            data, record = read_regular_file(path)[0], None
        facts = site_facts_of_source(path, read_checkable(path, data)[0], display_path(path), positions)
    except SourceError:
        return RefineOutcome(index, {}, None)
    except Exception:  # noqa: BLE001 - missing facts only lose call sites
        if os.environ.get("HOOKLINT_STRICT"):
            raise
        return RefineOutcome(index, {}, None)
    return RefineOutcome(index, facts or {}, record)


def names_from_roots(path: str, roots: list[str]) -> list[str]:
    # hooklint.static.core.imports loads the whole core (its package): only runs that ask about the project need it
    from hooklint.static.core.imports import names_from_roots as names

    return names(path, roots)


def project_roots(root: str, paths: Any, pythonpath: Any) -> list[str]:
    from hooklint.static.core.imports import project_roots as roots

    return roots(root, paths, pythonpath)


# ---------------------------------------------------------------- workers

_WORKER_STATE: dict[str, Any] = {}


def _init_worker(options: CheckOptions, graph_facts: dict[str, Any]) -> None:
    # Ctrl-C is the parent's to handle (one "interrupted" line), not a
    # traceback from every worker.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER_STATE["options"] = options
    _WORKER_STATE["graph"] = graph_facts


def _run_tasks(tasks: list[CheckTask]) -> list[Outcome]:
    options = _WORKER_STATE["options"]
    graph = _WORKER_STATE["graph"]
    return [check_task(i, path, options, graph.get(path), sha, for_cache, answers, summarize)
            for i, path, sha, for_cache, answers, summarize in tasks]


def _run_scans(tasks: list[ScanTask]) -> list[ScanOutcome]:
    return [scan_task(*task) for task in tasks]


def _run_refines(tasks: list[RefineTask]) -> list[RefineOutcome]:
    return [refine_task(*task) for task in tasks]


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


def _in_pool(tasks: list[tuple], jobs: int, options: CheckOptions, graph_facts: dict[str, Any],
             runner: Callable[[list], list]) -> tuple[list[Any], list[tuple]]:
    """Run tasks (tuples starting with index and path) in a pool; returns the
    outcomes and the tasks left unanswered when a worker died."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    # The biggest files first: a big file handed out last would leave the other workers idle at the end.
    # (Not for the project pass's text searches: they take no time worth balancing, and a stat per file did.)
    by_size = sorted(tasks, key=_file_size, reverse=True) if runner is _run_tasks else tasks
    per_task = max(1, min(MAX_FILES_PER_TASK, len(tasks) // (jobs * TASKS_PER_WORKER)))
    chunks = [by_size[i:i + per_task] for i in range(0, len(by_size), per_task)]
    outcomes: list[Any] = []
    pending: dict[Future, list] = {}
    lost: list[tuple] = []
    needed = {task[1] for task in tasks}
    graph = {p: g for p, g in graph_facts.items() if p in needed}
    if runner is _run_tasks:
        _load_before_fork(options)
    executor = ProcessPoolExecutor(max_workers=jobs, mp_context=_context(), initializer=_init_worker,
                                   initargs=(_portable(options), graph))
    try:
        for n, chunk in enumerate(chunks):
            try:
                pending[executor.submit(runner, chunk)] = chunk
            except BrokenProcessPool:
                # a worker died while tasks were still being handed out (at
                # its start, or on an early task): what was not handed out is
                # lost with it and goes round again
                for rest in chunks[n:]:
                    lost.extend(rest)
                break
        for future in as_completed(pending):
            try:
                outcomes.extend(future.result())
            except BrokenProcessPool:
                lost.extend(pending[future])
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return outcomes, lost


def _load_before_fork(options: CheckOptions) -> None:
    """The rules' modules and the prefilter's patterns, loaded here once: forked
    workers inherit them instead of each loading them again (0.1 s of CPU
    each).  Only for runs big enough for a pool, where some file nearly always
    passes the prefilter; a small run still loads only what it needs."""
    from hooklint.static.checker import load_rules

    load_rules(options.codes)


def _file_size(task: tuple) -> int:
    try:
        return os.stat(task[1]).st_size
    except OSError:
        return 0


def _resilient(tasks: list[tuple], jobs: int, options: CheckOptions, graph_facts: dict[str, Any],
               runner: Callable[[list], list], crashed: Callable[[tuple], Any]) -> list[Any]:
    """Run tasks in a pool; when a worker dies, run the unanswered tasks again
    in halves until the file that kills its process is alone (``crashed``
    gives its outcome)."""
    outcomes, lost = _in_pool(tasks, jobs, options, graph_facts, runner)
    if not lost:
        return outcomes
    if len(lost) == 1 and len(tasks) == 1:
        return [crashed(lost[0])]
    lost.sort()
    half = max(len(lost) // 2, 1)
    for part in (lost[:half], lost[half:]):
        if part:
            outcomes += _resilient(part, min(jobs, len(part)), options, graph_facts, runner, crashed)
    return outcomes


def _crashed_check(task: tuple) -> Outcome:
    index, path = task[0], task[1]
    shown = display_path(path)
    return Outcome(index, FileResult(shown, notices=[Notice(
        shown, "the static check of this file ended its process abruptly (a crash or the out-of-memory "
        "killer); the file was not checked; please report it", NoticeLevel.ERROR)]), None)


def _crashed_scan(task: tuple) -> ScanOutcome:
    return ScanOutcome(task[0], None, None)


def _crashed_refine(task: tuple) -> RefineOutcome:
    return RefineOutcome(task[0], {}, None)


def _run(tasks: list[tuple], options: CheckOptions, graph_facts: dict[str, Any], runner: Callable[[list], list],
         crashed: Callable[[tuple], Any]) -> list[Any]:
    """In worker processes when there are enough tasks and jobs, else here."""
    if options.jobs > 1 and len(tasks) >= MIN_PARALLEL_FILES:
        return _resilient(tasks, min(options.jobs, len(tasks)), options, graph_facts, runner, crashed)
    if runner is not _run_tasks:
        return runner(tasks)
    return [check_task(i, path, options, graph_facts.get(path), sha, for_cache, answers, summarize)
            for i, path, sha, for_cache, answers, summarize in tasks]


# ---------------------------------------------------------------- a run


def check_parallel(files: list[str], options: CheckOptions, graph_facts: dict[str, Any]) -> list[FileResult]:
    """Check ``files`` with ``options.jobs`` processes and the static cache when
    ``options.extra["static_cache"]`` is set, then run the project pass when
    there are several files; results in input order."""
    cache: StaticCache | None = options.extra.get("static_cache")
    # Even one file: a cached result may hold answers about other files that
    # this run must confirm (docs/developing.md, "Cross-file analysis").
    project = options.project
    results: list[FileResult | None] = [None] * len(files)
    records: dict[int, Record] = {}  # results to store in the cache
    tasks: list[CheckTask] = []
    for index, path in enumerate(files):
        expected = None
        if cache is not None and graph_facts.get(path) is None:
            hit, expected = cache.lookup(path)
            if hit is not None and (not project or not hit.parsed or hit.summary is not None):
                results[index] = hit
                continue
        tasks.append((index, path, expected, cache is not None, None, project))

    for outcome in _run(tasks, options, graph_facts, _run_tasks, _crashed_check):
        _settle(outcome, files, results, records, options, cache, project)

    done = [r for r in results if r is not None]
    assert len(done) == len(files), "a file without a result"
    scan_valid: set[int] = set()
    if project:
        project_pass = ProjectPass(files, done, records, options, cache, graph_facts)
        project_pass.run()
        scan_valid = project_pass.scan_valid
        options.extra["project_pass"] = project_pass.figures()
    if cache is not None:
        for index, record in records.items():
            cache.store(files[index], record, done[index], scanned=index in scan_valid)
        cache.save()
    if cache is not None and cache.error:
        done.append(FileResult(str(cache.folder), notices=[Notice(str(cache.folder), cache.error)]))
    for result in done:  # what the report needs, not the project pass's working data
        result.summary = result.asked = None
    return done


def _settle(outcome: Outcome, files: list[str], results: list[FileResult | None], records: dict[int, Record],
            options: CheckOptions, cache: StaticCache | None, project: bool = False) -> None:
    path = files[outcome.index]
    if outcome.result is None:  # unchanged bytes under a new stat signature
        assert cache is not None and outcome.record is not None
        reused = cache.reuse(path, outcome.record, need_summary=project)
        if reused is not None:
            results[outcome.index] = reused
            return
        # Nothing usable under those bytes: a context entry (no result), or a parsed result without the
        # summary the project pass needs.  Checked as a new file would be (summarized, and stored): a
        # result without its summary is a parsed file with no call sites, whose callers are never searched.
        outcome = check_task(outcome.index, path, options, None, None, True, None, project)
        if outcome.result is None:  # cannot happen without an expected hash; guarded all the same
            results[outcome.index] = _guarded_check(path, options, None, None, project)
            return
    results[outcome.index] = outcome.result
    if cache is not None and outcome.record is not None:
        records[outcome.index] = outcome.record


# Rounds of the text search for callers: each round follows one more link of
# a chain of callers that the files found so far show.
MAX_SCAN_ROUNDS = 4
# Names searched in one run at most (each one is a search of every file's text).
MAX_SEARCHED_NAMES = 128


class ProjectPass:
    """The second half of a run over several files (docs/developing.md,
    "Cross-file analysis").

    Every parsed file has its call-graph summary and the questions its rules
    asked about other files (with the answers a run on that file alone
    gives).  The summaries merge into a :class:`ProjectIndex`.  Files the
    prefilter ruled out can still call a hook-registering function: their
    text is searched for the names that could answer the questions (the
    function's or its class's name), and those that name one are summarized.
    Then every file whose questions get other answers from the whole project
    is checked again with those answers.
    """

    def __init__(self, files: list[str], results: list[FileResult], records: dict[int, Record],
                 options: CheckOptions, cache: StaticCache | None, graph_facts: dict[str, Any]):
        self.files = list(files)
        self.results = results
        self.records = records
        self.options = options
        self.cache = cache
        self.graph_facts = graph_facts
        self.scanned = 0  # files whose text was searched
        # files known not to name any of the cache's `scan_names` (stored with the flag)
        self.scan_valid: set[int] = set()
        self.summarized = 0  # of those, files summarized
        self.rechecked = 0
        self.refined = 0  # files whose call sites got their facts
        self.context_files = 0  # files of the project outside the run, searched for callers
        # context files the cache could not vouch for (changed or new): searched whatever it says
        self.unverified: set[int] = set()
        self.roots: list[str] = []
        # files the prefilter ruled out that call another file's wrapper: checked without it
        self.unfiltered: set[int] = set()
        self._searched: set[str] = set()  # names the files' text was searched for
        self._by_last: dict[str, list[int]] | None = None  # the run's files by the last part of their module name
        self._names_of: dict[int, set[str]] = {}  # the module names of a file, when asked
        self._path_parts: set[str] | None = None  # every folder name and stem of the run's paths

    def figures(self) -> dict[str, int]:
        return {"searched": self.scanned, "summarized": self.summarized, "refined": self.refined,
                "rechecked": self.rechecked, "context": self.context_files}

    def run(self) -> None:
        if not any(r.summary is not None or r.asked for r in self.results):
            return  # no file asked about the project nor has a summary: nothing to answer
        index = ProjectIndex()
        self.roots = roots = project_roots(str(self.options.config.root), self.options.paths,
                                           self.options.config.pythonpath)
        for i, result in enumerate(self.results):
            if result.summary is not None:
                index.add(result.summary, names_from_roots(self.files[i], roots))
        keys = {key for r in self.results if r.asked for key in r.asked}
        wrappers = index.wrapper_names()
        if not keys and not wrappers:
            return
        checked = len(self.files)
        self._add_context(index)
        index.settle_aliases()
        wrappers = index.wrapper_names()  # the project's other files can define them too
        try:
            self._answer(index, keys, wrappers, checked)
        finally:
            # the project's other files lent their call sites; they have no result of this run
            if self.cache is not None:
                for i in range(checked, len(self.files)):
                    if i in self.records:
                        self.cache.store_context(self.files[i], self.records[i], self.results[i].summary,
                                                 scanned=i in self.scan_valid)
            del self.files[checked:], self.results[checked:]
            for i in [i for i in self.records if i >= checked]:
                del self.records[i]
            self.scan_valid = {i for i in self.scan_valid if i < checked}
            self.unfiltered = {i for i in self.unfiltered if i < checked}

    def _add_context(self, index: ProjectIndex) -> None:
        """The project's files that the run does not name, as callers only:
        unchanged ones lend their cached summary (or the cache's word that
        they name none of the searched names); the others are searched like
        the files the prefilter ruled out."""
        root = self.options.project_root
        if root is None:
            return
        for path in project_files(root, self.options, self.files):
            i = len(self.files)
            self.files.append(path)
            lent = FileResult(display_path(path))
            valid, summary, parsed = self.cache.lent(path) if self.cache is not None else (False, None, False)
            if not valid:
                self.unverified.add(i)
            else:
                lent.parsed, lent.summary = parsed, summary
                if summary is not None:
                    index.add(summary, names_from_roots(path, self.roots))
            self.results.append(lent)
            self.context_files += 1

    def _search_for(self, index: ProjectIndex, keys: set[str], wrappers: set[str]) -> None:
        """Find the callers the questions in ``keys`` need."""
        questions = {parse_key(key) for key in keys
                     if not key.startswith((EXTERNAL_KEY, APPLY_KEY, HOOKS_QUERY, SELF_REMOVING_QUERY,
                                            MODULE_CLASS_QUERY))}
        applied = {key[len(APPLY_KEY):] for key in keys if key.startswith(APPLY_KEY)}
        # questions about the hooks a function of another file registers are answered from that file's
        # summary; the files that re-export it (a package's `__init__.py`) are found by its name
        callees = {key[len(HOOKS_QUERY):] for key in keys if key.startswith(HOOKS_QUERY)}
        # a hook object's class (or a hook function) of another file: the files defining it are summarized
        callees |= {key[len(SELF_REMOVING_QUERY):] for key in keys if key.startswith(SELF_REMOVING_QUERY)}
        self._find_classes(index, {key[len(MODULE_CLASS_QUERY):] for key in keys if key.startswith(MODULE_CLASS_QUERY)})
        hooks_names = {callee.rpartition(".")[2] for callee in self._find_definers(index, callees)}
        self._find_callers(index, questions, applied, wrappers, {n for n in hooks_names if n.isidentifier()})

    def _find_classes(self, index: ProjectIndex, classes: set[str]) -> None:
        """Summarize the files that define the classes ``classes`` name and their
        bases, base after base (a module class of another file: HKL303 asks
        whether it is an nn.Module and whether its `__call__` runs torch's).
        Found along the modules, as functions are: no text search."""
        known = set(classes)
        for _depth in range(6):
            if not classes:
                return
            self._find_definers(index, classes)
            bases: set[str] = set()
            for name in classes:
                qual = index.canonical(name)
                if qual is None or not index.is_class(qual):
                    continue
                module, local = index._split(qual, "classes")
                if module is not None:
                    bases.update(b for b in index.modules[module]["classes"][local]
                                 if b and not b.startswith(("torch.", "builtins.", "typing.", "abc.")))
            classes = bases - known
            known |= classes

    def _find_definers(self, index: ProjectIndex, callees: set[str]) -> set[str]:
        """Summarize the files that define or re-export the functions ``callees``
        name; return the callees that still need a search of every file's text.

        Resolving `pkg.mod.f` (:meth:`ProjectIndex.canonical`) reads only the
        modules whose names begin its dotted name, then those that begin the
        name an import there leads to: the files that name `f` and can be
        imported as one of those modules are the only ones that can change
        the answer.  Searching every file for `f` (`normal_`, `zeros_`)
        summarized a tenth of the corpus for nothing.  Callees of a class
        (a constructor, a method found along the bases) keep the text search."""
        if not callees:
            return set()
        done: set[int] = set()
        for _round in range(8):  # each round follows one more import
            wanted: dict[int, set[str]] = {}
            for callee in callees:
                head = callee.partition(".")[0]
                if not head.isidentifier():
                    continue  # `super:...`: found through the class
                name = callee.rpartition(".")[2]
                for dotted in index.canonical_steps(callee):
                    parts = dotted.split(".")
                    for i in range(1, len(parts)):
                        for file_index in self._files_of_module(".".join(parts[:i])):
                            result = self.results[file_index]
                            if file_index not in done and result.summary is None and not result.parsed \
                                    and not result.findings and not result.notices:
                                wanted.setdefault(file_index, set()).add(name)
            if not wanted:
                break
            done.update(wanted)
            tasks: list[ScanTask] = [(i, self.files[i], tuple(sorted(names)), self.cache is not None)
                                     for i, names in sorted(wanted.items())]
            self.scanned += len(tasks)
            for outcome in _run(tasks, self.options, self.graph_facts, _run_scans, _crashed_scan):
                if outcome.summary is not None:
                    self.results[outcome.index].summary = outcome.summary
                    index.add(outcome.summary, names_from_roots(self.files[outcome.index], self.roots))
                    index.settle_aliases()
                    self.summarized += 1
                if outcome.record is not None:
                    self.records[outcome.index] = outcome.record
        left = set()
        for callee in callees:
            qual = index.canonical(callee) if callee.partition(".")[0].isidentifier() else None
            if qual is not None and index.function(qual) is not None:
                continue  # a function: found along the modules
            if qual is None and callee.partition(".")[0].isidentifier() and not self._may_define(callee):
                continue  # no file of the run can be imported under its first name
            left.add(callee)
        return left

    def _files_of_module(self, module: str) -> list[int]:
        """The run's files that can be imported as ``module``.  A module name is
        the end of its file's path (`pkg/sub/mod.py`, `pkg/sub/__init__.py`):
        the files are indexed by their last name once, and only those ending in
        ``module``'s last part get their names worked out (a warm run must not
        compute them for every file)."""
        if self._by_last is None:
            by_last: dict[str, list[int]] = {}
            for i, path in enumerate(self.files):
                by_last.setdefault(_last_module_part(path), []).append(i)
            self._by_last = by_last
        return [i for i in self._by_last.get(module.rpartition(".")[2], ()) if module in self._module_names(i)]

    def _module_names(self, i: int) -> set[str]:
        names = self._names_of.get(i)
        if names is None:
            from hooklint.static.callgraph import module_name

            path = self.files[i]
            names = self._names_of[i] = {module_name(path), *names_from_roots(path, self.roots)}
        return names

    def _may_define(self, callee: str) -> bool:
        """Can a file of the run be imported under the first part of ``callee``?
        (`torch.nn.init.normal_` is no function of a project without `torch`.)
        A module's first part is one of the folders of its file's path, or its
        stem: when no path has it, no file can be."""
        if self._path_parts is None:
            parts: set[str] = set()
            for path in self.files:
                parts.update(os.path.abspath(path).split(os.sep))
                parts.add(os.path.basename(path).split(".", 1)[0])
            self._path_parts = parts
        return callee.partition(".")[0] in self._path_parts

    def _answer(self, index: ProjectIndex, keys: set[str], wrappers: set[str], checked: int) -> None:
        self._search_for(index, keys, wrappers)
        # Files that call a wrapper of another file (a helper that registers hooks for its caller): the
        # registrations are theirs, so they are checked by every rule, whatever their text.  That holds for a
        # file the prefilter admitted too: its first check knew nothing of the wrappers, so the rules that
        # follow a registration to its callers (HKL304: is the function called in a loop?) asked nothing then,
        # and the callers they need are searched only after this check.
        users: list[CheckTask] = []
        for i, result in enumerate(self.results[:checked]):
            if result.summary is None:
                continue
            key = EXTERNAL_KEY + result.summary["path"]
            answer = index.external_facts(result.summary["path"])
            if result.parsed and result.asked is not None and result.asked.get(key) == answer:
                continue  # checked with these very facts already (a cached result)
            if any(facts[0].get("regs") for facts in answer.values()):
                self.unfiltered.add(i)
                users.append((i, self.files[i], None, self.cache is not None, {key: answer}, True))
        self._check(users)
        if users:  # their questions name more callers to find
            self._search_for(index, {key for r in self.results if r.asked for key in r.asked}, wrappers)
        self._remember_searched()
        recheck: list[CheckTask] = []
        for _attempt in range(MAX_SCAN_ROUNDS):
            recheck = []
            for i, result in enumerate(self.results):
                if not result.asked:
                    continue
                answers = {key: _answer(index, key) for key in result.asked}
                if answers != result.asked:
                    if any(key.startswith(EXTERNAL_KEY) and any(facts[0].get("regs") for facts in answer.values())
                           for key, answer in answers.items() if answer):
                        self.unfiltered.add(i)  # it calls another file's wrapper: checked whatever its text
                    recheck.append((i, self.files[i], None, self.cache is not None, answers, True))
            if not self._refine(index):
                break
        self.rechecked = len(recheck)
        self._check(recheck)

    def _check(self, tasks: list[CheckTask]) -> None:
        """Check files again (with answers about the project); those in
        ``unfiltered`` without the text prefilter."""
        plain = [t for t in tasks if t[0] not in self.unfiltered]
        whole = [t for t in tasks if t[0] in self.unfiltered]
        for options, part in ((self.options, plain), (dataclasses.replace(self.options, prefilter=False), whole)):
            if not part:
                continue
            for outcome in _run(part, options, self.graph_facts, _run_tasks, _crashed_check):
                if outcome.result is not None:
                    _keep_site_facts(self.results[outcome.index].summary, outcome.result.summary)
                    self.results[outcome.index] = outcome.result
                    if outcome.record is not None:
                        self.records[outcome.index] = outcome.record
                    else:
                        self.records.pop(outcome.index, None)

    def _find_callers(self, index: ProjectIndex, questions: set[tuple[str, frozenset[str]]],
                      applied: set[str] = frozenset(), wrappers: set[str] = frozenset(),  # type: ignore[assignment]
                      names_too: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        pending = [i for i, r in enumerate(self.results) if r.summary is None and not r.parsed and not r.findings
                   and not r.notices]
        searched = self._searched
        known_names = set(self.cache.scan_names) if self.cache is not None else set()
        for _round in range(MAX_SCAN_ROUNDS):
            # the callers of the functions the questions are about first (and the files that re-export a
            # function whose hooks are asked about); then the class names of autograd Functions applied
            # elsewhere, and the wrappers that register for their callers
            ordered = [sorted((index.names_for(questions) | names_too) - searched),
                       sorted({qual.rpartition(".")[2] for qual in applied} - searched),
                       sorted(set(wrappers) - searched)]
            room = max(MAX_SEARCHED_NAMES - len(searched), 0)  # each name costs a pass over the text
            names = set()
            for group in ordered:
                for name in group:
                    if len(names) < room:
                        names.add(name)
            progress = self._refine(index)
            if not names or not pending:
                if progress:
                    continue
                break
            searched |= names
            # files the cache says name none of a superset of these names are skipped;
            # the others are searched for that whole superset, so that the cache can say so next time
            trusted = bool(known_names) and names <= known_names
            wanted = tuple(sorted(known_names if trusted else names))
            tasks: list[ScanTask] = []
            for i in pending:
                if trusted and i not in self.records and i not in self.unverified and self.cache is not None \
                        and self.cache.scanned(self.files[i]):
                    continue
                tasks.append((i, self.files[i], wanted, self.cache is not None))
            self.scanned += len(tasks)
            found = []
            for outcome in _run(tasks, self.options, self.graph_facts, _run_scans, _crashed_scan):
                result = self.results[outcome.index]
                if outcome.summary is not None:
                    result.summary = outcome.summary
                    index.add(outcome.summary, names_from_roots(self.files[outcome.index], self.roots))
                    index.settle_aliases()
                    found.append(outcome.index)
                else:
                    self.scan_valid.add(outcome.index)
                if outcome.record is not None:
                    self.records[outcome.index] = outcome.record
            self.summarized += len(found)
            hits = set(found)
            pending = [i for i in pending if i not in hits]
            self.scan_valid -= hits

    def _remember_searched(self) -> None:
        known_names = set(self.cache.scan_names) if self.cache is not None else set()
        if self.cache is not None and self._searched and not self._searched <= known_names:
            self.cache.scan_names = sorted(self._searched)

    def _refine(self, index: ProjectIndex) -> bool:
        """Compute the facts of the call sites the index found missing; False when none were."""
        if not index.missing:
            return False
        by_path = {display_path(path): i for i, path in enumerate(self.files)}
        wanted: dict[int, tuple[dict[str, Any], set[tuple[int, int, str]]]] = {}
        for summary, positions in index.missing.values():
            i = by_path.get(summary["path"])
            if i is not None:
                wanted[i] = (summary, positions)
        index.missing = {}
        tasks: list[RefineTask] = [(i, self.files[i], tuple(sorted(positions)), self.cache is not None)
                                   for i, (_summary, positions) in wanted.items()]
        self.refined += len(tasks)
        for outcome in _run(tasks, self.options, self.graph_facts, _run_refines, _crashed_refine):
            summary, positions = wanted[outcome.index]
            for site in summary["sites"]:
                key = (site[3], site[4], site[6])
                if key in positions:
                    # a file that changed meanwhile: its site counts as guarded (no reason)
                    site[5] = outcome.facts.get(key) or [None, None, False, True, None, {}, None]
            if outcome.record is not None and self.results[outcome.index].summary is summary:
                self.records[outcome.index] = outcome.record
        index.changed()
        return True


def _last_module_part(path: str) -> str:
    """The last part of the module names ``path`` can be imported as: its
    stem, or its folder's name for an ``__init__`` file."""
    stem = os.path.basename(path).split(".", 1)[0]
    return os.path.basename(os.path.dirname(os.path.abspath(path))) if stem == "__init__" else stem


def project_files(root: Path, options: CheckOptions, checked: list[str]) -> list[str]:
    """The Python files of the project at ``root`` (as ``hooklint check`` run
    there finds them: excludes and .gitignore apply) that are not in ``checked``;
    none when no checked file is inside the project."""
    root_text = str(root)
    inside = root_text.rstrip(os.sep) + os.sep
    for given in options.paths:
        folder = os.path.realpath(given)
        if os.path.isdir(folder) and (root_text + os.sep).startswith(folder.rstrip(os.sep) + os.sep):
            return []  # the run walked the whole project already (`hooklint check .` at its root)
    checked_abs = {os.path.abspath(path) for path in checked}
    if not any(p.startswith(inside) or p == root_text for p in checked_abs):
        return []
    cfg = options.config
    top = os.path.relpath(root_text)
    if top.startswith(".." + os.sep + ".."):
        top = root_text  # far above the working folder: absolute paths read better
    walker = Walker(root, cfg.excludes(), cfg.respect_gitignore)
    return [path for path in walker.files([top]) if os.path.abspath(path) not in checked_abs]


def _keep_site_facts(old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
    """The facts of call sites worked out for a file's previous summary (by
    the search for callers, or refined) carry over to the summary its new
    check made: the cache then holds them, and a warm run need not parse the
    file again for them."""
    if not old or not new or old.get("path") != new.get("path"):
        return
    known = {(site[3], site[4], site[6]): site[5] for site in old.get("sites", ()) if site[5] is not None}
    if not known:
        return
    for site in new.get("sites", ()):
        if site[5] is None:
            site[5] = known.get((site[3], site[4], site[6]))


def _answer(index: ProjectIndex, key: str) -> Any:
    if key.startswith(HOOKS_QUERY):
        return index.hooks_of(key[len(HOOKS_QUERY):])
    if key.startswith(SELF_REMOVING_QUERY):
        return index.self_removing(key[len(SELF_REMOVING_QUERY):])
    if key.startswith(MODULE_CLASS_QUERY):
        return index.module_class(key[len(MODULE_CLASS_QUERY):])
    if key.startswith(EXTERNAL_KEY):
        return index.external_facts(key[len(EXTERNAL_KEY):])
    if key.startswith(APPLY_KEY):
        return index.apply_sites(key[len(APPLY_KEY):])
    qual, needed = parse_key(key)
    found = index.first_reason(qual, needed)
    return None if found is None else found.to_list()
