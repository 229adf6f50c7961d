"""Rules only run-time instrumentation can report (hooklint.runtime)."""
