"""The static pass imports no torch and executes no user code."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

from conftest import FIXTURES, ROOT

PROBE = textwrap.dedent(
    """
    import sys
    from hooklint.cli import main
    code = main(sys.argv[1:])
    leaked = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    print("TORCH_MODULES=" + ",".join(leaked))
    print("EXIT=" + str(code))
    """
)


def _run_static(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE, "check", "--static-only", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_static_check_never_imports_torch_nor_runs_user_code(tmp_path):
    marker = tmp_path / "MARKER"
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent(f"""
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("imported!")
        import torch
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                pathlib.Path({str(marker)!r}).write_text("constructed!")
                self.fc = nn.Linear(2, 2)

            def forward(self, x):
                return self.fc(x)

        net = Net()
        net.register_backward_hook(lambda m, gi, go: print(gi))

        if __name__ == "__main__":
            pathlib.Path({str(marker)!r}).write_text("ran as main!")
    """))
    r = _run_static(str(model), str(FIXTURES), cwd=tmp_path)
    assert "EXIT=1" in r.stdout, r.stderr  # it did find the legacy hook
    assert re.search(r"model.py:\d+:\d+: HKL101", r.stdout)
    assert "TORCH_MODULES=\n" in r.stdout, "the static pass imported torch"
    assert not marker.exists(), f"user code ran: {marker.read_text()}"


def test_importing_hooklint_does_not_import_torch():
    code = ("import sys, hooklint, hooklint.cli, hooklint.engine, hooklint.report, hooklint.rules;"
            "hooklint.rules.all_rules();"
            "print([m for m in sys.modules if m.split('.')[0] == 'torch'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
