"""Run-time instrumentation: observe what hooks really do during a forward and
backward, and report it with the same codes as ``hooklint check``.

Used by ``hooklint run``, ``hooklint.instrument()``, ``hooklint.testing`` and
the pytest plugin.  torch is imported when the first session starts.
"""

from hooklint.runtime.observation import Observation
from hooklint.runtime.session import Session, instrument

__all__ = ["Observation", "Session", "instrument"]
