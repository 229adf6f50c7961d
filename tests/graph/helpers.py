"""Helpers for the graph-layer tests.

``analyse_in_process`` loads a model file the way the worker does
(definitions only, literal constructor calls, no-argument constructors) and
analyses the instances in this process, so that tests can compare hooklint's
facts with real hooks on the very same instances.  Worker-level behaviour
(timeouts, crashes, the cache) is tested through the real subprocess.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from conftest import FIXTURES, ROOT

MODEL_FIXTURES = sorted((FIXTURES / "models").glob("*.py"))
SEED_MODELS = [FIXTURES / "seeds" / name for name in (
    "seed000_conditional_grad_hook.py", "seed002_custom_function.py", "seed004_autograd_and_hooks.py")]


class NoGuard:
    """The audit hook is for the worker process; these files are our own fixtures."""

    @contextlib.contextmanager
    def running_user_code(self):
        yield


@dataclass
class Analysed:
    model: object  # the nn.Module instance that was analysed
    facts: object  # its ModelFacts


_CACHE: dict[Path, tuple[list[Analysed], list]] = {}


def analyse_in_process(path: Path) -> tuple[list[Analysed], list]:
    """(analysed models, build failures) of one file, built and analysed in this process."""
    path = Path(path).resolve()
    if path not in _CACHE:
        from hooklint.graph.build import build_instances, describer, exec_definitions, file_session
        from hooklint.graph.trace import analyse_model

        out = []
        with file_session(path, ROOT) as session:
            exec_definitions(session)
            built = build_instances(session, lambda what: contextlib.nullcontext())
            describe = describer({session.unique_name: path.stem})
            for item in built.built:
                facts = analyse_model(item.model, source=item.source, describe=describe, inputs=item.inputs,
                                      call_line=item.call_line, origin_file=str(path))
                out.append(Analysed(item.model, facts))
        _CACHE[path] = (out, list(built.failures.values()))
    return _CACHE[path]


def model_named(path: Path, class_name: str) -> Analysed:
    analysed, _failures = analyse_in_process(path)
    matches = [a for a in analysed if a.facts.class_name == class_name]
    assert matches, f"{class_name} was not analysed in {path.name}: {[a.facts.class_name for a in analysed]}"
    return matches[0]


def file_facts_in_process(path: Path):
    """FileFacts for ``path`` as the provider would build them (without the worker)."""
    from hooklint.graph.facts import FileFacts

    analysed, failures = analyse_in_process(path)
    return FileFacts(str(path), models=[a.facts for a in analysed], unanalysed=failures)
