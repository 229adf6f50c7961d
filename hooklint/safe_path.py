"""``python -m hooklint`` (and ``-m hooklint.graph.worker``) put the working
folder first on ``sys.path``; a project with its own ``tokenize.py``,
``signal.py`` or ``types.py`` would then have its file imported in place of
the standard library's, by hooklint, outside any sandbox.  Entry points call
:func:`drop_working_folder` before importing anything else."""

import os
import sys


def drop_working_folder() -> None:
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:
        here = None
    sys.path[:] = [entry for entry in sys.path
                   if entry not in ("", ".") and (here is None or os.path.realpath(entry) != here)]
