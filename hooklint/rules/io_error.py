"""HKL002: a file that cannot be read."""

from __future__ import annotations

from hooklint.findings import Severity
from hooklint.rules.base import Rule


class IoErrorRule(Rule):
    """
    ## What it does
    Reports a file that was named or found but could not be read (permissions,
    a file deleted while hooklint ran, a broken symlink).

    ## Why is this bad?
    An unreadable file is an unchecked file; a clean result would be a lie.

    ## Example
    ```python
    # (a file with mode 000)
    ```

    ## Use instead
    ```python
    # (make the file readable, or exclude it with `extend-exclude`)
    ```

    ## Fix safety
    There is no automatic fix.
    """

    code = "HKL002"
    name = "io-error"
    summary = "The file could not be read"
    severity = Severity.ERROR
