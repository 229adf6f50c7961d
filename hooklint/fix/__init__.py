"""Applying fixes: ``hooklint check --fix``, ``--unsafe-fixes`` and ``--diff``.

* :mod:`hooklint.fix.apply` works on text only: it turns the fixes of a set
  of findings into one new text (non-overlapping edits, a re-parse gate, rounds
  until nothing more applies);
* :mod:`hooklint.fix.files` reads and writes files (encoding, byte-order
  mark, line endings, atomic replace) and renders unified diffs;
* :mod:`hooklint.fix.cli_options` adds the options to ``hooklint check``;
* ``--verify`` proves each fix first: :mod:`hooklint.fix.verify` plans and
  judges the proofs, :mod:`hooklint.fix.entries` finds the programs that
  reach a file (static), and the proof worker (:mod:`hooklint.fix.verify_worker`,
  :mod:`hooklint.fix.program`) runs them and the built models.

Which fixes run is each fix's :class:`~hooklint.findings.Applicability`:
``--fix`` applies the safe ones, ``--unsafe-fixes`` adds the unsafe ones, and
display-only fixes are never applied.
"""

from __future__ import annotations

__all__ = ["FixOutcome", "RejectedFix", "apply_round", "fix_text"]


def __getattr__(name: str):
    # `hooklint check` imports hooklint.fix.cli_options on every run; the fix
    # engine itself loads only when something is fixed.
    if name in __all__:
        from hooklint.fix import apply

        return getattr(apply, name)
    raise AttributeError(f"module 'hooklint.fix' has no attribute {name!r}")
