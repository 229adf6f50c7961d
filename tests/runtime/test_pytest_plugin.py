"""The pytest plugin, run with pytester: `--hooklint` fails a test whose run had
hook problems and passes a clean one; selection from the command line, the
configuration and a marker; the `hooklint_session` fixture; `-p no:hooklint`;
no torch import unless asked."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

BUGGY_AND_CLEAN = """
import pytest
import torch

@pytest.fixture
def model():
    layer = torch.nn.Linear(4, 2)
    def scale(grad):
        grad *= 2   # in place: HKL401
    layer.weight.register_hook(scale)  # registered in a fixture: still observed
    return layer

def test_buggy(model):
    model(torch.rand(3, 4)).sum().backward()

def test_clean():
    x = torch.ones(3, requires_grad=True)
    x.register_hook(lambda g: g * 2)
    (x ** 2).sum().backward()
    assert x.grad.tolist() == [4.0, 4.0, 4.0]
"""


def test_failing_and_passing_tests(pytester):
    pytester.makepyfile(test_hooks=BUGGY_AND_CLEAN)
    result = pytester.runpytest("--hooklint")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*hooklint HKL401: hook problems observed in this test: 1 finding.",
        "*HKL401 hook-mutates-argument: tensor hook `model.scale` on `layer.weight` (shape (2, 4)) modified its "
        "gradient argument `grad` in place*",
        "*at: test_hooks.py:9: layer.weight.register_hook(scale)*",
        "*FAILED test_hooks.py::test_buggy*",
    ])


def test_the_short_summary_names_the_code(pytester):
    pytester.makepyfile(test_hooks=BUGGY_AND_CLEAN)
    result = pytester.runpytest("--hooklint", "-rf")
    result.stdout.fnmatch_lines(["FAILED test_hooks.py::test_buggy - Failed: hooklint HKL401: *"])


LEGACY = """
import torch

def test_legacy_hook():
    layer = torch.nn.Linear(4, 2)
    layer.register_backward_hook(lambda m, gi, go: None)  # HKL101, a warning
    layer(torch.rand(3, 4, requires_grad=True)).sum().backward()
"""


def test_fail_on_decides_which_findings_fail_a_test(pytester):
    pytester.makepyfile(test_legacy=LEGACY)
    result = pytester.runpytest("--hooklint")
    result.assert_outcomes(failed=1)  # fail-on = "warning", the default
    result.stdout.fnmatch_lines(["*Failed: hooklint HKL101: *"])
    passed = pytester.runpytest("--hooklint", "--hooklint-fail-on=error")
    passed.assert_outcomes(passed=1, warnings=1)
    passed.stdout.fnmatch_lines(["*HooklintFindings: hooklint HKL101: below `fail-on = \"error\"`, not failing "
                                 "the test: 1 finding.*"])
    pytester.makepyprojecttoml('[tool.hooklint]\nfail-on = "error"\n')
    pytester.runpytest("--hooklint").assert_outcomes(passed=1, warnings=1)


def test_without_the_option_nothing_fails(pytester):
    pytester.makepyfile(test_hooks=BUGGY_AND_CLEAN)
    pytester.runpytest().assert_outcomes(passed=2)


def test_selection_from_options_config_and_marker(pytester):
    pytester.makepyfile(test_hooks=BUGGY_AND_CLEAN)
    pytester.runpytest("--hooklint", "--hooklint-ignore=HKL4").assert_outcomes(passed=2)
    pytester.runpytest("--hooklint", "--hooklint-select=HKL2,HKL3").assert_outcomes(passed=2)
    pytester.makepyprojecttoml('[tool.hooklint]\nignore = ["HKL401"]\n')
    pytester.runpytest("--hooklint").assert_outcomes(passed=2)
    pytester.makepyprojecttoml('[tool.hooklint]\nselect = ["HKL"]\n')
    pytester.makepyfile(test_hooks=BUGGY_AND_CLEAN.replace(
        "def test_buggy", "@pytest.mark.hooklint(ignore=['HKL401'])\ndef test_buggy"))
    pytester.runpytest("--hooklint").assert_outcomes(passed=2)
    pytester.makepyfile(test_hooks=BUGGY_AND_CLEAN.replace(
        "def test_buggy", "@pytest.mark.hooklint(enabled=False)\ndef test_buggy"))
    pytester.runpytest("--hooklint").assert_outcomes(passed=2)


def test_bad_selector_is_a_usage_error(pytester):
    pytester.makepyfile(test_hooks=BUGGY_AND_CLEAN)
    result = pytester.runpytest("--hooklint", "--hooklint-select=HKL999")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*hooklint: --hooklint-select: *HKL999*"])


def test_hooklint_session_fixture(pytester):
    pytester.makepyfile(test_fixture="""
        import torch

        def test_sees_findings(hooklint_session):
            x = torch.ones(3, requires_grad=True)
            x.register_hook(lambda g: g.mul_(2))
            (x ** 2).sum().backward()
            assert [f.code for f in hooklint_session.findings] == ["HKL401"]
    """)
    pytester.runpytest().assert_outcomes(passed=1)
    # under --hooklint the fixture is the plugin's session, and the finding fails the test
    pytester.runpytest("--hooklint").assert_outcomes(failed=1)


def test_plugin_can_be_disabled(pytester):
    pytester.makepyfile(test_fixture="def test_uses(hooklint_session):\n    pass\n")
    result = pytester.runpytest("-p", "no:hooklint")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'hooklint_session' not found*"])
    disabled = pytester.runpytest("-p", "no:hooklint", "--hooklint")
    assert disabled.ret == pytest.ExitCode.USAGE_ERROR


def test_helpers_hide_their_frames(pytester):
    pytester.makepyfile(test_helper="""
        import torch
        from hooklint.testing import assert_no_legacy_hooks

        def test_legacy():
            layer = torch.nn.Linear(2, 2)
            layer.register_backward_hook(lambda m, gi, go: None)
            assert_no_legacy_hooks(layer)
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert_no_legacy_hooks(layer)*", "E*AssertionError: Legacy backward hooks found*"])
    assert "hooklint/testing.py" not in result.stdout.str()


def test_plugin_does_not_import_torch_without_the_option(pytester):
    pytester.makepyfile(test_light="""
        import sys

        def test_no_torch():
            assert "torch" not in sys.modules
            assert "hooklint.pytest_plugin" in sys.modules
    """)
    pytester.runpytest_subprocess("-p", "hooklint").assert_outcomes(passed=1)


BROKEN_RUNTIME = """
import pytest
import torch
from hooklint.runtime.core import RUNTIME

def explain(*args, **kwargs):
    raise KeyError("a bug in hooklint")

@pytest.fixture(autouse=True)
def broken(monkeypatch):  # undone after each test: pytester runs in this very process
    monkeypatch.setattr(RUNTIME, "explain_exception", explain)

def test_fails_on_its_own():
    raise ValueError("the test's own failure")

def test_passes():
    x = torch.ones(2, requires_grad=True)
    (x * 2).sum().backward()
"""


def test_an_internal_error_is_seen(pytester, monkeypatch):
    """hooklint's own error while it watches a test is shown in that test's
    report and in the run's summary, never swallowed."""
    monkeypatch.delenv("HOOKLINT_STRICT", raising=False)  # strict mode raises instead: the user's mode here
    pytester.makepyfile(test_broken=BROKEN_RUNTIME)
    result = pytester.runpytest("--hooklint")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*hooklint could not watch this test: hooklint internal error at *: KeyError: 'a bug in hooklint'*",
        "*hooklint errors*",
        "test_broken.py::test_fails_on_its_own: hooklint internal error*",
    ])
