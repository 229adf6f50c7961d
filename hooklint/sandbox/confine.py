"""Putting a worker process, then each process it forks for a file, in the sandbox.

:func:`enter_worker` runs first thing in ``python -m hooklint.graph.worker``
(and the proof worker), while the process still has one thread and before
torch is imported; :func:`confine_child` runs in each process forked for one
file, before any of its code runs.  Both say what they enforced in a
:class:`Status`, which the parent turns into one notice (``auto``) or a
refusal (``require``).
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

MODES = ("auto", "require", "off")
PR_SET_PDEATHSIG = 1
# Files model code writes (its scratch folder, in total; each file where no tmpfs can be had).
SCRATCH_LIMIT_MIB = 512
OPEN_FILES_LIMIT = 4096
# Under the user's home folder, what model code may not read (where Landlock allows hiding it).
SECRETS = (".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".netrc", ".pypirc", ".git-credentials",
           ".password-store", ".vault-token", ".npmrc", ".config/gcloud", ".config/gh", ".local/share/keyrings",
           ".cache/huggingface/token", ".huggingface/token", ".cargo/credentials.toml", ".cargo/credentials")


@dataclass
class Status:
    """What the sandbox of one worker enforces.  ``missing``: one phrase per
    part the system could not give, saying what that leaves open."""

    mode: str
    enforced: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    landlock_abi: int = 0
    seccomp: bool = False
    scratch_tmpfs: bool = False

    @property
    def complete(self) -> bool:
        return self.mode != "off" and not self.missing

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "enforced": self.enforced, "missing": self.missing,
                "landlock_abi": self.landlock_abi, "seccomp": self.seccomp, "scratch_tmpfs": self.scratch_tmpfs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Status":
        return cls(data.get("mode", "auto"), list(data.get("enforced", [])), list(data.get("missing", [])),
                   int(data.get("landlock_abi", 0)), bool(data.get("seccomp")), bool(data.get("scratch_tmpfs")))


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL when the parent ends; and if it already ended (between the fork
    and now), end now.  Without PR_SET_PDEATHSIG (not Linux), a thread checks
    every half second (the process then serves one request and never forks)."""
    if sys.platform.startswith("linux"):
        _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    elif parent_pid:
        import threading
        import time

        exit_now = os._exit  # the audit guard replaces os._exit while model code runs

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(0.5)
            exit_now(1)

        threading.Thread(target=watch, name="hooklint-parent-watch", daemon=True).start()
    if parent_pid and os.getppid() != parent_pid:
        os._exit(0)


def _set_limit(resource_id: int, value: int) -> None:
    import resource

    try:
        _soft, hard = resource.getrlimit(resource_id)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(resource_id, (value, value))
    except (ValueError, OSError):
        pass


def limit_resources(memory_mib: int, sandboxed: bool) -> None:
    import resource

    if memory_mib > 0:
        _set_limit(resource.RLIMIT_AS, memory_mib * 1024 * 1024)
    _set_limit(resource.RLIMIT_CORE, 0)
    if sandboxed:
        _set_limit(resource.RLIMIT_NOFILE, OPEN_FILES_LIMIT)
        # no write to any file (scratch, the inherited stderr) grows it past this
        _set_limit(resource.RLIMIT_FSIZE, SCRATCH_LIMIT_MIB * 1024 * 1024)


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def enter_worker(scratch: str, memory_mib: int, mode: str, parent_pid: int) -> Status:
    """Sandbox this process (a worker, before torch and any user code)."""
    status = Status(mode)
    die_with_parent(parent_pid)
    limit_resources(memory_mib, sandboxed=mode != "off")
    if mode == "off":
        return status
    if not sys.platform.startswith("linux"):
        status.missing.append(f"no kernel sandbox on {sys.platform} (Linux only): model code can write files, "
                              f"use the network and start processes")
        return status
    try:
        _sandbox_linux(status, scratch)
    except Exception as exc:  # noqa: BLE001 - a system hooklint did not foresee: say what broke, go on
        status.missing.append(f"the sandbox could not be set up ({type(exc).__name__}: {exc})")
    return status


def _sandbox_linux(status: Status, scratch: str) -> None:
    from hooklint.sandbox import namespaces
    from hooklint.sandbox.landlock import LandlockError, abi_version
    from hooklint.sandbox.seccomp import SeccompError, native_table

    mounts = _enter_namespaces(status, scratch)
    read_only = False
    if mounts:
        try:
            namespaces.make_mounts_private()
            try:
                namespaces.make_tree_read_only()
                read_only = True
                status.enforced.append("read-only mounts")
            except OSError:
                pass
            namespaces.mount_tmpfs(scratch, SCRATCH_LIMIT_MIB)
            status.scratch_tmpfs = True
            status.enforced.append(f"scratch tmpfs {SCRATCH_LIMIT_MIB} MiB")
        except OSError as exc:
            status.missing.append(f"no private scratch ({exc.strerror}): what model code writes is limited per "
                                  f"file, not in total")
    else:
        status.missing.append("no private scratch (no mount namespace): what model code writes is limited per "
                              "file, not in total")
    try:
        namespaces.drop_capabilities()
    except OSError as exc:
        if os.geteuid() == 0:
            status.missing.append(f"capabilities not dropped ({exc.strerror})")
    abi = abi_version()
    if read_only:
        left_open = "only the read-only mounts keep model code from writing outside its scratch folder"
    else:
        left_open = "model code can write outside its scratch folder"
    if abi >= 1:
        try:
            _landlock_worker(scratch, abi)
            status.landlock_abi = abi
            status.enforced.append(f"Landlock ABI {abi}")
        except (LandlockError, OSError) as exc:
            status.missing.append(f"Landlock failed ({exc.strerror or exc}): {left_open}")
    else:
        status.missing.append(f"no Landlock (needs Linux 5.13+ with Landlock enabled): {left_open}")
    if native_table() is None:
        import platform

        status.missing.append(f"no seccomp filter for {platform.machine()}: model code can start processes and "
                              f"open sockets")
        return
    from hooklint.sandbox import seccomp

    rules = list(seccomp.WORKER_RULES)
    if not read_only:
        rules += seccomp.METADATA_RULES
        if abi < 3:
            rules += seccomp.TRUNCATE_RULES
    try:
        seccomp.install(rules)
        status.seccomp = True
        status.enforced.append("seccomp")
    except SeccompError as exc:
        status.missing.append(f"seccomp unavailable ({exc.strerror}): model code can start processes and open "
                              f"sockets")


def _enter_namespaces(status: Status, scratch: str) -> bool:
    """A user (when allowed), network and mount namespace; True with a mount namespace."""
    from hooklint.sandbox import namespaces

    if _threads() > 1:
        status.missing.append("no namespaces (the worker already had threads)")
        return False
    try:
        namespaces.enter_user_namespace(namespaces.CLONE_NEWNET | namespaces.CLONE_NEWNS)
        status.enforced += ["user namespace", "network namespace"]
        return True
    except OSError as user_error:
        reason = os.strerror(user_error.errno) if user_error.errno else str(user_error)
    try:
        namespaces.unshare(namespaces.CLONE_NEWNET | namespaces.CLONE_NEWNS)
        status.enforced.append("network namespace")
        return True
    except OSError:
        pass
    try:
        namespaces.unshare(namespaces.CLONE_NEWNET)
        status.enforced.append("network namespace")
        return False
    except OSError:
        status.missing.append(f"no network namespace (user namespaces: {reason}); seccomp still refuses sockets")
        return False


def _home_folders() -> list[str]:
    homes = {os.path.expanduser("~")}
    try:
        import pwd

        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    except (ImportError, KeyError):
        pass
    return sorted(os.path.realpath(h) for h in homes if h and os.path.isabs(h))


def hidden_paths() -> list[str]:
    """The secrets under the home folders that exist, as real paths."""
    out = set()
    for home in _home_folders():
        for name in SECRETS:
            path = os.path.join(home, name)
            if os.path.lexists(path):
                out.add(os.path.realpath(path))
    return sorted(out)


def _grant_reads_except(ruleset, hidden: list[str]) -> None:
    """Reading allowed everywhere but beneath ``hidden``: Landlock grants, so
    each folder on the way to a hidden path gets its other entries granted one
    by one (listing folders stays allowed everywhere)."""
    from hooklint.sandbox.landlock import READ_DIR, READ_FILE

    ruleset.allow("/", READ_DIR)
    chains: dict[str, set[str]] = {}  # folder -> entries not to grant wholesale
    for path in hidden:
        parts = path.strip("/").split("/")
        for depth in range(len(parts)):
            folder = "/" + "/".join(parts[:depth])
            chains.setdefault(folder, set()).add(parts[depth])
    for folder, skip in chains.items():
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry)
            # a rule on a symbolic link would grant its target (pytest's `pytest-current` leads
            # back into the chain); the target is granted where it really is
            if entry in skip or os.path.islink(path):
                continue
            try:
                ruleset.allow(path, READ_FILE | READ_DIR)
            except OSError:
                continue


def _landlock_worker(scratch: str, abi: int) -> None:
    from hooklint.sandbox.landlock import EXECUTE, IOCTL_DEV, READ_RIGHTS, TRUNCATE, WRITE_FILE, WRITE_RIGHTS, Ruleset

    hidden = hidden_paths()
    handled = WRITE_RIGHTS | EXECUTE | (READ_RIGHTS if hidden else 0)
    ruleset = Ruleset(handled, network=True, scopes=True, abi=abi)
    ruleset.allow(scratch, WRITE_RIGHTS | READ_RIGHTS)
    ruleset.allow(os.devnull, WRITE_FILE | TRUNCATE | IOCTL_DEV | READ_RIGHTS)
    if hidden:
        _grant_reads_except(ruleset, hidden)
    from hooklint.sandbox.seccomp import set_no_new_privs

    set_no_new_privs()
    ruleset.restrict_self()


def confine_child(status: Status, scratch: str, cpu_seconds: int, parent_pid: int) -> None:
    """The process that runs one file's model code: dies with the worker,
    writes only in its own scratch folder, cannot fork, signal others, or
    leave its process group."""
    import resource

    die_with_parent(parent_pid)
    _set_limit(resource.RLIMIT_CPU, cpu_seconds)
    if status.mode == "off" or not sys.platform.startswith("linux"):
        return
    if status.landlock_abi:
        from hooklint.sandbox.landlock import (
            EXECUTE,
            IOCTL_DEV,
            READ_RIGHTS,
            TRUNCATE,
            WRITE_FILE,
            WRITE_RIGHTS,
            Ruleset,
        )

        ruleset = Ruleset(WRITE_RIGHTS | EXECUTE, network=True, scopes=True, abi=status.landlock_abi)
        ruleset.allow(scratch, WRITE_RIGHTS | READ_RIGHTS)
        ruleset.allow(os.devnull, WRITE_FILE | TRUNCATE | IOCTL_DEV)
        ruleset.restrict_self()
    if status.seccomp:
        from hooklint.sandbox import seccomp

        seccomp.install(seccomp.child_rules(os.getpid()))
