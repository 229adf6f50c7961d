"""HKL001: a file that cannot be parsed."""

from __future__ import annotations

from typing import ClassVar

from hooklint.findings import Severity
from hooklint.rules.base import Invalid, Rule


class SyntaxErrorRule(Rule):
    """
    ## What it does
    Reports a file that Python cannot parse: a syntax error, an undecodable
    byte sequence, a null byte.

    ## Why is this bad?
    A file that does not parse cannot be analysed, so every hook bug in it goes
    unreported; and Python will refuse to run it too.

    Which syntax is valid is the project's target Python: `target-version`
    (`py37` ... `py314`), by default the lower bound of `requires-python` in
    the nearest `pyproject.toml`.  Syntax newer than the target (`:=` for
    `py37`, `match` for `py39`) is reported, naming the target, when hooklint
    runs on a newer Python.  When hooklint runs on a Python older than the
    target, a file that does not parse may use the target's newer syntax
    (`type X = ...`, `def f[T]()`, nested same-quote f-strings of 3.12): it is
    not reported as a syntax error but skipped, with one notice that says so.

    In a Jupyter notebook each code cell that does not parse is reported in its
    cell (Jupyter runs the others), and the rest of the notebook is checked.  A
    notebook that is not valid JSON, or not an nbformat 4 notebook, is reported
    at its place in the file.

    ## Known problems
    To stay fast, hooklint only parses files whose text mentions a hook API or
    another pattern one of the enabled rules looks for (`register_*hook`,
    `.forward(`, `needs_input_grad`...).  A syntax error in a file that mentions
    none of these is not reported; run `hooklint check --no-prefilter` to parse
    every file.

    Python's parser checks a target older than itself on a best-effort basis:
    the assignment expressions, `match`, parenthesized context managers and
    similar syntax are caught, but not every newer construct (nested
    same-quote f-strings parse on 3.12 whatever the target).

    ## Example
    ```python
    def hook(grad)
        return grad * 2
    x.register_hook(hook)
    ```

    ## Use instead
    ```python
    def hook(grad):
        return grad * 2
    x.register_hook(hook)
    ```

    ## Fix safety
    There is no automatic fix.

    ## References
    - [Python: Errors and exceptions](https://docs.python.org/3/tutorial/errors.html#syntax-errors)
    """

    code = "HKL001"
    name = "syntax-error"
    summary = "The file cannot be parsed (syntax error, bad encoding or null bytes)"
    severity = Severity.ERROR
    VALID: ClassVar[tuple[str, ...]] = (
        "def hook(grad):\n    return grad * 2\n",
    )
    INVALID: ClassVar[tuple[Invalid, ...]] = (
        Invalid("x.register_hook(lambda g: g * 2  # HKL001\n"),
    )
