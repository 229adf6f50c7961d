""".hooklint_cache/: a second run over unchanged files imports no user code."""

from __future__ import annotations

import os
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


def _blocks(width: int = 2) -> str:
    return textwrap.dedent(BLOCKS.format(width=width))


@pytest.mark.parametrize("edit", [
    pytest.param(lambda text: text + "# a comment at the end\n\n\n", id="comment-and-blank-lines-at-the-end"),
    pytest.param(lambda text: text.replace("return self.fc(x)", "return self.fc(x)  # the only layer"),
                 id="comment-after-code"),
    pytest.param(lambda text: text.replace("\n\n    def forward", "\n    # the forward\n    def forward"),
                 id="comment-line-in-place-of-a-blank-line"),
])
def test_a_comment_in_a_dependency_reuses_the_facts(project, monkeypatch, edit):
    """A dependency's bytes changed, its lines of code did not: the facts of the
    file that imports it still hold (keyed on what can change the built model)."""
    model = str(project / "model.py")
    _first, facts, _ = _run([model], project)
    edited = edit(_blocks())
    assert edited != _blocks() and len(edited.splitlines()) >= len(_blocks().splitlines())
    (project / "blocks.py").write_text(edited, encoding="utf-8")
    monkeypatch.setattr(WorkerPool, "get", _no_worker)
    second, cached, _ = _run([model], project)
    assert second.imported == [] and second.cached == [model]
    assert [m.to_dict() for m in cached[model].models] == [m.to_dict() for m in facts[model].models]
    # stored again with the new bytes: the next run matches them without reading the code lines
    third, _, _ = _run([model], project)
    assert third.cached == [model]


def test_a_comment_that_moves_code_lines_analyses_again_and_the_lines_are_right(project):
    model = str(project / "model.py")
    _first, facts, _ = _run([model], project)
    op = facts[model].models[0].module("block.fc").bound
    assert (os.path.basename(op.file), op.line, op.code) == ("blocks.py", 11, "return self.fc(x)")
    moved = _blocks().replace("    def forward", "    # one line\n    # two\n    def forward")
    (project / "blocks.py").write_text(moved, encoding="utf-8")
    again, facts, _ = _run([model], project)
    assert again.imported == [model]
    op = facts[model].models[0].module("block.fc").bound
    assert (op.line, op.code) == (13, "return self.fc(x)")
    assert (project / "blocks.py").read_text().splitlines()[op.line - 1].strip() == op.code


def test_a_comment_after_the_code_of_a_line_the_facts_quote_is_not_quoted(project, monkeypatch):
    """Ops quote their line without its comment, so the facts are the same with
    or without one (and the cached ones stay right)."""
    model = str(project / "model.py")
    (project / "blocks.py").write_text(_blocks().replace("return self.fc(x)", "return self.fc(x)  # the layer"),
                                       encoding="utf-8")
    _first, facts, _ = _run([model], project)
    ops = facts[model].models[0].module("block.fc").ops
    assert {op.code for op in ops} == {"return self.fc(x)"}
    (project / "blocks.py").write_text(_blocks(), encoding="utf-8")
    monkeypatch.setattr(WorkerPool, "get", _no_worker)
    second, cached, _ = _run([model], project)
    assert second.cached == [model] and cached[model].models[0].module("block.fc").ops == ops


def test_code_that_changes_the_model_is_not_taken_for_a_comment(project, monkeypatch):
    model = str(project / "model.py")
    _run([model], project)
    blocks = project / "blocks.py"
    for edited in (
        _blocks(3),  # a layer's size
        _blocks().replace("return self.fc(x)", "return self.fc(x).relu_()"),  # an in-place op
        _blocks().replace("class Block", '"""Blocks."""\nclass Block').replace("\nimport", "import", 1),  # docstring
        _blocks().replace("return self.fc(x)", "return self.fc(x)  # type: (Tensor) -> Tensor"),  # read by TorchScript
        _blocks().replace("return self.fc(x)", "return self.fc( x )"),  # other spacing: the quoted line changes
    ):
        blocks.write_text(edited, encoding="utf-8")
        monkeypatch.setattr(WorkerPool, "get", _wanted)
        with pytest.raises(_WorkerWanted):
            _run([model], project)
        monkeypatch.undo()
    blocks.write_text(_blocks().replace("return self.fc(x)", "return self.fc(x).relu_()"), encoding="utf-8")
    changed, facts, _ = _run([model], project)
    assert changed.imported == [model]
    assert facts[model].models[0].module("block.fc").output_inplace is not None


def test_a_comment_in_the_model_file_itself_reuses_its_facts(project, monkeypatch):
    model = project / "model.py"
    _run([str(model)], project)
    text = model.read_text()
    model.write_text(text.replace("self.block = Block()", "self.block = Block()  # the only block") + "# end\n",
                     encoding="utf-8")
    monkeypatch.setattr(WorkerPool, "get", _no_worker)
    second, _, _ = _run([str(model)], project)
    assert second.cached == [str(model)]
    monkeypatch.setattr(WorkerPool, "get", _wanted)
    model.write_text(text.replace("self.block = Block()", "self.block = Block()\n        self.extra = Block()"),
                     encoding="utf-8")
    with pytest.raises(_WorkerWanted):
        _run([str(model)], project)


def test_a_changed_installed_package_imports_again(tmp_path, monkeypatch):
    """A module from outside the project (an installed package) is part of the
    facts too: its modification time and size are recorded with them."""
    project, site = tmp_path / "project", tmp_path / "site"
    project.mkdir()
    site.mkdir()
    (project / "model.py").write_text(textwrap.dedent(MODEL).replace("from blocks", "from vendored_blocks"),
                                      encoding="utf-8")
    installed = site / "vendored_blocks.py"
    installed.write_text(textwrap.dedent(BLOCKS.format(width=2)), encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(site))
    model = str(project / "model.py")
    first, facts, _ = _run([model], project)
    assert facts[model].models[0].module("block.fc").bound.grad_input[0] == (2,)
    again, _, _ = _run([model], project)
    assert again.cached == [model]
    installed.write_text(textwrap.dedent(BLOCKS.format(width=3)) + "\n", encoding="utf-8")
    changed, facts, _ = _run([model], project)
    assert changed.imported == [model], "vendored_blocks.py changed: the cached facts are stale"
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


BROKEN = ("import torch.nn as nn\nimport hooklint_no_such_module\n\n"
          "class Net(nn.Module):\n    def forward(self, x):\n        return x\n")


def test_an_import_failure_is_cached_until_the_file_or_the_installed_packages_change(tmp_path, monkeypatch):
    path = tmp_path / "broken.py"
    path.write_text(BROKEN, encoding="utf-8")
    _first, facts, notices = _run([str(path)], tmp_path)
    assert facts[str(path)].error_kind == "import" and len(notices) == 1
    assert "cached" not in notices[0].message

    monkeypatch.setattr(WorkerPool, "get", _no_worker)
    second, facts, notices = _run([str(path)], tmp_path)
    assert second.cached == [str(path)] and second.workers_started == 0
    assert [n.message for n in notices] == [
        "graph analysis skipped: importing its definitions failed: ModuleNotFoundError: No module named "
        "'hooklint_no_such_module' (broken.py:2); cached: not retried until the file changes (--no-cache to "
        "retry now)"]

    # installing a package (a site-packages folder changes) retries it
    from hooklint.graph import cache as cache_module

    stamp = cache_module.environment_stamp()
    monkeypatch.setattr(cache_module, "environment_stamp", lambda: stamp + [["/new/site-packages", 1]])
    monkeypatch.setattr(WorkerPool, "get", _wanted)
    with pytest.raises(_WorkerWanted):
        _run([str(path)], tmp_path)


HANGS = """
import torch.nn as nn


class Hang(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        while {condition}:
            pass

    def forward(self, x):
        return self.fc(x)
"""


def test_a_timeout_is_cached_the_next_run_does_not_wait_and_an_edit_retries(tmp_path, monkeypatch):
    import time

    path = tmp_path / "hangs.py"
    path.write_text(HANGS.format(condition="True"), encoding="utf-8")
    started = time.monotonic()
    _first, facts, notices = _run([str(path)], tmp_path, timeout=2)
    assert time.monotonic() - started < 60, "the hang was not stopped"
    assert [n.level.name for n in notices] == ["ERROR"]
    assert notices[0].message.startswith("graph analysis timed out after 2 s while building Hang()")

    monkeypatch.setattr(WorkerPool, "get", _no_worker)
    started = time.monotonic()
    second, _facts, notices = _run([str(path)], tmp_path, timeout=2)
    assert time.monotonic() - started < 5 and second.cached == [str(path)]
    assert [n.level.name for n in notices] == ["ERROR"], "a cached failure keeps its level (and the exit status)"
    assert notices[0].message.endswith("; cached: not retried until the file changes (--no-cache to retry now)")

    # a longer timeout is another question: not answered from the cache
    monkeypatch.setattr(WorkerPool, "get", _wanted)
    with pytest.raises(_WorkerWanted):
        _run([str(path)], tmp_path, timeout=3)

    monkeypatch.undo()
    path.write_text(HANGS.format(condition="False"), encoding="utf-8")
    edited, facts, notices = _run([str(path)], tmp_path, timeout=2)
    assert edited.imported == [str(path)] and not notices
    assert [m.class_name for m in facts[str(path)].models] == ["Hang"]


def test_a_crash_is_cached_with_the_modules_it_imported(tmp_path, monkeypatch):
    (tmp_path / "helper.py").write_text("import ctypes\nCRASH = True\n", encoding="utf-8")
    path = tmp_path / "crashes.py"
    path.write_text("import ctypes\nimport torch.nn as nn\nfrom helper import CRASH\n\n"
                    "class Crash(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        if CRASH:\n            ctypes.string_at(0)\n\n"
                    "    def forward(self, x):\n        return x\n", encoding="utf-8")
    _first, _facts, notices = _run([str(path)], tmp_path)
    assert [n.level.name for n in notices] == ["ERROR"] and "crashed the worker" in notices[0].message
    monkeypatch.setattr(WorkerPool, "get", _no_worker)
    second, _facts, notices = _run([str(path)], tmp_path)
    assert second.cached == [str(path)] and "cached" in notices[0].message
    # the module it imported changes: retried
    (tmp_path / "helper.py").write_text("import ctypes\nCRASH = False\n", encoding="utf-8")
    monkeypatch.undo()
    third, facts, notices = _run([str(path)], tmp_path)
    assert third.imported == [str(path)] and not notices and facts[str(path)].models


DECORATED = """
import torch.nn as nn


def plain(cls):
    return cls


def wide(cls):
    cls.WIDTH = 4
    return cls


@plain
class Net(nn.Module):
    WIDTH = 2

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, self.WIDTH)

    def forward(self, x):
        return self.fc(x)
"""


def test_a_changed_decorator_analyses_again(tmp_path):
    """A decorated definition starts at its first decorator: the plan's digest covers it."""
    path = tmp_path / "model.py"
    path.write_text(DECORATED, encoding="utf-8")
    _run([str(path)], tmp_path)
    path.write_text(DECORATED.replace("@plain", "@wide"), encoding="utf-8")
    again, facts, _ = _run([str(path)], tmp_path)
    assert again.imported == [str(path)]
    assert facts[str(path)].models[0].module("fc").bound.grad_input[0] == (4,)


@pytest.mark.parametrize("encode", [
    pytest.param(lambda text: b"\xef\xbb\xbf" + text.encode("utf-8"), id="utf-8-bom"),
    pytest.param(lambda text: ("# -*- coding: latin-1 -*-\n# width in \xb5m\n" + text).encode("latin-1"),
                 id="latin-1-cookie"),
])
def test_a_dependency_not_in_plain_utf8_reuses_the_facts(project, monkeypatch, encode):
    """The worker records the digest of a dependency's bytes, as the cache
    compares them: a file with a BOM or another encoding is no perpetual miss."""
    (project / "blocks.py").write_bytes(encode(_blocks()))
    model = str(project / "model.py")
    first, facts, _ = _run([model], project)
    assert first.imported == [model] and facts[model].models
    monkeypatch.setattr(WorkerPool, "get", _no_worker)
    second, cached, _ = _run([model], project)
    assert second.imported == [] and second.cached == [model]
