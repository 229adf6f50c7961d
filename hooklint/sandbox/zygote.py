"""One fresh process per file: the worker forks, the child runs the file.

The worker (the *zygote*) imports torch and hooklint's analysis once and
never runs model code.  For each request it forks a child that confines
itself further (:func:`~hooklint.sandbox.confine.confine_child`), handles
that one request with the zygote's clean state, and exits: whatever a model
file changes (``torch.set_default_dtype``, a patched ``nn.Linear.forward``,
a module in ``sys.modules``, files in scratch) dies with it, so no file can
change another file's facts or proofs.

The child writes its events to a pipe of its own; the zygote relays the
well-formed ones (``stage``, ``dep``, then one ``result``) to the parent and
enforces the child's deadline with SIGKILL: the step budget plus a grace
after each ``stage`` event, and at most :data:`TOTAL_STEPS` budgets in all
(a child cannot keep itself alive by announcing stages).  When the child
ends without a result, the zygote sends ``{"event": "ended", "how":
"crash" | "timeout", "detail": ...}``.

Where forking is not safe (not Linux, or the zygote has threads after
importing torch), the worker handles one request itself and exits: one
process per file.
"""

from __future__ import annotations

import gc
import json
import os
import select
import shutil
import signal
import sys
import time
from typing import Any, Callable, Iterable

from hooklint.sandbox.confine import Status, confine_child

KILL_GRACE = 5.0  # past a step's own budget (code the in-child alarm cannot stop)
TOTAL_STEPS = 50  # a child's wall-clock and CPU time: at most this many step budgets
MAX_MESSAGE = 256 * 1024 * 1024  # bytes of one event line
_RELAYED = frozenset({"stage", "dep", "result"})
# The environment variables that point libraries at a place to write.
SCRATCH_VARIABLES = {"TMPDIR": "", "XDG_CACHE_HOME": "cache", "HF_HOME": "huggingface", "TORCH_HOME": "torch",
                     "MPLCONFIGDIR": "matplotlib"}

Handler = Callable[[dict[str, Any], Callable[[dict[str, Any]], None]], dict[str, Any]]


def isolation_for(torch_threads: int) -> str:
    """"fork" (a child per request) or "process" (this process handles one)."""
    wanted = os.environ.get("HOOKLINT_ISOLATION", "")
    if wanted in ("fork", "process"):
        return wanted if (wanted == "process" or hasattr(os, "fork")) else "process"
    if not sys.platform.startswith("linux") or torch_threads > 1:
        return "process"
    return "fork"


def use_scratch(folder: str) -> None:
    """Point the usual cache and temporary-folder variables at ``folder``."""
    import tempfile

    os.environ["HOOKLINT_SCRATCH"] = folder
    for name, sub in SCRATCH_VARIABLES.items():
        os.environ[name] = os.path.join(folder, sub) if sub else folder
    tempfile.tempdir = None


def serve(requests: Iterable[str], send: Callable[[dict[str, Any]], None], handle: Handler, *, status: Status,
          scratch: str, isolation: str, close_in_child: tuple[int, ...],
          prepare: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Answer each request line (JSON) with ``handle`` in a fresh child.
    ``prepare(request)`` runs here first: work that runs no user code and that
    later children can reuse (it is inherited by the fork)."""
    # Out of the collector's sight from now on: in a child, a full collection would
    # write to every object torch made here and copy each page it is on (0.1 to 0.15 s
    # of a small model file's analysis); frozen, the objects are shared as forked.
    gc.freeze()
    count = 0
    for line in requests:
        request = json.loads(line)
        budget = float(request.get("budget", 60.0))
        if prepare is not None:
            prepare(request)
        if isolation == "process":
            use_scratch(scratch)
            confine_child(status, scratch, _cpu_seconds(budget), os.getppid())
            send({"event": "result", **_handled(handle, request, send)})
            return
        count += 1
        folder = os.path.join(scratch, f"file-{count}")
        os.mkdir(folder, 0o700)
        try:
            _fork_and_relay(request, send, handle, status, folder, budget, close_in_child)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _handled(handle: Handler, request: dict[str, Any], send) -> dict[str, Any]:
    """The reply, with ``imported``: every file a module imported for this request
    came from, as ``[mtime_ns, size]`` (the installed packages the facts depend
    on, beyond torch and hooklint, which the zygote had imported already)."""
    before = set(sys.modules)
    reply = handle(request, send)
    imported: dict[str, list[int]] = {}
    for name in set(sys.modules) - before:
        origin = getattr(sys.modules.get(name), "__file__", None)
        if not isinstance(origin, str):
            continue
        try:
            info = os.stat(origin)
        except OSError:
            continue
        imported[os.path.realpath(origin)] = [info.st_mtime_ns, info.st_size]
    return {**reply, "imported": imported}


def _cpu_seconds(budget: float) -> int:
    return int(budget * TOTAL_STEPS) + 1


def _fork_and_relay(request: dict[str, Any], send, handle: Handler, status: Status, folder: str, budget: float,
                    close_in_child: tuple[int, ...]) -> None:
    read_fd, write_fd = os.pipe()
    zygote = os.getpid()
    # What this process made since the last fork (the parsing of `prepare`), collected
    # and then out of the collector's sight too (see `serve`); cheap: frozen objects are not traversed
    gc.collect()
    gc.freeze()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child(request, write_fd, handle, status, folder, budget, zygote, close_in_child)
    os.close(write_fd)
    try:
        _relay(pid, read_fd, send, budget)
    finally:
        os.close(read_fd)


def _child(request: dict[str, Any], fd: int, handle: Handler, status: Status, folder: str, budget: float,
           zygote: int, close_in_child: tuple[int, ...]) -> None:
    code = 0
    try:
        for inherited in close_in_child:  # the parent's channels: this child has its own pipe only
            try:
                os.close(inherited)
            except OSError:
                pass
        out = os.fdopen(fd, "w", encoding="utf-8", buffering=1)

        def send(message: dict[str, Any]) -> None:
            out.write(json.dumps(message, ensure_ascii=False) + "\n")
            out.flush()

        use_scratch(folder)
        confine_child(status, folder, _cpu_seconds(budget), zygote)
        send({"event": "result", **_handled(handle, request, send)})
    except BaseException:  # noqa: BLE001 - the zygote reports a child that ends without a result
        code = 70
    finally:
        try:
            sys.stderr.flush()
        finally:
            os._exit(code)


def _relay(pid: int, fd: int, send: Callable[[dict[str, Any]], None], budget: float) -> None:
    started = time.monotonic()
    hard_deadline = started + budget * TOTAL_STEPS + KILL_GRACE
    deadline = min(started + budget + KILL_GRACE, hard_deadline)
    buffer = b""
    answered = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            _kill(pid)
            if not answered:
                send({"event": "ended", "how": "timeout"})
            return
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            break
        buffer += chunk
        if len(buffer) > MAX_MESSAGE and b"\n" not in buffer:
            _kill(pid)
            send({"event": "ended", "how": "crash",
                  "detail": f"sent a message larger than {MAX_MESSAGE // (1024 * 1024)} MiB"})
            return
        while b"\n" in buffer:
            line, _, buffer = buffer.partition(b"\n")
            message = _parse(line)
            if message is None or answered:
                continue
            if message["event"] == "stage":
                deadline = min(time.monotonic() + budget + KILL_GRACE, hard_deadline)
            send(message)
            answered = message["event"] == "result"
    # the pipe is closed: the child is ending (or closed it and goes on: it gets until its deadline)
    code = _wait(pid, KILL_GRACE if answered else max(0.0, deadline - time.monotonic()))
    if not answered:
        send({"event": "ended", "how": "crash", "detail": describe_exit(code)})


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    if isinstance(message, dict) and message.get("event") in _RELAYED:
        return message
    return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _wait(pid: int, within: float) -> int | None:
    """The child's wait status; killed first if it is still running after ``within`` s."""
    end = time.monotonic() + within
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        if time.monotonic() >= end:
            os.kill(pid, signal.SIGKILL)
            _done, status = os.waitpid(pid, 0)
            return status
        time.sleep(0.01)


def describe_exit(status: int | None) -> str:
    """"killed by SIGSEGV", "exited with status 3"; the wording of
    :meth:`hooklint.graph.provider.WorkerProcess._death`."""
    if status is None:
        return "ended"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        if number == signal.SIGXCPU:
            return f"killed by {name}: it used all the CPU time allowed"
        if number == getattr(signal, "SIGSYS", -1):
            return f"killed by {name}: a system call the sandbox forbids"
        return f"killed by {name}"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return "ended"
