"""HKL003: a ``# noqa`` code that silences nothing."""

from __future__ import annotations

from typing import ClassVar

from hooklint.findings import Applicability, Edit, Finding, Fix, Location, Severity
from hooklint.rules.base import Invalid, Rule


class UnusedNoqaRule(Rule):
    """
    ## What it does
    Reports an HKL code in a line's `# noqa: ...` comment when no finding of
    that code starts on that line (or when the code is named twice), as
    ruff's RUF100 does for its own codes.  Only hooklint's codes are
    considered (`E501` belongs to another tool), only rules that are enabled
    for the file, and only in files hooklint parsed and checked.

    ## Why is this bad?
    A `# noqa` whose finding went away (the hook was fixed, the line moved)
    stays behind and silences the next finding on that line without anyone
    noticing: a legacy `register_backward_hook` written there later, whose
    `grad_input` is not the module's, would go unreported.

    ## Known problems
    The rule is off by default (`extend-select = ["HKL003"]` turns it on).

    Codes of rules that read the model graph (HKL102, HKL201, HKL403) are
    judged only when the graph layer analysed the file: `--static-only` and
    the pre-commit hook cannot tell whether the graph would report them, so
    they are left alone there.  Codes only `hooklint run` reports (HKL503,
    HKL601) are never judged.  A `# noqa` kept for a finding that only
    `hooklint run` observes (a registration the static pass cannot follow) is
    reported; add `HKL003` to that `# noqa` to keep it.

    A bare `# noqa` (every code) and the file-level `# hooklint: noqa` are not
    checked: they may serve other tools.

    ## Example
    ```python
    import torch.nn as nn

    def log(module, grad_input, grad_output):
        print(grad_output[0].norm())

    layer = nn.Linear(4, 2)
    layer.register_full_backward_hook(log)  # noqa: HKL101
    ```

    ## Use instead
    ```python
    import torch.nn as nn

    def log(module, grad_input, grad_output):
        print(grad_output[0].norm())

    layer = nn.Linear(4, 2)
    layer.register_full_backward_hook(log)
    ```

    ## Fix safety
    The fix is safe: it removes the unused codes from the comment (the whole
    `# noqa: ...` when no code is left, keeping any other comment text),
    which changes no behaviour of the program.

    ## References
    - [ruff: unused-noqa (RUF100)](https://docs.astral.sh/ruff/rules/unused-noqa/)
    - [flake8: selecting and ignoring violations](https://flake8.pycqa.org/en/latest/user/violations.html)
    """

    code = "HKL003"
    name = "unused-noqa"
    summary = "A `# noqa` code that silences no finding on its line"
    severity = Severity.WARNING
    default_enabled = False
    # a file without an HKL code in a `noqa` comment has nothing to report
    triggers = ("HKL", "hkl")
    trigger_pattern = r"(?i)noqa[ \t]*:[ \t,A-Z0-9]*HKL"
    fix_applicability = "safe"
    VALID: ClassVar[tuple[str, ...]] = (
        # the code silences a real finding on its line
        "import torch.nn as nn\n"
        "layer = nn.Linear(4, 2)\n"
        "layer.register_backward_hook(lambda m, gi, go: None)  # noqa: HKL101\n",
        # other tools' codes and a bare noqa are theirs
        "x = 1  # noqa: E501\n"
        "y = 2  # noqa\n",
        # a rule that reads the model graph: not judged without it
        "import torch.nn as nn\n"
        "layer = nn.Linear(4, 2)\n"
        "layer.register_full_backward_hook(lambda m, gi, go: None)  # noqa: HKL102\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid(
            "import torch.nn as nn\n"
            "layer = nn.Linear(4, 2)\n"
            "layer.register_full_backward_hook(lambda m, gi, go: None)  # noqa: HKL101  # HKL003\n",
            fixed="import torch.nn as nn\n"
                  "layer = nn.Linear(4, 2)\n"
                  "layer.register_full_backward_hook(lambda m, gi, go: None)  # HKL003\n",
        ),
        Invalid(
            "import torch.nn as nn\n"
            "layer = nn.Linear(4, 2)\n"
            "layer.register_backward_hook(lambda m, gi, go: None)  # noqa: HKL101, HKL304, E501  # HKL003\n",
            fixed="import torch.nn as nn\n"
                  "layer = nn.Linear(4, 2)\n"
                  "layer.register_backward_hook(lambda m, gi, go: None)  # noqa: HKL101, E501  # HKL003\n",
        ),
    )

    @classmethod
    def report(cls, display: str, text: str, findings: list[Finding], checkable: frozenset[str]) -> list[Finding]:
        """Findings for the unused codes of ``text``'s ``# noqa`` comments,
        given the findings before ``# noqa`` applied."""
        from hooklint.static.noqa import unused_noqa

        used: dict[int, set[str]] = {}
        for finding in findings:
            used.setdefault(finding.location.row, set()).add(finding.code)
        out = []
        for item in unused_noqa(text, used, checkable, never=frozenset({cls.code})):
            directive = item.directive
            names = ", ".join(item.unused)
            several = len(item.unused) > 1
            what = (f"`# noqa` names {names}, but no finding of {'these codes' if several else 'that code'} "
                    f"starts on this line")
            removes_all = item.replacement in ("", "# ") and item.end >= directive.span[1]
            fix_message = "Remove the unused `# noqa` comment" if removes_all else f"Remove {names} from the `# noqa`"
            out.append(cls.make(
                path=display,
                location=Location(directive.row, directive.span[0] + 1),
                end_location=Location(directive.row, directive.span[1] + 1),
                message=f"{what}: it silences nothing now, and would hide the next such finding on this line",
                help=f"{fix_message} (or add HKL003 to it, to keep it for `hooklint run`).",
                fix=Fix(fix_message, (Edit(item.replacement, Location(directive.row, item.start + 1),
                                           Location(directive.row, item.end + 1)),), Applicability.SAFE),
            ))
        return out
