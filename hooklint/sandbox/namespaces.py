"""Namespaces, mounts and capabilities for the worker (Linux, ctypes).

A new user namespace comes first when the kernel allows it, for root too:
inside it the process has capabilities over its own namespaces only, none
over the machine's (it cannot load modules, raise its limits, or mount
anything the machine sees).  With it, a network namespace (no interface but
a loopback that is down) and a mount namespace, in which the whole mount
tree is made read-only and the scratch folder becomes a size-limited tmpfs
that no other process sees and that vanishes with the worker.
"""

from __future__ import annotations

import ctypes
import errno
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
_MOUNT_SETATTR = 442
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc().unshare(ctypes.c_int(flags)), "unshare")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def enter_user_namespace(extra: int) -> None:
    """A new user namespace with ``extra`` namespaces owned by it; the same
    uid and gid inside as outside (``os.getuid()`` in model code does not
    change).  Needs a process with one thread."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWUSER | extra)
    try:
        _write("/proc/self/setgroups", "deny")
    except FileNotFoundError:
        pass
    _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
    _write("/proc/self/gid_map", f"{gid} {gid} 1\n")


def make_mounts_private() -> None:
    _check(_libc().mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "mount(/, private)")


def make_tree_read_only() -> None:
    """Every mount read-only (in this mount namespace only)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    result = libc.syscall(ctypes.c_long(_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), b"/",
                          ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    _check(int(result), "mount_setattr(/, read-only)")


def mount_tmpfs(path: str, size_mib: int) -> None:
    options = f"size={size_mib}m,mode=0700".encode()
    _check(_libc().mount(b"tmpfs", os.fsencode(path), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), options),
           f"mount(tmpfs on {path})")


def drop_capabilities() -> None:
    """No capability left, none to regain: the bounding and ambient sets are
    emptied, then the effective, permitted and inheritable ones."""
    libc = _libc()
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the last capability this kernel knows
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header = Header(_CAP_VERSION_3, 0)
    data = (Data * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def effective_capabilities() -> int:
    """This process's effective capability mask (from /proc)."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0
