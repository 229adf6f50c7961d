"""Helpers for the distributed tests: real 2-process gloo groups on loopback,
started through PyTorch's own launcher, and a check that nothing they started
survives them.

Every launch carries a marker in its environment (inherited by the launcher,
the ranks and anything they start); `survivors(marker)` lists the processes
that still carry it, read from /proc, so a test can assert that none is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available():  # pragma: no cover - torch built without distributed
    pytest.skip("torch.distributed is not available", allow_module_level=True)

PROGRAMS = Path(__file__).resolve().parent / "programs"
MARKER_VAR = "HOOKLINT_TEST_MARKER"


def new_marker() -> str:
    return uuid.uuid4().hex


def survivors(marker: str) -> list[int]:
    """Processes whose environment holds ``HOOKLINT_TEST_MARKER=marker``."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[-1].split()[0]
        except OSError:
            continue  # gone meanwhile, or not ours
        if state != b"Z" and needle in environ.split(b"\0"):
            found.append(int(entry))
    return found


def wait_for_no_survivors(marker: str, seconds: float = 10.0) -> list[int]:
    """Survivors after up to ``seconds`` (a process killed a moment ago may still be exiting)."""
    deadline = time.monotonic() + seconds
    while True:
        left = survivors(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def kill_marked(marker: str) -> None:
    """A test's last resort, so that a failing test does not leave processes behind."""
    for pid in survivors(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def env_with(marker: str, **extra: str) -> dict:
    env = dict(os.environ)
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    env[MARKER_VAR] = marker
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def torchrun(script: Path | str, *args: str, nproc: int = 2, cwd: Path | str | None = None, timeout: float = 150,
             marker: str | None = None) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone --nproc-per-node N script args``
    (a free port picked by the rendezvous), without hooklint."""
    marker = marker or new_marker()
    try:
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc-per-node={nproc}", str(script), *args],
                              cwd=cwd, env=env_with(marker), capture_output=True, text=True, timeout=timeout)
    finally:
        kill_marked(marker)


def hooklint(*args: str, cwd: Path | str | None = None, timeout: float = 150, marker: str | None = None,
             env: dict | None = None) -> subprocess.CompletedProcess:
    """The real `hooklint` command in a subprocess."""
    marker = marker or new_marker()
    full_env = env_with(marker)
    if env:
        full_env.update(env)
    try:
        return subprocess.run([sys.executable, "-m", "hooklint", *args], cwd=cwd, env=full_env,
                              capture_output=True, text=True, timeout=timeout)
    finally:
        kill_marked(marker)
