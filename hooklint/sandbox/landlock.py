"""Landlock through its three system calls (``landlock_create_ruleset``,
``landlock_add_rule``, ``landlock_restrict_self``, numbers 444-446 on every
architecture), with ctypes: three calls and two structures, which the
PyPI bindings (``landlock`` 1.0.0.dev5, ``landlockpy`` 0.2) would only wrap.

A ruleset names the access rights it *handles*; once the process restricts
itself, a handled right is granted only beneath the paths a rule gives it
to.  Rights the running kernel does not know (a newer ABI) are left out, and
the caller learns which were (:attr:`Ruleset.abi`).  Layers stack: each
``restrict`` adds one, and a process can only ever lose rights.
"""

from __future__ import annotations

import ctypes
import errno
import os

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

# Rights that make sense on a file (not a folder) in a rule.
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
# Every right that changes the file system.
WRITE_RIGHTS = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
                | MAKE_BLOCK | MAKE_SYM | REFER | TRUNCATE | IOCTL_DEV)
READ_RIGHTS = READ_FILE | READ_DIR


def _fs_rights_of(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class LandlockError(OSError):
    pass


def _syscall():
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.syscall
    call.restype = ctypes.c_long
    return call


def abi_version() -> int:
    """The kernel's Landlock ABI, 0 when Landlock is missing or disabled."""
    try:
        value = _syscall()(ctypes.c_long(_CREATE_RULESET), ctypes.c_void_p(None), ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return int(value) if value > 0 else 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class Ruleset:
    """One Landlock layer being built.  ``handled``: the file-system rights it
    restricts (masked to what the kernel knows); TCP bind/connect and the
    scopes are added when the ABI has them and ``network``/``scopes`` ask."""

    def __init__(self, handled: int, *, network: bool = False, scopes: bool = False, abi: int | None = None):
        self.abi = abi_version() if abi is None else abi
        if self.abi < 1:
            raise LandlockError(errno.EOPNOTSUPP, "Landlock is not available")
        self.handled = handled & _fs_rights_of(self.abi)
        attr = _RulesetAttr(self.handled, 0, 0)
        size = 8
        self.network = network and self.abi >= 4
        self.scopes = scopes and self.abi >= 6
        if self.network:
            attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
            size = 16
        if self.scopes:
            attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            size = 24
        self.call = _syscall()
        fd = self.call(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                       ctypes.c_uint32(0))
        if fd < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        self.fd = int(fd)

    def allow(self, path: str, rights: int) -> bool:
        """Grant ``rights`` beneath ``path`` (or on it, for a file); False when
        the path does not exist."""
        try:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if not os.path.isdir(path):
                rights &= FILE_RIGHTS
            rights &= self.handled
            if not rights:
                return True
            rule = _PathBeneath(rights, target)
            result = self.call(ctypes.c_long(_ADD_RULE), ctypes.c_int(self.fd), ctypes.c_int(_RULE_PATH_BENEATH),
                               ctypes.byref(rule), ctypes.c_uint32(0))
            if result != 0:
                err = ctypes.get_errno()
                raise LandlockError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
            return True
        finally:
            os.close(target)

    def restrict_self(self) -> None:
        """Enforce the layer on this thread (and what it forks); the caller has
        set no_new_privs."""
        try:
            result = self.call(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(self.fd), ctypes.c_uint32(0))
            if result != 0:
                err = ctypes.get_errno()
                raise LandlockError(err, f"landlock_restrict_self: {os.strerror(err)}")
        finally:
            os.close(self.fd)
