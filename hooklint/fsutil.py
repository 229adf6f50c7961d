"""File writes that never leave a half-written file behind, and never
overwrite a file that changed since it was read."""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the comparison still guards
    fcntl = None  # type: ignore[assignment]


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8", newline: str | None = "") -> None:
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
        with os.fdopen(fd, "w", encoding=encoding, newline=newline) as handle:
            handle.write(text)
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
