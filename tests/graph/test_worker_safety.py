"""Importing user model files: only definitions run, in a worker subprocess with a
timeout per step and a memory limit; each misbehaving file costs one notice
and the run goes on.  One provider run over all the files below (the worker is
reused, and restarted after the crash)."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from hooklint.config import Config
from hooklint.findings import NoticeLevel
from hooklint.graph.provider import GraphRun, provide_graph_facts

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

MODEL = """
import os
import socket
import torch
import torch.nn as nn


class {name}(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        {init}

    def forward(self, x):
        return self.fc(x)
"""

FILES = {
    "a_good.py": MODEL.format(name="First", init="pass"),
    # a script: trains, writes files and loops forever at top level, and in its main block
    "b_trains.py": MODEL.format(name="Net", init="pass") + textwrap.dedent("""
        net = Net()
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        with open("TRAINED_MARKER", "w") as handle:
            handle.write("trained")
        for step in range(10 ** 9):
            net(torch.rand(2, 3)).sum().backward()
            opt.step()
        while True:
            pass
        if __name__ == "__main__":
            open("MAIN_MARKER", "w").write("main")
    """),
    "c_writes.py": MODEL.format(name="Writer", init='open("WRITTEN_MARKER", "w").write("x")'),
    "d_hangs.py": MODEL.format(name="Hang", init="while True: pass"),
    "e_exits.py": MODEL.format(name="Exit", init="os._exit(3)"),
    "f_forks.py": MODEL.format(name="Fork", init="os.fork()"),
    "g_crashes.py": MODEL.format(name="Crash", init="import ctypes; ctypes.string_at(0)"),
    "h_import_fails.py": "import hooklint_no_such_module\n" + MODEL.format(name="Missing", init="pass"),
    # 6 GiB: more than the default memory-limit (4 GiB), and fine without it
    "i_memory.py": MODEL.format(name="Huge", init="self.table = torch.zeros(3 * 2 ** 29)"),
    "j_network.py": MODEL.format(name="Online", init='socket.create_connection(("192.0.2.1", 80), timeout=5)'),
    # hostile: switches the audit hook off first; the kernel sandbox refuses all the same
    "jj_bypasses.py": MODEL.format(name="Bypass", init=(
        '[setattr(g, "active", False) for g in __import__("gc").get_objects() if type(g).__name__ == "Guard"]; '
        'open("BYPASS_MARKER", "w").write("x")')),
    # honest code that needs a temporary file and /dev/null at import (what `import trio` does): allowed
    "jk_tempfile.py": ("import tempfile\nwith tempfile.TemporaryFile() as _handle:\n    _handle.write(b'x')\n"
                       "with open(os.devnull, 'w') as _sink:\n    _sink.write('x')\n"
                       "with open(os.path.join(tempfile.gettempdir(), 'scratch.txt'), 'w') as _kept:\n"
                       "    _kept.write('x')\n" + MODEL.replace("import os\n", "", 1)).replace(
        "import tempfile", "import os\nimport tempfile", 1).format(name="UsesTemp", init="pass"),
    "k_good.py": MODEL.format(name="Last", init="pass"),
}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    paths = []
    for name, text in FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
        paths.append(str(folder / name))
    run = GraphRun()
    facts, notices = provide_graph_facts(paths, Config(root=folder), use_cache=False, timeout=3, run=run)
    by_file = defaultdict(list)
    for notice in notices:
        by_file[Path(notice.path).name].append(notice)
    return folder, facts, by_file, run


def _facts(analysed, name):
    folder, facts, _notices, _run = analysed
    return facts[str(folder / name)]


def test_good_files_before_and_after_the_trouble_are_analysed(analysed):
    for name, cls in (("a_good.py", "First"), ("k_good.py", "Last")):
        found = _facts(analysed, name)
        assert [m.class_name for m in found.models] == [cls] and found.models[0].autograd
    assert not analysed[2]["a_good.py"] and not analysed[2]["k_good.py"]


def test_temporary_files_in_scratch_and_dev_null_are_allowed(analysed):
    """The box allows writes in its scratch folder (the temp folder model code
    sees) and to /dev/null: a library that opens a temporary file at import
    still gets its model analysed."""
    found = _facts(analysed, "jk_tempfile.py")
    assert [m.class_name for m in found.models] == ["UsesTemp"] and found.models[0].autograd
    assert not analysed[2]["jk_tempfile.py"]
    assert not list(analysed[0].glob("scratch.txt"))


def test_top_level_training_writing_and_looping_never_run(analysed):
    folder = analysed[0]
    found = _facts(analysed, "b_trains.py")
    assert [m.class_name for m in found.models] == ["Net"] and found.error is None
    assert found.skipped_statements == 6
    assert not list(folder.glob("*MARKER*")), "model code wrote a file"
    assert not analysed[2]["b_trains.py"]


def _only_notice(analysed, name):
    notices = analysed[2][name]
    assert len(notices) == 1, notices
    assert "\n" not in notices[0].message
    return notices[0]


@pytest.mark.parametrize(("name", "level", "words"), [
    ("c_writes.py", NoticeLevel.INFO, "Writer() failed: Blocked: hooklint does not let model code write to "
                                      "'WRITTEN_MARKER'"),
    ("e_exits.py", NoticeLevel.INFO, "Exit() failed: Blocked: hooklint does not let model code end the process "
                                     "(os._exit(3))"),
    ("f_forks.py", NoticeLevel.INFO, "Fork() failed: Blocked: hooklint does not let model code fork the process"),
    ("j_network.py", NoticeLevel.INFO, "Online() failed: Blocked: hooklint does not let model code look up a "
                                       "network address"),
    ("h_import_fails.py", NoticeLevel.SKIP, "graph analysis skipped: importing its definitions failed: "
                                            "ModuleNotFoundError: No module named 'hooklint_no_such_module'"),
    ("i_memory.py", NoticeLevel.INFO, "Huge() failed: RuntimeError: [enforce fail at alloc_cpu.cpp:"),
    ("i_memory.py", NoticeLevel.INFO, "raise `memory-limit` in [tool.hooklint] if the model needs more"),
    ("d_hangs.py", NoticeLevel.ERROR, "graph analysis timed out after 3 s while building Hang() "
                                      "(no-argument constructor); the model code was stopped"),
    ("g_crashes.py", NoticeLevel.ERROR, "graph analysis failed: the model code crashed the worker (killed by "
                                        "SIGSEGV"),
])
def test_one_clear_notice_per_misbehaving_file(analysed, name, level, words):
    notice = _only_notice(analysed, name)
    assert notice.level is level
    assert words in notice.message, notice.message
    assert not list(analysed[0].glob("*MARKER*"))


def test_code_that_switches_the_audit_hook_off_meets_the_kernel(analysed):
    """The hook only explains; the boundary is the kernel sandbox (tests/security
    tries every escape of the security review)."""
    from security.conftest import require_sandbox

    assert not list(analysed[0].glob("*MARKER*"))
    require_sandbox()
    message = _only_notice(analysed, "jj_bypasses.py").message
    assert "Bypass() failed: " in message and "Blocked" not in message, message
    assert "Read-only file system" in message or "Permission denied" in message, message


def test_the_crash_names_what_was_running(analysed):
    message = _only_notice(analysed, "g_crashes.py").message
    assert "while building Crash() (no-argument constructor)" in message


def test_one_worker_served_every_file_even_the_crash(analysed):
    """Each file runs in a child the worker forks (hooklint.sandbox.zygote): the
    hang is stopped inside it (each step has its own alarm), and the crash
    costs that child only, not the worker."""
    run = analysed[3]
    assert run.workers_started == 1
    assert len(run.imported) == len(FILES)


def test_a_hanging_model_does_not_cost_the_other_models_of_its_file(tmp_path):
    source = MODEL.format(name="Hang", init="while True: pass") + MODEL.format(name="Fine", init="pass")
    path = tmp_path / "two.py"
    path.write_text(source, encoding="utf-8")
    facts, notices = provide_graph_facts([str(path)], Config(root=tmp_path), use_cache=False, timeout=2)
    found = facts[str(path)]
    assert [m.class_name for m in found.models] == ["Fine"]
    assert [(n.level, n.message.split(";")[0]) for n in notices] == [
        (NoticeLevel.ERROR, "graph analysis timed out after 2 s while building Hang() (no-argument constructor)")]
