"""Legacy backward hook registrations, grouped by hook, and the notes that name their sites.
"""

from __future__ import annotations

from hooklint.findings import Related
from hooklint.static.context import FileContext
from hooklint.static.hooks import DYNAMIC_NAME_TRIGGERS, HookKind, Registration
from hooklint.static.values import src

LEGACY_TRIGGERS = ("register_backward_hook", "register_module_backward_hook") + DYNAMIC_NAME_TRIGGERS


def legacy_groups(ctx: FileContext, through_wrappers: bool = False) -> list[list[Registration]]:
    """Legacy registrations by registering call: each call's instances (one per
    call site of the helper it is in, per handler a loop gives it...).  A call
    of a wrapper in another file that registers the legacy hook counts when
    ``through_wrappers`` (the hook's body is here), or when the call's own
    argument named the legacy API (``attach(m, fn, kind="backward")``)."""
    groups: dict[int, list[Registration]] = {}
    for reg in ctx.hooks.instances_by_kind(HookKind.BACKWARD_LEGACY):
        if reg.summary is not None and not through_wrappers and not getattr(reg.summary, "chosen", False):
            continue  # a wrapper that spells the legacy API itself: reported there, where it is fixed
        groups.setdefault(id(reg.call), []).append(reg)
    return list(groups.values())


def site_notes(ctx: FileContext, group: list[Registration], limit: int = 4) -> list[Related]:
    """Where the calls that chose the hook or the module are."""
    notes: list[Related] = []
    seen: set[int] = set()
    for reg in group:
        site = reg.site_call
        if site is None or id(site) in seen:
            continue
        seen.add(id(site))
        parts = []
        if reg.receiver_origin is not None:
            module = reg.receiver_module
            label = f" ({module.class_name})" if module is not None and module.class_name else ""
            parts.append(f"the module `{src(reg.receiver_origin)}`{label}")
        if reg.hook_origin is not None and reg.hook is not None:
            parts.append(f"the hook `{reg.hook.name}`")
        what = " and ".join(parts) or "the registration's arguments"
        notes.append(Related(f"`{src(site.func)}(...)` passes {what}", ctx.display_path, ctx.span(site)[0]))
        if len(notes) >= limit:
            break
    return notes
