"""Helpers for the sandbox tests: a project of good model files, hostile files
next to them, a canary folder and a fake home with a fake SSH key, TCP and UDP
listeners on 127.0.0.1, and what the machine looks like before and after.

The tests run the real ``hooklint`` command and the real kernel.  They are
skipped only where the kernel cannot give the sandbox and ``CI`` is not set
(on CI they must run)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")


def sandbox_status() -> dict:
    """What ``enter_worker`` gets on this machine, tried in a throw-away process."""
    code = ("import json, sys\n"
            "from hooklint.sandbox.confine import enter_worker\n"
            "print(json.dumps(enter_worker(sys.argv[1], 0, 'auto', 0).to_dict()))\n")
    with tempfile.TemporaryDirectory(prefix="hooklint-probe-") as scratch:
        done = subprocess.run([sys.executable, "-c", code, scratch], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return {"missing": [done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "probe failed"]}
    return json.loads(done.stdout)


_STATUS: dict | None = None


def require_sandbox() -> dict:
    """The sandbox status; skips the test (not on CI) when it is incomplete."""
    global _STATUS
    if _STATUS is None:
        _STATUS = sandbox_status()
    if _STATUS.get("missing"):
        reason = "kernel sandbox incomplete here: " + "; ".join(_STATUS["missing"])
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI is set: these tests must run)")
        pytest.skip(reason)
    return _STATUS


# hooklint under a seccomp filter refusing the system calls named in argv[1] (comma-separated):
# a machine without a part of the sandbox, for real (the filter survives exec: the workers get it).
_WITHOUT = """
import errno, runpy, sys
from hooklint.sandbox.seccomp import Rule, install
install([Rule(name, errno.ENOSYS if name.startswith("landlock") else errno.EPERM)
         for name in sys.argv[1].split(",")])
sys.argv = ["hooklint", *sys.argv[2:]]
runpy.run_module("hooklint", run_name="__main__", alter_sys=True)
"""


def hooklint(*args: str, cwd: Path, env: dict[str, str], timeout: float = 300,
             without: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The real command; the result also has ``pid`` (scratch folders are named by it).
    ``without``: system calls refused to hooklint and its workers (``unshare``:
    no namespaces; ``mount_setattr``: no read-only mounts; ``landlock_create_ruleset``:
    no Landlock)."""
    full = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR",)}
    full.update(NO_COLOR="1", **env)
    command = [sys.executable, "-c", _WITHOUT, ",".join(without)] if without else [sys.executable, "-m", "hooklint"]
    proc = subprocess.Popen([*command, *args], cwd=cwd, env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    done.pid = proc.pid  # type: ignore[attr-defined]
    return done


class Listener:
    """A TCP and a UDP socket on 127.0.0.1 that record whatever reaches them."""

    def __init__(self) -> None:
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(16)
        self.tcp.settimeout(0.2)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.settimeout(0.2)
        self.received: list[tuple[str, bytes]] = []
        self.stopping = False
        self.threads = [threading.Thread(target=self._tcp, daemon=True),
                        threading.Thread(target=self._udp, daemon=True)]
        for thread in self.threads:
            thread.start()

    @property
    def tcp_port(self) -> int:
        return self.tcp.getsockname()[1]

    @property
    def udp_port(self) -> int:
        return self.udp.getsockname()[1]

    def _tcp(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.tcp.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                data = b"connected:"
                try:
                    while chunk := conn.recv(65536):
                        data += chunk
                except OSError:
                    pass
                self.received.append(("tcp", data))

    def _udp(self) -> None:
        while not self.stopping:
            try:
                data, _ = self.udp.recvfrom(65536)
            except OSError:
                continue
            self.received.append(("udp", data))

    def close(self) -> None:
        self.stopping = True
        for thread in self.threads:
            thread.join(timeout=2)
        self.tcp.close()
        self.udp.close()


def snapshot(*folders: Path) -> dict[str, tuple]:
    """Every entry under the folders: type, size, mode, mtime, extended attributes."""
    out: dict[str, tuple] = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = [d for d in dirnames if d not in (".hooklint_cache", "__pycache__")]
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                try:
                    attrs = tuple(sorted((a, os.getxattr(path, a, follow_symlinks=False))
                                         for a in os.listxattr(path, follow_symlinks=False)))
                except OSError:
                    attrs = ()
                out[path] = (st.st_mode, st.st_size, st.st_mtime_ns, attrs)
    return out


def processes_with(needle: str) -> list[str]:
    """Processes whose command line or environment contains ``needle`` (not this one)."""
    found = []
    data = needle.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{part}", "rb") as handle:
                    if data in handle.read():
                        with open(f"/proc/{entry}/cmdline", "rb") as cmd:
                            command = cmd.read().replace(b"\0", b" ").decode(errors="replace")
                        found.append(f"{entry}: {command}")
                        break
            except OSError:
                continue
    return found


def wait_until_gone(needle: str, within: float = 5.0) -> list[str]:
    end = time.monotonic() + within
    while True:
        left = processes_with(needle)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.1)


def write_files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def scratch_folders(pid: int) -> list[str]:
    """The scratch folders of the hooklint process ``pid`` still in the temporary folder."""
    folder = tempfile.gettempdir()
    return sorted(name for name in os.listdir(folder) if name.startswith(f"hooklint-{pid}-"))


__all__ = ["Listener", "hooklint", "processes_with", "require_sandbox", "snapshot", "wait_until_gone",
           "write_files", "scratch_folders"]
