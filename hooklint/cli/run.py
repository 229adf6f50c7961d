"""``hooklint run SCRIPT [ARGS...]`` / ``hooklint run -m MODULE [ARGS...]``: run a
program under instrumentation and report the hook problems it really had.

The program runs as ``__main__`` in this process, as with ``python``; its own
output and exit status are kept.  Findings are printed once it has finished
(also when it calls ``sys.exit`` or raises): to stdout after its output, or to
``-o FILE`` so the two never mix.

``--nproc N`` runs it on N local processes through PyTorch's launcher
(``torch.distributed.run``), observed in every rank; the ranks' findings are
merged into one report (hooklint.runtime.distributed_launch).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from hooklint.cli import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, SUBCOMMANDS
from hooklint.cli.options import (
    add_fail_on_option,
    add_output_options,
    add_selection_options,
    config_from_args,
    write_output,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "run",
        help=SUBCOMMANDS["run"],
        description="Run SCRIPT (or `-m MODULE`) as __main__, like `python`, observing every hook it "
        "registers and every backward it runs, then report what went wrong with the same codes as "
        "`hooklint check`. The script's output and exit status are kept; findings follow its output on "
        "stdout, or go to -o FILE.",
        usage="hooklint run [options] SCRIPT [ARGS...]\n       hooklint run [options] -m MODULE [ARGS...]",
    )
    add_selection_options(p)
    add_output_options(p)
    g = p.add_argument_group("behaviour")
    g.add_argument("--config", action="append", metavar="FILE | KEY=VALUE",
                   help="Read configuration from FILE instead of the nearest pyproject.toml / hooklint.toml; or "
                        "set one key inline, as TOML (`--config 'select = [\"HKL1\"]'`). Repeatable.")
    g.add_argument("--isolated", action="store_true", help="Ignore all configuration files.")
    g.add_argument("--fail-on-findings", action="store_true",
                   help="Exit 1 when the script succeeded but findings at or above `fail-on` were reported "
                   "(default: the script's own exit status).")
    add_fail_on_option(g)
    g.add_argument("-q", "--quiet", action="store_true", help="No summary line on stderr.")
    d = p.add_argument_group("distributed")
    d.add_argument("--nproc", type=int, metavar="N",
                   help="Run the program on N local processes through PyTorch's launcher "
                   "(`python -m torch.distributed.run --standalone --nproc-per-node N`, a free port picked for the "
                   "rendezvous), observing every rank; findings of all ranks are merged into one report. The "
                   "program initialises its process group as under torchrun (gloo on CPU).")
    d.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="With --nproc: stop the launcher and every rank after SECONDS (exit 124), whatever they "
                   "are doing.")
    p.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS...]",
                   help="Run a module, as `python -m` does; everything after it is passed to the module.")
    p.add_argument("script", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]",
                   help="The script to run and its arguments.")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hooklint.engine import UsageError

    if args.module:
        module, script, script_args = args.module[0], None, args.module[1:]
    elif args.script:
        module, script, script_args = None, args.script[0], args.script[1:]
    else:
        raise UsageError("nothing to run: give a SCRIPT or -m MODULE")
    args.paths = [script] if script is not None else []
    config = config_from_args(args)
    codes = config.enabled_codes()

    if args.timeout is not None and args.nproc is None:
        raise UsageError("--timeout needs --nproc")
    if args.nproc is None:
        require_torch("hooklint run")  # with --nproc the ranks import it, never this process
    from hooklint.runtime.script import ScriptNotFound, check_target, run_main
    from hooklint.runtime.session import Session
    try:
        check_target(script, module)
    except ScriptNotFound as exc:
        raise UsageError(str(exc)) from None
    if args.nproc is not None:
        return _run_distributed(args, config, codes, script, module, script_args)

    own = _OwnStreams()  # the script may close or replace sys.stdout/sys.stderr, even fds 1 and 2
    session = Session(codes=codes, all_threads=True)
    session.start()
    try:
        outcome = run_main(script, module, script_args)
        if outcome.exception is not None:
            session.observe_exception(outcome.exception)
    finally:
        session.stop()  # judged while the script's objects are still alive
    outcome.namespace = None

    report = session.report()
    failure = script_failure(outcome, session.observations)
    with own.installed():
        _emit(report, config.output_format, args, script or f"-m {module}", failure)
    if outcome.exit_code == 0 and args.fail_on_findings and any(config.fails(f.severity) for f in report.findings):
        return EXIT_FINDINGS
    return outcome.exit_code


def _run_distributed(args: argparse.Namespace, config, codes, script: str | None, module: str | None,
                     script_args: list[str]) -> int:
    from hooklint.engine import UsageError
    from hooklint.findings import Notice, NoticeLevel, Report
    from hooklint.runtime.distributed_launch import LaunchError, launch, merged
    from hooklint.runtime.session import Session

    if args.nproc < 1:
        raise UsageError(f"--nproc must be at least 1 (got {args.nproc})")
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise UsageError("`hooklint run --nproc` needs torch; install it or `hooklint[torch]`")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout must be positive (got {args.timeout:g})")
    rank_args = [script, *script_args] if script is not None else ["-m", module or "", *script_args]
    from hooklint.runtime.distributed_launch import Terminated

    try:
        outcome = launch(rank_args, args.nproc, mode="run", codes=codes, timeout=args.timeout)
    except (LaunchError, OSError) as exc:
        raise UsageError(f"cannot launch {args.nproc} processes: {exc}") from None
    except Terminated:
        sys.stderr.write("hooklint run: terminated; the launcher and every rank were stopped\n")
        return 143
    observations, notices = merged(outcome)
    folded = Session(codes=codes)
    folded.merge(observations)
    what = script or f"-m {module}"
    extra = []
    if outcome.timed_out:
        extra.append(Notice("<runtime>", f"hooklint run: stopped {what} after {args.timeout:g} s (--timeout); "
                            "the launcher and every rank were ended", NoticeLevel.ERROR))
    elif outcome.missing:
        ranks = ", ".join(map(str, outcome.missing))
        extra.append(Notice("<runtime>", f"hooklint run: rank{'s' if len(outcome.missing) > 1 else ''} {ranks} "
                            "ended without handing back observations (killed, or the launcher stopped them after "
                            "another rank failed)", NoticeLevel.ERROR))
    report = Report(findings=folded.findings, notices=[*notices, *folded.notices, *extra])
    failure = (f"it exited with status {outcome.exit_code}", []) if outcome.exit_code != 0 else None
    _emit(report, config.output_format, args, f"{what} on {args.nproc} process{'es' if args.nproc > 1 else ''}",
          failure)
    if outcome.exit_code == 0 and args.fail_on_findings and any(config.fails(f.severity) for f in report.findings):
        return EXIT_FINDINGS
    return outcome.exit_code


def require_torch(command: str) -> None:
    """One line and exit 2 when torch cannot be imported: the run-time layer
    instruments torch itself, so nothing can run without it."""
    from hooklint.engine import UsageError

    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"`{command}` needs torch, which is not installed ({exc}): "
                         f"pip install 'hooklint[torch]'") from None
    except Exception as exc:  # noqa: BLE001 - a broken install: say so in one line
        raise UsageError(f"`{command}` needs torch, which is installed but cannot be imported "
                         f"({type(exc).__name__}: {exc})") from None


class _OwnStreams:
    """hooklint's own copies of standard output and error, taken before the
    script runs: its findings reach the terminal (or pipe) even when the
    script closed ``sys.stdout``, replaced it, or closed file descriptor 1."""

    def __init__(self) -> None:
        self.streams = [self._copy(stream) for stream in (sys.stdout, sys.stderr)]

    @staticmethod
    def _copy(stream):
        try:
            fd = os.dup(stream.fileno())
        except (OSError, ValueError, AttributeError):
            return None  # no real file behind it (captured by a test runner): use it as it is
        return os.fdopen(fd, "w", encoding=getattr(stream, "encoding", None) or "utf-8",
                         errors="backslashreplace", buffering=1)

    @contextlib.contextmanager
    def installed(self):
        saved = sys.stdout, sys.stderr
        out, err = self.streams
        sys.stdout = out or (sys.__stdout__ if _closed(sys.stdout) else sys.stdout)
        sys.stderr = err or (sys.__stderr__ if _closed(sys.stderr) else sys.stderr)
        try:
            yield
        finally:
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError, AttributeError):
                    pass
            sys.stdout, sys.stderr = saved


def _closed(stream) -> bool:
    return stream is None or getattr(stream, "closed", False)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def script_failure(outcome, observations) -> tuple[str, list[str]] | None:
    """How the script failed, in one line, and the codes of the findings whose
    error it is (a hook error PyTorch raised); None when it succeeded."""
    exc = outcome.exception
    if exc is not None:
        explained = sorted({obs.code for obs in observations if obs.explains(exc)})
        return _one_line(exc), explained
    if outcome.exit_code != 0:
        return f"it exited with status {outcome.exit_code}", []
    return None


def _summary(report, what: str, failure: tuple[str, list[str]] | None) -> str:
    n = len(report.findings)
    codes = sorted({f.code for f in report.findings})
    observed = f"{n} finding{'s' if n != 1 else ''} observed while running {what} ({', '.join(codes)})"
    if failure is None:
        return f"hooklint run: {observed}." if n else f"hooklint run: no hook problems observed while running {what}."
    line, explained = failure
    if explained:
        return (f"hooklint run: {observed}; the script then failed with the error {', '.join(explained)} "
                f"explains: {line}.")
    if n:
        return (f"hooklint run: {observed} before the script failed: {line}; what would have run after that was "
                f"not judged.")
    return f"hooklint run: the script failed before the hooks could be judged: {line}."


def _emit(report, fmt: str, args: argparse.Namespace, what: str,
          failure: tuple[str, list[str]] | None = None) -> None:
    from hooklint.cli.check import source_loader
    from hooklint.report import render, rule_catalog
    from hooklint.report.text import render_notices, use_color

    to_file = bool(args.output_file)
    text = render(report, fmt, sources=source_loader(), catalog=rule_catalog() if fmt == "sarif" else {},
                  color=(not to_file) and use_color(sys.stdout))
    if text or to_file:
        write_output(text, args.output_file)
    notes = render_notices(report, color=use_color(sys.stderr))
    if notes:
        sys.stderr.write(notes)
    if not args.quiet:
        sys.stderr.write(_summary(report, what, failure) + "\n")
    sys.stderr.flush()


__all__ = ["add_parser", "run", "EXIT_ERROR", "EXIT_OK"]
