"""Options shared by the subcommands that check code (check, graph, report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hooklint.config import OUTPUT_FORMATS, Config, load_config, validate_selectors


def comma_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _extend(namespace_list: list[str] | None, values: list[str]) -> list[str]:
    return (namespace_list or []) + values


class _CommaAppend(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, _extend(getattr(namespace, self.dest), comma_list(values)))


def add_selection_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("rule selection")
    g.add_argument("--select", action=_CommaAppend, metavar="CODES",
                   help="Rules to enable, replacing the configured `select` (codes, prefixes like HKL2, or ALL).")
    g.add_argument("--extend-select", action=_CommaAppend, metavar="CODES", help="Rules to enable in addition.")
    g.add_argument("--ignore", action=_CommaAppend, metavar="CODES", help="Rules to disable.")


def add_file_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("file selection")
    g.add_argument("--exclude", action=_CommaAppend, metavar="PATTERNS",
                   help="Patterns to exclude, replacing the defaults (.git, .venv, build, ...).")
    g.add_argument("--extend-exclude", action=_CommaAppend, metavar="PATTERNS",
                   help="Patterns to exclude in addition to the defaults.")
    g.add_argument("--force-exclude", action="store_true", default=None,
                   help="Apply excludes to paths passed explicitly too (what pre-commit needs).")
    g.add_argument("--no-respect-gitignore", dest="respect_gitignore", action="store_false", default=None,
                   help="Check files that .gitignore ignores.")
    g.add_argument("--config", action="append", metavar="FILE | KEY=VALUE",
                   help="Read configuration from FILE instead of the nearest pyproject.toml / hooklint.toml; or "
                        "set one key inline, as TOML (`--config 'fail-on = \"error\"'`, `--config "
                        "'select = [\"HKL1\"]'`), over the configuration file's. Repeatable.")
    g.add_argument("--isolated", action="store_true", help="Ignore all configuration files.")


def add_output_options(p: argparse.ArgumentParser, formats=OUTPUT_FORMATS) -> None:
    g = p.add_argument_group("output")
    g.add_argument("--output-format", choices=formats, default=None,
                   help="How to print findings (default: full, or `output-format` from the config).")
    g.add_argument("-o", "--output-file", metavar="FILE", help="Write findings to FILE instead of stdout.")
    add_color_option(g)


def add_color_option(group) -> None:
    group.add_argument("--color", choices=("auto", "always", "never"), default=None,
                       help="Colour in the text formats (full, concise) and notices: `auto` (the default) colours "
                            "a terminal unless NO_COLOR is set, or anything when FORCE_COLOR is set.")


def add_fail_on_option(group) -> None:
    from hooklint.config import FAIL_ON_LEVELS

    group.add_argument("--fail-on", choices=FAIL_ON_LEVELS, default=None,
                       help="The lowest severity whose findings make the run fail (exit 1): `error`, `warning` "
                            "(the default: info findings are printed and pass) or `info`.")


def split_config_args(values: str | list[str] | None) -> tuple[str | None, dict]:
    """``--config`` values -> (the configuration file, inline ``key = value`` overrides).
    An existing file is a file (as ruff decides); anything else must be a TOML assignment."""
    from hooklint.config import ConfigError, parse_override

    if values is None:
        return None, {}
    if isinstance(values, str):
        values = [values]
    explicit: str | None = None
    overrides: dict = {}
    for value in values:
        if "=" not in value or Path(value).is_file():
            if explicit is not None:
                raise ConfigError(f"--config {value!r}: only one configuration file can be given "
                                  f"(already {explicit!r})")
            explicit = value
            continue
        key, parsed = parse_override(value)
        overrides[key] = parsed
    return explicit, overrides


def config_from_args(args: argparse.Namespace) -> Config:
    start = None
    paths = getattr(args, "paths", None) or []
    stdin_filename = getattr(args, "stdin_filename", None)
    if stdin_filename and (not paths or paths == ["-"]):
        paths = [stdin_filename]  # stdin: the configuration of the file it stands for
    elif paths == ["-"]:
        paths = []
    explicit, overrides = split_config_args(getattr(args, "config", None))
    if paths and not explicit:
        # like ruff: the configuration nearest to the first path (or the cwd)
        first = Path(paths[0])
        start = first if first.is_dir() else (first.parent if str(first.parent) else Path.cwd())
        if not start.exists():
            start = None
    cfg = load_config(explicit, start=start, isolated=getattr(args, "isolated", False), overrides=overrides)
    if getattr(args, "select", None) is not None:
        validate_selectors(args.select, "--select")
        cfg.select = args.select
    if getattr(args, "extend_select", None):
        validate_selectors(args.extend_select, "--extend-select")
        cfg.extend_select = cfg.extend_select + args.extend_select
    if getattr(args, "ignore", None):
        validate_selectors(args.ignore, "--ignore")
        cfg.ignore = cfg.ignore + args.ignore
    if getattr(args, "exclude", None) is not None:
        cfg.exclude = args.exclude
    if getattr(args, "extend_exclude", None):
        cfg.extend_exclude = cfg.extend_exclude + args.extend_exclude
    if getattr(args, "force_exclude", None):
        cfg.force_exclude = True
    if getattr(args, "respect_gitignore", None) is False:
        cfg.respect_gitignore = False
    if getattr(args, "output_format", None):
        cfg.output_format = args.output_format
    if getattr(args, "fail_on", None):
        cfg.fail_on = args.fail_on
    if getattr(args, "target_version", None):
        cfg.target_version = args.target_version
        cfg.target_version_origin = "--target-version"
    return cfg


def write_output(text: str, output_file: str | None) -> None:
    if output_file:
        from hooklint.fsutil import atomic_write_text

        atomic_write_text(Path(output_file), text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
