"""The sandbox of every process that runs the user's model code.

``hooklint check`` imports model files (the graph layer) and ``--fix
--verify`` runs them again to prove fixes.  Both workers put themselves in a
sandbox the kernel enforces before they import torch
(:func:`~hooklint.sandbox.confine.enter_worker`), then fork one child per
file that confines itself further (:mod:`hooklint.sandbox.zygote`).  See
docs/sandbox.md for what is enforced where.

The parent side (this module) never imports torch: the ``sandbox`` setting,
the scratch folders (:mod:`hooklint.sandbox.scratch`), the environment a
worker starts with, and the one notice per run about what the system could
not give.
"""

from __future__ import annotations

import re

from hooklint.sandbox.confine import MODES, Status

__all__ = ["MODES", "Status", "worker_environment", "incomplete_notice", "refusal", "NOTICE_KEY"]

# Names of environment variables that carry credentials: the worker does not get them.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH)",
                          re.IGNORECASE)
_SECRET_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_APPLICATION_", "SSH_AUTH_SOCK", "GPG_AGENT", "DOCKER_",
                    "KUBECONFIG", "VAULT_", "NETRC")


def worker_environment(base: dict[str, str], mode: str) -> dict[str, str]:
    """The environment for a worker: without credentials unless ``mode`` is off."""
    if mode == "off":
        return dict(base)
    return {name: value for name, value in base.items()
            if not (_SECRET_NAME.search(name) or name.upper().startswith(_SECRET_PREFIXES))}


# Said once per run, however many workers report it (Notice.once_key).
NOTICE_KEY = "sandbox"


def incomplete_notice(status: Status) -> str | None:
    """The line about what the sandbox lacks (``auto``), or None."""
    if status.mode != "auto" or not status.missing:
        return None
    return ("sandbox incomplete: " + "; ".join(status.missing)
            + " (`sandbox = \"require\"` refuses to run model code without it; `--static-only` never runs it)")


def refusal(missing: list[str]) -> str:
    """Why ``require`` ran no model code."""
    return ("graph analysis skipped: `sandbox = \"require\"` and this system cannot sandbox model code ("
            + "; ".join(missing) + "); static rules only")
