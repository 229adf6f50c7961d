"""What the run-time layer tells its extensions (``core.Runtime.extensions``).

An extension is installed with the patches when the first session starts and
removed when the last one ends.  Every method has a default that does
nothing, so an extension implements only what it follows.  Beside these,
``core`` calls, when an extension has them, ``hook_removed(rec, caller)``,
``session_ending(session)``, and the functions an extension appends to
``Runtime.forward_watchers`` after every forward (pre-)hook of the user's.
"""

from __future__ import annotations

from typing import Any


class Extension:
    def install(self, rt: Any) -> None:
        """Patch what it needs; ``rt`` is the Runtime."""

    def uninstall(self, rt: Any) -> None:
        """Put back what ``install`` patched."""

    def hook_bound(self, rec: Any) -> None:
        """A user's hook was registered (its record has its handle now)."""

    def adopted(self, module: Any) -> None:
        """``session.watch(module)``: hooks registered before the session are watched."""

    def module_hook_after_accumulation(self, rec: Any, module: Any, accesses: list, task_id: int) -> None:
        """A module backward hook touched `.grad` of parameters whose gradient had arrived."""

    def post_accumulate_ran(self, rec: Any, param: Any, version: int, call: Any) -> None:
        """A post-accumulate-grad hook ran."""

    def backward_ended(self, info: Any, failed: bool) -> None:
        """An instrumented backward ended."""

    def gradient_elsewhere(self, param: Any) -> bool:
        """Does an engine move this parameter's gradient to another tensor?"""
        return False

    def rewrite(self, obs: Any) -> Any:
        """The observation as reported (an extension may add to its help)."""
        return obs
