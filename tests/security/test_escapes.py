"""Hostile model files next to good ones, through `hooklint check` (the graph
worker) and `hooklint check --diff --verify` (the proof worker: the built
model, and the file's `__main__` block run as a program): every escape
the security review found is tried, after switching hooklint's audit hook off,
and the kernel sandbox stops each one (hooklint.sandbox, docs/sandbox.md).

One run of each command serves every test here: the project (good and
hostile files) and a baseline copy of the good files alone.  One more `check`
runs with namespaces and read-only mounts refused (a seccomp filter around
hooklint): Landlock and seccomp alone must stop every attempt too, as on a
machine that forbids user namespaces.  Each hostile
file reports how its attempt ended through the diagnostics hooklint prints
(tests/security/hostile.py), so a test can tell "stopped" from "never ran".
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from security.conftest import (Listener, hooklint, processes_with, require_sandbox, scratch_folders, snapshot,
                               wait_until_gone, write_files)
from security.hostile import ESCAPES, FAKE_KEY, GOOD, hostile_file

pytestmark = [pytest.mark.torch, pytest.mark.slow]

NAMES = sorted(ESCAPES)


@dataclass
class World:
    canary: Path
    home: Path
    project: Path
    marker: str
    runs: dict
    before: dict
    after: dict
    received: list
    leftover: list[str]


def _good_lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith("good_") or ": good_" in line)


def _good_diff(text: str) -> str:
    """The part of a unified diff about the good files."""
    out, keep = [], False
    for line in text.splitlines():
        if line.startswith("--- "):
            keep = "good_" in line
        if keep:
            out.append(line)
    return "\n".join(out)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    require_sandbox()
    base = tmp_path_factory.mktemp("escapes")
    canary, home, project, baseline = (base / n for n in ("canary", "home", "project", "baseline"))
    for folder in (canary, home / ".ssh", project, baseline):
        folder.mkdir(parents=True)
    (canary / "existing.txt").write_text("canary\n")
    (home / ".ssh" / "id_rsa").write_text(FAKE_KEY)
    os.chmod(home / ".ssh" / "id_rsa", 0o600)
    marker = f"hooklint-escape-{uuid.uuid4().hex}"
    listener = Listener()
    for folder in (project, baseline):
        write_files(folder, {"pyproject.toml": "[tool.hooklint]\n", **GOOD})
    for name in NAMES:
        (project / f"hostile_{name}.py").write_text(
            hostile_file(name, str(canary), listener.tcp_port, listener.udp_port, marker), encoding="utf-8")
    before = snapshot(canary, home, project)
    env = {"HOME": str(home)}
    runs = {}
    try:
        for where, folder in (("baseline", baseline), ("project", project)):
            # the first run fills the graph cache; the second runs the proof worker on it
            runs[f"{where}-check"] = hooklint("check", "--output-format", "concise", ".", cwd=folder, env=env)
            runs[f"{where}-verify"] = hooklint("check", "--diff", "--verify", ".", cwd=folder, env=env)
        runs["layers-check"] = hooklint("check", "--no-cache", "--output-format", "concise", ".", cwd=project,
                                        env=env, without=("unshare", "mount_setattr"))
        leftover = wait_until_gone(marker) + wait_until_gone(str(home))
    finally:
        listener.close()
    return World(canary, home, project, marker, runs, before, snapshot(canary, home, project),
                 list(listener.received), leftover)


def test_a_full_sandbox_says_nothing_about_itself(world):
    for name, run in world.runs.items():
        if name != "layers-check":
            assert "sandbox" not in run.stderr, run.stderr


def test_every_run_ended_normally(world):
    for name, run in world.runs.items():
        assert run.returncode == 1, (name, run.returncode, run.stderr[-2000:])
        assert "Traceback" not in run.stderr, (name, run.stderr[-2000:])


@pytest.mark.parametrize("name", NAMES)
def test_the_graph_worker_ran_the_attempt_and_the_kernel_stopped_it(world, name):
    stderr = world.runs["project-check"].stderr
    assert f"ESCAPE {name} in graph: blocked (" in stderr, stderr[-3000:]


@pytest.mark.parametrize("name", NAMES)
def test_landlock_and_seccomp_alone_stop_it_too(world, name):
    stderr = world.runs["layers-check"].stderr
    assert f"ESCAPE {name} in graph: blocked (" in stderr, stderr[-3000:]
    assert "sandbox incomplete: no network namespace" in stderr  # said, once


@pytest.mark.parametrize("name", NAMES)
def test_the_proof_worker_ran_the_attempt_and_the_kernel_stopped_it(world, name):
    """Even under --diff, which users read as "change nothing"."""
    stderr = world.runs["project-verify"].stderr
    assert f"ESCAPE {name} in proof: blocked (" in stderr, stderr[-3000:]


@pytest.mark.parametrize("name", NAMES)
def test_the_program_run_ran_the_attempt_and_the_kernel_stopped_it(world, name):
    """The file's __main__ block, which --verify runs to prove a fix."""
    stderr = world.runs["project-verify"].stderr
    assert f"ESCAPE {name} in program: blocked (" in stderr, stderr[-3000:]


def test_no_attempt_got_through(world):
    for run in world.runs.values():
        assert "ESCAPED" not in run.stdout + run.stderr


def test_nothing_was_created_or_changed_outside_scratch(world):
    """The canary folder, the fake home and the project: same entries, sizes,
    modes, times and extended attributes (the graph cache aside)."""
    assert world.after == world.before


def test_nothing_reached_the_listeners(world):
    assert world.received == []


def test_the_key_never_left_the_fake_home(world):
    secret = FAKE_KEY.splitlines()[1]
    for run in world.runs.values():
        assert secret not in run.stdout + run.stderr


def test_no_process_was_left_behind(world):
    assert world.leftover == []
    assert processes_with(world.marker) == []


def test_no_scratch_folder_was_left_behind(world):
    for run in world.runs.values():
        assert scratch_folders(run.pid) == []


def test_the_good_files_findings_are_those_without_the_hostile_files(world):
    baseline, project = world.runs["baseline-check"].stdout, world.runs["project-check"].stdout
    assert _good_lines(baseline), baseline
    assert _good_lines(project) == _good_lines(baseline)


def test_the_good_files_fixes_and_proofs_are_those_without_the_hostile_files(world):
    baseline, project = world.runs["baseline-verify"], world.runs["project-verify"]
    assert "good_conv.py: HKL101 fix at 10:19 verified" in baseline.stderr, baseline.stderr
    assert _good_diff(project.stdout) == _good_diff(baseline.stdout) != ""
    assert _good_lines(project.stderr) == _good_lines(baseline.stderr)
