""".hooklint_cache/: a second run over unchanged files imports no user code."""

from __future__ import annotations

import textwrap

import pytest

from hooklint.config import Config
from hooklint.graph import provider
from hooklint.graph.provider import GraphRun, WorkerPool, provide_graph_facts

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

MODEL = """
import torch.nn as nn
from blocks import Block


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x)
"""

BLOCKS = """
import torch.nn as nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, {width})

    def forward(self, x):
        return self.fc(x)
"""


def _no_worker(self):
    raise AssertionError("the worker (the only process that imports user code) was started")


def _run(paths, root, **kwargs):
    run = GraphRun()
    facts, notices = provide_graph_facts(paths, Config(root=root), run=run, **kwargs)
    return run, facts, notices


@pytest.fixture
def project(tmp_path):
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL), encoding="utf-8")
    (tmp_path / "blocks.py").write_text(textwrap.dedent(BLOCKS.format(width=2)), encoding="utf-8")
    return tmp_path


def test_second_run_reads_the_cache_without_importing(project, monkeypatch):
    model = str(project / "model.py")
    first, facts, _ = _run([model], project)
    assert first.imported == [model] and first.workers_started == 1
    cache = project / ".hooklint_cache"
    assert (cache / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert (cache / ".gitignore").read_text() == "*\n"

    monkeypatch.setattr(WorkerPool, "get", _no_worker)
    second, cached, notices = _run([model], project)
    assert second.imported == [] and second.cached == [model] and second.workers_started == 0
    assert cached[model].cached and not notices
    assert [m.to_dict() for m in cached[model].models] == [m.to_dict() for m in facts[model].models]


class _WorkerWanted(Exception):
    pass


def _wanted(self):
    raise _WorkerWanted


def test_a_changed_dependency_imports_again(project):
    model = str(project / "model.py")
    _run([model], project)
    (project / "blocks.py").write_text(textwrap.dedent(BLOCKS.format(width=3)), encoding="utf-8")
    changed, facts, _ = _run([model], project)
    assert changed.imported == [model], "blocks.py changed: the cached facts are stale"
    assert facts[model].models[0].module("block.fc").bound.grad_input[0] == (3,)


def test_another_torch_version_or_no_cache_misses(project, monkeypatch):
    model = str(project / "model.py")
    _run([model], project)
    monkeypatch.setattr(WorkerPool, "get", _wanted)
    with pytest.raises(_WorkerWanted):
        _run([model], project, use_cache=False)
    version = provider.torch_version()
    monkeypatch.setattr(provider, "torch_version", lambda: version + ".other")
    with pytest.raises(_WorkerWanted):
        _run([model], project)


def test_failures_of_the_whole_file_are_not_cached(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import torch.nn as nn\nimport hooklint_no_such_module\n\n"
                    "class Net(nn.Module):\n    def forward(self, x):\n        return x\n", encoding="utf-8")
    _first, facts, notices = _run([str(path)], tmp_path)
    assert facts[str(path)].error_kind == "import" and len(notices) == 1
    assert not list(tmp_path.glob(".hooklint_cache/graph/*/*.json")), \
        "installing the missing package must be enough to fix it"
