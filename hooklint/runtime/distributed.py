"""Run-time checks under ``torch.distributed``: DDP and FSDP2.

An extension of the run-time layer (``core.Runtime.extensions``): installed with
the patches when a session starts, removed when the last one ends.  It knows
which parameters an engine manages and observes what hooks do to them:

- DDP: ``DistributedDataParallel.__init__`` names the parameters it manages,
  its ``forward`` says whether the next backward all-reduces (not under
  ``no_sync()``).  A module backward hook that writes ``.grad`` of such a
  parameter after its gradient was accumulated (DDP has copied it into its
  bucket already and writes the all-reduced bucket back at the end of
  backward), and a post-accumulate-grad hook that updates the parameter from
  its ``.grad`` (the local gradient: the all-reduce runs after the hook) are
  HKL602.
- FSDP2: ``FSDPParam.__init__`` (``fully_shard``) names the sharded
  parameters; tensor hooks left on the parameter it replaces, and tensor hooks
  registered on the sharded parameter, never run (HKL603, judged after a
  backward in which FSDP computed that parameter's gradient).  A module
  backward hook that reads ``.grad`` of a sharded parameter before FSDP wrote
  this backward's gradient into it is HKL602.
- HKL601: at the end of every backward whose gradients are meant to be the
  same on every rank (a DDP forward that synchronises, or a hook that called
  a ``torch.distributed`` collective on a parameter or its gradient), a
  checksum of each such gradient is taken, before any optimizer step can use
  it, and compared across ranks by an all-reduce that runs while the program
  goes on; it is concluded at the next backward, at
  ``destroy_process_group`` or when the session ends.

FSDP's modules are imported by the program, never by hooklint: its classes
are patched when the program imports them (an import hook while a session is
active), so sessions of programs without FSDP pay nothing for it.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import threading
import types
import weakref
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from hooklint.runtime import describe, distributed_observe, frames
from hooklint.runtime.frames import Site
from hooklint.runtime.import_watch import ImportWatcher
from hooklint.runtime.observation import Observation
from hooklint.static.distributed import ENGINE_HELP as _ENGINE_HELP
from hooklint.static.hooks import HookKind

_FSDP_PARAM_MODULE = "torch.distributed.fsdp._fully_shard._fsdp_param"
_GRAD = torch._C.TensorBase.grad
# The collectives a hand-written gradient sync calls (torch.distributed's names).
_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "all_reduce_coalesced")
_HOOK_WRAPPER_NAMES = frozenset({"hooklint_tensor_hook", "hooklint_post_accumulate_hook", "hooklint_module_hook"})
_CHECK_TIMEOUT = float(os.environ.get("HOOKLINT_DIST_CHECK_TIMEOUT", "300"))
# Relative difference of a gradient's sum or squared norm across ranks that counts as a
# divergence, once the bits differ: reductions in another order change the last bits only.
_TOLERANCE = 1e-6


def extension() -> "DistributedExtension | None":
    if not dist.is_available():
        return None
    return DistributedExtension()


# -- what an engine manages -------------------------------------------------------------


@dataclasses.dataclass
class Managed:
    """A parameter an engine manages."""

    engine: str  # "ddp" or "fsdp2"
    name: str  # as the engine names it (DDP: `module.0.weight`), the same on every rank
    owner: Any  # weakref to the DDP module, or the FSDPParam


@dataclasses.dataclass
class DdpWrite:
    """A module backward hook wrote `.grad` of a DDP-managed parameter after accumulation."""

    rec: Any
    module_text: str
    param_text: str
    param_ref: weakref.ref
    written: torch.Tensor | None
    changed: torch.Tensor | None
    site: Site
    task_id: int


@dataclasses.dataclass
class ShardedRead:
    """A module backward hook read `.grad` of an FSDP-sharded parameter."""

    rec: Any
    param_ref: weakref.ref
    was_none: bool
    grad_ref: Any
    version: int
    site: Site
    module_text: str
    param_text: str


@dataclasses.dataclass
class PendingFsdpHook:
    """A tensor hook on a parameter FSDP manages: it should run in every backward
    that computes that parameter's gradient."""

    rec: Any
    fsdp_param: Any  # weakref to the FSDPParam
    before: bool  # registered on the parameter fully_shard replaced
    shard_site: Site | None


@dataclasses.dataclass
class HandSync:
    """A hook called a collective on a parameter (or its gradient) during a backward."""

    param_ref: weakref.ref
    name: str
    hooks: dict  # (what, site) -> what the collective was called on


class DistributedExtension:
    def __init__(self) -> None:
        self.rt: Any = None
        self.originals: list[tuple[Any, str, Any, bool]] = []
        self.managed: WeakIdKeyDictionary = WeakIdKeyDictionary()  # param -> Managed
        self.ddp_modules: weakref.WeakSet = weakref.WeakSet()
        self.ddp_order: list[weakref.ref] = []  # DDP modules in the order they were constructed
        self.ddp_params: WeakIdKeyDictionary = WeakIdKeyDictionary()  # DDP module -> [(name, param ref)]
        self.ddp_synced: WeakIdKeyDictionary = WeakIdKeyDictionary()  # DDP module -> its last forward synchronises
        # FSDP's unsharded parameters (made at the first forward) -> what manages them
        self.unsharded: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.engines: set[str] = set()
        self.lock = threading.Lock()
        self.ddp_writes: list[DdpWrite] = []
        self.sharded_reads: dict[tuple[int, int], ShardedRead] = {}
        self.fsdp_hooks: list[PendingFsdpHook] = []
        self.hand_synced: dict[int, HandSync] = {}
        self.touched: WeakIdKeyDictionary = WeakIdKeyDictionary()  # param -> {(what, site)}
        self.param_hooks: WeakIdKeyDictionary = WeakIdKeyDictionary()  # param -> [HookRecord] on it
        self.finder: ImportWatcher | None = None
        self.divergence_checks = True
        self.pending_check: PendingCheck | None = None

    # -- lifecycle ------------------------------------------------------------
    def install(self, rt) -> None:
        self.rt = rt
        from torch.nn.parallel import DistributedDataParallel

        self._patch(DistributedDataParallel, "__init__", self._ddp_init(DistributedDataParallel.__init__))
        self._patch(DistributedDataParallel, "forward", self._ddp_forward(DistributedDataParallel.forward))
        for name in _COLLECTIVES:
            original = getattr(dist, name, None)
            if original is not None:
                self._patch(dist, name, self._collective(original))
        self._patch(dist, "destroy_process_group", self._before_destroy(dist.destroy_process_group))
        if _FSDP_PARAM_MODULE in sys.modules:
            self._patch_fsdp()
        else:
            self.finder = ImportWatcher(_FSDP_PARAM_MODULE, self._fsdp_imported)
            sys.meta_path.insert(0, self.finder)

    def uninstall(self, rt) -> None:
        if self.pending_check is not None and dist.is_initialized():
            self.drain()
        self.pending_check = None
        if self.finder is not None:
            if self.finder in sys.meta_path:
                sys.meta_path.remove(self.finder)
            self.finder = None
        for owner, name, original, had in reversed(self.originals):
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self.originals = []

    def _before_destroy(self, original):
        ext = self

        def destroy_process_group(*args, **kwargs):
            if ext.pending_check is not None:
                ext.drain()  # the last backward's comparison needs the group
            _groups.clear()
            return original(*args, **kwargs)

        destroy_process_group.__wrapped__ = original
        destroy_process_group.__doc__ = original.__doc__
        return destroy_process_group

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        had = name in vars(owner)
        self.originals.append((owner, name, vars(owner).get(name), had))
        setattr(owner, name, replacement)

    def _fsdp_imported(self) -> None:
        if self.rt is not None and self.rt.active:
            try:
                self._patch_fsdp()
            except Exception as exc:  # noqa: BLE001 - FSDP stays unobserved, the program runs on
                self.rt.internal_error(self.rt.sessions_here(), exc)

    def _patch_fsdp(self) -> None:
        fsdp_param = sys.modules[_FSDP_PARAM_MODULE]
        from torch.distributed.tensor import DTensor

        if any(owner is fsdp_param.FSDPParam for owner, *_ in self.originals):
            return
        self._patch(fsdp_param.FSDPParam, "__init__", self._fsdp_param_init(fsdp_param.FSDPParam.__init__))
        self._patch(fsdp_param.FSDPParam, "init_unsharded_param",
                    self._fsdp_unsharded(fsdp_param.FSDPParam.init_unsharded_param))
        self._patch(DTensor, "grad", self._dtensor_grad())

    # -- engines ----------------------------------------------------------------
    def _ddp_init(self, original):
        ext = self

        def __init__(ddp, module, *args, **kwargs):
            original(ddp, module, *args, **kwargs)
            try:
                ext.ddp_wrapped(ddp)
            except Exception as exc:  # noqa: BLE001
                ext.rt.internal_error(ext.rt.sessions_here(), exc)

        __init__.__wrapped__ = original
        return __init__

    def ddp_wrapped(self, ddp) -> None:
        ignored = getattr(ddp, "parameters_to_ignore", set())
        ref = weakref.ref(ddp)
        with self.lock:
            self.engines.add("ddp")
            self.ddp_modules.add(ddp)
            self.ddp_order = [r for r in self.ddp_order if r() is not None] + [ref]
            own = []
            for name, param in ddp.module.named_parameters():
                if param.requires_grad and name not in ignored:
                    self.managed[param] = Managed("ddp", f"module.{name}", ref)
                    own.append((f"module.{name}", weakref.ref(param)))
            self.ddp_params[ddp] = own

    def _ddp_forward(self, original):
        ext = self

        def forward(ddp, *args, **kwargs):
            ext.ddp_synced[ddp] = torch.is_grad_enabled() and bool(getattr(ddp, "require_backward_grad_sync", True))
            return original(ddp, *args, **kwargs)

        forward.__wrapped__ = original
        return forward

    def _fsdp_param_init(self, original):
        ext = self

        def __init__(fsdp_param, param, module_info, *args, **kwargs):
            hooks = _wrapped_records(param)
            original(fsdp_param, param, module_info, *args, **kwargs)
            try:
                ext.fsdp_param_created(fsdp_param, module_info, hooks)
            except Exception as exc:  # noqa: BLE001
                ext.rt.internal_error(ext.rt.sessions_here(), exc)

        __init__.__wrapped__ = original
        return __init__

    def _fsdp_unsharded(self, original):
        ext = self

        def init_unsharded_param(fsdp_param, *args, **kwargs):
            result = original(fsdp_param, *args, **kwargs)
            unsharded = getattr(fsdp_param, "_unsharded_param", None)
            if unsharded is not None and unsharded not in ext.unsharded:
                managed = ext.managed.get(fsdp_param.sharded_param)
                if managed is not None:
                    ext.unsharded[unsharded] = managed
            return result

        init_unsharded_param.__wrapped__ = original
        return init_unsharded_param

    def fsdp_param_created(self, fsdp_param, module_info, hooks: list) -> None:
        sharded = fsdp_param.sharded_param
        caller = frames.user_frame(2)
        shard_site = frames.site_of(caller) if caller is not None else None
        ref = weakref.ref(fsdp_param)
        with self.lock:
            self.engines.add("fsdp2")
            managed = self.managed[sharded] = Managed("fsdp2", module_info.param_name, ref)
            unsharded = getattr(fsdp_param, "_unsharded_param", None)  # adopted after a forward
            if unsharded is not None:
                self.unsharded[unsharded] = managed
            for rec in hooks:
                if rec.kind in (HookKind.TENSOR, HookKind.POST_ACCUMULATE):
                    self.fsdp_hooks.append(PendingFsdpHook(rec, ref, True, shard_site))

    def adopted(self, module: nn.Module | None) -> None:
        """`session.watch(model)` on a model wrapped before the session started."""
        if module is None:
            return
        from torch.nn.parallel import DistributedDataParallel

        for sub in module.modules():
            if isinstance(sub, DistributedDataParallel) and sub not in self.ddp_modules:
                self.ddp_wrapped(sub)
            state = getattr(sub, "_get_fsdp_state", None)
            if state is not None:
                try:
                    group = state()._fsdp_param_group
                except Exception:  # noqa: BLE001 - not an FSDP module after all
                    group = None
                for fsdp_param in getattr(group, "fsdp_params", None) or ():
                    if fsdp_param.sharded_param not in self.managed:
                        self.fsdp_param_created(fsdp_param, fsdp_param._module_info, [])

    def engine_of(self, param: Any) -> Managed | None:
        """The engine managing ``param``: a DDP parameter, an FSDP sharded parameter, or
        the unsharded parameter FSDP gathers for forward and backward."""
        if param is None:
            return None
        found = self.managed.get(param)
        if found is None and self.unsharded:
            found = self.unsharded.get(param)
        return found

    # -- registrations and hook calls --------------------------------------------------------
    def hook_bound(self, rec) -> None:
        if not rec.kind.is_tensor:
            return
        target = rec.target()
        if isinstance(target, nn.Parameter):  # for HKL601's message: the hooks on each parameter
            self.param_hooks.setdefault(target, []).append(rec)
        if rec.kind is not HookKind.TENSOR:
            return
        managed = self.managed.get(target) if target is not None else None
        if managed is not None and managed.engine == "fsdp2":
            with self.lock:
                self.fsdp_hooks.append(PendingFsdpHook(rec, managed.owner, False, None))

    def module_hook_after_accumulation(self, rec, module, accesses: list, task_id: int) -> None:
        """A module backward hook touched `.grad` of parameters whose gradient had arrived."""
        from hooklint.runtime.core import grad_of
        from hooklint.runtime.observe import _bits, same_values

        for access in accesses:
            param = access.param_ref()
            managed = self.engine_of(param)
            if managed is None:
                continue
            key = (rec.what(), rec.site)
            self.touched.setdefault(param, {})[key] = None
            if managed.engine != "ddp" or not self._ddp_syncs(managed):
                continue
            now = grad_of(param)
            before = access.before
            if access.assigned:
                wrote = True
            elif before is None:
                wrote = now is not None
            else:
                wrote = now is None or not same_values(now, before)
            if not wrote:
                continue
            written = now.detach().clone() if now is not None else None
            changed = None
            if written is not None and before is not None and before.shape == written.shape \
                    and before.dtype == written.dtype:
                changed = _bits(written) != _bits(before)
            module_text = describe.describe_module(module, rec.roots)
            with self.lock:
                self.ddp_writes.append(DdpWrite(rec, module_text,
                                                describe.describe_parameter(param, module, rec.roots, module_text),
                                                weakref.ref(param), written, changed, access.site, task_id))

    def post_accumulate_ran(self, rec, param, version: int, call) -> None:
        managed = self.engine_of(param)
        if managed is None:
            return
        self.touched.setdefault(param, {})[(rec.what(), rec.site)] = None
        if managed.engine == "ddp" and self._ddp_syncs(managed) and id(param) in call.accesses \
                and param._version != version:
            self.rt.emit(rec.sessions, distributed_observe.local_gradient_update(rec, managed))

    def gradient_elsewhere(self, param) -> bool:
        """FSDP2's unsharded parameters: their gradient is reduce-scattered into the
        sharded parameter's `.grad`, theirs is None after backward by design."""
        return bool(self.unsharded) and param in self.unsharded

    def _ddp_syncs(self, managed: Managed) -> bool:
        ddp = managed.owner()
        return ddp is not None and self.ddp_synced.get(ddp, False)

    def _dtensor_grad(self) -> property:
        ext = self
        tls = self.rt.tls

        def get(tensor):
            grad = _GRAD.__get__(tensor, type(tensor))
            call = tls.call
            if call is not None and call.rec.kind.is_module_backward:
                try:
                    ext.sharded_grad_read(call.rec, tensor, grad, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001
                    ext.rt.internal_error(call.rec.sessions, exc)
            return grad

        def set_(tensor, value):
            _GRAD.__set__(tensor, value)

        def delete(tensor):
            _GRAD.__delete__(tensor)

        return property(get, set_, delete, _GRAD.__doc__)

    def sharded_grad_read(self, rec, param, grad, frame: types.FrameType) -> None:
        managed = self.managed.get(param)
        if managed is None or managed.engine != "fsdp2":
            return
        key = (id(rec), id(param))
        if key in self.sharded_reads:
            return
        fsdp_param = managed.owner()
        module = getattr(getattr(fsdp_param, "_module_info", None), "module", None)
        module_text = describe.describe_module(module, rec.roots) if module is not None else "its module"
        param_text = describe.describe_parameter(param, module, rec.roots, module_text)
        with self.lock:
            self.sharded_reads[key] = ShardedRead(rec, weakref.ref(param), grad is None,
                                                  weakref.ref(grad) if grad is not None else None,
                                                  _version_of(grad),
                                                  frames.site_of(frame), module_text, param_text)

    def _collective(self, original):
        ext = self

        def collective(tensor, *args, **kwargs):
            if ext.rt is not None and ext.rt.active and isinstance(tensor, torch.Tensor):
                try:
                    ext.collective_called(original.__name__, tensor, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001
                    ext.rt.internal_error(ext.rt.sessions_here(), exc)
            return original(tensor, *args, **kwargs)

        collective.__wrapped__ = original
        collective.__name__ = original.__name__
        collective.__doc__ = original.__doc__
        return collective

    def collective_called(self, collective: str, tensor: torch.Tensor, frame: types.FrameType | None) -> None:
        """A collective called from inside one of the user's hooks, during a backward,
        on a parameter or its gradient: that parameter's gradient is meant to be the
        same on every rank."""
        from hooklint.runtime.core import current_task_id, grad_of

        if current_task_id() < 0:
            return
        rec, wrapper_frame = None, None
        for _ in range(40):
            if frame is None:
                return
            if frame.f_code.co_name in _HOOK_WRAPPER_NAMES and frames.is_hooklint(frame):
                rec, wrapper_frame = frame.f_locals.get("rec"), frame
                break
            frame = frame.f_back
        if rec is None or wrapper_frame is None:
            return
        target = rec.target()
        if isinstance(target, nn.Module):
            candidates = list(target.parameters())
        elif isinstance(target, torch.Tensor) and isinstance(target, nn.Parameter):
            candidates = [target]
        else:
            return
        for param in candidates:
            what = _same_storage_as(tensor, param, grad_of(param), wrapper_frame.f_locals.get("grad"))
            if what is None:
                continue
            managed = self.engine_of(param)
            if managed is not None and managed.engine == "fsdp2":
                return  # FSDP reduces its own shards; a rank holds a different shard of each
            name = managed.name if managed is not None else _label_name(rec, param)
            with self.lock:
                entry = self.hand_synced.get(id(param))
                if entry is None or entry.param_ref() is not param:
                    entry = self.hand_synced[id(param)] = HandSync(weakref.ref(param), name, {})
                entry.hooks[(rec.what(), rec.site)] = f"`dist.{collective}` on {what}"
            self.touched.setdefault(param, {})[(rec.what(), rec.site)] = None
            if rec.kind is HookKind.POST_ACCUMULATE and what == "the parameter itself":
                self.rt.emit(rec.sessions, distributed_observe.collective_on_parameter(rec, collective))
            return

    # -- end of backward ----------------------------------------------------------------
    def backward_ended(self, info, failed: bool) -> None:
        if self.sharded_reads:
            self._conclude_sharded_reads(info, failed)
        if failed:
            if self.ddp_writes:
                with self.lock:
                    self.ddp_writes = [w for w in self.ddp_writes if w.task_id != info.task_id]
            return
        if self.ddp_writes:
            self._conclude_ddp_writes(info)
        if not (self.fsdp_hooks or self.ddp_modules or self.hand_synced):
            return  # no engine, no hand-written sync: the common case costs nothing more
        leaves = {id(p) for p, _node, _slot, _seq in info.leaves}
        if self.fsdp_hooks:
            self._conclude_fsdp_hooks(info, leaves)
        if info.accumulate:
            self._compare_across_ranks(info, leaves)

    def _conclude_ddp_writes(self, info) -> None:
        from hooklint.runtime.core import grad_of
        from hooklint.runtime.observe import same_values

        with self.lock:
            mine = [w for w in self.ddp_writes if w.task_id == info.task_id]
            self.ddp_writes = [w for w in self.ddp_writes if w.task_id != info.task_id and w.param_ref() is not None]
        for write in mine:
            param = write.param_ref()
            if param is None:
                continue
            final = grad_of(param)
            if write.written is None:
                lost = final is not None
            elif final is None or final.shape != write.written.shape:
                lost = True
            elif write.changed is not None and bool(write.changed.any()):
                lost = not same_values(final[write.changed], write.written[write.changed])
            else:
                lost = not same_values(final, write.written)
            self.rt.emit(write.rec.sessions, distributed_observe.ddp_write(write, lost, info.site))

    def _conclude_sharded_reads(self, info, failed: bool) -> None:
        from hooklint.runtime.core import grad_of

        with self.lock:
            reads, self.sharded_reads = list(self.sharded_reads.values()), {}
        for read in reads:
            param = read.param_ref()
            if param is None:
                continue
            final = grad_of(param)
            if not failed:
                earlier = read.grad_ref() if read.grad_ref is not None else None
                if final is not None and earlier is final and _version_of(final) == read.version:
                    continue  # it read the gradient FSDP wrote in this backward
                if final is None and read.was_none:
                    continue  # no gradient this backward either: nothing was early
            self.rt.emit(read.rec.sessions, distributed_observe.sharded_read(read, failed))

    def _conclude_fsdp_hooks(self, info, leaves: set[int]) -> None:
        with self.lock:
            self.fsdp_hooks = [item for item in self.fsdp_hooks
                               if item.fsdp_param() is not None and item.rec.live and not item.rec.removed]
            pending = list(self.fsdp_hooks)
        for item in pending:
            fsdp_param = item.fsdp_param()
            if fsdp_param is None:
                continue
            unsharded = getattr(fsdp_param, "_unsharded_param", None)
            if unsharded is None or id(unsharded) not in leaves or item.rec.fired:
                continue  # FSDP computed no gradient for it in this backward, or the hook ran after all
            self.rt.emit(item.rec.sessions, distributed_observe.fsdp_hook_never_runs(item, fsdp_param, info.site))

    # -- HKL601 ------------------------------------------------------------------------
    def _compare_across_ranks(self, info, leaves: set[int]) -> None:
        from hooklint.runtime.core import grad_of

        with self.lock:
            hand, self.hand_synced = self.hand_synced, {}
        if not self.divergence_checks or not dist.is_initialized() or dist.get_world_size() < 2:
            return
        if not any("HKL601" in session.codes for session in info.sessions):
            return  # not selected (the same on every rank): no collective at all
        # DDP's parameters: every parameter of each DDP whose synchronising forward this backward
        # consumed, in the order DDP was constructed, whatever this rank's graph used (DDP checks at
        # construction that every rank has the same parameters: the rows line up on every rank)
        entries: list[tuple[str, Any]] = []
        for ddp in list(self.ddp_order):
            ddp = ddp()
            if ddp is None or not self.ddp_synced.get(ddp, False):
                continue
            own = self.ddp_params.get(ddp, [])
            if not any(id(ref()) in leaves for _name, ref in own):
                continue
            self.ddp_synced[ddp] = False  # this forward's backward has been checked
            entries.extend((name, ref()) for name, ref in own)
        handshake = False
        for entry in sorted(hand.values(), key=lambda e: e.name):
            param = entry.param_ref()
            if param is not None and all(param is not p for _n, p in entries):
                entries.append((entry.name, param))
                handshake = True  # hooks decide these: check that the ranks compare the same ones
        if not entries:
            return
        rows = _checksum_rows([grad_of(param) if param is not None else None for _name, param in entries])
        # what the message will need, held by this check, not by the parameters (which may be
        # gone when the comparison is concluded, at the end of the next backward)
        check = PendingCheck([(name, describe.shape_text(param) if param is not None else "?",
                               self.param_hooks.get(param) if param is not None else None,
                               self.touched.get(param) if param is not None else None)
                              for name, param in entries], rows, hand, info.site, list(info.sessions))
        try:
            self.drain()  # the previous backward's comparison, done meanwhile
            if not _start_comparison(check, handshake):
                return  # the ranks compare different parameter sets: nothing to say about their gradients
        except Exception as exc:  # noqa: BLE001 - stop checking rather than break the program
            self._stop_checks(check.sessions, exc)
            return
        self.pending_check = check

    def drain(self) -> None:
        """Conclude the comparison started at the end of the last backward (its
        all-reduce ran while the program went on).  Every rank calls this at the same
        point: the end of its next backward, `destroy_process_group`, or the end of
        the session."""
        check, self.pending_check = self.pending_check, None
        if check is None:
            return
        try:
            suspects = _finish_comparison(check)
            if not suspects:
                return
            # every rank saw the same extremes, so every rank comes here: the per-rank values, for the message
            gathered: list = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, [check.rows[i].tolist() for i in suspects], group=_check_group())
        except Exception as exc:  # noqa: BLE001
            self._stop_checks(check.sessions, exc)
            return
        hand_names = {e.name for e in check.hand.values()}
        for k, i in enumerate(suspects):
            name, shape, recs, touched = check.entries[i]
            values = [tuple(ranked[k][1:]) for ranked in gathered]
            hooks = self._hooks_touching(name, recs, touched, check.hand)
            self.rt.emit(check.sessions,
                         distributed_observe.diverged(name, shape, values, hooks, check.site, name in hand_names))

    def _stop_checks(self, sessions: list, exc: BaseException) -> None:
        self.divergence_checks = False
        self.pending_check = None
        self.rt.internal_error(sessions, RuntimeError(
            f"HKL601 checks stopped: comparing gradient checksums across ranks failed ({type(exc).__name__}: {exc})"))

    @staticmethod
    def _hooks_touching(name: str, recs: list | None, touched: dict | None, hand: dict) -> list[tuple[str, Site, str]]:
        """The hooks registered on a parameter, those that touched its `.grad`, and
        those that called a collective on it, with what they called it on."""
        found: dict[tuple[str, Site], str] = {}
        for rec in recs or ():
            if not rec.removed:
                found.setdefault((rec.what(), rec.site), "")
        for key in touched or {}:
            found.setdefault(key, "")
        for entry in hand.values():
            if entry.name == name:
                for key, how in entry.hooks.items():
                    found[key] = how
        return [(what, site, how) for (what, site), how in found.items()]

    # -- help that works under the engine in use --------------------------------------------
    def rewrite(self, obs: Observation) -> Observation:
        extra = _ENGINE_HELP.get(obs.code)
        if not extra or not self.engines:
            return obs
        engine = "fsdp2" if "fsdp2" in self.engines else "ddp"
        if obs.code == "HKL201":
            return dataclasses.replace(obs, help=extra[engine])
        return dataclasses.replace(obs, help=obs.help + extra[engine])


# -- helpers ------------------------------------------------------------------------


def _version_of(grad: Any) -> int:
    """A DTensor's version counter does not move when FSDP accumulates into its local
    tensor in place; the local tensor's does."""
    if grad is None:
        return -1
    local = getattr(grad, "_local_tensor", None)
    return local._version if isinstance(local, torch.Tensor) else grad._version


def _wrapped_records(param: Any) -> list:
    from hooklint.runtime.core import _WRAPPER_ATTR

    found = []
    for attr in ("_backward_hooks", "_post_accumulate_grad_hooks"):
        hooks = getattr(param, attr, None)
        for hook in (hooks or {}).values():
            rec = getattr(hook, _WRAPPER_ATTR, None)
            if rec is not None and rec.live:
                found.append(rec)
    return found


def _same_storage_as(tensor: torch.Tensor, param: torch.Tensor, grad: torch.Tensor | None,
                     incoming: Any) -> str | None:
    """What ``tensor`` is, seen from ``param``: the parameter itself (or its `.data`),
    its `.grad`, the gradient a tensor hook received; None for another tensor."""
    def same(a: Any, b: Any) -> bool:
        return isinstance(b, torch.Tensor) and (a is b or (a.numel() > 0 and a.data_ptr() == b.data_ptr()
                                                           and a.shape == b.shape))

    if same(tensor, param):
        return "the parameter itself"
    if grad is not None and same(tensor, grad):
        return "its `.grad`"
    if isinstance(incoming, torch.Tensor) and same(tensor, incoming):
        return "the gradient the hook received"
    return None


def _label_name(rec, param) -> str:
    name = rec.roots.parameter_name(param)
    return name or f"a parameter of shape {describe.shape_text(param)}"


_groups: dict[int, Any] = {}


def _check_group():
    """The group HKL601 gathers checksums on: the default group when it is gloo,
    otherwise a gloo group of every rank (created once, by every rank, at the end of
    the same backward)."""
    world = dist.group.WORLD
    if dist.get_backend() == "gloo":
        return world
    group = _groups.get(id(world))
    if group is None:
        group = _groups[id(world)] = dist.new_group(backend="gloo",
                                                   timeout=datetime.timedelta(seconds=_CHECK_TIMEOUT))
    return group


_BITS_MOD = 1 << 52  # a sum of bits kept exact in a float64


def _checksum_rows(grads: list) -> torch.Tensor:
    """Per gradient one row: (present, numel, a sum of its bits, its sum, its squared
    norm), in float64.  Three passes over each gradient, no copy of it kept.
    ``present`` is 0 for a None (or sparse, or DTensor) gradient, which is not
    compared."""
    rows = torch.zeros(len(grads), 5, dtype=torch.float64)
    for i, grad in enumerate(grads):
        if grad is None or grad.is_sparse or type(grad) is not torch.Tensor:
            continue
        flat = grad.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        if flat.is_floating_point() and flat.element_size() in (2, 4, 8):
            as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
            bits = int(flat.view(as_int).sum(dtype=torch.int64)) % _BITS_MOD
        elif not flat.is_floating_point():
            bits = int(flat.sum(dtype=torch.int64)) % _BITS_MOD
        else:
            bits = 0
        rows[i, 0] = 1.0
        rows[i, 1] = float(flat.numel())
        rows[i, 2] = float(bits)
        if flat.numel():
            rows[i, 3] = flat.sum(dtype=torch.float64)
            rows[i, 4] = torch.linalg.vector_norm(flat, 2, dtype=torch.float64) ** 2
    return rows


def _name_hash(names: list[str]) -> float:
    import zlib

    return float(zlib.crc32("\0".join(names).encode()))


@dataclasses.dataclass
class PendingCheck:
    """HKL601's comparison for one backward, while its all-reduce runs."""

    entries: list  # (name, shape as text, hook records on the parameter, hooks that touched its `.grad`)
    rows: torch.Tensor
    hand: dict
    site: Site
    sessions: list
    work: Any = None
    buffer: torch.Tensor | None = None


def _start_comparison(check: PendingCheck, handshake: bool) -> bool:
    """Start the all-reduce that gives every rank the lowest and highest value of
    every checksum over the ranks (MAX of the values and of their negatives, behind
    a header of the number of rows and a hash of their names), without waiting for
    it.  False when the ranks do not compare the same parameters.

    Ranks that all-reduce tensors of different sizes crash (gloo aborts), so when the
    rows are not known to line up (parameters chosen by what hooks did,
    ``handshake``) the header goes first, alone, and is waited for."""
    group = _check_group()
    names = [entry[0] for entry in check.entries]
    header = torch.tensor([float(len(names)), _name_hash(names)], dtype=torch.float64)
    if handshake:
        both = torch.cat([header, -header])
        dist.all_reduce(both, op=dist.ReduceOp.MAX, group=group)
        if not torch.equal(both[:2], -both[2:]):
            return False
    flat = torch.cat([header, check.rows.reshape(-1)])
    check.buffer = torch.cat([flat, -flat])
    check.work = dist.all_reduce(check.buffer, op=dist.ReduceOp.MAX, group=group, async_op=True)
    return True


def _finish_comparison(check: PendingCheck) -> list[int]:
    """Wait for the all-reduce; the rows whose gradient differs across ranks."""
    check.work.wait(datetime.timedelta(seconds=_CHECK_TIMEOUT))
    both = check.buffer
    half = both.numel() // 2
    high, low = both[:half], -both[half:]
    if not torch.equal(high[:2], low[:2]):
        return []
    shape = check.rows.shape
    high_rows, low_rows = high[2:].reshape(shape).tolist(), low[2:].reshape(shape).tolist()
    return [i for i in range(shape[0]) if low_rows[i][0] == 1 and _differ([low_rows[i][1:], high_rows[i][1:]])]


def _differ(values: list) -> bool:
    """Whether the checksums (numel, bits, sum, squared norm) of one gradient differ
    across ranks beyond what summing in another order can do: the bits differ, and
    so do the sum (relative to sqrt(numel) times the norm, which bounds the sum of
    absolute values) or the squared norm, by more than ``_TOLERANCE``."""
    first = values[0]
    for other in values[1:]:
        if other[0] != first[0]:
            return True
        if other[1] == first[1] and tuple(other[2:]) == tuple(first[2:]):
            continue
        squares = max(first[3], other[3], 1e-300)
        scale = (max(first[0], 1.0) * squares) ** 0.5
        if abs(first[2] - other[2]) > _TOLERANCE * scale or abs(first[3] - other[3]) > _TOLERANCE * squares:
            return True
    return False
