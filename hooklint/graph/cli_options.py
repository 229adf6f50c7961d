"""``hooklint check`` options of the graph layer (``hooklint.cli.check`` loads this)."""

from __future__ import annotations

import argparse


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("the timeout must be positive")
    return value


def add_graph_options(group) -> None:
    group.add_argument("--timeout", type=positive_seconds, metavar="SECONDS",
                       help="Time allowed to import and analyse one model file (default: `timeout` from the "
                            "config, else 60).")
    group.add_argument("--sandbox", choices=("auto", "require", "off"),
                       help="The kernel sandbox of the processes that run model code (default: `sandbox` from the "
                            "config, else auto): `require` runs no model code without all of it, `off` runs it "
                            "without (docs/sandbox.md).")
    group.add_argument("--no-cache", action="store_true",
                       help="Ignore .hooklint_cache/ (graph facts and static results): nothing is read from "
                            "it or written to it.")


def add_check_options(parser: argparse.ArgumentParser) -> None:
    add_graph_options(parser.add_argument_group("graph analysis (imports nn.Module classes; needs torch)"))


def graph_rules_enabled(codes) -> bool:
    """Whether any enabled rule reads graph facts: otherwise no model is imported."""
    from hooklint.findings import Origin
    from hooklint.rules import get_rule

    return any(Origin.GRAPH in get_rule(code).origins for code in codes)


def configure_check(options, args: argparse.Namespace) -> None:
    if args.timeout is not None:
        options.config.timeout = args.timeout
    if args.sandbox is not None:
        options.config.sandbox = args.sandbox
    if not graph_rules_enabled(options.codes):
        return
    use_cache = not args.no_cache

    def provider(files, config):
        from hooklint.graph.provider import provide_graph_facts

        return provide_graph_facts(files, config, use_cache=use_cache)

    options.graph_provider = provider
