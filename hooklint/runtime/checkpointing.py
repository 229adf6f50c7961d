"""Run-time HKL702 and HKL703: forward hooks and the activation-checkpoint recompute.

An extension of the run-time layer (``core.Runtime.extensions``) that watches
every forward (pre-)hook call of the user's (``Runtime.forward_watchers``):

- In a backward (a graph task is running), a forward hook that runs is part
  of a recompute when torch 2.13 marks it so: non-reentrant checkpointing
  recomputes under its ``_recomputation_hook`` saved-tensor hooks (the top of
  the default saved-tensor hooks stack), reentrant checkpointing inside the
  backward of ``CheckpointFunction`` (the current autograd node).  A hook
  whose body accumulates state (the same question the static rule asks of
  its source, ``hooklint.static.hook_effects``) is reported with how many
  times it ran at forwards and at recomputes (HKL703).
- In a forward, a hook that changed what the module computes (it returned a
  value, or its output's version counter moved) while a checkpoint's
  ``_checkpoint_hook`` is on top of the saved-tensor hooks stack (or inside
  ``CheckpointFunction.forward``) is noted with a checksum of what it made.
  When that hook is removed before the region was recomputed, a helper hook
  of hooklint's is put on the module for the recompute: if the module then
  produces something else than the forward used, the backward differentiates
  activations the forward never produced, and the removal is reported
  (HKL702).  A recompute that stops before the module (early stop), or that
  reproduces the same values, is not reported.

The common path (a hook outside any backward that returns None) costs a
dictionary update and a graph-task-id read.
"""

from __future__ import annotations

import ast
import linecache
import sys
import threading
import types
import weakref
from typing import Any

import torch
from torch import nn

from hooklint.runtime import frames
from hooklint.runtime.extension import Extension
from hooklint.runtime.frames import Site
from hooklint.runtime.observation import Observation
from hooklint.static.hook_effects import Effect, accumulating_effects
from hooklint.static.hooks import HookKind

_top_hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
_current_node = getattr(torch._C, "_current_autograd_node", None)
_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)
_MAX_NOTED = 16  # changed forwards noted per hook (a hook that runs at every step keeps the latest)
_MAX_FRAMES = 40  # frames searched for CheckpointFunction.forward (reentrant checkpointing)


def extension() -> "CheckpointExtension | None":
    if _top_hooks is None:
        return None
    return CheckpointExtension()


def recompute_kind() -> str | None:
    """"non-reentrant" or "reentrant" while a checkpoint recomputes its forward, else None."""
    top = _top_hooks(False)
    if top and getattr(top[1], "__qualname__", "").startswith("_recomputation_hook."):
        return "non-reentrant"
    if _current_node is not None:
        node = _current_node()
        if node is not None and node.name() == "CheckpointFunctionBackward":
            return "reentrant"
    return None


def _cell(fn: Any, name: str) -> Any:
    code = getattr(fn, "__code__", None)
    if code is None or name not in code.co_freevars:
        return None
    try:
        return fn.__closure__[code.co_freevars.index(name)].cell_contents
    except (ValueError, IndexError, TypeError):
        return None


def checkpoint_region() -> tuple[Any, bool] | None:
    """(the checkpoint's region object, reentrant?) while a checkpointed forward runs."""
    top = _top_hooks(False)
    if top and getattr(top[1], "__qualname__", "").startswith("_checkpoint_hook."):
        frame = _cell(top[1], "frame")
        return (frame, False) if frame is not None else None
    if torch.is_grad_enabled():
        return None
    from torch.utils.checkpoint import CheckpointFunction

    code = CheckpointFunction.forward.__code__
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            return None
        if frame.f_code is code:
            ctx = frame.f_locals.get("ctx")
            return (ctx, True) if ctx is not None else None
        frame = frame.f_back
    return None


def _recomputing_frame() -> Any:
    top = _top_hooks(False)
    if top and getattr(top[1], "__qualname__", "").startswith("_recomputation_hook."):
        ref = _cell(top[0], "target_frame_ref") or _cell(getattr(top[0], "__wrapped__", None), "target_frame_ref")
        return ref() if isinstance(ref, weakref.ref) else None
    return None


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            if isinstance(item, torch.Tensor):
                return item
    if isinstance(value, dict):
        return _first_tensor(list(value.values()))
    return None


def _checksum(tensor: torch.Tensor | None) -> tuple | None:
    if tensor is None:
        return None
    with torch.no_grad():
        data = tensor.detach()
        return tuple(data.shape), float(data.double().sum()), float(data.double().abs().sum())


def _differs(a: tuple | None, b: tuple | None) -> bool:
    if a is None or b is None:
        return False
    if a[0] != b[0]:
        return True
    return any(abs(x - y) > 1e-6 * (1.0 + abs(x)) for x, y in zip(a[1:], b[1:]))


class Changed:
    """A forward of a checkpointed region in which a hook changed its module's output (or input)."""

    __slots__ = ("module_ref", "region_ref", "reentrant", "checksum")

    def __init__(self, module: nn.Module, region: Any, reentrant: bool, checksum: tuple | None):
        self.module_ref = weakref.ref(module)
        try:
            self.region_ref: Any = weakref.ref(region)
        except TypeError:
            self.region_ref = lambda region=region: region
        self.reentrant = reentrant
        self.checksum = checksum


class Watch:
    """A hook removed before the recompute of a region whose forward it changed."""

    __slots__ = ("rec", "changed", "removal_site", "through_call", "handle", "done")

    def __init__(self, rec: Any, changed: Changed, removal_site: Site, through_call: bool = False):
        self.rec = rec
        self.changed = changed
        self.removal_site = removal_site
        self.through_call = through_call  # removed by a helper this call (or `with` block) ran
        self.handle: Any = None
        self.done = False


class CheckpointExtension(Extension):
    def __init__(self) -> None:
        self.rt: Any = None
        self.lock = threading.Lock()
        self.forward_calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # rec -> calls at forwards
        self.recompute_calls: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # rec -> calls at recomputes
        self.changed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # rec -> [Changed]
        self.watches: list[Watch] = []
        self.effects: dict[Any, list[tuple[Effect, str]] | None] = {}

    # -- lifecycle ------------------------------------------------------------
    def install(self, rt) -> None:
        self.rt = rt
        rt.forward_watchers.append(self.forward_hook_ran)

    def uninstall(self, rt) -> None:
        for watch in self.watches:
            if watch.handle is not None:
                watch.handle.remove()
        self.watches.clear()
        self.effects.clear()

    # -- forward hook calls ----------------------------------------------------------
    def forward_hook_ran(self, rec: Any, args: tuple, result: Any, watched: Any, version: int | None) -> None:
        if _task_id() != -1:
            kind = recompute_kind()
            if kind is not None:
                self._recomputed(rec, kind)
            return
        calls = self.forward_calls.get(rec, 0) + 1
        self.forward_calls[rec] = calls
        if result is None and (version is None or watched._version == version):
            return
        region = checkpoint_region()
        if region is None:
            return
        module = args[0] if args and isinstance(args[0], nn.Module) else None
        if module is None:
            return
        if rec.kind is HookKind.FORWARD:
            made = _first_tensor(result) if result is not None else watched
        else:
            made = _first_tensor(result[0] if isinstance(result, tuple) and len(result) == 2
                                 and isinstance(result[1], dict) else result) if result is not None else watched
        noted = self.changed.setdefault(rec, [])
        if len(noted) >= _MAX_NOTED:
            del noted[0]
        noted.append(Changed(module, region[0], region[1], _checksum(made)))

    def _recomputed(self, rec: Any, kind: str) -> None:
        effects = self._effects(rec)
        if not effects:
            return
        count = self.recompute_calls.get(rec, 0) + 1
        self.recompute_calls[rec] = count
        info = self.rt.infos.get(_task_id())
        backward_site = info.site if info is not None else None
        self.rt.emit(rec.sessions, _doubled(rec, kind, count, self.forward_calls.get(rec, 0), effects[0],
                                            backward_site))

    def _effects(self, rec: Any) -> list[tuple[Effect, str]] | None:
        key = rec.code_key
        if key not in self.effects:
            self.effects[key] = _source_effects(key)
        return self.effects[key]

    # -- removals ---------------------------------------------------------------------
    def hook_removed(self, rec: Any, caller: types.FrameType | None) -> None:
        noted = self.changed.pop(rec, None) if self.changed else None
        if not noted or caller is None:
            return
        site = frames.site_of(caller)
        through_call = False
        if caller.f_code.co_name != "<module>":
            # removed by a helper of another file (a steering context manager's `__exit__`): the user's call
            outer = frames.caller_in_other_file(caller)
            if outer is not None and not _installed(outer.filename):
                site, through_call = outer, True
        for changed in noted:
            module = changed.module_ref()
            region = changed.region_ref()
            if module is None or region is None or _recomputed_already(region, changed.reentrant):
                continue
            watch = Watch(rec, changed, site, through_call)
            helper = self._helper(watch)
            register = self.rt.original("register_forward_pre_hook" if rec.kind is HookKind.FORWARD_PRE
                                        else "register_forward_hook", nn.Module)
            watch.handle = register(module, helper)
            with self.lock:
                self.watches.append(watch)

    def _helper(self, watch: Watch):
        ext = self
        pre = watch.rec.kind is HookKind.FORWARD_PRE

        def hooklint_recompute_watch(module, *args):
            if watch.done or _task_id() == -1 or recompute_kind() is None:
                return None
            if not watch.changed.reentrant and _recomputing_frame() is not watch.changed.region_ref():
                return None
            try:
                watch.done = True
                made = _first_tensor(args[0]) if pre else _first_tensor(args[-1])
                now = _checksum(made)
                if _differs(watch.changed.checksum, now):
                    info = ext.rt.infos.get(_task_id())
                    ext.rt.emit(watch.rec.sessions, _removed_before_recompute(watch, now, info))
            except Exception as exc:  # noqa: BLE001 - never break the user's backward
                ext.rt.internal_error(watch.rec.sessions, exc)
            return None

        from hooklint.runtime.core import _HELPER_ATTR

        setattr(hooklint_recompute_watch, _HELPER_ATTR, True)
        return hooklint_recompute_watch

    def backward_ended(self, info, failed: bool) -> None:
        if not self.watches:
            return
        with self.lock:
            watches, self.watches = self.watches, []
        keep = []
        for watch in watches:
            region = watch.changed.region_ref()
            if watch.done or region is None or _recomputed_already(region, watch.changed.reentrant):
                if watch.handle is not None:
                    watch.handle.remove()
            else:
                keep.append(watch)
        with self.lock:
            self.watches = keep + self.watches


def _installed(filename: str) -> bool:
    parts = filename.replace("\\", "/").split("/")
    return "site-packages" in parts or "dist-packages" in parts


def _recomputed_already(region: Any, reentrant: bool) -> bool:
    if reentrant:
        return False
    recomputed = getattr(region, "is_recomputed", None)
    return bool(recomputed) and any(recomputed.values())


# -- the hook's source -----------------------------------------------------------------

_trees: dict[str, ast.AST | None] = {}


def _source_effects(key: Any) -> list[tuple[Effect, str]] | None:
    """What the hook's body accumulates, read from its source (the static rule's question)."""
    code = key if isinstance(key, types.CodeType) else getattr(getattr(key, "__call__", None), "__code__", None)
    if not isinstance(code, types.CodeType) or frames.is_internal(code.co_filename):
        return None
    node = _function_node(code)
    if node is None:
        return None
    return [(effect, code.co_filename) for effect in accumulating_effects(node)]


def _function_node(code: types.CodeType) -> ast.AST | None:
    filename = code.co_filename
    if filename not in _trees:
        text = "".join(linecache.getlines(filename))
        try:
            _trees[filename] = ast.parse(text) if text else None
        except (SyntaxError, ValueError):
            _trees[filename] = None
    tree = _trees[filename]
    if tree is None:
        return None
    params = list(code.co_varnames[:code.co_argcount])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if code.co_firstlineno in (first, node.lineno):
                found.append(node)
        elif isinstance(node, ast.Lambda) and code.co_name == "<lambda>" and node.lineno == code.co_firstlineno:
            if [a.arg for a in node.args.posonlyargs + node.args.args] == params:
                found.append(node)
    return found[0] if len(found) == 1 else None


# -- observations -------------------------------------------------------------------------


def _doubled(rec: Any, kind: str, recomputes: int, forwards: int, effect: tuple[Effect, str],
             backward_site: Site | None) -> Observation:
    target = rec.target_text()
    node, filename = effect
    effect_site = Site(filename, getattr(node.node, "lineno", 1), getattr(node.node, "col_offset", 0) + 1)
    at = f" during the backward at {backward_site}" if backward_site is not None else " during a backward"
    how = "reentrant" if kind == "reentrant" else "non-reentrant"
    related = [effect_site.related("the state it accumulates")]
    if backward_site is not None:
        related.append(backward_site.related("the backward whose recompute ran it again"))
    return Observation(
        code="HKL703",
        key=("HKL703", rec.site, rec.name),
        site=rec.site,
        message=f"{rec.what()} on {target} ran again in the {how} checkpoint's recompute{at}: {recomputes} "
        f"call{'s' if recomputes != 1 else ''} at recomputes for {forwards} at forwards; it accumulates state "
        f"({node.text} at {effect_site}), so what it collects or counts advances twice per step",
        help="Make the hook idempotent (key what it stores by module name and overwrite it), or skip the "
        "recompute (`if torch._C._current_graph_task_id() != -1: return`: a forward inside a backward), or hook a "
        "module outside the checkpointed region.",
        expected="the hook runs once per forward",
        observed=f"{recomputes} more call{'s' if recomputes != 1 else ''} during backward recomputes",
        related=tuple(related),
        count=recomputes,
        counts_itself=True,
        subject=target,
        subject_noun="module",
    )


def _removed_before_recompute(watch: Watch, now: tuple | None, info: Any) -> Observation:
    rec = watch.rec
    target = rec.target_text()
    what = "input" if rec.kind is HookKind.FORWARD_PRE else "output"
    before = watch.changed.checksum
    numbers = f" (sum {now[1]:.6g} instead of {before[1]:.6g})" if now and before and now[0] == before[0] else ""
    backward = f" the backward at {info.site}" if info is not None else " the backward"
    related = [rec.site.related("the hook was registered here")]
    if info is not None:
        related.append(info.site.related("the backward that recomputed without it"))
    return Observation(
        code="HKL702",
        key=("HKL702", watch.removal_site, rec.site, rec.name),
        site=watch.removal_site,
        message=f"{rec.what()} on {target} changed the module's {what} in a checkpointed forward and was removed "
        f"{'by the helper this line runs' if watch.through_call else 'here'}, before{backward} recomputed the "
        f"region: the recompute produced another {what} for that module"
        f"{numbers}, so the gradients were computed from activations the forward never produced",
        help="Remove the hook after the `backward()` of that forward (keep it through the recompute), or keep the "
        "hooked module out of the checkpointed region.",
        expected=f"the recompute reproduces the {what} the forward used",
        observed=f"it produced another {what} without the removed hook",
        related=tuple(related),
        subject=target,
        subject_noun="module",
    )
