"""Registrations as the messages name them: by hook, with their kind, sites and engine.
"""

from __future__ import annotations

import ast

from hooklint.findings import Related
from hooklint.static.context import FileContext
from hooklint.static.hooks import HookKind, Registration

MODULE_BACKWARD_KINDS = (HookKind.BACKWARD_LEGACY, HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE)


# Every module backward registration API contains one of these
# (register_[full_]backward_hook, register_full_backward_pre_hook and the
# register_module_* globals).
MODULE_BACKWARD_TRIGGERS = ("backward_hook", "backward_pre_hook")


KIND_WORDS = {
    HookKind.BACKWARD_LEGACY: "legacy backward hook",
    HookKind.FULL_BACKWARD: "full backward hook",
    HookKind.FULL_BACKWARD_PRE: "full backward pre-hook",
    HookKind.TENSOR: "tensor hook",
    HookKind.POST_ACCUMULATE: "post-accumulate-grad hook",
    HookKind.FORWARD: "forward hook",
    HookKind.FORWARD_PRE: "forward pre-hook",
}


def registrations_by_hook(ctx: FileContext, kinds: tuple[HookKind, ...]) -> dict[ast.AST, list[Registration]]:
    """Registrations of the given kinds, grouped by the hook function they run
    (with hooks that reach a registration through a helper's parameters)."""
    out: dict[ast.AST, list[Registration]] = {}
    for reg in ctx.hooks.instances_by_kind(*kinds):
        if reg.hook is not None:
            out.setdefault(reg.hook.node, []).append(reg)
    return out


def hook_label(reg: Registration) -> str:
    """``grad_mod``, ``Net._clip`` for a method, ``GradSync.__call__`` for a callable object."""
    hook = reg.hook
    if hook is None:
        return "the hook"
    if hook.owner is not None and hook.via in ("method", "__call__"):
        return f"{hook.owner.name}.{hook.name}"
    return hook.name


def describe_registrations(regs: list[Registration]) -> str:
    """Where a hook is registered: ``full backward hook on `net.fc3` (Linear) at line 56, and on ...``."""
    parts = []
    previous_kind = None
    for reg in regs[:3]:
        kind = "" if reg.kind is previous_kind else f"{KIND_WORDS[reg.kind]} "
        target = "every module (global hook)" if reg.is_global else reg.describe_target()
        parts.append(f"{kind}on {target} at line {reg.call.lineno}")
        previous_kind = reg.kind
    if len(regs) > 3:
        parts.append(f"{len(regs) - 3} more")
    return ", and ".join(parts) if len(parts) == 2 else ", ".join(parts)


def registration_notes(ctx: FileContext, regs: list[Registration]) -> list[Related]:
    return [Related(f"registered as a {KIND_WORDS[r.kind]} on {r.describe_target()}", ctx.display_path,
                    ctx.span(r.call)[0]) for r in regs]


def engine_help(ctx: FileContext, regs: list[Registration], code: str, replace: bool = False) -> str:
    """The fix that works under the engine the file shows wrapping the hooked modules
    (FSDP2 before DDP: its advice differs most); "" when it shows none.  For HKL201 it
    replaces the help (``replace``), for HKL203 it is a sentence to add."""
    from hooklint.static.distributed import ENGINE_HELP, engines_of_registrations

    engines = engines_of_registrations(ctx, regs)
    if not engines:
        return ""
    text = ENGINE_HELP[code]["fsdp2" if "fsdp2" in engines else "ddp"]
    return text
