"""The worker subprocess: ``python -m hooklint.graph.worker MEMORY_LIMIT_MIB``.

The only process that imports torch and the user's code.  It reads one JSON
request per line on stdin and writes JSON events, one per line, to the file
descriptor named by ``HOOKLINT_RESULT_FD`` (user code printing to stdout
cannot corrupt them):

* ``{"event": "ready", "torch": "2.13.0+cpu"}`` once torch is imported, or
  ``{"event": "fatal", "message": ...}`` when it cannot be;
* ``{"event": "stage", "what": "building MyNet() (line 31)"}`` while working,
  so that the parent can say what hung or crashed;
* ``{"event": "result", ...}`` when a request is done.

Requests: ``{"kind": "file", "path": ..., "root": ...}`` and
``{"kind": "factories", "specs": [...], "root": ...}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable


def _limit_resources(memory_mib: int) -> None:
    import resource

    if memory_mib > 0:
        limit = memory_mib * 1024 * 1024
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass


class Worker:
    def __init__(self, send: Callable[[dict[str, Any]], None]):
        from hooklint.graph.guard import Guard

        self.send = send
        self.guard = Guard(os.environ.get("HOOKLINT_SCRATCH"))
        self.unique_names: dict[str, str] = {}

    def stage(self, what: str) -> None:
        self.send({"event": "stage", "what": what})

    def analyse_built(self, built, describe, origin_file: str | None, unanalysed: list) -> list[dict]:
        from hooklint.graph.build import user_error
        from hooklint.graph.trace import AnalysisError, analyse_model

        models = []
        for item in built:
            name = type(item.model).__name__
            self.stage(f"analysing {name}" + (f" (line {item.call_line})" if item.call_line else ""))
            try:
                with self.guard.running_user_code():
                    facts = analyse_model(item.model, source=item.source, describe=describe, inputs=item.inputs,
                                          inputs_origin=item.inputs_origin, call_line=item.call_line,
                                          origin_file=origin_file)
            except AnalysisError as exc:
                unanalysed.append({"class_name": name, "line": item.call_line, "reason": str(exc)})
                continue
            except BaseException as exc:  # noqa: BLE001 - user code: one diagnostic per model
                unanalysed.append({"class_name": name, "line": item.call_line,
                                   "reason": f"analysing {item.source} failed: {user_error(exc)}"})
                continue
            models.append(facts.to_dict())
        return models

    def file(self, path: str, root: str) -> dict[str, Any]:
        from hooklint.graph.build import build_instances, describer, exec_definitions, file_session, user_error

        result: dict[str, Any] = {"path": path, "models": [], "unanalysed": []}
        self.stage("reading the file")
        with file_session(Path(path), Path(root)) as session:
            result["skipped_statements"] = len(session.plan.sanitized.skipped_lines)
            self.unique_names[session.unique_name] = session.path.stem
            self.stage("importing the file's definitions")
            try:
                with self.guard.running_user_code():
                    exec_definitions(session)
            except BaseException as exc:  # noqa: BLE001
                result["error"] = f"importing its definitions failed: " \
                                  f"{user_error(exc, session.plan.sanitized.skipped_names)}"
                result["error_kind"] = "import"
                return {"facts": result, "deps": session.importer.deps}
            built = build_instances(session, self.stage, self.guard)
            describe = describer(self.unique_names)
            unanalysed: list[dict] = []
            result["models"] = self.analyse_built(built.built, describe, str(session.path), unanalysed)
            covered = {m["class_name"] for m in result["models"]} | {
                mod["class_name"] for m in result["models"] for mod in m["modules"]}
            for failure in built.failures.values():
                if failure.class_name not in covered:
                    unanalysed.append(failure.to_dict())
            result["unanalysed"] = unanalysed
            return {"facts": result, "deps": session.importer.deps}

    def factories(self, specs: list[str], root: str) -> dict[str, Any]:
        from hooklint.graph.build import LocalImporter, describer, run_factory, user_error

        root_path = Path(root).resolve()
        importer = LocalImporter([root_path])
        sys.meta_path.insert(0, importer)
        sys.path.insert(0, str(root_path))
        models: list[dict] = []
        errors: list[dict] = []
        try:
            for spec in specs:
                self.stage(f"calling the factory {spec}")
                try:
                    built = run_factory(spec, self.guard)
                except BaseException as exc:  # noqa: BLE001
                    errors.append({"spec": spec, "reason": user_error(exc)})
                    continue
                unanalysed: list[dict] = []
                models += self.analyse_built([built], describer(self.unique_names), None, unanalysed)
                errors += [{"spec": spec, "reason": u["reason"]} for u in unanalysed]
        finally:
            sys.meta_path.remove(importer)
            sys.path.remove(str(root_path))
        return {"models": models, "errors": errors, "deps": importer.deps}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    memory_mib = int(argv[0]) if argv else 0
    out = os.fdopen(int(os.environ["HOOKLINT_RESULT_FD"]), "w", encoding="utf-8", buffering=1)

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message, ensure_ascii=False) + "\n")
        out.flush()

    # Requests come on the real stdin; user code reading stdin gets end-of-file.
    requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    sys.dont_write_bytecode = True
    _limit_resources(memory_mib)
    import faulthandler

    faulthandler.enable(sys.stderr)
    try:
        import torch

        torch.set_num_threads(1)
        import torch.fx  # noqa: F401 - fail now, not inside the first model
    except BaseException as exc:  # noqa: BLE001
        send({"event": "fatal", "message": f"{type(exc).__name__}: {exc}"})
        return 1
    worker = Worker(send)
    send({"event": "ready", "torch": torch.__version__})
    for line in requests:
        request = json.loads(line)
        try:
            if request["kind"] == "file":
                reply = worker.file(request["path"], request["root"])
            else:
                reply = worker.factories(request["specs"], request["root"])
        except Exception as exc:  # noqa: BLE001 - hooklint's own failure: say so, keep serving
            from hooklint.graph.trace import one_line

            message = f"internal error in the graph analysis ({one_line(exc)}); please report it"
            if request["kind"] == "file":
                reply = {"facts": {"path": request["path"], "error": message, "error_kind": "internal"}, "deps": {}}
            else:
                reply = {"models": [], "errors": [{"spec": ", ".join(request["specs"]), "reason": message}],
                         "deps": {}}
        send({"event": "result", **reply})
    out.close()
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is sent; skip the interpreter's teardown (torch's takes most of a second).
    sys.stderr.flush()
    os._exit(code)
