"""``hooklint check --watch``: check, then check again whenever something the
run depends on changes, until Ctrl-C.

Polling, with the standard library only: every ``interval`` seconds the
paths are walked again (so new and deleted files count) and each file's
size and modification time compared with the previous round's, together
with the configuration file's.  A run is a full ``hooklint check`` (the
cache keeps it fast); a bad request (a path that disappeared, a broken
configuration) is reported and the watch goes on.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

from hooklint.cli import EXIT_ERROR, EXIT_OK

# Seconds between two looks at the files; HOOKLINT_WATCH_INTERVAL overrides it.
DEFAULT_INTERVAL = 0.5

Snapshot = dict[str, tuple[int, int]]


def watch(args: argparse.Namespace, run_once: Callable[[argparse.Namespace], int],
          build_options: Callable[[argparse.Namespace], object]) -> int:
    interval = _interval()
    try:
        while True:
            _checked(args, run_once)
            before = _snapshot(args, build_options)
            _say(f"watching {len(before)} file{'s' if len(before) != 1 else ''} for changes (Ctrl-C to stop)")
            while True:
                time.sleep(interval)
                now = _snapshot(args, build_options)
                if now != before:
                    changed = sorted(path for path in set(now) | set(before) if now.get(path) != before.get(path))
                    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
                    _say(f"{shown} changed: checking again")
                    break
    except KeyboardInterrupt:
        return EXIT_OK  # the way a watch ends


def _checked(args: argparse.Namespace, run_once: Callable[[argparse.Namespace], int]) -> int:
    """One run; a request that went bad since (a deleted path) is said and watched."""
    from hooklint.config import ConfigError
    from hooklint.engine import UsageError
    from hooklint.rules import UnknownRuleError

    try:
        return run_once(argparse.Namespace(**vars(args)))  # a run may set options on its namespace
    except (ConfigError, UsageError, UnknownRuleError) as exc:
        print(f"hooklint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _snapshot(args: argparse.Namespace, build_options: Callable[[argparse.Namespace], object]) -> Snapshot:
    """Size and mtime of every file the run would check and of its configuration."""
    from hooklint.engine import discover

    out: Snapshot = {}
    try:
        options = build_options(argparse.Namespace(**vars(args)))
        files = discover(options)  # type: ignore[arg-type]
        source = options.config.source  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a broken state is watched until it is fixed
        files, source = list(args.paths or ["."]), None
    for path in [*files, *([str(source)] if source else [])]:
        try:
            st = os.stat(path)
        except OSError:
            continue
        out[path] = (st.st_mtime_ns, st.st_size)
    return out


def _say(message: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] hooklint: {message}\n")
    sys.stderr.flush()


def _interval() -> float:
    try:
        value = float(os.environ.get("HOOKLINT_WATCH_INTERVAL", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL
