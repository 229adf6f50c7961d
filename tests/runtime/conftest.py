"""Helpers for the run-time layer's tests: programs are written to real files
(findings point at their lines) and run under instrumentation in-process."""

from __future__ import annotations

import runpy
import textwrap
import warnings
from pathlib import Path

import pytest


def pytest_configure(config):
    # `pytest_plugins` is refused in a conftest below the rootdir; this loads the
    # same plugin (the `pytester` fixture) for these tests.
    config.pluginmanager.import_plugin("pytester")


class Observed:
    """What a program did under instrumentation."""

    def __init__(self, path: Path, session, error: BaseException | None, namespace: dict):
        self.path = path
        self.session = session
        self.error = error
        self.namespace = namespace

    @property
    def findings(self):
        return self.session.findings

    def codes(self) -> list[tuple[int, str]]:
        return sorted((f.location.row, f.code) for f in self.findings if f.path.endswith(self.path.name))

    def line_of(self, marker: str) -> int:
        for number, line in enumerate(self.path.read_text().splitlines(), start=1):
            if marker in line:
                return number
        raise AssertionError(f"{marker!r} not in the program")

    def only(self, code: str):
        found = [f for f in self.findings if f.code == code]
        assert len(found) == 1, [(f.code, f.message) for f in self.findings]
        return found[0]


_counter = 0


@pytest.fixture
def observe(tmp_path):
    """observe(source, select=["ALL"]) writes the program to a file, runs it as
    __main__ under `hooklint.instrument()` and returns an `Observed`."""

    def _observe(source: str, select=("ALL",), expect_error: type[BaseException] | None = None) -> Observed:
        global _counter
        import hooklint

        _counter += 1
        path = tmp_path / f"program_{_counter}.py"
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        error = None
        namespace: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with hooklint.instrument(select=list(select)) as session:
                try:
                    namespace = runpy.run_path(str(path), run_name="__main__")
                except Exception as exc:  # noqa: BLE001 - the tests decide what is expected
                    error = exc
                    session.observe_exception(exc)
        if expect_error is None and error is not None:
            raise error
        if expect_error is not None:
            assert isinstance(error, expect_error), f"expected {expect_error.__name__}, got {error!r}"
        assert not session.notices, session.notices
        return Observed(path, session, error, namespace)

    return _observe
