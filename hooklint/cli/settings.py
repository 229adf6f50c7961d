"""``hooklint check --show-settings`` and ``--show-files``: what a run would use,
without checking anything (ruff's options of the same names)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from hooklint.cli import EXIT_OK
from hooklint.config import DEFAULT_EXCLUDES
from hooklint.engine import CheckOptions, discover, display_path


def _toml_value(value) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }" \
            if value else "{}"
    return json.dumps(value, ensure_ascii=False)


def show_settings(options: CheckOptions, args: argparse.Namespace) -> int:
    """The configuration resolved for the first path: where it came from, every
    key with its value (command-line flags applied), the enabled rules."""
    from hooklint.rules import get_rule

    cfg = options.config
    first = (args.paths or ["."])[0]
    if first == "-":
        first = getattr(args, "stdin_filename", None) or "-"
    lines = [f"Settings for: {first}",
             f"Configuration file: {cfg.source if cfg.source else '(none: defaults)'}",
             f"Project root: {cfg.root}",
             f"Cross-file callers from: {options.project_root or '(no project found: the files of the run only)'}",
             "", "[tool.hooklint]"]
    for f in fields(cfg):
        if f.name in ("root", "source", "target_version_origin"):
            continue
        key = f.name.replace("_", "-")
        value = getattr(cfg, f.name)
        line = f"{key} = {_toml_value(value)}"
        if key == "select" and value is None:
            line = "select = (not set: the rules that are on by default)"
        if key == "exclude" and value is None:
            line = f"exclude = {_toml_value(list(DEFAULT_EXCLUDES))}  # the defaults"
        if key == "target-version":
            line += f"  # from {cfg.target_version_origin}" if cfg.target_version_origin else \
                "  # the running Python's syntax"
        lines.append(line)
    codes = sorted(options.codes)
    lines += ["", f"Enabled rules ({len(codes)}):"]
    lines += [f"  {code}  {get_rule(code).name}" for code in codes]
    ignored = cfg.ignored_for(_rel(first, cfg)) if cfg.per_file_ignores and first != "-" else set()
    if ignored:
        lines.append(f"Ignored for {first} by per-file-ignores: {', '.join(sorted(ignored))}")
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK


def _rel(path: str, cfg) -> str:
    from hooklint.engine import rel_to_root

    return rel_to_root(path, cfg.root)


def show_files(options: CheckOptions, args: argparse.Namespace, stdin: bool = False) -> int:
    """One file per line, sorted, as findings would name them."""
    if stdin:
        from hooklint.cli.stdin import STDIN_NAME, _excluded

        name = getattr(args, "stdin_filename", None)
        files = [] if name and _excluded(name, options) else [display_path(name) if name else STDIN_NAME]
    else:
        files = sorted(display_path(path) for path in discover(options))
    from hooklint.report.escape import printable

    sys.stdout.write("".join(f"{printable(path)}\n" for path in files))
    return EXIT_OK
