"""pytest plugin (entry point ``pytest11``, name ``hooklint``).

``pytest --hooklint`` instruments every test, from the setup of its fixtures
to its end, and fails a test whose run produced findings, with the same codes
and messages as ``hooklint check``.  Rule selection comes from
``[tool.hooklint]`` (``select``, ``ignore``, ``per-file-ignores``), then
``--hooklint-select`` / ``--hooklint-ignore``, then a test's
``@pytest.mark.hooklint(select=..., ignore=..., enabled=...)``.  Findings
below ``fail-on`` (``--hooklint-fail-on``) do not fail the test: they are
reported in pytest's warnings summary.

The ``hooklint_session`` fixture gives the test its session (``.findings``);
without ``--hooklint`` it starts one for that test only.  ``-p no:hooklint``
turns the plugin off.

This module imports neither torch nor the runtime layer unless ``--hooklint``
is given or the fixture is used: it is loaded in every pytest run of every
project that installed hooklint.
"""

from __future__ import annotations

import pytest

_SESSION_KEY = pytest.StashKey["object"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hooklint", "hook-correctness checks for PyTorch (hooklint)")
    group.addoption("--hooklint", action="store_true", default=False,
                    help="Instrument every test and fail those whose run showed hook problems.")
    group.addoption("--hooklint-select", action="append", default=None, metavar="CODES",
                    help="Rules to report, replacing [tool.hooklint] select (comma-separated: HKL2,HKL304).")
    group.addoption("--hooklint-ignore", action="append", default=None, metavar="CODES",
                    help="Rules not to report, in addition to [tool.hooklint] ignore.")
    group.addoption("--hooklint-fail-on", default=None, choices=("error", "warning", "info"),
                    help="The lowest severity that fails a test (default: [tool.hooklint] fail-on, else warning); "
                         "findings below it are reported as warnings in pytest's summary.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "hooklint(select=None, ignore=(), enabled=True): rule selection for this test under `pytest --hooklint`",
    )
    if config.getoption("hooklint"):
        config.pluginmanager.register(_Runner(config), "hooklint-runner")


def _comma_list(values: list[str] | None) -> list[str] | None:
    if values is None:
        return None
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


class _Runner:
    """Starts a session before each test's setup, judges it after the call, stops
    it after teardown."""

    def __init__(self, config: pytest.Config):
        from hooklint.config import ConfigError, load_config, validate_selectors

        try:
            self.cfg = load_config(start=config.rootpath)
            select = _comma_list(config.getoption("hooklint_select"))
            ignore = _comma_list(config.getoption("hooklint_ignore")) or []
            if select is not None:
                validate_selectors(select, "--hooklint-select")
                self.cfg.select = select
            validate_selectors(ignore, "--hooklint-ignore")
            self.cfg.ignore = self.cfg.ignore + ignore
            if config.getoption("hooklint_fail_on"):
                self.cfg.fail_on = config.getoption("hooklint_fail_on")
        except ConfigError as exc:
            raise pytest.UsageError(f"hooklint: {exc}") from None
        self.errors: list[tuple[str, str]] = []  # (test, message) of hooklint's own errors

    def _codes_for(self, item: pytest.Item) -> frozenset[str] | None:
        from hooklint.config import ConfigError, resolve_codes, validate_selectors

        select, extend, ignore = self.cfg.select, list(self.cfg.extend_select), list(self.cfg.ignore)
        for marker in reversed(list(item.iter_markers("hooklint"))):  # the closest marker is applied last
            if marker.args or marker.kwargs.get("enabled", True) is False:
                if marker.args and marker.args[0] is not False:
                    raise pytest.UsageError("use @pytest.mark.hooklint(enabled=False) to turn hooklint off")
                return None
            try:
                if "select" in marker.kwargs:
                    select = list(marker.kwargs["select"])
                    validate_selectors(select, f"{item.nodeid}: hooklint marker")
                if "ignore" in marker.kwargs:
                    ignore += list(marker.kwargs["ignore"])
                    validate_selectors(list(marker.kwargs["ignore"]), f"{item.nodeid}: hooklint marker")
            except ConfigError as exc:
                raise pytest.UsageError(str(exc)) from None
        return frozenset(resolve_codes(select, extend, ignore))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        codes = self._codes_for(item)
        if codes is not None:
            from hooklint.runtime.session import Session

            session = Session(codes=codes)
            item.stash[_SESSION_KEY] = session
            session.start()
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        session = item.stash.get(_SESSION_KEY, None)
        if session is None:
            return (yield)
        try:
            result = yield
        except BaseException as exc:
            session.observe_exception(exc)
            failing, passing = self._texts(session)
            errors = self._errors(session, item)
            if failing or passing or errors:
                item.add_report_section("call", "hooklint", "\n\n".join(t for t in (failing, passing, errors) if t))
            raise
        failing, passing = self._texts(session)
        errors = self._errors(session, item)
        if passing:  # below `fail-on`: said, but the test passes
            item.warn(HooklintFindings(passing))
        if failing or errors:
            raise pytest.fail.Exception("\n\n".join(t for t in (failing, errors) if t), pytrace=False)
        return result

    def _errors(self, session, item: pytest.Item) -> str:
        """hooklint's own errors while it watched the test: the test's result
        cannot be trusted to say "no hook problem", so they fail it, and the
        run's summary lists them again."""
        from hooklint.findings import NoticeLevel

        errors = [n.message for n in session.notices if n.level is NoticeLevel.ERROR]
        if not errors:
            return ""
        self.errors.extend((item.nodeid, message) for message in errors)
        lines = ["hooklint could not watch this test: " + message for message in errors]
        lines.append("(run without --hooklint, or mark the test @pytest.mark.hooklint(enabled=False), "
                     "to go on without it)")
        return "\n".join(lines) + "\n"

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.errors:
            terminalreporter.section("hooklint errors", sep="-", red=True)
            for nodeid, message in self.errors:
                terminalreporter.line(f"{nodeid}: {message}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem):
        try:
            return (yield)
        finally:
            session = item.stash.get(_SESSION_KEY, None)
            if session is not None:
                session.stop()

    def _texts(self, session) -> tuple[str, str]:
        """(what fails the test, what is below `fail-on`): the findings as text, "" when none."""
        from hooklint.engine import rel_to_root
        from hooklint.runtime.observation import rule_for

        session.judge_pending()
        observations = [
            obs for obs in session.observations
            if not self.cfg.per_file_ignores
            or obs.code not in self.cfg.ignored_for(rel_to_root(obs.site.filename, self.cfg.root))
        ]

        def fails(obs) -> bool:
            rule = rule_for(obs.code)
            return rule is None or self.cfg.fails(rule.severity)

        failing = [obs for obs in observations if fails(obs)]
        passing = [obs for obs in observations if not fails(obs)]
        return (_titled(failing, "hook problems observed in this test"),
                _titled(passing, f"below `fail-on = \"{self.cfg.fail_on}\"`, not failing the test"))


class HooklintFindings(UserWarning):
    """Findings of a test run below `fail-on`: shown in pytest's warnings summary."""


def _titled(observations, what: str) -> str:
    """The text of a test's findings; its first line, which pytest's short
    summary shows, names the codes: ``hooklint HKL101, HKL304: ...``."""
    from hooklint.testing import format_observations

    if not observations:
        return ""
    codes = ", ".join(dict.fromkeys(obs.code for obs in observations))
    return format_observations(observations, f"hooklint {codes}: {what}")


@pytest.fixture
def hooklint_session(request: pytest.FixtureRequest):
    """The hooklint session observing this test (``.findings``, ``.observations``)."""
    session = request.node.stash.get(_SESSION_KEY, None)
    if session is not None:
        yield session
        return
    from hooklint.runtime.session import Session

    with Session() as session:
        yield session
