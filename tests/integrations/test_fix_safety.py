"""`--fix` never loses data: what a file keeps when hooklint rewrites it
(owner, mode, hard links, extended attributes), and what happens when the
file changes under a run (an editor's save, two hooklint runs at once).

The protocol is in hooklint/fsutil.py (replace_file_bytes): the content is
compared with the bytes read, under a folder lock, right before it is
replaced; a file saved since the check read it is not fixed at all."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import run_cli
from hooklint.fix.files import SourceFile
from hooklint.fsutil import FileChanged, replace_file_bytes

BUGGY = """\
import torch

def scale(grad):
    grad *= 2

x = torch.ones(4, requires_grad=True)
x.register_hook(scale)
"""
FIXED = BUGGY.replace("    grad *= 2\n", "    grad = grad * 2\n    return grad\n")


def fix(cwd, *paths):
    return run_cli("check", "--static-only", "--no-cache", "--fix", *paths, cwd=cwd)


def xattrs_supported(path) -> bool:
    try:
        os.setxattr(path, "user.hooklint-probe", b"1")
        os.removexattr(path, "user.hooklint-probe")
        return True
    except (OSError, AttributeError):
        return False


class TestWhatAFileKeeps:
    def test_mode_owner_xattrs(self, tmp_path):
        target = tmp_path / "model.py"
        target.write_text(BUGGY)
        os.chmod(target, 0o640)
        owned = os.geteuid() == 0
        if owned:
            os.chown(target, 4321, 4321)  # another user's file, as root (CI) fixes it
        has_xattrs = xattrs_supported(target)
        if has_xattrs:
            os.setxattr(target, "user.origin", b"editor")
        fix(tmp_path, "model.py")
        assert target.read_text() == FIXED
        st = os.stat(target)
        assert st.st_mode & 0o7777 == 0o640
        if owned:
            assert (st.st_uid, st.st_gid) == (4321, 4321)
        if has_xattrs:
            assert os.getxattr(target, "user.origin") == b"editor"

    def test_hard_links_stay_one_file(self, tmp_path):
        target = tmp_path / "model.py"
        target.write_text(BUGGY)
        other = tmp_path / "elsewhere.txt"
        os.link(target, other)
        inode = os.stat(target).st_ino
        fix(tmp_path, "model.py")
        assert os.stat(target).st_ino == inode == os.stat(other).st_ino
        assert other.read_text() == FIXED
        assert not [p for p in tmp_path.iterdir() if "hooklint" in p.name and p.name != ".hooklint_cache"]

    def test_symlink_stays_a_link(self, tmp_path):
        real = tmp_path / "real.py"
        real.write_text(BUGGY)
        link = tmp_path / "link.py"
        link.symlink_to(real)
        fix(tmp_path, "link.py")
        assert link.is_symlink() and real.read_text() == FIXED


class TestAFileThatChanges:
    """Each moment a save can land, in one process: deterministic."""

    def test_saved_after_read(self, tmp_path):
        path = tmp_path / "model.py"
        path.write_text(BUGGY)
        source = SourceFile.read(str(path))
        path.write_text(BUGGY + "# the user's edit\n")
        with pytest.raises(FileChanged):
            source.write(FIXED)
        assert path.read_text() == BUGGY + "# the user's edit\n"

    def test_saved_by_rename_after_read(self, tmp_path):
        path = tmp_path / "model.py"
        path.write_text(BUGGY)
        source = SourceFile.read(str(path))
        new = tmp_path / ".model.py.swp"
        new.write_text(BUGGY + "# saved as editors save\n")
        os.replace(new, path)
        with pytest.raises(FileChanged):
            source.write(FIXED)
        assert path.read_text().endswith("# saved as editors save\n")

    def test_same_bytes_saved_again_is_not_a_change(self, tmp_path):
        path = tmp_path / "model.py"
        path.write_text(BUGGY)
        source = SourceFile.read(str(path))
        path.write_text(BUGGY)  # an editor's save that changed nothing
        source.write(FIXED)
        assert path.read_text() == FIXED

    def test_in_place_rewrite_refuses_a_changed_file(self, tmp_path):
        path = tmp_path / "model.py"
        path.write_bytes(b"old\n")
        os.link(path, tmp_path / "twin")
        with pytest.raises(FileChanged):
            replace_file_bytes(path, b"new\n", b"something else\n")
        assert path.read_bytes() == b"old\n"
        replace_file_bytes(path, b"new\n", b"old\n")
        assert (tmp_path / "twin").read_bytes() == b"new\n"

    def test_cli_says_the_file_changed_since_the_check(self, tmp_path):
        """A file saved between the check and the fix is left alone, with a
        line that says so (the findings' positions could be stale)."""
        (tmp_path / "a.py").write_text(BUGGY)
        # many files, so the check takes a while; the save lands during it
        for i in range(150):
            (tmp_path / f"m{i:03}.py").write_text(BUGGY)
        proc = subprocess.Popen([sys.executable, "-m", "hooklint", "check", "--static-only", "--no-cache", "-j", "1",
                                 "--fix", "."], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(0.3)
        edited = "# edited while hooklint ran\n" + BUGGY
        (tmp_path / "a.py").write_text(edited)
        out, err = proc.communicate(timeout=120)
        text = (tmp_path / "a.py").read_text()
        # hooklint read the file after the save and fixed the new text, or it
        # refused it, or the save landed after its write; it never reverts the edit
        assert text in (edited, "# edited while hooklint ran\n" + FIXED), err
        if text == edited:
            refused = "changed since hooklint" in err
            saved_after_the_fix = "Found 1 finding in 1 file" in err  # the re-check after --fix sees the save
            assert refused or saved_after_the_fix, err


class TestConcurrentRuns:
    def test_three_fix_runs_on_the_same_files(self, tmp_path):
        n = 200
        for i in range(n):
            (tmp_path / f"m{i:03}.py").write_text(BUGGY)
        procs = [subprocess.Popen([sys.executable, "-m", "hooklint", "check", "--static-only", "--no-cache", "-j", "1",
                                   "--fix", "."], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
        for p in procs:
            p.communicate(timeout=300)
        bad = [p.name for p in sorted(tmp_path.glob("m*.py")) if p.read_text() != FIXED]
        assert bad == []
        assert not [p.name for p in tmp_path.iterdir() if p.name.endswith((".hooklint-tmp", ".hooklint-backup"))]

    def test_editor_keeps_saving_during_three_runs(self, tmp_path):
        """An editor saves one file over and over (as editors do: a new file
        renamed over it) while three runs fix the folder: its last save is
        what the file holds at the end, fixed or not."""
        for i in range(120):
            (tmp_path / f"m{i:03}.py").write_text(BUGGY)
        target = tmp_path / "m060.py"
        procs = [subprocess.Popen([sys.executable, "-m", "hooklint", "check", "--static-only", "--no-cache", "-j", "1",
                                   "--fix", "."], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
        saves = []
        stop = threading.Event()

        def editor():
            n = 0
            while not stop.is_set():
                n += 1
                body = f"# save {n}\n" + BUGGY
                tmp = tmp_path / ".m060.py.swp"
                tmp.write_text(body)
                os.replace(tmp, target)
                saves.append(n)
                time.sleep(0.02)

        thread = threading.Thread(target=editor)
        thread.start()
        try:
            for p in procs:
                p.communicate(timeout=300)
        finally:
            stop.set()
            thread.join()
        last = saves[-1]
        assert target.read_text() in (f"# save {last}\n" + BUGGY, f"# save {last}\n" + FIXED)
        others = [p.name for p in sorted(tmp_path.glob("m*.py")) if p != target and p.read_text() != FIXED]
        assert others == []
