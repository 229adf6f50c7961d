"""Process-wide instrumentation: the patched PyTorch APIs, hook records, and
the bookkeeping that turns what happens during forward and backward into
observations.

While at least one session is active, the hook registration APIs, the entry
points of backward, ``RemovableHandle.remove``, ``Parameter.grad`` and
``warnings.warn`` are replaced by thin wrappers; when the last session ends
every one of them is put back, the hooks the user registered meanwhile are
unwrapped in place, and hooklint's own helper hooks are removed.

Only weak references to the user's modules and tensors are kept.  The numbers
the program computes do not change: wrappers pass arguments and return values
through untouched, and helper hooks return None.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import os
import sys
import threading
import types
import warnings
import weakref
from typing import Any, Callable

import torch
from torch import nn
from torch.nn.modules import module as module_mod
from torch.utils import hooks as torch_hooks
from torch.utils.weak import WeakIdKeyDictionary

from hooklint.runtime import describe, frames, observe
from hooklint.runtime.frames import Site
from hooklint.static.hooks import HookKind

_GRAD = torch._C.TensorBase.grad  # the real `.grad` descriptor, read without being observed
_WRAPPER_ATTR = "__hooklint_record__"
_HELPER_ATTR = "__hooklint_helper__"  # hooklint's own hooks, never adopted as the user's
_META_INPUTS = "hooklint.module_inputs"
_META_MODULE = "hooklint.hooked_module"
_TENSOR_BACKWARD_CODE = torch.Tensor.backward.__code__
_ACCUMULATE_GRAD = torch._C._functions.AccumulateGrad

_current_task_id: Callable[[], int] = getattr(torch._C, "_current_graph_task_id", lambda: -1)
# While dynamo traces a function, hooklint's wrappers step aside: what they do (frame walks, records)
# would break the graph, and the compiled code must be the same with and without hooklint.
_is_compiling: Callable[[], bool] = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def current_task_id() -> int:
    return _current_task_id()


def sequence_nr() -> int:
    """The sequence number the next autograd node created in this thread will get;
    every node that exists now has a smaller one."""
    peek = getattr(torch._C._autograd, "_get_sequence_nr", None)
    if peek is not None:
        return peek()
    with torch.enable_grad():
        node = torch.empty(0, requires_grad=True).view(0).grad_fn
    return node._sequence_nr() + 1


def grad_of(tensor: torch.Tensor) -> torch.Tensor | None:
    return _GRAD.__get__(tensor, type(tensor))


_read_grad: Callable[[torch.Tensor], torch.Tensor | None] = _GRAD.__get__  # grad_of without a Python call


class _Local(threading.local):
    def __init__(self) -> None:
        self.sessions: list = []
        self.call: "HookCall | None" = None
        self.outputs_warning_module: int = 0  # id() of the module PyTorch just warned about
        self.last_hooked: tuple | None = None  # (module ref, side) of the last tensors a BackwardHook wrapped
        # id(module) -> the gradient edges of its inputs, noted before each forward of a module with a
        # legacy backward hook (a stack: a module may run inside itself)
        self.legacy_inputs: dict[int, list] = {}
        # the backward hook running in this thread (any kind), for optimizer steps made from it (HKL205)
        self.backward_hook: "HookRecord | None" = None


# -- records -----------------------------------------------------------------


class HookRecord:
    """One registration the user made while instrumented."""

    __slots__ = ("kind", "is_global", "name", "site", "roots", "target_ref", "target_label", "handle_id",
                 "dict_ref", "sessions", "live", "fired", "runs", "last_task", "removed", "reg_seq", "reg_thread",
                 "key", "code_key", "site_group", "subject_noun", "uses_grad_input", "intent_names",
                 "gradient_named", "snapshot_data", "caller_site", "__weakref__")

    def __init__(self, kind: HookKind, is_global: bool, hook: Any, site: Site, roots: describe.Roots,
                 target: Any, sessions: list, adopted: bool = False, target_name: str | None = None):
        self.kind = kind
        self.is_global = is_global
        self.name = describe.hook_name(hook)
        self.site = site
        self.roots = roots
        self.target_ref = weakref.ref(target) if target is not None else None
        if isinstance(target, nn.Module):
            self.target_label = f"a `{describe.module_label(target)}` module"
            self.subject_noun = "module"
        elif isinstance(target, torch.Tensor):
            name = roots.parameter_name(target) if isinstance(target, nn.Parameter) else None
            name = name or target_name
            shape = describe.shape_text(target)
            self.target_label = f"`{name}` (shape {shape})" if name else f"a tensor of shape {shape}"
            self.subject_noun = "parameter" if isinstance(target, nn.Parameter) else "tensor"
        else:
            self.target_label = "every module (global hook)"
            self.subject_noun = "target"
        self.handle_id = -1
        self.dict_ref: weakref.ref | None = None
        self.sessions = list(sessions)
        # the call in another file that led to the registration (`GradCAM(model, layer)` in the script's
        # loop, for a hook registered in a library's __init__); set by Registry.registered
        self.caller_site: Site | None = None
        self.live = True
        self.fired = 0  # calls of the hook
        self.runs = 0  # forwards of the target module while registered (module hooks)
        self.last_task = -2
        self.removed = False
        # adopted hooks were registered before anything hooklint saw ran: never late
        self.reg_seq = sequence_nr() if kind.is_module_backward and not is_global and not adopted else 0
        self.reg_thread = threading.get_ident()
        self.key = describe.hook_key(hook)
        self.code_key = describe.hook_code_key(hook)
        self.site_group: SiteGroup | None = None
        self.uses_grad_input = describe.reads_parameter(hook, 1) if kind is HookKind.BACKWARD_LEGACY else None
        self.intent_names = describe.code_names(hook) if kind is HookKind.POST_ACCUMULATE else frozenset()
        self.gradient_named = ""  # the argument's name, when it names a gradient
        self.snapshot_data = False
        if kind is HookKind.POST_ACCUMULATE:
            # `def clip(grad): grad.clamp_(-1, 1)`: the name says the author takes the parameter for its
            # gradient, whatever words the code uses
            argument = describe.argument_name(hook, 0)
            self.gradient_named = argument if argument and describe.names_a_gradient(argument) else ""
            attributes = describe.attribute_names(hook)
            # an edit through `.data` leaves no trace in the version counter: compare values instead, only
            # for hooks that use `.data` and never `.grad` (a copy of the parameter per call)
            self.snapshot_data = "data" in attributes and "grad" not in attributes and (
                self.gradient_named or not observe.looks_like_parameter_update(self.intent_names))

    def target(self) -> Any:
        return self.target_ref() if self.target_ref is not None else None

    def target_text(self) -> str:
        target = self.target()
        if isinstance(target, nn.Module):
            return describe.describe_module(target, self.roots)
        return self.target_label

    def what(self) -> str:
        """``full backward hook `grad_mod``` """
        return f"{describe.kind_phrase(self.kind.value)} `{self.name}`"

    def has_run(self) -> bool:
        """Its target ran (a forward of its module, a gradient for its tensor) while it was registered."""
        return self.runs > 0 or self.fired > 0

    def in_force(self) -> bool:
        return self.live and not self.removed and (self.target_ref is None or self.target_ref() is not None)


class SiteGroup:
    """Registrations of the same code from one source line on one target (HKL304).

    Registering again after the target ran, while the earlier registration is
    still in place, makes the group suspect: the hooks stack up across runs.
    It is reported when the target runs again (or a backward ends, or the
    session ends) with two or more of them still registered."""

    __slots__ = ("members", "suspect", "reported")

    def __init__(self) -> None:
        self.members: list[HookRecord] = []
        self.suspect = False
        self.reported = 0  # the count last reported, so that a steady leak is not rebuilt at every forward


class ParamState:
    """Per parameter: the last backward (graph task) in which a gradient reached it;
    once an optimizer step made from a hook used its `.grad`, that gradient's
    fingerprint (:class:`HookStep`) and the sum of each gradient arriving since."""

    __slots__ = ("last_task", "hook_step", "arrived_sum")

    def __init__(self) -> None:
        self.last_task = -2
        self.hook_step: HookStep | None = None
        self.arrived_sum: float | None = None


class HookStep:
    """What an optimizer step made from a hook used as a parameter's gradient: the
    `.grad` tensor (by identity), its version counter and the sum of its values."""

    __slots__ = ("grad_id", "version", "total", "task")

    def __init__(self, grad: torch.Tensor, task: int) -> None:
        self.grad_id = id(grad)
        self.version = grad._version
        self.total = float(grad.detach().double().sum())
        self.task = task

    def applied_again(self, grad: torch.Tensor, arrived: float | None, task: int) -> bool:
        """``grad`` is that same gradient with exactly one backward's gradient added
        in place (one more version, its sum that of the old one plus the arrival):
        nothing reset it, so a step now applies the old part a second time."""
        if task == self.task or arrived is None or id(grad) != self.grad_id or grad._version != self.version + 1:
            return False
        now = float(grad.detach().double().sum())
        scale = abs(self.total) + abs(arrived) + abs(now)
        return abs(self.total) > 1e-6 * scale and abs(now - arrived - self.total) <= 1e-5 * scale


class GradAccess:
    """A parameter's ``.grad`` as a module backward or post-accumulate-grad hook found it."""

    __slots__ = ("param_ref", "before", "was_none", "assigned", "site")

    def __init__(self, param: torch.Tensor, grad: torch.Tensor | None, site: Site, snapshot: bool):
        self.param_ref = weakref.ref(param)
        self.was_none = grad is None
        # a copy, because edits through `.grad.data` leave no trace in version counters
        self.before = None if grad is None or not snapshot else grad.detach().clone()
        self.assigned = False
        self.site = site


class HookCall:
    """The hook call running in this thread, to attribute ``.grad`` reads and writes."""

    __slots__ = ("rec", "accesses", "snapshot")

    def __init__(self, rec: HookRecord, snapshot: bool):
        self.rec = rec
        self.accesses: dict[int, GradAccess] = {}
        self.snapshot = snapshot  # copy `.grad` at first access, to tell what the hook wrote

    def access(self, param: torch.Tensor, frame: types.FrameType) -> GradAccess:
        found = self.accesses.get(id(param))
        if found is None:
            found = GradAccess(param, grad_of(param), frames.site_of(frame), self.snapshot)
            self.accesses[id(param)] = found
        return found


class TaskState:
    """One backward (autograd graph task) in which a module hook touched `.grad`."""

    __slots__ = ("task_id", "candidates")

    def __init__(self, task_id: int):
        self.task_id = task_id
        self.candidates: list[observe.GradEditCandidate] = []


class BackwardInfo:
    """One instrumented backward: where it was called, its roots, and (when a check asks)
    the parameters in its graph."""

    __slots__ = ("sessions", "thread", "caller", "_call", "_site", "root_seq", "_leaves", "accumulate", "task_id",
                 "markers", "roots", "consumers")

    def __init__(self, sessions: list, caller: types.FrameType, accumulate: bool):
        self.sessions = sessions
        self.thread = threading.get_ident()
        self.caller: types.FrameType | None = caller
        # the call's position, kept to build `site` when a finding asks (most backwards never do)
        self._call = (caller.f_code, caller.f_lasti)
        self._site: Site | None = None
        self.root_seq: int | None = None
        self._leaves: list[tuple[nn.Parameter, Any, int, int]] | None = None
        self.accumulate = accumulate
        self.task_id: int | None = None
        self.markers: list = []
        self.roots: list = []  # the root nodes, until the backward ends (its errors, `leaves`)
        # RemovalWatch -> (sequence nr, name) of the earliest op in this graph that used its tensor
        self.consumers: dict = {}

    @property
    def site(self) -> Site:
        """Where the backward was called (the `loss.backward()` line)."""
        if self._site is None:
            self._site = frames.site_at(*self._call)
        return self._site

    @property
    def leaves(self) -> list[tuple[nn.Parameter, Any, int, int]]:
        """(parameter, the node that consumed it, that node's input slot, earliest consumer
        sequence nr) for every parameter in the graph.  Found by a walk from the roots
        when first asked, which is after the backward ran unless removal watches need
        it before (HKL301): running a backward leaves a graph's edges in place (only
        saved tensors are freed), and the roots keep it alive until the backward ends."""
        if self._leaves is None:
            self._leaves = _parameters_in_graph(self.roots) if self.roots else []
        return self._leaves

    @leaves.setter
    def leaves(self, value: list[tuple[nn.Parameter, Any, int, int]]) -> None:
        self._leaves = value

    def leaves_without_grad(self) -> list[tuple[nn.Parameter, Any, int, int]]:
        """The entries of `leaves` whose parameter's `.grad` is None now (HKL503, after
        every backward): without building `leaves` when nothing else asked for it."""
        if self._leaves is not None:
            return [leaf for leaf in self._leaves if _read_grad(leaf[0]) is None]
        return _parameters_without_grad_in_graph(self.roots) if self.roots else []


class RemovalWatch:
    """A tensor hook removed before it ever ran, until a gradient reaches its tensor (HKL301)."""

    __slots__ = ("rec", "tensor_ref", "removal_site", "removal_seq", "thread", "handle", "__weakref__")

    def __init__(self, rec: HookRecord, tensor: torch.Tensor, removal_site: Site):
        self.rec = rec
        self.tensor_ref = weakref.ref(tensor)
        self.removal_site = removal_site
        self.removal_seq = sequence_nr()  # every op that exists now has a smaller sequence number
        self.thread = threading.get_ident()
        self.handle: torch_hooks.RemovableHandle | None = None


# -- the runtime ---------------------------------------------------------------


class Runtime:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.tls = _Local()
        self.global_sessions: list = []
        self.active = 0
        self.originals: list[tuple[Any, str, Any, bool]] = []
        self.records: dict[int, HookRecord] = {}
        self.groups: dict[tuple, list[HookRecord]] = {}
        self.pending_302: list[HookRecord] = []
        self.repeated: set[tuple] = set()  # keys of groups that reached two live registrations
        self.site_groups: dict[tuple, SiteGroup] = {}
        self.suspects: set[SiteGroup] = set()
        self.removal_watches: list[RemovalWatch] = []
        self.legacy_watched: weakref.WeakSet = weakref.WeakSet()
        self.params: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self.tasks: dict[int, TaskState] = {}
        self.infos: dict[int, BackwardInfo] = {}
        self.helper_handles: list[torch_hooks.RemovableHandle] = []
        # Module backward hooks removed while an exception was propagating (`finally:
        # handle.remove()` around a forward that PyTorch's in-place check failed): the
        # exception is explained after they are gone, so they are kept here with it.
        self.removed_during_error: list[tuple[int, HookRecord]] = []
        self._registrations = itertools.count()
        # Layers that follow what this one sees (hooklint.runtime.distributed, .compiled,
        # .checkpointing): installed and removed with the patches, told about registrations, hook
        # calls and ends of backward.
        self.extensions: list = []
        # Called after every forward (pre-)hook of the user's, when an extension asks for it:
        # (record, the hook's arguments, what it returned, its output's version before the call).
        self.forward_watchers: list = []

    # -- sessions -----------------------------------------------------------
    def sessions_here(self) -> list:
        if not self.active:
            return []
        return [*self.global_sessions, *self.tls.sessions]

    def attach(self, session) -> None:
        with self.lock:
            if self.active == 0:
                self._install()
            enclosing = self.sessions_here()
            self.active += 1
            if session.all_threads:
                self.global_sessions.append(session)
                session._stack = self.global_sessions
            else:
                self.tls.sessions.append(session)
                session._stack = self.tls.sessions
            if enclosing:
                self._join(session, enclosing)

    def _join(self, session, enclosing: list) -> None:
        """A session started inside others watches, while it is active, the hooks
        they watch: what those hooks do meanwhile is reported to it too.  The
        hooks stay wrapped once."""
        for rec in list(self.records.values()):
            if rec.live and not rec.removed and session not in rec.sessions \
                    and any(outer in rec.sessions for outer in enclosing):
                rec.sessions.append(session)
                session._records.append(rec)

    def detach(self, session) -> None:
        with self.lock:
            stack = session._stack
            if session in stack:
                stack.remove(session)
            try:
                self.check_repeated(final=True)
            except Exception as exc:  # noqa: BLE001
                self.internal_error([session], exc)
            for extension in self.extensions:
                ending = getattr(extension, "session_ending", None)
                if ending is not None:
                    try:
                        ending(session)
                    except Exception as exc:  # noqa: BLE001
                        self.internal_error([session], exc)
            for rec in session._records:
                if session in rec.sessions:
                    rec.sessions.remove(session)
                if not rec.sessions:
                    self._retire(rec)
            session._records.clear()
            self.active -= 1
            if self.active == 0:
                self._uninstall()

    def _retire(self, rec: HookRecord) -> None:
        """No session watches this hook any more: put the user's callable back."""
        rec.live = False
        self.records.pop(rec.handle_id, None)
        hooks_dict = rec.dict_ref() if rec.dict_ref is not None else None
        if hooks_dict is not None:
            wrapper = hooks_dict.get(rec.handle_id)
            if getattr(wrapper, _WRAPPER_ATTR, None) is rec:
                hooks_dict[rec.handle_id] = wrapper.__wrapped__

    # -- errors inside hooklint -----------------------------------------------
    def internal_error(self, sessions: list, exc: BaseException) -> None:
        if os.environ.get("HOOKLINT_STRICT"):
            raise exc
        for session in sessions:
            session._internal_error(exc)

    def emit(self, sessions: list, obs) -> None:
        for extension in self.extensions:
            obs = extension.rewrite(obs)
        for session in sessions:
            if session.active:
                session._observe(obs)

    # -- patching -------------------------------------------------------------
    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        had = name in vars(owner)
        original = vars(owner).get(name)
        self.originals.append((owner, name, original, had))
        setattr(owner, name, replacement)

    def _install(self) -> None:
        self.originals = []
        patches = _Patches(self)
        for name, kind in _MODULE_METHODS.items():
            self._patch(nn.Module, name, patches.module_method(getattr(nn.Module, name), kind))
        for name, kind in _GLOBAL_FUNCTIONS.items():
            self._patch(module_mod, name, patches.global_function(getattr(module_mod, name), kind))
        self._patch(torch.Tensor, "register_hook", patches.tensor_method(torch.Tensor.register_hook, HookKind.TENSOR))
        self._patch(torch.Tensor, "register_post_accumulate_grad_hook",
                    patches.tensor_method(torch.Tensor.register_post_accumulate_grad_hook,
                                          HookKind.POST_ACCUMULATE))
        self._patch(torch_hooks.RemovableHandle, "remove", patches.handle_remove(torch_hooks.RemovableHandle.remove))
        self._patch(torch.autograd, "backward", patches.backward_entry(torch.autograd.backward, accumulate=True))
        self._patch(torch.autograd, "grad", patches.backward_entry(torch.autograd.grad, accumulate=False))
        for method in ("setup_input_hook", "setup_output_hook"):
            self._patch(torch_hooks.BackwardHook, method,
                        patches.tag_hooked_tensors(getattr(torch_hooks.BackwardHook, method), method))
        self._patch(nn.Parameter, "grad", patches.grad_property())
        self._patch(warnings, "warn", patches.warn(warnings.warn))
        self.original_register_hook = self.original("register_hook", torch.Tensor)
        optim = importlib.import_module("torch.optim.optimizer")
        self.helper_handles.append(optim.register_optimizer_step_pre_hook(self._optimizer_step))
        for name in _EXTENSIONS:
            extension = importlib.import_module(name).extension()
            if extension is not None:
                extension.install(self)
                self.extensions.append(extension)

    def original(self, name: str, owner: Any) -> Any:
        for patched_owner, patched_name, original, _had in self.originals:
            if patched_owner is owner and patched_name == name:
                return original
        raise KeyError(name)

    def _uninstall(self) -> None:
        for extension in reversed(self.extensions):
            try:
                extension.uninstall(self)
            except Exception as exc:  # noqa: BLE001 - the patches below must be put back whatever happens
                self.internal_error(self.sessions_here(), exc)
        self.extensions.clear()
        self.forward_watchers.clear()
        for owner, name, original, had in reversed(self.originals):
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self.originals = []
        for handle in self.helper_handles:
            handle.remove()
        self.helper_handles.clear()
        for rec in list(self.records.values()):
            self._retire(rec)
        self.records.clear()
        self.removed_during_error.clear()
        self.groups.clear()
        self.repeated.clear()
        self.site_groups.clear()
        self.suspects.clear()
        self.removal_watches.clear()
        self.legacy_watched = weakref.WeakSet()
        self.pending_302.clear()
        self.params = WeakIdKeyDictionary()
        self.tasks.clear()
        self.infos.clear()

    # -- registration ---------------------------------------------------------
    def registered(self, kind: HookKind, is_global: bool, hook: Any, target: Any, caller: types.FrameType,
                   sessions: list) -> HookRecord:
        name = describe.variable_name(caller, target) if isinstance(target, torch.Tensor) else None
        rec = HookRecord(kind, is_global, hook, frames.site_of(caller), describe.Roots.capture(caller),
                         target, sessions, target_name=name)
        rec.caller_site = frames.caller_in_other_file(caller)
        for session in sessions:
            session._records.append(rec)
        return rec

    def bind_handle(self, rec: HookRecord, handle: torch_hooks.RemovableHandle) -> None:
        self._bind(rec, handle.id, handle.hooks_dict_ref)

    def _bind(self, rec: HookRecord, handle_id: int, dict_ref: weakref.ref) -> None:
        rec.handle_id = handle_id
        rec.dict_ref = dict_ref
        if rec.kind is HookKind.BACKWARD_LEGACY:
            self._watch_legacy_inputs(rec.target())
        with self.lock:
            self.records[handle_id] = rec
            if rec.kind.is_module_backward and not rec.is_global and rec.reg_seq:
                self.pending_302.append(rec)
            target = rec.target()
            group_key = (rec.kind, rec.is_global, id(target) if target is not None else 0, rec.key)
            group = self.groups.setdefault(group_key, [])
            group[:] = [r for r in group if not r.removed and r.target() is target and r.live]
            group.append(rec)
            if len(group) >= 2:
                self.repeated.add(group_key)
            self._join_site_group(rec, target)
            if next(self._registrations) % 1024 == 1023:
                self._forget_dead_records()
        for extension in self.extensions:
            extension.hook_bound(rec)

    def _join_site_group(self, rec: HookRecord, target: Any) -> None:
        site = rec.site
        key = (rec.kind, rec.is_global, id(target) if target is not None else 0, site.filename, site.line,
               site.column, rec.code_key)
        group = self.site_groups.get(key)
        if group is None:
            group = self.site_groups[key] = SiteGroup()
        group.members[:] = [r for r in group.members if r.in_force() and r.target() is target]
        if any(r.has_run() for r in group.members):
            group.suspect = True
            self.suspects.add(group)
        group.members.append(rec)
        rec.site_group = group

    def confirm_site_group(self, group: SiteGroup) -> None:
        """HKL304 for a suspect site group, when its target runs again, a backward
        ends or the session ends: reported if two or more are still registered."""
        with self.lock:
            group.members[:] = [r for r in group.members if r.in_force()]
            n = len(group.members)
            if n < 2:
                group.suspect = False
                group.reported = 0
                self.suspects.discard(group)
                return
            if n == group.reported:
                return
            group.reported = n
            newest = group.members[-1]
            self.emit(newest.sessions, observe.repeated_registration(list(group.members), across_runs=True))

    def module_ran(self, hooks: Any) -> None:
        """A module with these (wrapped) backward hooks ran its forward."""
        for hook in hooks:
            rec = getattr(hook, _WRAPPER_ATTR, None)
            if rec is not None and rec.live:
                rec.runs += 1
                group = rec.site_group
                if group is not None and group.suspect:
                    try:
                        self.confirm_site_group(group)
                    except Exception as exc:  # noqa: BLE001
                        self.internal_error(rec.sessions, exc)

    def check_repeated(self, final: bool = False) -> None:
        """HKL304, judged when a backward or a session ends (and, for hooks
        registered again after their target ran, when the target runs again)
        rather than at registration: a duplicate removed right away is not a
        leak."""
        if not self.repeated and not self.suspects:
            return
        with self.lock:
            for key in list(self.repeated):
                group = self.groups.get(key, [])
                group[:] = [r for r in group if r.in_force()]
                if len(group) < 2:
                    self.repeated.discard(key)
                    continue
                self.emit(group[-1].sessions, observe.repeated_registration(group))
            for site_group in list(self.suspects):
                if final:
                    site_group.reported = 0  # said again, so that a session ending now hears it
                self.confirm_site_group(site_group)

    def judge_pending(self) -> None:
        """Judge now what is otherwise judged after a backward or when the session
        ends: repeated registrations, and what the extensions hold back (a hook
        compiled code never called, HKL701)."""
        self.check_repeated(final=True)
        for extension in self.extensions:
            judge = getattr(extension, "judge", None)
            if judge is not None:
                try:
                    judge()
                except Exception as exc:  # noqa: BLE001
                    self.internal_error(self.sessions_here(), exc)

    def _watch_legacy_inputs(self, module: nn.Module | None) -> None:
        """Note, on the autograd node a legacy backward hook binds to, whether that
        node's inputs are the module's inputs (HKL102).  A forward pre-hook of
        hooklint's own notes the gradient edges of the module's inputs before
        the forward (an in-place op in the forward moves them); a forward hook
        compares them with the edges of the node PyTorch binds the hook to (it
        sees the same final `result` from which PyTorch picks that node)."""
        key = module if module is not None else _GLOBAL
        if key in self.legacy_watched:
            return
        self.legacy_watched.add(key)
        if module is None:
            handles = [self.original("register_module_forward_pre_hook", module_mod)(_note_legacy_inputs),
                       self.original("register_module_forward_hook", module_mod)(_record_legacy_inputs)]
        else:
            handles = [self.original("register_forward_pre_hook", nn.Module)(module, _note_legacy_inputs),
                       self.original("register_forward_hook", nn.Module)(module, _record_legacy_inputs)]
        self.helper_handles.extend(handles)

    def _forget_dead_records(self) -> None:
        for handle_id, rec in list(self.records.items()):
            if rec.dict_ref is None or rec.dict_ref() is None:
                del self.records[handle_id]
        for key, group in list(self.groups.items()):
            if all(r.removed or r.target_ref is not None and r.target() is None for r in group):
                del self.groups[key]
        for key, site_group in list(self.site_groups.items()):
            if not any(r.in_force() for r in site_group.members):
                del self.site_groups[key]
                self.suspects.discard(site_group)

    def adopt(self, session, module: nn.Module | None, caller: types.FrameType | None) -> int:
        """Watch hooks registered before the session started: those of ``module`` and
        its submodules and parameters, and the global module hooks.  They are wrapped
        in place (and unwrapped when the session ends); their "registration site" is
        the hook's definition, since the registration was not seen."""
        roots = describe.Roots.capture(caller)
        found = []
        # (target, its hooks, kind, global, the parameter's name in `module` when the caller's names lack it)
        dicts: list[tuple[Any, dict, HookKind, bool, str | None]] = []
        for name, kind in (("_global_forward_pre_hooks", HookKind.FORWARD_PRE),
                           ("_global_forward_hooks", HookKind.FORWARD),
                           ("_global_backward_pre_hooks", HookKind.FULL_BACKWARD_PRE)):
            dicts.append((None, getattr(module_mod, name), kind, True, None))
        legacy = module_mod._global_is_full_backward_hook is False
        dicts.append((None, module_mod._global_backward_hooks,
                      HookKind.BACKWARD_LEGACY if legacy else HookKind.FULL_BACKWARD, True, None))
        for path, sub in module.named_modules() if module is not None else ():
            dicts.append((sub, sub._forward_pre_hooks, HookKind.FORWARD_PRE, False, None))
            dicts.append((sub, sub._forward_hooks, HookKind.FORWARD, False, None))
            dicts.append((sub, sub._backward_pre_hooks, HookKind.FULL_BACKWARD_PRE, False, None))
            dicts.append((sub, sub._backward_hooks, HookKind.BACKWARD_LEGACY if sub._is_full_backward_hook is False
                          else HookKind.FULL_BACKWARD, False, None))
            for param_name, param in sub.named_parameters(recurse=False):
                for attr, kind in (("_backward_hooks", HookKind.TENSOR),
                                   ("_post_accumulate_grad_hooks", HookKind.POST_ACCUMULATE)):
                    hooks_dict = getattr(param, attr)
                    if hooks_dict:
                        dicts.append((param, hooks_dict, kind, False, f"{path}.{param_name}" if path else param_name))
        for target, hooks_dict, kind, is_global, target_name in dicts:
            for handle_id, hook in list(hooks_dict.items()):
                known = getattr(hook, _WRAPPER_ATTR, None)
                if known is not None:
                    # wrapped already for another session (an outer one, `pytest --hooklint`): watch it too
                    if known.live and session not in known.sessions:
                        known.sessions.append(session)
                        session._records.append(known)
                        found.append(known)
                    continue
                if getattr(hook, _HELPER_ATTR, False):
                    continue
                code = describe.hook_code(hook)
                site = frames.code_site(code) if code is not None else (
                    frames.site_of(caller) if caller is not None else Site("<unknown>", 1))
                rec = HookRecord(kind, is_global, hook, site, roots, target, [session], adopted=True,
                                 target_name=target_name)
                session._records.append(rec)
                hooks_dict[handle_id] = _wrap(self, rec, hook)
                self._bind(rec, handle_id, weakref.ref(hooks_dict))
                found.append(rec)
        for extension in self.extensions:
            extension.adopted(module)
        return len(found)

    def removed(self, rec: HookRecord, caller: types.FrameType | None) -> None:
        rec.removed = True
        self.records.pop(rec.handle_id, None)
        for extension in self.extensions:
            notify = getattr(extension, "hook_removed", None)
            if notify is not None:
                notify(rec, caller)
        in_flight = sys.exc_info()[1]
        if in_flight is not None and rec.kind.is_module_backward:
            del self.removed_during_error[:-63]
            self.removed_during_error.append((id(in_flight), rec))
        if rec.kind.is_tensor and rec.fired == 0 and rec.live and caller is not None:
            tensor = rec.target()
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                self._watch_removed_tensor_hook(rec, tensor, frames.site_of(caller))

    def _watch_removed_tensor_hook(self, rec: HookRecord, tensor: torch.Tensor, removal_site: Site) -> None:
        """A tensor hook removed before it ever ran.  When a gradient next reaches
        its tensor, the backward that brought it is checked: if it ran through
        an op that used the tensor before the removal (wherever the loss was
        built), the hook was removed before the backward it was registered for
        (HKL301).  Every backward started meanwhile notes such ops
        (`begin_backward`)."""
        watch = RemovalWatch(rec, tensor, removal_site)

        @torch_hooks.unserializable_hook
        def removed_hook_watch(grad):
            try:
                self._removal_watch_fired(watch)
            except Exception as exc:  # noqa: BLE001 - never break the user's backward
                self.internal_error(rec.sessions, exc)

        setattr(removed_hook_watch, _HELPER_ATTR, True)
        watch.handle = self.original_register_hook(tensor, removed_hook_watch)
        self.helper_handles.append(watch.handle)
        with self.lock:
            self.removal_watches.append(watch)
            if len(self.removal_watches) % 256 == 0:
                # a loop that registers and removes hooks without ever running a backward: forget the
                # watches whose tensors are gone, and their helpers' handles
                self.removal_watches = [w for w in self.removal_watches if w.tensor_ref() is not None]
                self.helper_handles = [h for h in self.helper_handles if h.hooks_dict_ref() is not None]

    def _removal_watch_fired(self, watch: "RemovalWatch") -> None:
        """A gradient reached a tensor whose hook was removed before it ever ran."""
        with self.lock:
            if watch in self.removal_watches:
                self.removal_watches.remove(watch)
        if watch.handle is not None:
            watch.handle.remove()
        info = self.infos.get(current_task_id())
        if info is None or info.thread != watch.thread:
            return  # sequence numbers are per thread: only a graph built in the removing thread is judged
        consumer = info.consumers.get(watch)
        if consumer is not None and consumer[0] < watch.removal_seq:
            self.emit(watch.rec.sessions,
                      observe.removed_before_backward(watch.rec, watch.removal_site, info.site, consumer[1]))

    # -- optimizer steps made from hooks (HKL205) ----------------------------------
    def _optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Before each optimizer step: one made from a backward hook whose gradients
        still hold what an earlier step from a hook already applied is reported."""
        rec = self.tls.backward_hook
        if rec is None or not rec.live:
            return
        try:
            task = current_task_id()
            again = []
            for group in optimizer.param_groups:
                for param in group["params"]:
                    grad = grad_of(param)
                    if not isinstance(grad, torch.Tensor):
                        continue
                    state = self.param_state(param)
                    if state.hook_step is not None and state.hook_step.applied_again(grad, state.arrived_sum, task):
                        again.append(param)
                    state.hook_step = HookStep(grad, task)
                    state.arrived_sum = None
            if again:
                self.emit(rec.sessions, observe.optimizer_step_applies_again(rec, optimizer, again))
        except Exception as exc:  # noqa: BLE001 - the user's step must go on
            self.internal_error(rec.sessions, exc)

    # -- parameters -------------------------------------------------------------
    def param_state(self, param: torch.Tensor) -> ParamState:
        """The parameter's state, with a helper hook that notes in which backward a
        gradient reached it (installed at first need; PyTorch runs hooks registered
        during a backward if the parameter's turn has not come yet)."""
        state = self.params.get(param)
        if state is None:
            state = ParamState()

            @torch_hooks.unserializable_hook
            def gradient_arrival(grad, state=state):
                state.last_task = current_task_id()
                if state.hook_step is not None and isinstance(grad, torch.Tensor):
                    state.arrived_sum = float(grad.detach().double().sum())

            setattr(gradient_arrival, _HELPER_ATTR, True)
            self.helper_handles.append(self.original_register_hook(param, gradient_arrival))
            self.params[param] = state
        return state

    def task(self, task_id: int) -> TaskState:
        state = self.tasks.get(task_id)
        if state is None:
            state = self.tasks[task_id] = TaskState(task_id)
            torch.autograd.Variable._execution_engine.queue_callback(functools.partial(self._finish_task, task_id))
        return state

    def _finish_task(self, task_id: int) -> None:
        state = self.tasks.pop(task_id, None)
        if state is None:
            return
        info = self.infos.get(task_id)
        if info is not None and not info.accumulate:
            return  # torch.autograd.grad: no `.grad` is written, nothing to be early for
        for candidate in state.candidates:
            sessions = candidate.rec.sessions
            try:
                obs = candidate.conclude(task_id)
                if obs is not None:
                    self.emit(sessions, obs)
            except Exception as exc:  # noqa: BLE001
                self.internal_error(sessions, exc)

    # -- hook calls -------------------------------------------------------------
    def after_module_hook(self, rec: HookRecord, call: HookCall, module: nn.Module, grads: tuple,
                          versions: list, task_id: int, node: Any, result: Any,
                          failure: BaseException | None) -> None:
        changed = [(label, before, tensor._version) for label, tensor, before in versions
                   if tensor._version != before]
        if changed:
            self.emit(rec.sessions, observe.mutated_argument(rec, changed))
        if rec.kind is HookKind.BACKWARD_LEGACY and node is not None and rec.uses_grad_input:
            binding = node.metadata.get(_META_INPUTS)
            if binding is not None and binding.wrong:
                self.emit(rec.sessions, observe.legacy_grad_input(rec, module, node, grads[0], binding))
        if failure is None and result is not None:
            obs = observe.return_arity(rec, module, grads, result) or \
                observe.module_hook_mismatch(rec, module, grads, result)
            if obs is not None:
                self.emit(rec.sessions, obs)
        if not call.accesses or task_id < 0:
            return
        on_outputs = (self.tls.outputs_warning_module == id(module) and rec.kind is HookKind.FULL_BACKWARD
                      and all(g is None for g in grads[0]))
        arrived = []
        for access in call.accesses.values():
            param = access.param_ref()
            if param is None:
                continue
            state = self.param_state(param)
            if state.last_task == task_id:
                arrived.append(access)
                continue  # its gradient had already arrived: the hook ran after accumulation
            candidate = observe.GradEditCandidate(rec, module, param, access, state, grad_of(param), on_outputs)
            if failure is not None:
                self.emit(rec.sessions, candidate.conclude_failed(failure))
            else:
                self.task(task_id).candidates.append(candidate)
        if arrived and failure is None:
            for extension in self.extensions:
                extension.module_hook_after_accumulation(rec, module, arrived, task_id)

    def after_post_accumulate(self, rec: HookRecord, param: torch.Tensor, version: int, call: HookCall,
                              result: Any, before: torch.Tensor | None) -> None:
        for extension in self.extensions:
            extension.post_accumulate_ran(rec, param, version, call)
        if result is not None:
            self.emit(rec.sessions, observe.post_accumulate_returned(rec, param, result))
        if not isinstance(param, nn.Parameter) or id(param) in call.accesses:
            return  # it read or wrote `.grad`: it knows its argument is the parameter
        if not rec.gradient_named and observe.looks_like_parameter_update(rec.intent_names):
            return  # optimizer in backward, weight clipping: the parameter is updated on purpose
        if param._version != version:
            self.emit(rec.sessions, observe.post_accumulate_mutated(rec, param, version))
        elif before is not None and not observe.same_values(param.detach(), before):
            self.emit(rec.sessions, observe.post_accumulate_mutated(rec, param, version, through_data=True))

    # -- backward -------------------------------------------------------------
    def begin_backward(self, roots: Any, sessions: list, caller: types.FrameType, accumulate: bool,
                       inputs: Any) -> BackwardInfo:
        info = BackwardInfo(sessions, caller, accumulate and inputs is None)
        nodes = [t.grad_fn for t in _tensors(roots) if t.grad_fn is not None]
        if not nodes:
            return info
        info.root_seq = max(node._sequence_nr() for node in nodes)
        info.roots = nodes
        if self.removal_watches:  # the consumers of watched tensors are needed while the backward runs
            leaf_watches, node_watches, keep = self._watched_edges()
            info.leaves = _parameters_in_graph(nodes, leaf_watches, node_watches, info.consumers)
            del keep

        def backward_started(grad_outputs):
            task_id = current_task_id()
            info.task_id = task_id
            self.infos[task_id] = info
            for handle in info.markers:
                handle.remove()
            info.markers.clear()

        info.markers = [node.register_prehook(backward_started) for node in nodes]
        return info

    def _watched_edges(self) -> tuple[dict, dict, list]:
        """The tensors of removal watches, as the walk of a backward graph meets them:
        leaves by the variable of their AccumulateGrad node, others by their edge.
        The third value holds the nodes whose ids are keys, while the walk runs."""
        leaf_watches: dict[int, RemovalWatch] = {}
        node_watches: dict[tuple[int, int], RemovalWatch] = {}
        keep: list = []
        with self.lock:
            watches = list(self.removal_watches)
        for watch in watches:
            tensor = watch.tensor_ref()
            if tensor is None:
                with self.lock:
                    if watch in self.removal_watches:
                        self.removal_watches.remove(watch)
                continue
            node = tensor.grad_fn
            if node is None:
                leaf_watches[id(tensor)] = watch
            else:
                keep.append(node)
                node_watches[(id(node), tensor.output_nr)] = watch
        return leaf_watches, node_watches, keep

    def backward_failed(self, info: BackwardInfo, exc: BaseException) -> None:
        """PyTorch's errors that only the backward graph explains (HKL501)."""
        obs = observe.function_gradient_count(exc, info.roots)
        if obs is not None:
            self.emit(info.sessions, obs)

    def end_backward(self, info: BackwardInfo, failed: bool) -> None:
        for handle in info.markers:
            handle.remove()
        info.markers = []
        task_id = info.task_id
        try:
            if not failed:
                self.check_repeated()
            if task_id is not None and not failed:
                self._check_late_module_hooks(info, task_id)
                if info.accumulate:
                    elsewhere = self._gradient_elsewhere if self.extensions else None
                    for obs in observe.parameters_without_grad(info, elsewhere):
                        self.emit(info.sessions, obs)
            for extension in self.extensions:
                try:
                    extension.backward_ended(info, failed)
                except Exception as exc:  # noqa: BLE001
                    self.internal_error(info.sessions, exc)
        finally:
            if task_id is not None:
                self.infos.pop(task_id, None)
            info.roots = []
            info.leaves = []
            info.consumers = {}
            info.caller = None

    def _gradient_elsewhere(self, param: torch.Tensor) -> bool:
        return any(extension.gradient_elsewhere(param) for extension in self.extensions)

    def _check_late_module_hooks(self, info: BackwardInfo, task_id: int) -> None:
        """HKL302: a module backward hook registered after the forward whose backward
        just ran, which therefore did not run."""
        if not self.pending_302:
            return
        first_use = {id(p): seq for p, _node, _slot, seq in info.leaves}
        with self.lock:
            self.pending_302 = self._late_module_hooks(info, first_use)

    def _late_module_hooks(self, info: BackwardInfo, first_use: dict[int, int]) -> list[HookRecord]:
        keep = []
        for rec in self.pending_302:
            module = rec.target()
            if module is None or not rec.live or rec.fired:
                continue  # gone, or it ran: it was registered in time for some forward
            earlier = [first_use[id(p)] for p in module.parameters() if id(p) in first_use]
            if rec.reg_thread == info.thread and earlier and min(earlier) < rec.reg_seq:
                self.emit(rec.sessions, observe.registered_after_forward(rec, info.site))
                continue
            keep.append(rec)
        return keep

    # -- PyTorch's own warnings and errors -------------------------------------
    def torch_warning(self, message: str, frame: types.FrameType) -> None:
        f_locals = frame.f_locals
        if frame.f_code.co_name == "_maybe_warn_non_full_backward_hook":
            module = f_locals.get("self")
            grad_fn = f_locals.get("grad_fn")
            for rec in self._records_of(module, HookKind.BACKWARD_LEGACY):
                self.emit(rec.sessions, observe.legacy_warning(rec, module, grad_fn, message))
        elif message.startswith("Full backward hook is firing"):
            backward_hook = f_locals.get("self")
            module = getattr(backward_hook, "module", None)
            if module is not None:
                self.tls.outputs_warning_module = id(module)

    def _records_of(self, module: Any, kind: HookKind) -> list[HookRecord]:
        found = []
        if not isinstance(module, nn.Module):
            return found
        dicts = [module._backward_hooks, module_mod._global_backward_hooks]
        if kind is not HookKind.BACKWARD_LEGACY:
            dicts.append(module._backward_pre_hooks)
            dicts.append(module_mod._global_backward_pre_hooks)
        for hooks_dict in dicts:
            for hook in hooks_dict.values():
                rec = getattr(hook, _WRAPPER_ATTR, None)
                if rec is not None and rec.live and (rec.kind is kind or kind is not HookKind.BACKWARD_LEGACY):
                    found.append(rec)
        return found

    def full_hooks_at_error(self, module: Any, exc: BaseException) -> list[HookRecord]:
        """The full backward hooks on ``module`` when ``exc`` was raised: those still
        registered, and those a `finally` removed while ``exc`` propagated."""
        found = self._records_of(module, HookKind.FULL_BACKWARD)
        for exc_id, rec in self.removed_during_error:
            if exc_id == id(exc) and rec.kind is HookKind.FULL_BACKWARD and rec.target() is module \
                    and rec not in found:
                found.append(rec)
        return found

    def explain_exception(self, exc: BaseException, sessions: list) -> None:
        """Map PyTorch's in-place error on a hooked module's output (or input) to the
        full backward hooks that caused it, with their registration sites."""
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            text = str(current)
            if "is a view and is being modified inplace" in text:
                direct = "of BackwardHookFunction is a view" in text
                found = False
                for obs in observe.inplace_on_hooked_tensor(current, self, _META_MODULE, direct=direct):
                    self.emit(sessions, obs)
                    found = True
                if found or direct:
                    return
            current = current.__cause__ or current.__context__


RUNTIME = Runtime()

_MODULE_METHODS = {
    "register_forward_pre_hook": HookKind.FORWARD_PRE,
    "register_forward_hook": HookKind.FORWARD,
    "register_backward_hook": HookKind.BACKWARD_LEGACY,
    "register_full_backward_hook": HookKind.FULL_BACKWARD,
    "register_full_backward_pre_hook": HookKind.FULL_BACKWARD_PRE,
}
# Modules whose `extension()` returns an object with install/uninstall, hook_bound, adopted,
# module_hook_after_accumulation, post_accumulate_ran, backward_ended, gradient_elsewhere and
# rewrite (or None).
_EXTENSIONS = ("hooklint.runtime.distributed", "hooklint.runtime.compiled", "hooklint.runtime.checkpointing")
_GLOBAL_FUNCTIONS = {
    "register_module_forward_pre_hook": HookKind.FORWARD_PRE,
    "register_module_forward_hook": HookKind.FORWARD,
    "register_module_backward_hook": HookKind.BACKWARD_LEGACY,
    "register_module_full_backward_hook": HookKind.FULL_BACKWARD,
    "register_module_full_backward_pre_hook": HookKind.FULL_BACKWARD_PRE,
}
_TORCH_HOOK_WARNINGS = (
    "Using a non-full backward hook",
    "Using non-full backward hooks",
    "Full backward hook is firing when gradients are computed with respect to module outputs",
)


class _GlobalHooks:
    """Stands for "every module" where a module is expected (global hooks)."""


_GLOBAL = _GlobalHooks()


class ModuleInput:
    """One positional input of a module's forward, as the forward received it:
    the edge autograd sends its gradient along (its `grad_fn` and output
    number; for a leaf, its AccumulateGrad node, recognised by its variable)."""

    __slots__ = ("shape", "needs_grad", "node", "output_nr", "leaf")

    def __init__(self, tensor: torch.Tensor):
        self.shape = tuple(tensor.shape)
        self.needs_grad = tensor.requires_grad
        self.node = tensor.grad_fn
        self.output_nr = tensor.output_nr
        self.leaf = weakref.ref(tensor) if self.needs_grad and self.node is None else None

    def is_edge(self, child: Any, input_nr: int) -> bool:
        """Whether ``(child, input_nr)``, an entry of some node's `next_functions`, is this input."""
        if not self.needs_grad or child is None:
            return False
        if self.leaf is not None:
            return type(child) is _ACCUMULATE_GRAD and child.variable is self.leaf()
        return child is self.node and input_nr == self.output_nr


class LegacyBinding:
    """Whether the node a legacy backward hook is bound to takes the module's
    inputs as its inputs, in order (then `grad_input` is the inputs' gradient).
    ``wrong`` lists the positions where it does not.

    An input is taken as it was before the forward (an in-place op in the
    forward, `nn.ReLU(inplace=True)`, moves the tensor's own edge onto the op)
    or as the forward hooks see it (a forward pre-hook registered after
    hooklint's may have replaced it)."""

    __slots__ = ("inputs", "wrong")

    def __init__(self, node: Any, inputs: list, seen_after: list):
        self.inputs: list[ModuleInput | None] = inputs
        edges = node.next_functions
        self.wrong: list[int] = []
        for i, item in enumerate(inputs):
            if item is None:
                continue  # not a tensor
            edge = edges[i] if i < len(edges) else None
            after = seen_after[i] if i < len(seen_after) else None
            if not item.needs_grad and (after is None or not after.needs_grad):
                if edge is not None and edge[0] is not None:
                    self.wrong.append(i)  # the entry for an input that needs no gradient holds another one
            elif edge is None or not (item.is_edge(*edge) or after is not None and after.is_edge(*edge)):
                self.wrong.append(i)


def _note_legacy_inputs(module: nn.Module, args: tuple) -> None:
    if not torch.is_grad_enabled():
        return
    inputs = [ModuleInput(a) if isinstance(a, torch.Tensor) else None for a in args]
    stack = RUNTIME.tls.legacy_inputs.setdefault(id(module), [])
    if len(stack) >= 8:
        del stack[0]  # forwards that raised left theirs behind
    stack.append(inputs)


def _record_legacy_inputs(module: nn.Module, args: tuple, result: Any) -> None:
    tls = RUNTIME.tls
    stack = tls.legacy_inputs.get(id(module))
    inputs = stack.pop() if stack else None
    if stack is not None and not stack:
        del tls.legacy_inputs[id(module)]
    if module._is_full_backward_hook is False:
        RUNTIME.module_ran(module._backward_hooks.values())
    if inputs is None or not any(item is not None for item in inputs):
        return  # no tensor among the positional inputs: nothing to compare with
    var = result
    try:
        while not isinstance(var, torch.Tensor):
            var = next(v for v in var.values() if isinstance(v, torch.Tensor)) if isinstance(var, dict) else var[0]
    except (IndexError, KeyError, TypeError, StopIteration):
        return  # PyTorch would not bind a legacy hook to anything either
    if var.grad_fn is not None:
        seen_after = [ModuleInput(a) if isinstance(a, torch.Tensor) else None for a in args]
        var.grad_fn.metadata[_META_INPUTS] = LegacyBinding(var.grad_fn, inputs, seen_after)


setattr(_note_legacy_inputs, _HELPER_ATTR, True)
setattr(_record_legacy_inputs, _HELPER_ATTR, True)


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _parameters_in_graph(roots: list, leaf_watches: dict | None = None, node_watches: dict | None = None,
                         consumers: dict | None = None) -> list[tuple[nn.Parameter, Any, int, int]]:
    """Every parameter whose AccumulateGrad node is reachable from ``roots``, with
    one node that consumes it, the slot, and the earliest sequence number among
    its consumers (when the forward used it).  Runs when a check needs the
    parameters of a backward's graph (HKL301, HKL302, the distributed checks), hence
    the plain loop; HKL503 walks with `_parameters_without_grad_in_graph`.

    With watches (HKL301), also notes in ``consumers`` the earliest op of the
    graph that used each watched tensor: a leaf by its AccumulateGrad's
    variable, another tensor by its edge (id of its node, output number)."""
    seen = set(roots)
    stack = list(roots)
    found: dict[int, list] = {}
    accumulate_grad, parameter, plain_tensor = _ACCUMULATE_GRAD, nn.Parameter, torch.Tensor
    watching = bool(leaf_watches or node_watches)
    while stack:
        node = stack.pop()
        slot = -1
        seq = -1  # the node's sequence number, read at its first parameter
        for child, input_nr in node.next_functions:
            slot += 1
            if child is None:
                continue
            if type(child) is accumulate_grad:
                variable = child.variable
                if watching:
                    watch = leaf_watches.get(id(variable))
                    if watch is not None:
                        _note_consumer(consumers, watch, node)
                # isinstance on Parameter goes through a Python metaclass hook: decide the common
                # types (Parameter itself, plain tensors) without it
                kind = type(variable)
                if kind is not parameter and (kind is plain_tensor or not isinstance(variable, parameter)):
                    continue
                if seq < 0:
                    seq = node._sequence_nr()
                entry = found.get(id(variable))
                if entry is None:
                    found[id(variable)] = [variable, node, slot, seq]
                elif seq < entry[3]:
                    entry[3] = seq
                continue
            if watching:
                watch = node_watches.get((id(child), input_nr))
                if watch is not None:
                    _note_consumer(consumers, watch, node)
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return [tuple(entry) for entry in found.values()]  # type: ignore[misc]


def _parameters_without_grad_in_graph(roots: list) -> list[tuple[nn.Parameter, Any, int, int]]:
    """What `_parameters_in_graph(roots)` gives for the parameters whose `.grad` is None:
    the same walk in the same order (so the same consuming node and slot), which
    builds nothing for the parameters that have a gradient (after most backwards,
    all of them).  The last field is the sequence number of that node only."""
    seen = set(roots)
    stack = list(roots)
    found: dict[int, tuple] = {}
    accumulate_grad, parameter, plain_tensor, read_grad = _ACCUMULATE_GRAD, nn.Parameter, torch.Tensor, _read_grad
    while stack:
        node = stack.pop()
        slot = -1
        for child, _input_nr in node.next_functions:
            slot += 1
            if child is None:
                continue
            if type(child) is accumulate_grad:
                variable = child.variable
                if read_grad(variable) is not None or id(variable) in found:
                    continue
                kind = type(variable)
                if kind is not parameter and (kind is plain_tensor or not isinstance(variable, parameter)):
                    continue
                found[id(variable)] = (variable, node, slot, node._sequence_nr())
            elif child not in seen:
                seen.add(child)
                stack.append(child)
    return list(found.values())


def _note_consumer(consumers: dict | None, watch: Any, node: Any) -> None:
    if consumers is None:
        return
    seq = node._sequence_nr()
    known = consumers.get(watch)
    if known is None or seq < known[0]:
        consumers[watch] = (seq, node.name())


def _argument_reader(signature: inspect.Signature) -> Callable[[tuple, dict], Callable[[str], Any]]:
    """``reader(args, kwargs)(name)``: the argument a call passed for ``name`` (None when
    left out), raising TypeError for a call that does not fit ``signature``, as
    ``signature.bind`` does.  Runs on every instrumented backward: when every
    parameter is positional-or-keyword (``torch.autograd.backward`` and ``grad``),
    it checks the call itself, without building a BoundArguments."""
    params = signature.parameters.values()
    if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params):
        def bind(args: tuple, kwargs: dict) -> Callable[[str], Any]:
            return signature.bind(*args, **kwargs).arguments.get
        return bind
    position = {p.name: i for i, p in enumerate(params)}
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    count = len(position)

    def read(args: tuple, kwargs: dict) -> Callable[[str], Any]:
        given = len(args)
        if given > count:
            raise TypeError("too many positional arguments")
        for name in kwargs:
            at = position.get(name)
            if at is None or at < given:
                raise TypeError(f"unexpected or repeated argument {name!r}")
        for name in required:
            if position[name] >= given and name not in kwargs:
                raise TypeError(f"missing a required argument: {name!r}")

        def value(name: str) -> Any:
            at = position.get(name)
            return args[at] if at is not None and at < given else kwargs.get(name)

        return value

    return read


class _Patches:
    """The replacement functions; each defers to the original it wraps."""

    def __init__(self, rt: Runtime):
        self.rt = rt

    # -- registration APIs -------------------------------------------------------
    def module_method(self, original: Callable, kind: HookKind) -> Callable:
        rt = self.rt

        @functools.wraps(original)
        def register(module, hook, *args, **kwargs):
            __tracebackhide__ = True
            if _is_compiling():
                return original(module, hook, *args, **kwargs)
            sessions = rt.sessions_here()
            caller = frames.called_from_user(1) if sessions else None
            if caller is None or not callable(hook):
                return original(module, hook, *args, **kwargs)
            try:
                rec = rt.registered(kind, False, hook, module, caller, sessions)
                wrapped = _wrap(rt, rec, hook)
            except Exception as exc:  # noqa: BLE001
                rt.internal_error(sessions, exc)
                return original(module, hook, *args, **kwargs)
            handle = original(module, wrapped, *args, **kwargs)
            rt.bind_handle(rec, handle)
            return handle

        return register

    def global_function(self, original: Callable, kind: HookKind) -> Callable:
        rt = self.rt

        @functools.wraps(original)
        def register(hook, *args, **kwargs):
            __tracebackhide__ = True
            sessions = rt.sessions_here()
            caller = frames.called_from_user(1) if sessions else None
            if caller is None or not callable(hook):
                return original(hook, *args, **kwargs)
            try:
                rec = rt.registered(kind, True, hook, None, caller, sessions)
                wrapped = _wrap(rt, rec, hook)
            except Exception as exc:  # noqa: BLE001
                rt.internal_error(sessions, exc)
                return original(hook, *args, **kwargs)
            handle = original(wrapped, *args, **kwargs)
            rt.bind_handle(rec, handle)
            return handle

        return register

    def tensor_method(self, original: Callable, kind: HookKind) -> Callable:
        rt = self.rt

        @functools.wraps(original)
        def register(tensor, hook):
            __tracebackhide__ = True
            if _is_compiling():
                return original(tensor, hook)
            sessions = rt.sessions_here()
            caller = frames.called_from_user(1) if sessions else None
            if caller is None or not callable(hook):
                return original(tensor, hook)
            try:
                rec = rt.registered(kind, False, hook, tensor, caller, sessions)
                wrapped = _wrap(rt, rec, hook)
            except Exception as exc:  # noqa: BLE001
                rt.internal_error(sessions, exc)
                return original(tensor, hook)
            handle = original(tensor, wrapped)
            rt.bind_handle(rec, handle)
            return handle

        return register

    def handle_remove(self, original: Callable) -> Callable:
        rt = self.rt

        @functools.wraps(original)
        def remove(handle):
            __tracebackhide__ = True
            rec = rt.records.get(handle.id)
            if rec is not None and rec.dict_ref is not None and handle.hooks_dict_ref() is rec.dict_ref():
                try:
                    rt.removed(rec, frames.user_frame(1))
                except Exception as exc:  # noqa: BLE001
                    rt.internal_error(rec.sessions, exc)
            return original(handle)

        return remove

    # -- backward entry points ---------------------------------------------------
    def backward_entry(self, original: Callable, accumulate: bool) -> Callable:
        rt = self.rt
        arguments = _argument_reader(inspect.signature(original))
        roots_name = "tensors" if accumulate else "outputs"

        @functools.wraps(original)
        def entry(*args, **kwargs):
            __tracebackhide__ = True
            sessions = rt.sessions_here()
            caller = frames.called_from_user(1, skip=(_TENSOR_BACKWARD_CODE,)) if sessions else None
            if caller is None:
                return original(*args, **kwargs)
            info = None
            try:
                given = arguments(args, kwargs)
                info = rt.begin_backward(given(roots_name), sessions, caller, accumulate,
                                         given("inputs") if accumulate else None)
            except TypeError:
                pass  # let the original report the bad call
            except Exception as exc:  # noqa: BLE001
                rt.internal_error(sessions, exc)
            if info is None:
                return original(*args, **kwargs)
            failed = True
            try:
                result = original(*args, **kwargs)
                failed = False
            except BaseException as exc:
                try:
                    rt.backward_failed(info, exc)
                except Exception as inner:  # noqa: BLE001
                    rt.internal_error(sessions, inner)
                raise
            finally:
                try:
                    rt.end_backward(info, failed)
                except Exception as exc:  # noqa: BLE001
                    rt.internal_error(sessions, exc)
            return result

        return entry

    # -- facts PyTorch computes during the forward --------------------------------
    def tag_hooked_tensors(self, original: Callable, method: str) -> Callable:
        side = "input" if method == "setup_input_hook" else "output"
        rt, tls = self.rt, self.rt.tls
        counts = side == "output"  # once per forward

        @functools.wraps(original)
        def setup(backward_hook, args):
            __tracebackhide__ = True
            if _is_compiling():
                return original(backward_hook, args)
            result = original(backward_hook, args)
            if counts:  # the module's forward ran: count it for its backward hooks (HKL304), in a plain loop
                for hook in backward_hook.user_hooks:
                    rec = getattr(hook, _WRAPPER_ATTR, None)
                    if rec is not None:
                        rec.runs += 1
                        group = rec.site_group
                        if group is not None and group.suspect and rec.live:
                            try:
                                rt.confirm_site_group(group)
                            except Exception as exc:  # noqa: BLE001
                                rt.internal_error(rec.sessions, exc)
                if backward_hook.user_pre_hooks:
                    rt.module_ran(backward_hook.user_pre_hooks)
            items = result if isinstance(result, tuple) else (result,)
            for item in items:
                node = getattr(item, "grad_fn", None) if isinstance(item, torch.Tensor) else None
                if node is not None and node.name() == "BackwardHookFunctionBackward":
                    tagged = (weakref.ref(backward_hook.module), side)
                    node.metadata[_META_MODULE] = tls.last_hooked = tagged
                    break  # one node serves every tensor of the call
            return result

        return setup

    def grad_property(self) -> property:
        tls = self.rt.tls

        def get(param):
            grad = _GRAD.__get__(param, type(param))
            call = tls.call
            if call is not None:
                call.access(param, sys._getframe(1))
            return grad

        def set_(param, value):
            call = tls.call
            if call is not None:
                call.access(param, sys._getframe(1)).assigned = True
            _GRAD.__set__(param, value)

        def delete(param):
            call = tls.call
            if call is not None:
                call.access(param, sys._getframe(1)).assigned = True
            _GRAD.__delete__(param)

        return property(get, set_, delete, _GRAD.__doc__)

    def warn(self, original: Callable) -> Callable:
        rt = self.rt

        @functools.wraps(original)
        def warn(message, category=None, stacklevel=1, source=None, **kwargs):
            __tracebackhide__ = True
            if isinstance(message, str) and message.startswith(_TORCH_HOOK_WARNINGS) and rt.active:
                try:
                    rt.torch_warning(message, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001
                    rt.internal_error(rt.sessions_here(), exc)
            return original(message, category, _attributed_stacklevel(stacklevel), source, **kwargs)

        return warn


def _importlib_internal(frame: types.FrameType) -> bool:
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def _next_frame(frame: types.FrameType, skip_hooklint: bool) -> types.FrameType | None:
    """The next frame outwards as `warnings.warn` steps (it skips importlib's),
    optionally also skipping hooklint's own frames."""
    frame = frame.f_back
    while frame is not None and (_importlib_internal(frame) or skip_hooklint and frames.is_hooklint(frame)):
        frame = frame.f_back
    return frame


def _attributed_stacklevel(stacklevel: int) -> int:
    """The stacklevel that, passed from the `warnings.warn` wrapper, attributes a
    warning to the frame Python would have chosen without hooklint: the wrapper
    and every hooklint frame between the warning and its target (the backward
    entry point, a hook wrapper) are not counted."""
    wrapper = sys._getframe(1)
    caller = wrapper.f_back
    if caller is None or stacklevel <= 1:
        return 2
    target: types.FrameType | None = caller
    for _ in range(stacklevel - 1):
        if target is None:
            break
        target = _next_frame(target, skip_hooklint=True)
    steps, frame = 0, wrapper
    while frame is not None and frame is not target:
        frame = _next_frame(frame, skip_hooklint=False)
        steps += 1
    return steps + 1 if frame is target else stacklevel + 1


# -- wrappers around the user's hooks --------------------------------------------


def _wrap(rt: Runtime, rec: HookRecord, hook: Callable) -> Callable:
    kind = rec.kind
    if kind in (HookKind.FORWARD, HookKind.FORWARD_PRE):
        wrapper = _forward_wrapper(rt, rec, hook)
    elif kind is HookKind.TENSOR:
        wrapper = _tensor_wrapper(rt, rec, hook)
    elif kind is HookKind.POST_ACCUMULATE:
        wrapper = _post_accumulate_wrapper(rt, rec, hook)
    else:
        wrapper = _module_backward_wrapper(rt, rec, hook)
    # what introspection of the hook usually looks at; not its __dict__, which for a
    # callable object (a module used as a hook) would copy the object's state
    for attr in ("__module__", "__name__", "__qualname__", "__doc__", "__torch_unserializable__"):
        try:
            setattr(wrapper, attr, getattr(hook, attr))
        except (AttributeError, TypeError):
            pass
    wrapper.__wrapped__ = hook  # type: ignore[attr-defined]
    setattr(wrapper, _WRAPPER_ATTR, rec)
    return wrapper


def _versions(grads: tuple) -> list[tuple[str, torch.Tensor, int]]:
    names = ("grad_input", "grad_output") if len(grads) == 2 else ("grad_output",)
    out = []
    for name, group in zip(names, grads):
        if isinstance(group, torch.Tensor):
            out.append((name, group, group._version))
        elif isinstance(group, (tuple, list)):
            out.extend((f"{name}[{i}]", g, g._version) for i, g in enumerate(group) if isinstance(g, torch.Tensor))
    return out


# Every wrapper sets `__tracebackhide__`: pytest then leaves its frame out of tracebacks, which go
# from the user's call straight to the user's hook (`hooklint run` and `instrument()` drop it too).


def _forward_wrapper(rt: Runtime, rec: HookRecord, hook: Callable) -> Callable:
    """Counts the module's forwards while the hook is registered: a hook registered
    again after its module ran, the earlier one still in place, stacks up (HKL304)."""

    watchers = rt.forward_watchers
    output_last = rec.kind is HookKind.FORWARD

    def hooklint_forward_hook(*args, **kwargs):
        __tracebackhide__ = True
        if _is_compiling():
            return hook(*args, **kwargs)
        if rec.live:
            rec.runs += 1
            group = rec.site_group
            if group is not None and group.suspect:
                try:
                    rt.confirm_site_group(group)
                except Exception as exc:  # noqa: BLE001
                    rt.internal_error(rec.sessions, exc)
        if not rec.live:
            return hook(*args, **kwargs)
        # the tensor the hook may edit in place: the output (forward hook) or the first input (pre-hook)
        watched = args[-1] if output_last else (args[1][0] if len(args) > 1 and isinstance(args[1], tuple)
                                                and args[1] else None)
        version = watched._version if isinstance(watched, torch.Tensor) else None
        result = hook(*args, **kwargs)
        if result is not None and rec.kind is HookKind.FORWARD and args:
            try:
                obs = observe.replaced_output(rec, hook, args[0], args[-1], result)
                if obs is not None:
                    rt.emit(rec.sessions, obs)
            except Exception as exc:  # noqa: BLE001
                rt.internal_error(rec.sessions, exc)
        for watcher in watchers:
            try:
                watcher(rec, args, result, watched, version)
            except Exception as exc:  # noqa: BLE001
                rt.internal_error(rec.sessions, exc)
        return result

    return hooklint_forward_hook


def _tensor_wrapper(rt: Runtime, rec: HookRecord, hook: Callable) -> Callable:
    # runs for every parameter in every backward (a gradient-statistics hook): kept to what
    # the checks need, the names it uses bound here
    tls, task_id, tensor = rt.tls, _current_task_id, torch.Tensor

    def hooklint_tensor_hook(grad):
        __tracebackhide__ = True
        if not rec.live:
            return hook(grad)
        rec.fired += 1
        rec.last_task = task_id()
        version = grad._version if isinstance(grad, tensor) else None
        outer = tls.backward_hook
        tls.backward_hook = rec
        try:
            result = hook(grad)
        except Exception as exc:
            _observe_failure(rt, rec, exc)
            raise
        finally:
            tls.backward_hook = outer
        if result is None and (version is None or grad._version == version):
            return None  # it neither edited its argument nor returned anything: nothing to check
        try:
            if version is not None and grad._version != version:
                rt.emit(rec.sessions, observe.mutated_argument(rec, [("grad", version, grad._version)]))
            if result is not None and not isinstance(result, torch.Tensor):
                rt.emit(rec.sessions, observe.tensor_hook_return(rec, result))
            elif result is not None:
                mismatch = observe.tensor_hook_mismatch(rec, grad, result)
                if mismatch is not None:
                    rt.emit(rec.sessions, mismatch)
        except Exception as exc:  # noqa: BLE001
            rt.internal_error(rec.sessions, exc)
        return result

    return hooklint_tensor_hook


def _post_accumulate_wrapper(rt: Runtime, rec: HookRecord, hook: Callable) -> Callable:
    tls = rt.tls

    def hooklint_post_accumulate_hook(param):
        __tracebackhide__ = True
        if not rec.live:
            return hook(param)
        rec.fired += 1
        rec.last_task = current_task_id()
        version = param._version
        before = param.detach().clone() if rec.snapshot_data else None
        call = HookCall(rec, snapshot=False)  # only whether `.grad` is read matters here
        previous, tls.call = tls.call, call
        outer, tls.backward_hook = tls.backward_hook, rec
        try:
            result = hook(param)
        finally:
            tls.call = previous
            tls.backward_hook = outer
        try:
            rt.after_post_accumulate(rec, param, version, call, result, before)
        except Exception as exc:  # noqa: BLE001
            rt.internal_error(rec.sessions, exc)
        return result

    return hooklint_post_accumulate_hook


def _module_backward_wrapper(rt: Runtime, rec: HookRecord, hook: Callable) -> Callable:
    tls = rt.tls
    legacy = rec.kind is HookKind.BACKWARD_LEGACY

    def hooklint_module_hook(module, *grads):
        __tracebackhide__ = True
        if not rec.live:
            return hook(module, *grads)
        rec.fired += 1
        task_id = rec.last_task = current_task_id()
        versions = _versions(grads)
        node = torch._C._current_autograd_node() if legacy else None
        call = HookCall(rec, snapshot=True)
        previous, tls.call = tls.call, call
        outer, tls.backward_hook = tls.backward_hook, rec
        try:
            result = hook(module, *grads)
        except Exception as exc:
            tls.call = previous
            tls.backward_hook = outer
            try:
                rt.after_module_hook(rec, call, module, grads, versions, task_id, node, None, exc)
            except Exception as inner:  # noqa: BLE001
                rt.internal_error(rec.sessions, inner)
            raise
        tls.call = previous
        tls.backward_hook = outer
        try:
            rt.after_module_hook(rec, call, module, grads, versions, task_id, node, result, None)
        except Exception as exc:  # noqa: BLE001
            rt.internal_error(rec.sessions, exc)
        return result

    return hooklint_module_hook


def _observe_failure(rt: Runtime, rec: HookRecord, exc: BaseException) -> None:
    try:
        obs = observe.failed_inplace_edit(rec, exc)
        if obs is not None:
            rt.emit(rec.sessions, obs)
    except Exception as inner:  # noqa: BLE001
        rt.internal_error(rec.sessions, inner)
