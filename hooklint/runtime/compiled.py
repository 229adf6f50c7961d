"""Run-time HKL701: module hooks registered after compiled code containing the module ran.

An extension of the run-time layer (``core.Runtime.extensions``).  While a
session is active, every graph dynamo hands to a backend
(``OutputGraph.call_user_compiler``, whatever the backend) is read for the
modules whose forward it traced (the ``nn_module_stack`` of its nodes, keyed
by the modules' ids and resolved against the objects of the compiled frame),
and the compiled function the backend returns is wrapped to count its calls.

A module hook registered later on one of those modules is watched: once the
graph that traced the module has run again after the registration and the
hook still never fired, it is reported with the number of compiled calls that
ran without it (judged after each backward and when the session ends).  Hooks
registered before the graph was compiled, tensor hooks and post-accumulate
hooks are never watched.

The graph is the backend's, unchanged: the wrapper only counts calls, and
hooklint's own hook wrappers step aside while dynamo traces (core.py), so the
number of graphs and recompilations is the same with and without hooklint
(bench/compile_overhead.py).
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any

from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from hooklint.runtime import frames
from hooklint.runtime.extension import Extension
from hooklint.runtime.frames import Site
from hooklint.runtime.import_watch import ImportWatcher
from hooklint.runtime.observation import Observation
from hooklint.static.hooks import HookKind

_MAX_MODULES = 100_000  # modules looked at to name the ids of one graph


_OUTPUT_GRAPH = "torch._dynamo.output_graph"


def extension() -> "CompiledExtension | None":
    import importlib.util

    try:
        # the package only: finding a submodule would import its parents, dynamo itself
        if importlib.util.find_spec("torch._dynamo") is None:
            return None
    except (ImportError, ValueError):  # no dynamo in this build: nothing is compiled
        return None
    return CompiledExtension()


class CompiledGraph:
    """One graph a backend compiled: where, and how often it ran since."""

    __slots__ = ("site", "calls", "__weakref__")

    def __init__(self, site: Site | None):
        self.site = site
        self.calls = 0


class LateHook:
    """A module hook registered after graphs that traced its module were compiled."""

    __slots__ = ("rec", "graphs", "reported", "site")

    def __init__(self, rec: Any, graphs: list[tuple[CompiledGraph, int]], site: Site):
        self.rec = rec
        self.graphs = graphs  # (graph, its call count when the hook was registered)
        self.reported = 0  # the count last reported
        # where to report: the registration, or for a hook a helper of another file registers (a Grad-CAM
        # class), the user's call of that helper, which is what comes too late
        self.site = site

    def calls_since(self) -> int:
        return sum(graph.calls - before for graph, before in self.graphs)


class CompiledExtension(Extension):
    def __init__(self) -> None:
        self.rt: Any = None
        self.originals: list[tuple[Any, str, Any, bool]] = []
        self.graphs_of: WeakIdKeyDictionary = WeakIdKeyDictionary()  # module -> [CompiledGraph]
        self.late: list[LateHook] = []
        self.lock = threading.Lock()
        self.finder: ImportWatcher | None = None

    # -- lifecycle ------------------------------------------------------------
    def install(self, rt) -> None:
        """Patch dynamo's hand-over to the backend, now if dynamo is imported, else
        when the program imports it (`torch.compile` does): importing it here
        would import much of torch.distributed too, before the other extensions
        could watch it, and cost every session a second."""
        self.rt = rt
        if _OUTPUT_GRAPH in sys.modules:
            self._patch_dynamo()
        else:
            self.finder = ImportWatcher(_OUTPUT_GRAPH, self._dynamo_imported)
            sys.meta_path.insert(0, self.finder)

    def _dynamo_imported(self) -> None:
        if self.rt is not None and self.rt.active and not self.originals:
            try:
                self._patch_dynamo()
            except Exception as exc:  # noqa: BLE001 - compiled code stays unobserved, the program runs on
                self.rt.internal_error(self.rt.sessions_here(), exc)

    def _patch_dynamo(self) -> None:
        output_graph = sys.modules[_OUTPUT_GRAPH].OutputGraph
        if hasattr(output_graph, "call_user_compiler"):
            self._patch(output_graph, "call_user_compiler",
                        self._compiler_wrapper(output_graph.call_user_compiler))

    def uninstall(self, rt) -> None:
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
        self.late.clear()

    def _patch(self, owner: Any, name: str, replacement: Any) -> None:
        had = name in vars(owner)
        self.originals.append((owner, name, vars(owner).get(name), had))
        setattr(owner, name, replacement)

    # -- graphs ---------------------------------------------------------------------
    def _compiler_wrapper(self, original):
        ext = self

        def call_user_compiler(output_graph, gm, example_inputs):
            compiled_fn = original(output_graph, gm, example_inputs)
            if not ext.rt.active or getattr(output_graph, "package", None) is not None:
                return compiled_fn
            try:
                return ext.graph_compiled(output_graph, gm, compiled_fn)
            except Exception as exc:  # noqa: BLE001 - the compiled function is returned as it is
                ext.rt.internal_error(ext.rt.sessions_here(), exc)
                return compiled_fn

        call_user_compiler.__wrapped__ = original  # type: ignore[attr-defined]
        return call_user_compiler

    def graph_compiled(self, output_graph: Any, gm: Any, compiled_fn: Any) -> Any:
        ids: set[int] = set()
        for node in gm.graph.nodes:
            stack = node.meta.get("nn_module_stack")
            if stack:
                for key in stack:
                    head = str(key).split("@", 1)[0]
                    if head.isdigit():
                        ids.add(int(head))
        if not ids:
            return compiled_fn
        modules = _resolve(output_graph, ids)
        if not modules:
            return compiled_fn
        caller = frames.user_frame(1)
        graph = CompiledGraph(frames.site_of(caller) if caller is not None else None)
        with self.lock:
            for module in modules:
                self.graphs_of.setdefault(module, []).append(graph)
        compiled_fn = _materialized(compiled_fn)
        graph_ref = weakref.ref(graph)

        def hooklint_counted_graph(*args, **kwargs):
            counted = graph_ref()
            if counted is not None:
                counted.calls += 1
            return compiled_fn(*args, **kwargs)

        hooklint_counted_graph.__wrapped__ = compiled_fn  # type: ignore[attr-defined]
        hooklint_counted_graph._hooklint_graph = graph  # type: ignore[attr-defined]  # keeps it alive
        return hooklint_counted_graph

    # -- hooks ----------------------------------------------------------------------
    def hook_bound(self, rec) -> None:
        if not rec.kind.is_module or rec.is_global or not self.graphs_of:
            return
        module = rec.target()
        if not isinstance(module, nn.Module):
            return
        graphs = self.graphs_of.get(module)
        if graphs:
            site = rec.site
            registering = frames.user_frame(1)
            caller = rec.caller_site
            if registering is not None and registering.f_code.co_name != "<module>" and caller is not None \
                    and not _installed(caller.filename):
                site = caller
            with self.lock:
                self.late.append(LateHook(rec, [(graph, graph.calls) for graph in graphs], site))

    def backward_ended(self, info, failed: bool) -> None:
        if self.late and not failed:
            self.judge()

    def session_ending(self, session) -> None:
        if self.late:
            self.judge()

    def judge(self) -> None:
        """Report the watched hooks that never fired while the graphs that traced
        their module ran after their registration; forget the settled ones."""
        with self.lock:
            pending, self.late = self.late, []
        keep = []
        for late in pending:
            rec = late.rec
            if rec.has_run():
                continue  # it fired (a recompilation traced it, or the module ran eagerly)
            calls = late.calls_since()
            if calls and calls != late.reported:
                late.reported = calls  # said again with the new count as more compiled calls skip it
                self.rt.emit(rec.sessions, _late_hook(rec, late, calls))
            if rec.live and not rec.removed:
                keep.append(late)
        with self.lock:
            self.late = keep + self.late


def _installed(filename: str) -> bool:
    """A file of an installed package (pytest's runner, a training framework): not the user's call."""
    parts = filename.replace("\\", "/").split("/")
    return "site-packages" in parts or "dist-packages" in parts


def _resolve(output_graph: Any, ids: set[int]) -> list[nn.Module]:
    """The modules with these ids, among the objects the compiled frame can
    reach: its locals, the globals its code names, and what they hold."""
    tx = getattr(output_graph, "root_tx", None)
    if tx is None:
        return []
    roots: list[Any] = list(getattr(tx, "f_locals", {}).values())
    code = getattr(tx, "f_code", None)
    f_globals = getattr(tx, "f_globals", {})
    if code is not None:
        roots += [f_globals[name] for name in code.co_names if name in f_globals]
    found: dict[int, nn.Module] = {}
    seen = 0
    for root in roots:
        if not isinstance(root, nn.Module):
            continue
        for module in root.modules():
            seen += 1
            if id(module) in ids:
                found[id(module)] = module
            original = getattr(module, "_orig_mod", None)
            if isinstance(original, nn.Module) and id(original) in ids:
                found[id(original)] = original
            if seen > _MAX_MODULES:
                break
    return list(found.values())


def _materialized(compiled_fn: Any) -> Any:
    """What dynamo does itself with a lazily recompiled GraphModule before
    calling it (OutputGraph.compile_and_call_fx_graph), done before wrapping it:
    the wrapper would hide it from that step."""
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
    except Exception:  # noqa: BLE001
        return compiled_fn
    owner = getattr(compiled_fn, "__self__", None)
    if isinstance(compiled_fn, _LazyGraphModule):
        _LazyGraphModule.force_recompile(compiled_fn)
        return compiled_fn
    if isinstance(owner, _LazyGraphModule) and getattr(compiled_fn, "__name__", "") == "_lazy_forward":
        _LazyGraphModule.force_recompile(owner)
        return owner.forward
    return compiled_fn


def _late_hook(rec: Any, late: LateHook, calls: int) -> Observation:
    graph_sites = [graph.site for graph, _before in late.graphs if graph.site is not None]
    compiled_at = f" (compiled when {graph_sites[0]} ran it)" if graph_sites else ""
    target = rec.target_text()
    site = late.site
    related = []
    if site is not rec.site:
        related.append(rec.site.related("the hook is registered here"))
    if graph_sites:
        related.append(graph_sites[0].related("the compiled call that traced the module"))
    backward = rec.kind in (HookKind.FULL_BACKWARD, HookKind.FULL_BACKWARD_PRE, HookKind.BACKWARD_LEGACY)
    runs = f"{calls} compiled call{'s' if calls != 1 else ''}" + (" and their backward" if backward else "")
    return Observation(
        code="HKL701",
        key=("HKL701", site, rec.site, rec.name),
        site=site,
        message=f"{rec.what()} was registered on {target} after compiled code containing that module had run"
        f"{compiled_at}; {runs} ran since, and the hook never fired: dynamo traced the module before the hook "
        f"existed and does not guard on module hooks (`torch._dynamo.config.skip_nnmodule_hook_guards`)",
        help="Register the hook before the first compiled call; or hook tensors instead (a parameter's "
        "`register_hook` / `register_post_accumulate_grad_hook` fire under compile); or run the hooked pass on the "
        "uncompiled module. `torch._dynamo.reset()` after registering makes it fire, at the cost of recompiling "
        "every compiled function.",
        expected="the hook fires in the compiled calls of its module",
        observed=f"it never fired in {calls} compiled call{'s' if calls != 1 else ''}",
        related=tuple(related),
        count=calls,
        counts_itself=True,
        subject=target,
        subject_noun="module",
    )


__all__ = ["CompiledExtension", "extension"]
