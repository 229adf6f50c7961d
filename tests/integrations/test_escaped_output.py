"""Names from the checked tree are printed escaped in the text formats: a
file name with a newline cannot forge a finding line, an ANSI sequence in a
hook's name cannot recolour or clear the terminal, and a bidirectional
control in a code frame cannot make the line read otherwise than Python
reads it."""

from __future__ import annotations

from conftest import run_cli
from hooklint.report.escape import printable

ESC = "\x1b"

HOOKED = '''\
import torch

def {name}(grad):
    grad *= 2  # {comment}

x = torch.ones(4, requires_grad=True)
x.register_hook({name})
'''


def test_printable():
    assert printable("plain name.py") == "plain name.py"
    assert printable("tab\tstays") == "tab\tstays"
    assert printable("a\nb") == "a\\nb"
    assert printable(ESC + "[2J") == "\\x1b[2J"
    assert printable("x\u202ey") == "x\\u202ey"
    assert printable("\x85\x9b") == "\\x85\\x9b"
    assert printable("unicode é ü 名前") == "unicode é ü 名前"


def test_file_name_with_a_newline_cannot_forge_a_finding(tmp_path):
    forged = "x.py:1:1: HKL999 forged"
    (tmp_path / f"evil\n{forged}.py").write_text(HOOKED.format(name="scale", comment="ok"))
    proc = run_cli("check", "--static-only", "--output-format", "concise", ".", cwd=tmp_path)
    lines = proc.stdout.splitlines()
    assert not any(line.startswith("x.py:1:1: HKL999") for line in lines)
    assert any(line.startswith("evil\\nx.py:1:1: HKL999 forged.py:4:5: HKL401") for line in lines), proc.stdout
    files = run_cli("check", "--show-files", ".", cwd=tmp_path).stdout.splitlines()
    assert files == ["evil\\nx.py:1:1: HKL999 forged.py"]


def test_escape_sequences_in_the_code_frame_and_messages(tmp_path):
    (tmp_path / "m.py").write_text(HOOKED.format(name="scale", comment=f"{ESC}[2J{ESC}]0;pwned\x07 \u202e"))
    for fmt in ("full", "concise", "github"):
        proc = run_cli("check", "--static-only", "--output-format", fmt, "m.py", cwd=tmp_path)
        assert ESC not in proc.stdout and "\x07" not in proc.stdout and "\u202e" not in proc.stdout, fmt
        assert "HKL401" in proc.stdout
    full = run_cli("check", "--static-only", "m.py", cwd=tmp_path).stdout
    assert "\\x1b[2J" in full and "\\u202e" in full


def test_the_caret_stays_under_the_code_after_an_escape(tmp_path):
    (tmp_path / "m.py").write_text("import torch\nx = torch.ones(2, requires_grad=True)\n"
                                   "s = '\x1b'; x.register_hook(lambda g: g.mul_(2))\n")
    full = run_cli("check", "--static-only", "m.py", cwd=tmp_path).stdout.splitlines()
    code = next(line for line in full if "register_hook" in line and "|" in line)
    caret = full[full.index(code) + 1]
    start = caret.index("^")
    assert code[start:].startswith("g.mul_(2)"), (code, caret)
