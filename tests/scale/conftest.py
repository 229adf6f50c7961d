"""Hypothesis profiles for the property tests in this folder.

``ci`` (the default) is derandomized (a fixed seed: the same examples on every
run) and small enough for the whole folder's property tests to take well
under three minutes on two cores; ``thorough`` explores far more, randomly:

    HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest tests/scale -k property
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

_COMMON = dict(
    database=None,  # no .hypothesis/ folder: every run starts from the profile alone
    deadline=None,  # a per-example wall-clock limit is enforced by the tests themselves (SIGALRM)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    # no "explain" phase: it traces every line executed, which makes the
    # static pass tens of times slower and the time limits meaningless
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
)
settings.register_profile("ci", max_examples=400, derandomize=True, **_COMMON)
settings.register_profile("thorough", max_examples=3000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
