"""What importing the run-time entry points costs: `import hooklint`,
`hooklint.testing`, `hooklint.runtime` and the pytest plugin do not import
torch; starting a session does."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _modules_after(code: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


@pytest.mark.parametrize("statement", [
    "import hooklint",
    "import hooklint.testing",
    "import hooklint.runtime",
    "import hooklint.pytest_plugin",
    "import hooklint.cli.run",
])
def test_import_does_not_import_torch(statement):
    assert "torch" not in _modules_after(statement)


@pytest.mark.torch
def test_instrument_is_reachable_from_the_package():
    pytest.importorskip("torch")
    import hooklint
    from hooklint.runtime import Session, instrument

    assert hooklint.instrument is instrument
    assert isinstance(hooklint.instrument(), Session)
