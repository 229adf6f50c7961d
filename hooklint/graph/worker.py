"""The worker subprocess: ``python -m hooklint.graph.worker MEMORY_LIMIT_MIB``.

The only process that imports torch and the user's code.  It first puts
itself in the kernel sandbox (:mod:`hooklint.sandbox`), imports torch, then
forks a fresh child for each request (:mod:`hooklint.sandbox.zygote`): model
code runs only in those children.  It reads one JSON request per line on
stdin and writes JSON events, one per line, to the file descriptor named by
``HOOKLINT_RESULT_FD`` (user code printing to stdout cannot corrupt them):

* ``{"event": "ready", "torch": "2.13.0+cpu", "sandbox": {...}, "isolation":
  "fork"}`` once torch is imported (what the sandbox enforces, and whether a
  child is forked per request or this process serves one request), or
  ``{"event": "fatal", "message": ...}`` when it cannot be (``"kind":
  "sandbox"``: ``require`` and an incomplete sandbox);
* ``{"event": "stage", "what": "building MyNet() (line 31)"}`` before each
  step, so that the parent can say what hung or crashed (and its deadline
  restarts: each step has its own time);
* ``{"event": "dep", "path": ..., "sha256": ...}`` for each of the user's own
  modules a request imported (so that even a failure can be cached until one
  of them changes);
* ``{"event": "result", ..., "imported": {path: [mtime_ns, size]}}`` when a
  request is done;
* ``{"event": "ended", "how": "crash" | "timeout", "detail": ...}`` when the
  child for a request died or was killed before its result.

Requests: ``{"kind": "file", "path", "root", "pythonpath", "budget"}``,
``{"kind": "factories", "specs", "root", "pythonpath", "budget"}`` and
``{"kind": "call", "function": "hooklint.x:y", "args": {...}, "budget"}``
(see :func:`Worker.call`).

Each step that runs model code (importing a file's definitions, building one
model, analysing one model) has ``budget`` seconds: an alarm then stops it
(:class:`OverBudget`), that one model is reported as timed out, and the
child goes on with the next.  The worker kills the child when a step
overruns by more (code the alarm cannot interrupt), and the parent kills
the worker if even that fails.
"""

from __future__ import annotations

from hooklint.safe_path import drop_working_folder

drop_working_folder()

# (the imports below come after the working folder left sys.path)
import importlib
import json
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple


class OverBudget(BaseException):
    """A step of model code ran past its time.  A BaseException, so that the
    model's own ``except Exception:`` does not swallow it."""


class Worker:
    def __init__(self, send: Callable[[dict[str, Any]], None], memory_mib: int = 0):
        from hooklint.graph.guard import Guard

        self.send = send
        self.memory_mib = memory_mib
        self.guard = Guard(os.environ.get("HOOKLINT_SCRATCH"))
        self.unique_names: dict[str, str] = {}
        self.budget = 60.0

    def stage(self, what: str) -> None:
        self.send({"event": "stage", "what": what})

    def dep(self, path: str, digest: str) -> None:
        self.send({"event": "dep", "path": path, "sha256": digest})

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        """One step of model code: announced, guarded, and stopped after ``budget`` s."""
        self.stage(what)
        budget = self.budget

        def expired(_signum, _frame):
            raise OverBudget(f"took more than {budget:g} s")

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            with self.guard.running_user_code():
                yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def timed_out(self, what: str) -> str:
        return (f"graph analysis timed out after {self.budget:g} s while {what}; the model code was stopped "
                f"(raise `timeout` in [tool.hooklint] or pass --timeout)")

    def analyse_built(self, built, describe, origin_file: str | None, unanalysed: list) -> list[dict]:
        from hooklint.graph.build import user_error
        from hooklint.graph.trace import AnalysisError, analyse_model

        models = []
        for item in built:
            name = type(item.model).__name__
            what = f"analysing {name}" + (f" (line {item.call_line})" if item.call_line else "")
            try:
                with self.step(what):
                    facts = analyse_model(item.model, source=item.source, describe=describe, inputs=item.inputs,
                                          inputs_origin=item.inputs_origin, call_line=item.call_line,
                                          origin_file=origin_file)
            except OverBudget:
                unanalysed.append({"class_name": name, "line": item.call_line, "reason": self.timed_out(what),
                                   "kind": "timeout"})
                continue
            except AnalysisError as exc:
                unanalysed.append({"class_name": name, "line": item.call_line, "reason": str(exc)})
                continue
            except BaseException as exc:  # noqa: BLE001 - user code: one diagnostic per model
                unanalysed.append({"class_name": name, "line": item.call_line,
                                   "reason": f"analysing {item.source} failed: {user_error(exc)}"})
                continue
            finally:
                item.model = None  # free it before the next model is built
            models.append(facts.to_dict())
        return models

    def file(self, path: str, root: str, pythonpath: list[str]) -> dict[str, Any]:
        from hooklint.graph.build import build_instances, describer, exec_definitions, file_session, user_error

        result: dict[str, Any] = {"path": path, "models": [], "unanalysed": []}
        self.stage("reading the file")
        with file_session(Path(path), Path(root), pythonpath, on_dep=self.dep) as session:
            sanitized = session.plan.sanitized
            result["skipped_statements"] = len(sanitized.skipped_lines)
            self.unique_names[session.unique_name] = session.path.stem
            what = "importing the file's definitions"
            try:
                with self.step(what):
                    exec_definitions(session)
            except OverBudget:
                result.update(error=self.timed_out(what), error_kind="timeout")
                return {"facts": result, "deps": session.importer.deps}
            except BaseException as exc:  # noqa: BLE001
                result["error"] = (f"importing its definitions failed: "
                                   f"{user_error(exc, sanitized.skipped_names, sanitized.computed_names)}")
                result["error_kind"] = "import"
                return {"facts": result, "deps": session.importer.deps}
            built = build_instances(session, self.step, OverBudget, self.timed_out)
            describe = describer(self.unique_names)
            unanalysed: list[dict] = []
            result["models"] = self.analyse_built(built.built, describe, str(session.path), unanalysed)
            covered = {m["class_name"] for m in result["models"]} | {
                mod["class_name"] for m in result["models"] for mod in m["modules"]}
            for failure in built.failures.values():
                if failure.class_name not in covered or failure.kind == "timeout":
                    unanalysed.append(failure.to_dict())
            result["unanalysed"] = unanalysed
            return {"facts": result, "deps": session.importer.deps}

    def factories(self, specs: list[str], root: str, pythonpath: list[str]) -> dict[str, Any]:
        from hooklint.graph.build import describer, project_session, run_factory, user_error

        models: list[dict] = []
        errors: list[dict] = []
        with project_session(Path(root), pythonpath, on_dep=self.dep) as importer:
            for spec in specs:
                what = f"calling the factory {spec}"
                try:
                    with self.step(what):
                        built = run_factory(spec)
                except OverBudget:
                    errors.append({"spec": spec, "reason": self.timed_out(what), "kind": "timeout"})
                    continue
                except BaseException as exc:  # noqa: BLE001
                    errors.append({"spec": spec, "reason": user_error(exc)})
                    continue
                unanalysed: list[dict] = []
                models += self.analyse_built([built], describer(self.unique_names), None, unanalysed)
                errors += [{"spec": spec, "reason": u["reason"], "kind": u.get("kind", "")} for u in unanalysed]
            deps = importer.deps
        return {"models": models, "errors": errors, "deps": deps}

    def call(self, function: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run ``hooklint.<module>:<function>(worker, **args)`` here and return its
        JSON-able result: how other layers (``--fix --verify``) run code next to
        the user's models, with the same guard, budget and memory limit.  Only
        hooklint's own functions can be named."""
        module_name, _, attr = function.partition(":")
        if not module_name.startswith("hooklint.") or not attr:
            raise ValueError(f"`{function}` is not a hooklint function")
        target = getattr(importlib.import_module(module_name), attr)
        return {"value": target(self, **args)}


class WorkerStart(NamedTuple):
    send: Callable[[dict[str, Any]], None]
    requests: Any  # a text stream of JSON lines
    close: Callable[[], None]
    memory_mib: int
    torch: Any  # the module, or None when it does not import
    sandbox: Any  # hooklint.sandbox.Status: what the kernel enforces
    scratch: str
    channels: tuple[int, ...]  # the parent's pipes, which a child for one file closes


def start_worker(argv: list[str] | None) -> WorkerStart:
    """The set-up every hooklint worker process shares (the graph worker, the
    fixes' proof): first the sandbox (``HOOKLINT_SANDBOX``: auto, require,
    off; :mod:`hooklint.sandbox`), while this process has one thread; replies
    on ``HOOKLINT_RESULT_FD``, requests on the real stdin while user code
    reading stdin gets end-of-file, no bytecode written next to the user's
    files, an argv that is not the user's, and torch on one thread.
    ``torch`` is None when it does not import, or when ``require`` finds the
    sandbox incomplete (a ``fatal`` event is sent: the caller exits 1)."""
    from hooklint.sandbox.confine import enter_worker

    argv = sys.argv[1:] if argv is None else argv
    memory_mib = int(argv[0]) if argv else 0
    mode = os.environ.get("HOOKLINT_SANDBOX", "auto")
    scratch = os.environ.get("HOOKLINT_SCRATCH")
    if not scratch:  # started by hand: a folder of its own, never the working folder
        import tempfile

        scratch = tempfile.mkdtemp(prefix="hooklint-scratch-")
    status = enter_worker(scratch, memory_mib, mode, int(os.environ.get("HOOKLINT_PARENT_PID", "0") or 0))
    result_fd = int(os.environ["HOOKLINT_RESULT_FD"])
    out = os.fdopen(result_fd, "w", encoding="utf-8", buffering=1)

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message, ensure_ascii=False) + "\n")
        out.flush()

    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    sys.dont_write_bytecode = True
    # argparse in model code sees no options
    sys.argv = [sys.argv[0]]
    channels = (result_fd, requests.fileno())
    if mode == "require" and not status.complete:
        send({"event": "fatal", "kind": "sandbox", "message": "; ".join(status.missing),
              "sandbox": status.to_dict()})
        return WorkerStart(send, requests, out.close, memory_mib, None, status, scratch, channels)
    import faulthandler

    faulthandler.enable(sys.stderr)
    try:
        import torch

        torch.set_num_threads(1)
        import torch.fx  # noqa: F401 - fail now, not inside the first model
    except BaseException as exc:  # noqa: BLE001
        send({"event": "fatal", "message": f"{type(exc).__name__}: {exc}"})
        return WorkerStart(send, requests, out.close, memory_mib, None, status, scratch, channels)
    return WorkerStart(send, requests, out.close, memory_mib, torch, status, scratch, channels)


def prepare(request: dict[str, Any]) -> None:
    """In the worker, before it forks the child for ``request``: hooklint's static
    reading of the file and of the project files it imports (parsed once, kept
    in :mod:`hooklint.graph.project`'s caches, which the child and the next
    files inherit).  It only reads text; whatever goes wrong here, the child
    meets again and reports."""
    path = request.get("path")
    if not isinstance(path, str):
        return
    import ast

    from hooklint.graph.plan import plan_for, project_context
    from hooklint.static.source import read_source

    try:
        tree = ast.parse(read_source(path), path)
        root = Path(request.get("root", ".")).resolve()
        plan_for(tree, project_context(os.path.realpath(path), root, request.get("pythonpath", ()), tree=tree))
    except BaseException:  # noqa: BLE001 - hostile text must not end the worker
        pass


def serve_requests(start: WorkerStart, handle: Callable[[dict[str, Any], Callable], dict[str, Any]],
                   prepare_request: Callable[[dict[str, Any]], None] | None = None) -> None:
    """Say ``ready``, then answer each request with ``handle(request, send)``
    in a fresh process (:mod:`hooklint.sandbox.zygote`).  Call it once the
    modules every request needs are imported: children share them.
    ``prepare_request``: what runs here before each fork (default :func:`prepare`)."""
    from hooklint.sandbox.zygote import isolation_for, serve

    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    isolation = isolation_for(threads)
    start.send({"event": "ready", "torch": start.torch.__version__, "sandbox": start.sandbox.to_dict(),
                "isolation": isolation})
    serve(start.requests, start.send, handle, status=start.sandbox, scratch=start.scratch, isolation=isolation,
          close_in_child=start.channels, prepare=prepare_request or prepare)


def handle_request(request: dict[str, Any], send: Callable[[dict[str, Any]], None], memory_mib: int = 0
                   ) -> dict[str, Any]:
    """One request of the graph worker, in the process forked for it."""
    worker = Worker(send, memory_mib)
    worker.budget = float(request.get("budget", 60.0))
    kind = request["kind"]
    try:
        if kind == "file":
            return worker.file(request["path"], request["root"], request.get("pythonpath", []))
        if kind == "factories":
            return worker.factories(request["specs"], request["root"], request.get("pythonpath", []))
        return worker.call(request["function"], request.get("args", {}))
    except (Exception, OverBudget) as exc:  # noqa: BLE001 - hooklint's own failure: say so
        return _internal_failure(request, exc, memory_mib)


def warm_up() -> None:
    """Pay torch's first-use costs once, here, rather than in every child: fx
    tracing through ``torch.relu`` builds torch's table of overridable
    functions (a third of a second), the first convolution picks its
    kernels, the fallback path turns anomaly mode on.  hooklint's own
    built-in modules only: no user code runs in this process."""
    import torch
    from torch import nn

    import hooklint.graph.build  # noqa: F401 - imported once, here, rather than in each child
    import hooklint.graph.guard  # noqa: F401
    import hooklint.graph.instances  # noqa: F401
    import hooklint.graph.project  # noqa: F401
    from hooklint.graph.build import describer
    from hooklint.graph.trace import analyse_model

    class Traced(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.norm = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(torch.relu(self.norm(self.conv(x))).mean((2, 3)))

    class Untraceable(nn.Module):  # a data-dependent branch: fx fails, a forward is run
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return self.fc(x) if x.sum() > 0 else -self.fc(x)

    describe = describer({})
    for model in (Traced(), Untraceable()):
        try:
            analyse_model(model, source="warm-up", describe=describe)
        except Exception:  # noqa: BLE001 - a slower first file, nothing worse
            pass


def main(argv: list[str] | None = None) -> int:
    start = start_worker(argv)
    if start.torch is None:
        return 1
    warm_up()
    serve_requests(start, lambda request, send: handle_request(request, send, start.memory_mib))
    start.close()
    return 0


def _internal_failure(request: dict[str, Any], exc: BaseException, memory_mib: int) -> dict[str, Any]:
    from hooklint.graph.trace import one_line

    if isinstance(exc, MemoryError):
        limit = f" (memory-limit {memory_mib} MiB)" if memory_mib else ""
        message = f"graph analysis ran out of memory{limit}; raise `memory-limit` in [tool.hooklint]"
        kind = "memory"
    elif isinstance(exc, OverBudget):
        message = f"graph analysis timed out ({exc})"
        kind = "timeout"
    else:
        message = f"internal error in the graph analysis ({one_line(exc)}); please report it"
        kind = "internal"
    if request["kind"] == "file":
        return {"facts": {"path": request["path"], "error": message, "error_kind": kind}, "deps": {}}
    if request["kind"] == "factories":
        return {"models": [], "errors": [{"spec": ", ".join(request["specs"]), "reason": message}], "deps": {}}
    return {"error": message, "error_kind": kind}


if __name__ == "__main__":
    code = main()
    # Everything is sent; skip the interpreter's teardown (torch's takes most of a second).
    sys.stderr.flush()
    os._exit(code)
