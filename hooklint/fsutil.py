"""File writes that never leave a half-written file behind, and never
overwrite a file that changed since it was read."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the comparison still guards
    fcntl = None  # type: ignore[assignment]


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8", newline: str | None = "") -> None:
    """:func:`atomic_write_bytes` of ``text`` (``newline=None``: line ends as the platform writes them)."""
    if newline is None:
        text = text.replace("\n", os.linesep)
    atomic_write_bytes(path, text.encode(encoding))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, then rename it over ``path``.

    The rename is atomic on POSIX, so readers see the old or the new content,
    never a mix; the original file's permission bits are kept, and missing
    parent folders are created.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        # mkstemp creates 0600; a new file gets what open() would give it
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".hooklint-tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class FileChanged(Exception):
    """The file no longer holds the bytes it was read with: someone saved it
    in between.  Nothing was written."""


@contextmanager
def folder_lock(path: str) -> Iterator[None]:
    """An exclusive advisory lock on ``path``'s folder, held while a file of
    it is compared and replaced.

    The folder, not the file: the file's inode changes with every atomic
    replacement, so a lock on it would not exclude a second hooklint that
    opened the old inode.  Other hooklint runs (``--fix``, ``--add-noqa``,
    the language server) take the same lock; editors do not, which is why
    the content is compared under the lock right before it is replaced."""
    folder = os.path.dirname(path) or "."
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def replace_file_bytes(path: str | Path, data: bytes, expected: bytes) -> None:
    """Replace the content of the file at ``path`` (through symlinks) with
    ``data``, only if it still holds ``expected``; raise :class:`FileChanged`
    otherwise.

    The file keeps what the user would notice losing: its owner and group,
    permission bits, extended attributes (ACLs and labels included, where the
    process may set them), and its hard links.  A file with one link is
    replaced atomically (a temporary file beside it, renamed over it);
    readers see the old or the new bytes, never a mix.  A file with several
    links, or one whose owner this process could not give to a new file, is
    rewritten in place so every link sees the change, with a copy of the old
    bytes beside it until the new ones are on disk.

    The remaining window is between the last comparison and the rename
    (microseconds): an editor that saves in exactly that instant is not seen.
    """
    real = os.path.realpath(path)
    with folder_lock(real):
        before = os.stat(real)
        if _read_all(real) != expected:
            raise FileChanged(real)
        if before.st_nlink > 1 or not _may_give(before):
            _rewrite_in_place(real, data, expected, before)
        else:
            _replace_atomically(real, data, before)


def _read_all(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _may_give(st: os.stat_result) -> bool:
    """Can a new file of this process get ``st``'s owner and group?"""
    if not hasattr(os, "geteuid"):
        return True
    if os.geteuid() == 0:
        return True
    return st.st_uid == os.geteuid() and (st.st_gid == os.getegid() or st.st_gid in os.getgroups())


def _same_file_state(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_ino, a.st_dev, a.st_size, a.st_mtime_ns) == (b.st_ino, b.st_dev, b.st_size, b.st_mtime_ns)


def _replace_atomically(real: str, data: bytes, before: os.stat_result) -> None:
    folder = os.path.dirname(real) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(real)}.", suffix=".hooklint-tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            if hasattr(os, "fchown") and (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(handle.fileno(), before.st_uid, before.st_gid)
            os.fchmod(handle.fileno(), before.st_mode & 0o7777)  # after chown, which may clear set-id bits
            _copy_xattrs(real, handle.fileno())
        # the last look before the rename: an editor's save since our read
        # shows as another inode (save by rename) or another size or mtime
        if not _same_file_state(os.stat(real), before):
            raise FileChanged(real)
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_folder(folder)


def _rewrite_in_place(real: str, data: bytes, expected: bytes, before: os.stat_result) -> None:
    folder = os.path.dirname(real) or "."
    fd, backup = tempfile.mkstemp(prefix=f".{os.path.basename(real)}.", suffix=".hooklint-backup", dir=folder)
    with os.fdopen(fd, "wb") as handle:
        handle.write(expected)
        handle.flush()
        os.fsync(handle.fileno())
    with open(real, "r+b") as handle:
        if not _same_file_state(os.fstat(handle.fileno()), before) or handle.read() != expected:
            os.unlink(backup)
            raise FileChanged(real)
        handle.seek(0)
        handle.write(data)
        handle.truncate()
        handle.flush()
        os.fsync(handle.fileno())
    os.unlink(backup)


def _copy_xattrs(source: str, fd: int) -> None:
    if not hasattr(os, "listxattr"):
        return
    try:
        names = os.listxattr(source)
    except OSError:
        return  # the file system has none
    for name in names:
        try:
            os.setxattr(fd, name, os.getxattr(source, name))
        except OSError as exc:
            # security.* and trusted.* need privileges; a label the process
            # may not set is the file system's to assign
            if exc.errno not in (errno.EPERM, errno.EACCES, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise


def _sync_folder(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_regular_file(path: str | Path, limit: int) -> bytes | None:
    """The bytes of ``path`` when it is a regular file of at most ``limit``
    bytes; None for anything else (missing, a FIFO or device, which could
    block or never end, too large, unreadable).  For files hooklint wrote
    itself (caches), whose damage must cost a miss, not a hang or a crash."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


_SUMMED = b"hooklint-sha256:"


def write_summed_json(path: str | Path, value: Any) -> None:
    """Write ``value`` as JSON after a first line holding its SHA-256, so a
    reader can tell a damaged file (truncated, edited, half-synced) from
    one hooklint wrote (:func:`load_summed_json`)."""
    body = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    atomic_write_bytes(Path(path), _SUMMED + hashlib.sha256(body).hexdigest().encode() + b"\n" + body)


def load_summed_json(path: str | Path, limit: int = 256 * 2 ** 20) -> Any:
    """What :func:`write_summed_json` wrote; None when the file is missing,
    damaged (its sum does not match), not a regular file, too large, or
    nested too deeply to read: a damaged cache costs a miss, never a crash
    or a hang."""
    data = read_regular_file(path, limit)
    if data is None or not data.startswith(_SUMMED):
        return None
    head, _, body = data.partition(b"\n")
    if head[len(_SUMMED):] != hashlib.sha256(body).hexdigest().encode():
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None
