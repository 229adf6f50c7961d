"""Model instances as the graph layer builds them, for code that runs them
(worker only: imports torch).

``hooklint check --fix --verify`` proves a fix by running the model with the
original hook and with the fixed one.  It needs exactly the models the graph
layer analyses, built the same way (the file's definitions only, the
project's import roots, the constructor calls, factories and fixtures the
project shows) and inputs their forward accepts.  From the parent process::

    from hooklint.graph.provider import run_in_worker

    reply = run_in_worker("hooklint.fix.verify_worker:verify", {"path": ..., "fixed_text": ...}, config)
    reply.value   # what the function returned (JSON), or None with reply.error / reply.kind

and, in that function, which the worker calls as ``verify(worker, **args)``::

    from hooklint.graph.instances import model_instances

    def verify(worker, path, fixed_text, root, pythonpath=()):
        with model_instances(worker, path, root=root, pythonpath=pythonpath) as originals:
            ...   # originals.models[i].model, .inputs (fresh each access), .source; originals.failures
        with model_instances(worker, path, root=root, pythonpath=pythonpath, text=fixed_text) as fixed:
            ...

Each model is built as one step of the worker (its time budget, its guard);
a model that cannot be built, or whose forward fails on every example input,
is listed in ``failures`` with the reason, as ``hooklint graph`` would say it.
Models are valid inside the ``with`` block only (the import state is undone
when it ends).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from hooklint.graph.build import build_instances, exec_definitions, file_session, user_error
from hooklint.graph.trace import backward_hooks_detached, fx_trace, input_candidates, one_line, prepared_inputs


@dataclass
class ModelInstance:
    model: nn.Module
    source: str  # how it was built: "MyNet()", "factory resnet18()", "fixture model()"...
    class_name: str
    call_line: int | None
    example: tuple[Any, ...]  # inputs its forward ran on (keep them unchanged: use ``inputs``)
    inputs_origin: str  # "derived from conv1 (Conv2d, in_channels=3)", "declared by example_input_array"

    @property
    def inputs(self) -> tuple[Any, ...]:
        """Fresh copies of the example inputs (floating ones require grad)."""
        return prepared_inputs(self.example)


@dataclass
class Instances:
    """The built models, and what could not be built."""

    models: list[ModelInstance] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (class name, reason)
    import_error: str | None = None  # the file's definitions did not import


def example_inputs(model: nn.Module, declared: tuple[Any, ...] | None = None) -> tuple[tuple[Any, ...], str]:
    """Inputs ``model``'s forward runs on, and where they come from (the graph
    layer's own derivation: declared, ``example_input_array``, the first
    layer's size).  Raises ValueError when none works."""
    if declared is not None:
        return declared, "declared by the factory"
    trace = None
    try:
        with backward_hooks_detached(model):
            trace = fx_trace(model)
    except Exception:  # noqa: BLE001 - only used to find the first layer
        trace = None
    candidates = input_candidates(model, trace)
    if isinstance(candidates, str):
        raise ValueError(candidates)
    errors = []
    for example, origin in candidates.tuples:
        try:
            with torch.no_grad(), backward_hooks_detached(model):
                model(*prepared_inputs(example))
        except Exception as exc:  # noqa: BLE001 - the model's own forward failed on this input
            errors.append(one_line(exc))
            continue
        return example, origin
    raise ValueError(f"its forward failed on every example input ({errors[0] if errors else 'none'})")


@contextmanager
def model_instances(worker, path: str | Path, *, root: str | Path, pythonpath: list[str] | tuple[str, ...] = (),
                    text: str | None = None, class_name: str | None = None) -> Iterator[Instances]:
    """The models the graph layer builds for ``path`` (only those of class
    ``class_name``, or containing a module of that class, when given), each with
    example inputs.  ``text``: build from this source in place of the file's
    (same path and package).  ``worker`` is the :class:`~hooklint.graph.worker.Worker`
    the call runs in (its steps, budget and guard)."""
    from hooklint.graph.worker import OverBudget

    out = Instances()
    with file_session(Path(path), Path(root), pythonpath, text=text) as session:
        sanitized = session.plan.sanitized
        try:
            with worker.step("importing the file's definitions"):
                exec_definitions(session)
        except OverBudget:
            out.import_error = worker.timed_out("importing the file's definitions")
            yield out
            return
        except BaseException as exc:  # noqa: BLE001 - user code
            out.import_error = f"importing its definitions failed: " \
                               f"{user_error(exc, sanitized.skipped_names, sanitized.computed_names)}"
            yield out
            return
        built = build_instances(session, worker.step, OverBudget, worker.timed_out)
        out.failures += [(f.class_name, f.reason) for f in built.failures.values()]
        for item in built.built:
            name = type(item.model).__name__
            if class_name is not None and not any(type(m).__name__ == class_name for m in item.model.modules()):
                continue
            try:
                with worker.step(f"finding example inputs for {name}"):
                    example, origin = example_inputs(item.model, item.inputs)
            except (OverBudget, Exception) as exc:  # noqa: BLE001
                out.failures.append((name, f"no example input: {one_line(exc)}"))
                continue
            out.models.append(ModelInstance(item.model, item.source, name, item.call_line, example, origin))
        yield out


def run_instances(worker, path: str, root: str, pythonpath: list[str] | tuple[str, ...] = (),
                  text: str | None = None) -> dict[str, Any]:
    """One forward and backward of each model the graph layer builds for ``path``
    (from ``text`` when given), with the hooks its code registers: whether it
    runs.  The smallest use of :func:`model_instances` through
    :func:`~hooklint.graph.provider.run_in_worker`, and what ``--verify`` starts
    from."""
    from hooklint.graph.trace import spec_of, tensors_in
    from hooklint.graph.worker import OverBudget

    runs = []
    with model_instances(worker, path, root=root, pythonpath=pythonpath, text=text) as built:
        for instance in built.models:
            inputs = instance.inputs
            entry: dict[str, Any] = {"class_name": instance.class_name, "source": instance.source,
                                     "inputs": [str(s) for s in spec_of(inputs)], "error": None}
            try:
                with worker.step(f"running {instance.class_name} forward and backward"):
                    output = instance.model(*inputs)
                    loss = sum(t.float().sum() for t in tensors_in(output) if t.requires_grad)
                    if isinstance(loss, torch.Tensor):
                        loss.backward()
            except OverBudget:
                entry["error"] = worker.timed_out(f"running {instance.class_name}")
            except BaseException as exc:  # noqa: BLE001 - the user's model: its failure is the answer
                entry["error"] = user_error(exc)
            runs.append(entry)
        return {"runs": runs, "failures": [list(f) for f in built.failures], "import_error": built.import_error}
