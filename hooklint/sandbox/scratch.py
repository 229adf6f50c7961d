"""Scratch folders of workers, on the parent's side.

Each worker gets ``$TMPDIR/hooklint-<pid of hooklint>-<random>``.  The parent
deletes it when the worker ends; a hooklint that was killed cannot, so each
run first deletes the folders whose owner process is gone.  (In the sandbox
the worker mounts a private tmpfs on its folder: what model code writes is
never on disk, and the folder left by a killed run is empty.)
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

PREFIX = "hooklint-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)-[A-Za-z0-9_]+$")
_cleaned: set[str] = set()


def make_scratch() -> str:
    clean_stale_scratch()
    return tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def clean_stale_scratch(folder: str | None = None) -> list[str]:
    """Delete the scratch folders of hooklint processes that no longer run
    (once per folder per run); the paths deleted."""
    folder = folder or tempfile.gettempdir()
    if folder in _cleaned:
        return []
    _cleaned.add(folder)
    removed = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    for entry in entries:
        match = _NAME.match(entry)
        if match is None or int(match.group(1)) == os.getpid() or _alive(int(match.group(1))):
            continue
        path = os.path.join(folder, entry)
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            removed.append(path)
    return removed
