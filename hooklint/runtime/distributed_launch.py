"""Launching N ranks through PyTorch's own launcher, with hooklint in every rank.

The parent (``hooklint run --nproc N``, ``hooklint.testing.assert_hooks_ok_distributed``)
runs ``python -m torch.distributed.run --standalone --nproc-per-node N -m
hooklint.runtime.distributed_rank ...``: the launcher picks a free port for its
rendezvous (so parallel runs never collide) and starts the ranks; each rank
runs ``hooklint.runtime.distributed_rank``, which starts a session, runs the
program, and writes what it observed to ``rank<N>.pkl`` in a temporary folder
that only this launch uses.  The parent merges those files into one report.

Process hygiene: the launcher runs in a session of its own; every process of
the launch carries ``HOOKLINT_DIST_DIR=<that folder>`` in its environment.  On a
timeout, Ctrl-C or any error in the parent, the launcher and the ranks are
asked to stop (SIGTERM), then, after a grace period, every process that still
carries the folder in its environment is killed (SIGKILL), whichever process
group or session it moved to.  The ranks also die with the launcher
(``PR_SET_PDEATHSIG``), and the launcher with the parent.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.runtime.observation import Observation

# The parent of a launch never imports torch (it would cost seconds after the ranks are
# done): this module and what it imports stay free of it.

DIR_VAR = "HOOKLINT_DIST_DIR"
CODES_VAR = "HOOKLINT_DIST_CODES"
MODE_VAR = "HOOKLINT_DIST_MODE"
RANK_MODULE = "hooklint.runtime.distributed_rank"
EXIT_TIMEOUT = 124  # as timeout(1)
_PR_SET_PDEATHSIG = 1


@dataclasses.dataclass
class RankResult:
    """What one rank hands back to the parent (pickled to ``rank<N>.pkl``)."""

    rank: int
    world_size: int
    exit_code: int
    observations: list = dataclasses.field(default_factory=list)
    notices: list = dataclasses.field(default_factory=list)
    error: str = ""  # the helper's rank: the exception that stopped it, as text


@dataclasses.dataclass
class LaunchOutcome:
    exit_code: int  # the program's: the first rank's non-zero status, else 0
    results: dict[int, RankResult]
    launcher_code: int
    timed_out: bool = False
    missing: list[int] = dataclasses.field(default_factory=list)  # ranks that wrote no result


class LaunchError(Exception):
    """The launch itself could not be made (a usage problem, exit 2)."""


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent exits (Linux);
    nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _launcher_preexec() -> None:
    set_parent_death_signal(signal.SIGTERM)  # the launcher stops its ranks on SIGTERM


def launch(rank_args: list[str], nproc: int, *, mode: str, codes: Iterable[str], timeout: float | None = None,
           grace: float = 3.0, folder: str | None = None, extra_env: dict | None = None,
           capture: bool = False) -> LaunchOutcome:
    """Run ``hooklint.runtime.distributed_rank rank_args...`` on ``nproc`` local ranks.

    ``mode`` is "run" (a script or ``-m module`` as ``hooklint run`` runs it) or
    "check" (the testing helper's job, described in ``folder``/spec.pkl).  The
    program's output goes where the parent's goes (``capture``: to a pipe, returned
    nowhere; for tests of hooklint itself).  ``timeout`` stops the whole launch.
    """
    if nproc < 1:
        raise LaunchError(f"--nproc must be at least 1 (got {nproc})")
    own_folder = folder is None
    folder = folder or tempfile.mkdtemp(prefix="hooklint-dist-")
    env = dict(os.environ)
    env[DIR_VAR] = folder
    env[CODES_VAR] = ",".join(sorted(codes))
    env[MODE_VAR] = mode
    env.update(extra_env or {})
    # torch's launcher, with its stores on the loopback interface only
    command = [sys.executable, "-m", "hooklint.runtime.loopback_launcher", "--standalone",
               f"--nproc-per-node={nproc}", "--rdzv-endpoint=127.0.0.1:0", "--local-addr=127.0.0.1",
               "-m", RANK_MODULE, *rank_args]
    out = subprocess.DEVNULL if capture else None
    timed_out = False
    previous_handler = _on_sigterm_raise()
    try:
        proc = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_launcher_preexec,
                                stdout=out, stderr=out)
        try:
            launcher_code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop(proc, folder, grace)
            launcher_code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        except BaseException:  # Ctrl-C, or anything else: nothing of the launch may survive the parent
            stop(proc, folder, grace)
            raise
        finally:
            sweep(folder)
        results = read_results(folder)
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)
        if own_folder:
            shutil.rmtree(folder, ignore_errors=True)
    if launcher_code < 0:
        launcher_code = 128 - launcher_code  # killed by a signal: as a shell reports it
    world_size = max([r.world_size for r in results.values()] + [nproc])
    missing = [rank for rank in range(world_size) if rank not in results]
    if timed_out:
        exit_code = EXIT_TIMEOUT
    else:
        codes_by_rank = [results[r].exit_code for r in sorted(results) if results[r].exit_code != 0]
        exit_code = codes_by_rank[0] if codes_by_rank else (launcher_code if launcher_code != 0 else 0)
        if missing and exit_code == 0:
            exit_code = launcher_code or 1
    return LaunchOutcome(exit_code, results, launcher_code, timed_out, missing)


class Terminated(BaseException):
    """The parent received SIGTERM while a launch ran (it stops the launch, then exits 143)."""


def _raise_terminated(signum, frame):
    raise Terminated()


def _on_sigterm_raise():
    """While a launch runs, SIGTERM to the parent stops the launch first (main thread
    only: Python delivers signals there).  Returns the handler to put back, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except (ValueError, OSError):
        return None


def read_results(folder: str) -> dict[int, RankResult]:
    results: dict[int, RankResult] = {}
    for name in os.listdir(folder):
        if not (name.startswith("rank") and name.endswith(".pkl")):
            continue
        try:
            with open(os.path.join(folder, name), "rb") as f:
                result = pickle.load(f)
        except Exception:  # noqa: BLE001 - a rank killed while writing: as if it wrote nothing
            continue
        if isinstance(result, RankResult):
            results[result.rank] = result
    return results


def write_result(result: RankResult) -> None:
    """Atomically: the parent never reads half a file."""
    folder = os.environ[DIR_VAR]
    path = os.path.join(folder, f"rank{result.rank}.pkl")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(result, f)
    os.replace(tmp, path)


def stop(proc: subprocess.Popen, folder: str, grace: float = 3.0) -> None:
    """Stop the launcher and its ranks: SIGTERM to the launcher's group and to every
    marked process, then, after ``grace`` seconds, SIGKILL to whatever is left."""
    _signal_group(proc.pid, signal.SIGTERM)
    for pid in marked_processes(folder):
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not marked_processes(folder):
            break
        time.sleep(0.05)
    _signal_group(proc.pid, signal.SIGKILL)
    sweep(folder)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
        pass


def sweep(folder: str, rounds: int = 50) -> None:
    """SIGKILL every process that still carries this launch's folder in its
    environment (a rank's child the launcher did not know, a rank that outlived it)."""
    for _ in range(rounds):
        left = marked_processes(folder)
        if not left:
            return
        for pid in left:
            _signal(pid, signal.SIGKILL)
        time.sleep(0.02)


def marked_processes(folder: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``HOOKLINT_DIST_DIR=folder``;
    [] where /proc cannot be read."""
    needle = f"{DIR_VAR}={folder}".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    me = os.getpid()
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            if needle not in environ.split(b"\0"):
                continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[-1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z":
            found.append(int(entry))
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def merged(outcome: LaunchOutcome):
    """The observations of every rank folded into one list (ranks noted), and their
    notices, deduplicated."""
    world_size = max([r.world_size for r in outcome.results.values()] + [1])
    observations = observations_with_ranks({rank: r.observations for rank, r in outcome.results.items()},
                                           world_size)
    notices = []
    seen = set()
    for rank in sorted(outcome.results):
        for notice in outcome.results[rank].notices:
            key = (notice.path, notice.message)
            if key not in seen:
                seen.add(key)
                notices.append(notice)
    return observations, notices


# Observations made from every rank's data at once (the same on every rank): kept once.
CROSS_RANK_CODES = frozenset({"HKL601"})


def observations_with_ranks(per_rank: dict[int, Iterable[Observation]], world_size: int) -> list[Observation]:
    """Fold the observations of every rank into one list: the same problem at the same
    site is one observation, whose counts and subjects add up, and whose message
    says on which ranks it was seen.  A cross-rank observation (HKL601), made alike
    by every rank, is taken from the lowest rank that made it."""
    folded: dict[tuple, Observation] = {}
    ranks: dict[tuple, set[int]] = {}
    first_rank: dict[tuple, int] = {}
    for rank in sorted(per_rank):
        for obs in per_rank[rank]:
            known = folded.get(obs.key)
            ranks.setdefault(obs.key, set()).add(rank)
            if known is None:
                folded[obs.key] = dataclasses.replace(obs, others=dict(obs.others))
                first_rank[obs.key] = rank
            elif obs.code not in CROSS_RANK_CODES or first_rank[obs.key] == rank:
                known.merge(obs)
    out = []
    for key, obs in folded.items():
        if obs.code not in CROSS_RANK_CODES:
            obs.message += " " + ranks_text(sorted(ranks[key]), world_size)
        out.append(obs)
    return out


def ranks_text(ranks: list[int], world_size: int) -> str:
    if world_size <= 1:
        return ""
    if len(ranks) == world_size:
        return f"[every rank: {', '.join(map(str, ranks))}]"
    if len(ranks) == 1:
        return f"[rank {ranks[0]} of {world_size} only]"
    return f"[ranks {', '.join(map(str, ranks))} of {world_size}]"
