"""``hooklint rule HKL101`` prints a rule's documentation; ``--all`` lists rules."""

from __future__ import annotations

import argparse
import json
import sys

from hooklint.cli import EXIT_OK, SUBCOMMANDS


def add_parser(sub) -> None:
    p = sub.add_parser(
        "rule",
        help=SUBCOMMANDS["rule"],
                       description="Print a rule's documentation: what it does, why it matters, an example, "
                       "the fix, and references.")
    p.add_argument("rule", nargs="?", metavar="CODE", help="A rule code (HKL101) or name (legacy-backward-hook).")
    p.add_argument("--all", action="store_true", help="List every rule.")
    p.add_argument("--output-format", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hooklint.docs import render_rule_markdown
    from hooklint.rules import all_rules, get_rule

    if args.all or not args.rule:
        rules = all_rules()
        if args.output_format == "json":
            sys.stdout.write(json.dumps([_rule_json(r) for r in rules], indent=2) + "\n")
            return EXIT_OK
        from tabulate import tabulate

        rows = [(r.code, r.name, r.severity.value, "on" if r.default_enabled else "off",
                 ",".join(o.value for o in r.origins), r.summary) for r in rules]
        sys.stdout.write(tabulate(rows, headers=("code", "name", "severity", "default", "layers", "summary"))
                         + "\n")
        return EXIT_OK
    rule = get_rule(args.rule)
    if args.output_format == "json":
        sys.stdout.write(json.dumps(_rule_json(rule), indent=2) + "\n")
    else:
        sys.stdout.write(render_rule_markdown(rule))
    return EXIT_OK


def _rule_json(rule) -> dict:
    from hooklint.docs import render_rule_markdown

    return {
        "code": rule.code,
        "name": rule.name,
        "summary": rule.summary,
        "severity": rule.severity.value,
        "default_enabled": rule.default_enabled,
        "layers": [o.value for o in rule.origins],
        "fix": rule.fix_applicability,
        "url": rule.url(),
        "explanation": render_rule_markdown(rule),
    }
