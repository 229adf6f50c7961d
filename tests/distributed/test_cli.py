"""`hooklint run --nproc 2` through the real command: the findings of both ranks in
one report, the script's output and exit status kept, and nothing left running,
also when a rank crashes or hangs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .helpers import PROGRAMS, env_with, hooklint, kill_marked, new_marker, survivors, wait_for_no_survivors

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def expected_lines(path, tag):
    return [number for number, line in enumerate(path.read_text().splitlines(), start=1) if f"# EXPECT {tag}" in line]


def test_buggy_training_gives_each_finding_once_with_its_ranks(tmp_path):
    program = PROGRAMS / "buggy_training.py"
    out = tmp_path / "findings.json"
    marker = new_marker()
    result = hooklint("run", "--nproc", "2", "--timeout", "150", "--output-format", "json", "-o", str(out),
                      str(program), cwd=tmp_path, marker=marker)
    assert wait_for_no_survivors(marker) == []
    assert result.returncode == 3, result.stderr[-3000:]  # the script's own exit status
    assert "rank 0 trained" in result.stdout and "rank 1 trained" in result.stdout
    findings = json.loads(out.read_text())
    got = sorted((f["location"]["row"], f["code"]) for f in findings)
    want = sorted([(line, "HKL602") for line in expected_lines(program, "HKL602")]
                  + [(line, "HKL601") for line in expected_lines(program, "HKL601")]
                  + [(line, "HKL203") for line in expected_lines(program, "HKL601 HKL203")]
                  + [(line, "HKL603") for line in expected_lines(program, "HKL603")])
    assert got == want, [(f["location"]["row"], f["code"], f["message"][:120]) for f in findings]
    by_code_line = {(f["location"]["row"], f["code"]): f for f in findings}
    for (line, code), finding in by_code_line.items():
        if code != "HKL601":
            assert "[every rank: 0, 1]" in finding["message"], finding["message"]
    diverged = by_code_line[(expected_lines(program, "HKL601")[0], "HKL601")]
    assert "differs across ranks (rank 0: sum" in diverged["message"]
    assert "post-accumulate-grad hook `sync`" in diverged["message"]
    assert "`dist.all_reduce` on the parameter itself" in diverged["message"]
    assert "the same for 3 other parameters" in diverged["message"]
    assert diverged["help"].startswith("Synchronise the gradient, not the parameter")
    before, after = expected_lines(program, "HKL603")
    assert "registered before `fully_shard`" in by_code_line[(before, "HKL603")]["message"]
    assert "registered on the sharded DTensor parameter" in by_code_line[(after, "HKL603")]["message"]
    assert "2 findings" not in result.stderr
    assert "findings observed while running" in result.stderr and "on 2 processes" in result.stderr


def test_fixed_twins_stay_clean_and_their_gradients_match(tmp_path):
    marker = new_marker()
    result = hooklint("run", "--nproc", "2", "--timeout", "150", str(PROGRAMS / "fixed_training.py"),
                      cwd=tmp_path, marker=marker)
    assert wait_for_no_survivors(marker) == []
    # the script exits 4 when a mask did not apply or the gradients differ across ranks
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert result.stdout.count("gradients as expected") == 2
    assert "no hook problems observed while running" in result.stderr


@pytest.mark.parametrize("section", ["Example", "Use instead"])
def test_docs_examples_of_rules_that_need_several_ranks(tmp_path, section):
    """HKL601's Example gives the finding on 2 ranks, its Use instead does not."""
    from hooklint.rules import all_rules

    checked = 0
    for rule in all_rules():
        if getattr(rule, "min_ranks", 1) < 2:
            continue
        for i, block in enumerate(rule.code_blocks(section)):
            program = tmp_path / f"{rule.code}_{i}.py"
            program.write_text(block)
            out = tmp_path / f"{rule.code}_{i}.json"
            marker = new_marker()
            result = hooklint("run", f"--nproc={rule.min_ranks}", "--timeout", "120", "--output-format", "json",
                              "-o", str(out), str(program), cwd=tmp_path, marker=marker)
            assert wait_for_no_survivors(marker) == []
            assert result.returncode == 0, result.stderr[-3000:]
            codes = {f["code"] for f in json.loads(out.read_text())}
            assert (rule.code in codes) == (section == "Example"), (rule.code, section, codes)
            checked += 1
    assert checked


def test_a_crashing_rank_keeps_its_status_and_leaves_no_process(tmp_path):
    marker = new_marker()
    result = hooklint("run", "--nproc", "2", "--timeout", "120", str(PROGRAMS / "crash.py"), cwd=tmp_path,
                      marker=marker)
    assert wait_for_no_survivors(marker) == []
    assert result.returncode == 1, result.stderr[-3000:]
    assert "ValueError: rank 1 fails on purpose" in result.stderr


def _wait_ready(folder, n, seconds=90):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all((folder / f"ready{rank}").exists() for rank in range(n)):
            return True
        time.sleep(0.2)
    return False


def test_timeout_ends_ranks_that_ignore_sigterm_and_their_escaped_children(tmp_path):
    marker = new_marker()
    started = time.monotonic()
    result = hooklint("run", "--nproc", "2", "--timeout", "10", str(PROGRAMS / "hang.py"), str(tmp_path),
                      cwd=tmp_path, marker=marker)
    took = time.monotonic() - started
    assert wait_for_no_survivors(marker, seconds=2) == []
    assert result.returncode == 124, result.stderr[-3000:]
    assert "stopped" in result.stderr and "after 10 s (--timeout)" in result.stderr
    assert took < 60


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])
def test_a_signal_to_hooklint_ends_every_process(tmp_path, signum, status):
    marker = new_marker()
    # hooklint as a terminal starts it: a suite run as a background job (`make test &`) has SIGINT ignored,
    # and an ignored disposition is inherited across exec, so Ctrl-C would never reach the child
    proc = subprocess.Popen([sys.executable, "-m", "hooklint", "run", "--nproc", "2", str(PROGRAMS / "hang.py"),
                             str(tmp_path)], cwd=tmp_path, env=env_with(marker), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert _wait_ready(tmp_path, 2), "the ranks never got ready"
        assert len(survivors(marker)) >= 5  # hooklint, the launcher, 2 ranks, their grandchildren
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == status, err[-3000:]  # as a shell reports a process ended by that signal
        assert wait_for_no_survivors(marker, seconds=2) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(marker)


def test_ranks_die_with_a_killed_launcher(tmp_path):
    """SIGKILL to the launcher, which can clean up nothing: its ranks die with it
    (PR_SET_PDEATHSIG) and hooklint kills their escaped grandchildren."""
    marker = new_marker()
    proc = subprocess.Popen([sys.executable, "-m", "hooklint", "run", "--nproc", "2", str(PROGRAMS / "hang.py"),
                             str(tmp_path)], cwd=tmp_path, env=env_with(marker), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_ready(tmp_path, 2), "the ranks never got ready"
        launchers = [pid for pid in survivors(marker) if b"hooklint.runtime.loopback_launcher" in
                     open(f"/proc/{pid}/cmdline", "rb").read()]
        assert len(launchers) == 1
        os.kill(launchers[0], signal.SIGKILL)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGKILL, err[-3000:]
        assert "ended without handing back observations" in err
        assert wait_for_no_survivors(marker, seconds=2) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_marked(marker)


@pytest.mark.parametrize(("args", "message"), [
    (["--nproc", "0"], "--nproc must be at least 1"),
    (["--timeout", "5"], "--timeout needs --nproc"),
    (["--nproc", "2", "--timeout", "-1"], "--timeout must be positive"),
])
def test_bad_arguments_are_usage_errors(tmp_path, args, message):
    script = tmp_path / "noop.py"
    script.write_text("print('never runs')\n")
    result = hooklint("run", *args, str(script), cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "never runs" not in result.stdout


def test_missing_script_is_a_usage_error_before_any_launch(tmp_path):
    marker = new_marker()
    result = hooklint("run", "--nproc", "2", "missing.py", cwd=tmp_path, marker=marker)
    assert result.returncode == 2
    assert "missing.py: no such file or directory" in result.stderr
    assert os.listdir(tmp_path) == []


IDLE_RANKS = """
import time
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
time.sleep(4)
dist.destroy_process_group()
"""


def _listening_sockets(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets in LISTEN state that these processes hold."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                found.add((address, int(port, 16)))
    return found


_LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1 and ::1 as /proc prints them


def test_the_launcher_listens_on_loopback_only(tmp_path):
    """torch's launcher serves the rendezvous and the ranks' store on every
    interface; under `hooklint run --nproc` both are bound to 127.0.0.1."""
    (tmp_path / "idle.py").write_text(IDLE_RANKS)
    marker = new_marker()
    proc = subprocess.Popen([sys.executable, "-m", "hooklint", "run", "--nproc", "2", "--timeout", "120", "idle.py"],
                            cwd=tmp_path, env=env_with(marker), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen: set[tuple[str, int]] = set()
    try:
        while proc.poll() is None:
            seen |= _listening_sockets(set(survivors(marker)))
            time.sleep(0.1)
        out, err = proc.communicate(timeout=60)
    finally:
        kill_marked(marker)
    assert proc.returncode == 0, err[-2000:]
    assert seen, "no listening socket was seen: the probe did not work"
    assert {address for address, _port in seen} <= _LOOPBACK, seen
