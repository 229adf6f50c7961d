"""Friendly early messages while model code runs: an audit hook (PEP 578).

Only definitions of a model file are executed (:mod:`hooklint.graph.sanitize`),
but class bodies, decorators, constructors and ``forward`` are the user's code
and run for real.  While they run, an audit hook refuses the effects a linter
must never cause: writing, deleting or renaming files outside the scratch
folder, starting processes, forking, opening network connections;
``os._exit`` raises instead of ending the worker.  A refused operation raises
:class:`Blocked`, whose one-line message names what the model tried ("hooklint
does not let model code write to 'out.txt'"), and ends the analysis of that
one model.

This is not the boundary: code can switch an audit hook off (``gc`` finds it)
or go around it (``ctypes``, ``_posixsubprocess``).  The boundary is the
kernel sandbox every worker runs in (:mod:`hooklint.sandbox`: namespaces,
Landlock, seccomp, one process per file), which refuses the same effects
whatever the code does; tests/security checks it with the hook switched off.
The scratch folder is the worker's ``TMPDIR`` (and the usual cache
variables), a private tmpfs that vanishes with the worker.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_BLOCKED_EVENTS = {
    "os.remove": "delete a file",
    "os.rmdir": "delete a folder",
    "os.rename": "rename a file",
    "os.mkdir": "create a folder",
    "os.chmod": "change file permissions",
    "os.chown": "change file ownership",
    "os.truncate": "truncate a file",
    "os.link": "create a link",
    "os.symlink": "create a link",
    "os.utime": "change file times",
    "shutil.rmtree": "delete a folder",
    "shutil.move": "move a file",
    "os.fork": "fork the process",
    "os.forkpty": "fork the process",
    "os.system": "run a shell command",
    "os.exec": "execute a program",
    "os.posix_spawn": "start a process",
    "os.spawn": "start a process",
    "subprocess.Popen": "start a process",
    "pty.spawn": "start a process",
    "os.kill": "send a signal",
    "os.killpg": "send a signal",
    "socket.connect": "open a network connection",
    "socket.bind": "open a network socket",
    "socket.getaddrinfo": "look up a network address",
    "socket.sendto": "send network data",
    "urllib.Request": "open a URL",
}


class Blocked(PermissionError):
    """Model code tried something hooklint does not allow while analysing it."""


# Events on a path that are fine inside the scratch folder.
_SCRATCH_EVENTS = frozenset({"os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.chmod", "os.truncate",
                             "os.utime", "shutil.rmtree", "shutil.move"})


class Guard:
    def __init__(self, scratch: str | None = None) -> None:
        self.active = False
        self.scratch = os.path.realpath(scratch) + os.sep if scratch else None
        sys.addaudithook(self._audit)

    def _in_scratch(self, path: object) -> bool:
        if self.scratch is None or not isinstance(path, (str, bytes, os.PathLike)):
            return False
        # the folder itself too: a temporary file opened with O_TMPFILE names the folder
        return (os.path.realpath(os.fsdecode(path)) + os.sep).startswith(self.scratch)

    def _audit(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "open":
            path, mode, flags = (list(args) + [None, None, None])[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing and not self._in_scratch(path) and path != os.devnull:
                self._refuse(f"write to {path!r}")
            return
        what = _BLOCKED_EVENTS.get(event)
        if what is None or (event in _SCRATCH_EVENTS and args and self._in_scratch(args[0])):
            return
        target = f" ({args[0]!r})" if args and isinstance(args[0], (str, bytes, os.PathLike)) else ""
        self._refuse(what + target)

    @staticmethod
    def _refuse(what: str) -> None:
        raise Blocked(f"hooklint does not let model code {what} while analysing it")

    def _exit(self, status: int = 0) -> None:
        raise Blocked(f"hooklint does not let model code end the process (os._exit({status}))")

    @contextmanager
    def running_user_code(self) -> Iterator[None]:
        saved_exit = os._exit
        os._exit = self._exit  # type: ignore[assignment]
        self.active = True
        try:
            yield
        finally:
            self.active = False
            os._exit = saved_exit  # type: ignore[assignment]
