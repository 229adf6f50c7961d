"""A seccomp-BPF filter built with ``struct`` and installed through ``prctl``.

Written by hand rather than through a binding: libseccomp's own comes with
the system's packages, not PyPI; on PyPI, ``pyseccomp`` (a ctypes wrapper
last released in 2021) still needs libseccomp installed, and the others are
young.  The filter is a short list of system calls checked one after the
other, which a few dozen lines build.  The numbers
come from the kernel's ``asm/unistd_64.h`` (x86_64) and
``asm-generic/unistd.h`` (aarch64); system calls added since 5.1 have the
same number on every architecture.

A filter is a list of :class:`Rule`: a system call, an optional condition
on its arguments, and the errno it fails with.  Filters stack: the graph
worker installs one before it imports torch, and each process it forks for
a file adds a stricter one (a child cannot remove a filter, only add).
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from dataclasses import dataclass

# Linux UAPI constants (linux/seccomp.h, linux/filter.h, linux/audit.h, linux/prctl.h)
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JGT_K = 0x25  # BPF_JMP | BPF_JGT | BPF_K
_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
_X32_SYSCALL_BIT = 0x40000000
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_NR_OFFSET, _ARCH_OFFSET, _ARGS_OFFSET = 0, 4, 16

CLONE_THREAD = 0x00010000
AF_UNIX = 1
PR_SET_PDEATHSIG = 1

_COMMON = {  # added in 5.1 or later: one number everywhere
    "pidfd_send_signal": 424, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_open": 434, "clone3": 435, "pidfd_getfd": 438, "process_madvise": 440, "mount_setattr": 442,
    "quotactl_fd": 443, "landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446,
    "memfd_secret": 447, "process_mrelease": 448, "fchmodat2": 452,
    "setxattrat": 463, "removexattrat": 466, "open_tree_attr": 467,
}
# The highest number this table knows: anything above is a system call newer than
# this file, refused with ENOSYS (libc falls back to the older one).
HIGHEST_KNOWN = 467

_X86_64 = {
    "socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "kill": 62,
    "truncate": 76, "chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "ptrace": 101,
    "syslog": 103, "setpgid": 109, "setsid": 112, "rt_sigqueueinfo": 129, "utime": 132, "mknod": 133,
    "uselib": 134, "vhangup": 153, "pivot_root": 155, "prctl": 157, "adjtimex": 159, "setrlimit": 160,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "nfsservctl": 180, "setxattr": 188,
    "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198, "fremovexattr": 199,
    "tkill": 200, "lookup_dcookie": 212, "clock_settime": 227, "tgkill": 234, "utimes": 235,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "migrate_pages": 256,
    "mknodat": 259, "fchownat": 260, "futimesat": 261, "fchmodat": 268, "unshare": 272, "move_pages": 279,
    "utimensat": 280, "rt_tgsigqueueinfo": 297, "perf_event_open": 298, "fanotify_init": 300,
    "prlimit64": 302, "name_to_handle_at": 303, "open_by_handle_at": 304, "clock_adjtime": 305,
    "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "execveat": 322, "userfaultfd": 323, **_COMMON,
}
_AARCH64 = {
    "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
    "fremovexattr": 16, "lookup_dcookie": 18, "mknodat": 33, "umount2": 39, "mount": 40, "pivot_root": 41,
    "nfsservctl": 42, "truncate": 45, "chroot": 51, "fchmod": 52, "fchmodat": 53, "fchownat": 54,
    "fchown": 55, "vhangup": 58, "quotactl": 60, "utimensat": 88, "acct": 89, "unshare": 97,
    "kexec_load": 104, "init_module": 105, "delete_module": 106, "clock_settime": 112, "syslog": 116,
    "ptrace": 117, "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "reboot": 142,
    "setpgid": 154, "setsid": 157, "sethostname": 161, "setdomainname": 162, "setrlimit": 164,
    "prctl": 167, "settimeofday": 170, "adjtimex": 171, "socket": 198, "socketpair": 199,
    "add_key": 217, "request_key": 218, "keyctl": 219, "clone": 220, "execve": 221, "swapon": 224,
    "swapoff": 225, "migrate_pages": 238, "move_pages": 239, "rt_tgsigqueueinfo": 240,
    "perf_event_open": 241, "fanotify_init": 262, "prlimit64": 261, "name_to_handle_at": 264,
    "open_by_handle_at": 265, "clock_adjtime": 266, "setns": 268, "process_vm_readv": 270,
    "process_vm_writev": 271, "kcmp": 272, "finit_module": 273, "bpf": 280, "execveat": 281,
    "userfaultfd": 282, "kexec_file_load": 294, **_COMMON,
}
_ARCHES = {"x86_64": (0xC000003E, _X86_64), "aarch64": (0xC00000B7, _AARCH64),
           "arm64": (0xC00000B7, _AARCH64)}


def native_table() -> tuple[int, dict[str, int]] | None:
    """(audit arch, system call numbers) of this machine, or None when unknown."""
    return _ARCHES.get(platform.machine().lower())


@dataclass(frozen=True)
class Rule:
    """``syscall`` fails with ``error`` unless ``allow_if`` holds.

    ``allow_if``: None (always refused), or ``(argument, test, value)`` where
    test is ``"eq"`` / ``"ne"`` (the argument, an ``int`` for the kernel, is /
    is not ``value``), ``"set"`` (a bit of ``value`` is set in it) or
    ``"null"`` (the argument, a pointer, is NULL: all 64 bits checked)."""

    syscall: str
    error: int = errno.EPERM
    allow_if: tuple[int, str, int] | None = None


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _condition(argument: int, test: str, value: int) -> list[bytes]:
    """Instructions ending in a jump whose true branch skips 1 (to "refuse")
    and false branch skips 0 (to "allow") -- or the reverse, per test: they
    are followed by ``ret ALLOW; ret refuse``."""
    low = _insn(_LD_W_ABS, 0, 0, _ARGS_OFFSET + 8 * argument)  # little-endian: low half first
    if test == "eq":
        return [low, _insn(_JEQ_K, 0, 1, value)]
    if test == "ne":
        return [low, _insn(_JEQ_K, 1, 0, value)]
    if test == "set":
        return [low, _insn(_JSET_K, 0, 1, value)]
    if test == "null":
        high = _insn(_LD_W_ABS, 0, 0, _ARGS_OFFSET + 8 * argument + 4)
        return [low, _insn(_JEQ_K, 0, 3, 0), high, _insn(_JEQ_K, 0, 1, 0)]
    raise ValueError(test)


def compile_filter(rules: list[Rule], arch: int, numbers: dict[str, int]) -> bytes:
    """The BPF program: wrong architecture or x32 calls kill the process, each
    rule's system call is checked in turn, system calls newer than this table
    get ENOSYS, everything else is allowed.  Names missing from ``numbers``
    (``fork`` on aarch64) are left out: the architecture has no such call."""
    program = [
        _insn(_LD_W_ABS, 0, 0, _ARCH_OFFSET),
        _insn(_JEQ_K, 1, 0, arch),
        _insn(_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0, 0, _NR_OFFSET),
        _insn(_JGE_K, 0, 1, _X32_SYSCALL_BIT),
        _insn(_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
    ]
    for rule in rules:
        number = numbers.get(rule.syscall)
        if number is None:
            continue
        refuse = _insn(_RET_K, 0, 0, SECCOMP_RET_ERRNO | (rule.error & 0xFFFF))
        if rule.allow_if is None:
            body = [refuse]
        else:
            # a rule whose arguments are checked returns on both branches
            body = _condition(*rule.allow_if) + [_insn(_RET_K, 0, 0, SECCOMP_RET_ALLOW), refuse]
        program.append(_insn(_JEQ_K, 0, len(body), number))
        program.extend(body)
    program += [
        _insn(_JGT_K, 0, 1, HIGHEST_KNOWN),
        _insn(_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.ENOSYS),
        _insn(_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    if len(program) > 4096:
        raise ValueError("seccomp filter too long")
    return b"".join(program)


class SeccompError(OSError):
    pass


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def set_no_new_privs() -> None:
    libc = _libc()
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {errno.errorcode.get(err, err)}")


def install(rules: list[Rule]) -> None:
    """Install a filter made of ``rules`` on this thread (call it while the
    process has one thread: filters are per thread, and forks inherit them)."""
    table = native_table()
    if table is None:
        raise SeccompError(errno.ENOSYS, f"no system call table for {platform.machine()}")
    program = compile_filter(rules, *table)
    count = len(program) // 8
    buffer = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(count, ctypes.cast(buffer, ctypes.c_void_p))
    set_no_new_privs()
    libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"prctl(PR_SET_SECCOMP): {errno.errorcode.get(err, err)}")


# What no process running model code may do, whatever the rest of the sandbox got:
# start programs, trace or read other processes, change mounts or namespaces, use
# the kernel's key store, BPF, io_uring (its operations bypass this filter), load
# modules, change the clock or host name, set extended attributes (Landlock does
# not cover them), open files by handle, create sockets (socketpair(AF_UNIX)
# stays: it reaches no one else), or undo the death signal.
WORKER_RULES = [
    Rule("execve"), Rule("execveat"), Rule("ptrace"), Rule("process_vm_readv"), Rule("process_vm_writev"),
    Rule("kcmp"), Rule("pidfd_getfd"), Rule("pidfd_open"), Rule("process_madvise"), Rule("process_mrelease"),
    Rule("mount"), Rule("umount2"), Rule("pivot_root"), Rule("chroot"), Rule("unshare"), Rule("setns"),
    Rule("mount_setattr"), Rule("fsopen"), Rule("fsmount"), Rule("fsconfig"), Rule("fspick"),
    Rule("move_mount"), Rule("open_tree"), Rule("open_tree_attr"),
    Rule("setxattr"), Rule("lsetxattr"), Rule("fsetxattr"), Rule("removexattr"), Rule("lremovexattr"),
    Rule("fremovexattr"), Rule("setxattrat"), Rule("removexattrat"),
    Rule("keyctl"), Rule("add_key"), Rule("request_key"), Rule("bpf"), Rule("perf_event_open"),
    Rule("userfaultfd"), Rule("io_uring_setup"), Rule("io_uring_enter"), Rule("io_uring_register"),
    Rule("init_module"), Rule("finit_module"), Rule("delete_module"), Rule("kexec_load"),
    Rule("kexec_file_load"), Rule("reboot"), Rule("swapon"), Rule("swapoff"), Rule("sethostname"),
    Rule("setdomainname"), Rule("settimeofday"), Rule("clock_settime"), Rule("clock_adjtime"),
    Rule("adjtimex"), Rule("acct"), Rule("quotactl"), Rule("quotactl_fd"), Rule("iopl"), Rule("ioperm"),
    Rule("syslog"), Rule("name_to_handle_at"), Rule("open_by_handle_at"), Rule("uselib"),
    Rule("lookup_dcookie"), Rule("vhangup"), Rule("fanotify_init"), Rule("nfsservctl"),
    Rule("memfd_secret"),
    Rule("socket", errno.EACCES), Rule("socketpair", errno.EACCES, (0, "eq", AF_UNIX)),
    Rule("prlimit64", allow_if=(0, "eq", 0)),  # its own limits only
    # a thread without CLONE_THREAD is a process; clone3's flags are out of a filter's reach
    Rule("clone3", errno.ENOSYS),
]

# Where a read-only mount tree cannot be had, metadata changes Landlock does not
# cover (chmod, chown, file times) are refused outright, and special files too.
METADATA_RULES = [
    Rule("mknod"), Rule("mknodat"),
    Rule("chmod"), Rule("fchmod"), Rule("fchmodat"), Rule("fchmodat2"), Rule("chown"), Rule("fchown"),
    Rule("lchown"), Rule("fchownat"), Rule("utime"), Rule("utimes"), Rule("futimesat"), Rule("utimensat"),
]

# Landlock before ABI 3 lets truncate(2) through.
TRUNCATE_RULES = [Rule("truncate")]


def child_rules(pid: int) -> list[Rule]:
    """What a process analysing one file may not do on top of :data:`WORKER_RULES`:
    create processes, signal any process but itself, leave its process group,
    or drop its death signal."""
    return [
        Rule("fork"), Rule("vfork"), Rule("clone", allow_if=(0, "set", CLONE_THREAD)),
        Rule("kill", allow_if=(0, "eq", pid)), Rule("tgkill", allow_if=(0, "eq", pid)),
        Rule("rt_sigqueueinfo", allow_if=(0, "eq", pid)), Rule("rt_tgsigqueueinfo", allow_if=(0, "eq", pid)),
        Rule("tkill"), Rule("pidfd_send_signal"), Rule("setsid"), Rule("setpgid"),
        Rule("setrlimit"), Rule("prlimit64", allow_if=(2, "null", 0)),  # read limits only
        Rule("prctl", allow_if=(0, "ne", PR_SET_PDEATHSIG)),
    ]
