"""Where a built model's modules run their forward: in code the model compiles
itself, and in activation-checkpointed regions (``hooklint graph``'s "runs in"
column; docs/compile.md).

Compiled: a submodule that is a ``torch.compile`` wrapper (``OptimizedModule``)
or was compiled in place (``module.compile()``), and everything below it.
Checkpointed: everything below a ``checkpoint_wrapper``; and, when the model's
code calls checkpointing itself (``checkpoint(self.block, x)`` in a forward),
the modules whose forward starts while a checkpoint runs, seen in one forward
pass on the example inputs (the same signal the run-time layer uses: the
checkpoint's saved-tensor hooks on top of the stack, or reentrant
``CheckpointFunction.forward`` on the call stack).
"""

from __future__ import annotations

import linecache
import sys
from typing import Any

import torch
from torch import nn

_MAX_FRAMES = 40


def compiled_paths(model: nn.Module) -> set[str]:
    # importing dynamo costs a second or more: a model can only hold a compiled module if it is imported
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    optimized = getattr(eval_frame, "OptimizedModule", None) if eval_frame is not None else None
    out: set[str] = set()
    for path, module in model.named_modules(remove_duplicate=False):
        if optimized is not None and isinstance(module, optimized) \
                or getattr(module, "_compiled_call_impl", None) is not None:
            prefix = path + "." if path else ""
            out.update(p for p, _m in model.named_modules(remove_duplicate=False)
                       if p == path or p.startswith(prefix))
    return out


def _wrapper_class() -> type | None:
    module = sys.modules.get("torch.distributed.algorithms._checkpoint.checkpoint_wrapper")
    return getattr(module, "CheckpointWrapper", None) if module is not None else None


def _mentions_checkpointing(model: nn.Module) -> bool:
    """Does the code of a module class of the model call checkpointing? (Before
    running a forward pass only for this.)"""
    files = set()
    for module in model.modules():
        code = getattr(type(module).forward, "__code__", None)
        if code is not None:
            files.add(code.co_filename)
    return any("checkpoint" in "".join(linecache.getlines(f)) for f in files if not f.startswith("<"))


def checkpointed_paths(model: nn.Module, inputs: tuple[Any, ...] | None) -> dict[str, str] | None:
    """path -> "non-reentrant" or "reentrant" for the modules that run inside a
    checkpointed region; None when it cannot be told (no forward could run)."""
    out: dict[str, str] = {}
    wrapper = _wrapper_class()
    named = list(model.named_modules(remove_duplicate=False))
    if wrapper is not None:
        for path, module in named:
            if isinstance(module, wrapper):
                prefix = path + "." if path else ""
                reentrant = "reentrant" if "REENTRANT" == getattr(getattr(module, "checkpoint_impl", None), "name",
                                                                  "") else "non-reentrant"
                out.update((p, reentrant) for p, _m in named if p.startswith(prefix))
    if not _mentions_checkpointing(model):
        return out  # no code of the model calls checkpointing: only the wrappers' modules
    if inputs is None:
        return out or None
    paths = {id(m): p for p, m in named}
    seen: dict[str, str] = {}

    def note(module, args):
        how = _region()
        if how is not None:
            seen.setdefault(paths.get(id(module), "?"), how)

    handles = [m.register_forward_pre_hook(note) for _p, m in named]
    try:
        with torch.enable_grad():
            model(*inputs)
    except Exception:  # noqa: BLE001 - the facts say "not known" rather than guess
        return out or None
    finally:
        for handle in handles:
            handle.remove()
    seen.update(out)
    return seen


def _region() -> str | None:
    top = torch._C._autograd._top_saved_tensors_default_hooks(False)
    if top and getattr(top[1], "__qualname__", "").startswith("_checkpoint_hook."):
        return "non-reentrant"
    if torch.is_grad_enabled():
        return None
    from torch.utils.checkpoint import CheckpointFunction

    code = CheckpointFunction.forward.__code__
    frame = sys._getframe(2)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return None
        if frame.f_code is code:
            return "reentrant"
        frame = frame.f_back
    return None
