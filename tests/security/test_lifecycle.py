"""Workers die with hooklint, whatever their model code does.

A model that blocks SIGALRM and spins cannot be stopped by the worker's own
alarm; killing hooklint (SIGKILL: no clean-up runs) used to leave such a
graph worker, and the proof worker, spinning forever, and their scratch
folders behind.  Now each worker and each child it forks have a death
signal tied to their parent, and the next run deletes the scratch folders
whose owner is gone.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from security.conftest import processes_with, require_sandbox, scratch_folders, wait_until_gone, write_files
from security.hostile import GOOD

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SPIN = '''
import signal
import sys

import torch.nn as nn


def _spin():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while True:
        pass


class {name}(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.fc.register_backward_hook(self.hook)
        if "{where}" == "graph":
            _spin()

    def hook(self, module, grad_input, grad_output):
        return None

    def forward(self, x):
        if "verify_worker" in sys.argv[0]:
            _spin()
        return self.fc(x) / 4
'''
SPINS_IN_GRAPH = SPIN.replace("{name}", "SpinsInGraph").replace("{where}", "graph")
SPINS_IN_PROOF = SPIN.replace("{name}", "SpinsInProof").replace("{where}", "proof")


def _start(folder, *args) -> subprocess.Popen:
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.Popen([sys.executable, "-m", "hooklint", "check", "--timeout", "60", *args, "."], cwd=folder,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for(needle: str, what: str, within: float = 60.0) -> None:
    end = time.monotonic() + within
    while not any(what in p for p in processes_with(needle)):
        assert time.monotonic() < end, f"no {what} process appeared"
        time.sleep(0.05)


def _kill_and_check(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = wait_until_gone(f"HOOKLINT_PARENT_PID={proc.pid}", within=5.0)
    assert left == [], f"still running 5 s after hooklint was killed: {left}"


@pytest.fixture
def project(tmp_path):
    require_sandbox()
    write_files(tmp_path, {"pyproject.toml": "[tool.hooklint]\n", "spin.py": SPINS_IN_GRAPH, **GOOD})
    return tmp_path


def _next_run_cleans(project, pids: list[int]) -> None:
    """A run that starts a worker deletes the scratch folders their killed owners left."""
    done = subprocess.run([sys.executable, "-m", "hooklint", "check", "--no-cache", "good_conv.py"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    for pid in pids:
        assert scratch_folders(pid) == []


def test_killing_hooklint_at_random_moments_leaves_no_process(project):
    rng = random.Random(os.environ.get("PYTEST_SEED", "0"))
    killed = []
    for _ in range(3):
        proc = _start(project, "--no-cache")
        time.sleep(rng.uniform(0.2, 3.0))  # before the worker starts, while it imports torch, or while it spins
        _kill_and_check(proc)
        killed.append(proc.pid)
    _next_run_cleans(project, killed)


def test_killing_hooklint_while_a_child_spins_with_sigalrm_blocked(project):
    proc = _start(project, "--no-cache")
    _wait_for(f"HOOKLINT_PARENT_PID={proc.pid}", "hooklint.graph.worker")
    time.sleep(2.0)  # the spinning child is forked once torch is imported
    _kill_and_check(proc)
    assert scratch_folders(proc.pid) != []  # nobody was left to delete it...
    _next_run_cleans(project, [proc.pid])  # ...until the next run


def test_killing_hooklint_while_the_proof_worker_spins(tmp_path):
    require_sandbox()
    project = tmp_path
    write_files(project, {"pyproject.toml": "[tool.hooklint]\n", "spin.py": SPINS_IN_PROOF, **GOOD})
    # the graph facts are cached first, so that the proof worker starts soon
    subprocess.run([sys.executable, "-m", "hooklint", "check", "--timeout", "60", "."], cwd=project,
                   capture_output=True, timeout=300)
    proc = _start(project, "--diff", "--verify")
    _wait_for(f"HOOKLINT_PARENT_PID={proc.pid}", "hooklint.fix.verify_worker")
    time.sleep(2.0)
    _kill_and_check(proc)
