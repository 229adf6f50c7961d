"""``hooklint.instrument()``: a session that observes hooks while it is active."""

from __future__ import annotations

import dataclasses
import threading
import traceback
from typing import Iterable

from hooklint.findings import Finding, Notice, NoticeLevel, Report
from hooklint.runtime.observation import Observation


class Session:
    """Observes hook registrations, forwards and backwards while active.

    ``findings`` are the observations as :class:`~hooklint.findings.Finding`
    values (origin ``runtime``), limited to the selected rules, without those
    silenced by ``# noqa`` on their line, sorted like ``hooklint check``'s.

    A session watches the thread that started it (hooks it saw registered are
    watched wherever they run); ``all_threads=True`` watches every thread.
    Sessions nest: an inner session sees what happens while it is active, and
    so does the outer one.
    """

    def __init__(self, select: Iterable[str] | None = None, ignore: Iterable[str] = (), *,
                 all_threads: bool = False, codes: Iterable[str] | None = None):
        from hooklint.config import resolve_codes, validate_selectors

        if codes is None:
            select_list = list(select) if select is not None else None
            ignore_list = list(ignore)
            if select_list is not None:
                validate_selectors(select_list, "select")
            validate_selectors(ignore_list, "ignore")
            codes = resolve_codes(select_list, [], ignore_list)
        self.codes = frozenset(codes)
        self.all_threads = all_threads
        self.active = False
        self._lock = threading.Lock()
        self._observations: dict[tuple, Observation] = {}
        self._notices: list[Notice] = []
        self._records: list = []
        self._stack: list | None = None
        self._started = False

    # -- lifecycle --------------------------------------------------------------
    def start(self) -> "Session":
        if self._started:
            raise RuntimeError("a hooklint session can only be started once")
        from hooklint.runtime.core import RUNTIME

        self._started = True
        self.active = True
        RUNTIME.attach(self)
        return self

    def stop(self) -> None:
        if not self.active:
            return
        from hooklint.runtime.core import RUNTIME

        try:
            RUNTIME.detach(self)  # still active: what is judged at the end is reported here
        finally:
            self.active = False

    def __enter__(self) -> "Session":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc is not None:
                self.observe_exception(exc)
                from hooklint.runtime.frames import drop_hooklint_frames

                drop_hooklint_frames(exc)  # the traceback goes from the user's call to the user's hook
        finally:
            self.stop()

    def watch(self, module=None) -> int:
        """Also observe hooks registered before this session started: those on
        ``module``, its submodules and their parameters, and the global module
        hooks.  Their findings point at the hook's definition (the registration was
        not seen).  Returns how many hooks were adopted."""
        if not self.active:
            raise RuntimeError("start the session before watching a module")
        from hooklint.runtime.core import RUNTIME
        from hooklint.runtime.frames import user_frame

        return RUNTIME.adopt(self, module, user_frame(1))

    def judge_pending(self) -> None:
        """Judge now what is otherwise judged after each backward and when the
        session ends (hooks registered again and again, HKL304; module hooks
        compiled code never called, HKL701)."""
        if self.active:
            from hooklint.runtime.core import RUNTIME

            RUNTIME.judge_pending()

    def observe_exception(self, exc: BaseException) -> None:
        """Map PyTorch's hook errors in ``exc`` (and its chain) to findings."""
        from hooklint.runtime.core import RUNTIME

        was_active = self.active
        self.active = True  # the exception may be examined after the session ended
        try:
            RUNTIME.explain_exception(exc, [self])
        except Exception as error:  # noqa: BLE001 - explaining must not hide the user's exception
            self._internal_error(error)
        finally:
            self.active = was_active

    # -- results ----------------------------------------------------------------
    @property
    def observations(self) -> list[Observation]:
        with self._lock:
            observations = list(self._observations.values())
        kept = []
        for obs in observations:
            if obs.code not in self.codes or _suppressed(obs):
                continue
            kept.append(obs)
        return sorted(kept, key=lambda o: (o.site.path, o.site.line, o.site.column, o.code, o.full_message))

    @property
    def findings(self) -> list[Finding]:
        found = [obs.finding() for obs in self.observations]
        return sorted((f for f in found if f is not None), key=Finding.sort_key)

    @property
    def notices(self) -> list[Notice]:
        with self._lock:
            return list(self._notices)

    def report(self) -> Report:
        return Report(findings=self.findings, notices=self.notices)

    def merge(self, observations: Iterable[Observation]) -> None:
        """Fold in observations made elsewhere (another process, another rank):
        the same problem at the same site is one finding, whose subjects and
        counts add up.  Observations are plain values (they pickle); their keys
        name code, source position and situation, never object identities."""
        for obs in observations:
            self._observe(obs)

    # -- called by the runtime -----------------------------------------------------
    def _observe(self, obs: Observation) -> None:
        with self._lock:
            known = self._observations.get(obs.key)
            if known is None:
                # a copy: the same observation goes to every session watching, and folding changes it
                self._observations[obs.key] = dataclasses.replace(obs, others=dict(obs.others))
            else:
                known.merge(obs)

    def _internal_error(self, exc: BaseException) -> None:
        where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
        with self._lock:
            self._notices.append(Notice("<runtime>", f"hooklint internal error{at}: {type(exc).__name__}: {exc} "
                                        "(please report it)", NoticeLevel.ERROR))


_noqa_cache: dict[str, object] = {}


def _suppressed(obs: Observation) -> bool:
    from hooklint.static.noqa import parse_noqa
    from hooklint.static.source import SourceError, read_source

    filename = obs.site.filename
    noqa = _noqa_cache.get(filename)
    if noqa is None:
        try:
            noqa = parse_noqa(read_source(filename))
        except (SourceError, OSError):
            noqa = parse_noqa("")
        _noqa_cache[filename] = noqa
    return noqa.suppresses(obs.code, obs.site.line)  # type: ignore[attr-defined]


def instrument(select: Iterable[str] | None = None, ignore: Iterable[str] = (), *,
               all_threads: bool = False) -> Session:
    """Observe hooks while the ``with`` block runs::

        with hooklint.instrument() as session:
            train_one_step(model, batch)
        for finding in session.findings:
            print(finding.code, finding.message)

    ``select``/``ignore`` take rule selectors as in the configuration (``HKL2``,
    ``HKL201``, ``ALL``); by default the rules enabled by default are reported.
    """
    return Session(select, ignore, all_threads=all_threads)
