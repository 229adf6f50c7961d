"""The language server reads the graph facts `hooklint check` cached for a
file (never computing any): the same findings as the CLI's graph run while
the buffer holds the file's bytes, the static ones once it is edited."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs the `server` extra")
pytest.importorskip("torch")

from conftest import FIXTURES, run_cli  # noqa: E402
from lsp.client import session  # noqa: E402
from lsp.test_server import as_tuples, cli_findings, expected_diagnostics, run_async  # noqa: E402

MODEL = FIXTURES / "models" / "legacy_hooks.py"  # HKL102 names the autograd op only the graph layer sees

pytestmark = pytest.mark.torch


@run_async
async def test_cached_graph_facts_are_used_until_the_buffer_changes(tmp_path):
    path = tmp_path / MODEL.name
    shutil.copyfile(MODEL, path)
    text = path.read_text(encoding="utf-8")
    graph = run_cli("check", "--output-format", "json", str(path), cwd=tmp_path)  # fills .hooklint_cache/
    assert graph.returncode == 1, graph.stderr
    graph_findings = json.loads(graph.stdout)
    static_findings = cli_findings(path, tmp_path)
    assert {f["message"] for f in graph_findings} != {f["message"] for f in static_findings}, \
        "the graph adds nothing here: the test would not tell the two apart"
    assert any(f["origin"] == "graph" for f in graph_findings)
    assert (tmp_path / ".hooklint_cache").is_dir()
    async with session(tmp_path) as s:
        uri = path.as_uri()
        s.open(uri, text)
        diagnostics = await s.diagnostics(uri, version=1)
        assert as_tuples(diagnostics) == expected_diagnostics(graph_findings, text)
        assert sorted(d.message for d in diagnostics) == sorted(f["message"] for f in graph_findings)
        # nothing imported the model in the server, nor torch
        maps = Path(f"/proc/{s.client._server.pid}/maps")
        if maps.exists():
            assert "torch" not in maps.read_text()

        edited = text + "\n# edited\n"
        s.replace_all(uri, 2, edited)
        diagnostics = await s.diagnostics(uri, version=2)
        expected = cli_findings(path, tmp_path, edited)
        assert sorted(d.message for d in diagnostics) == sorted(f["message"] for f in expected)

        # with graph facts turned off, the unchanged file gets the static findings too
        s.replace_all(uri, 3, text)
        assert sorted(d.message for d in await s.diagnostics(uri, version=3)) == \
            sorted(f["message"] for f in graph_findings)
        mark = s.count(uri)
        s.client.workspace_did_change_configuration(_settings({"graph-facts": False}))
        diagnostics = await s.diagnostics(uri, after=mark)
        assert sorted(d.message for d in diagnostics) == sorted(f["message"] for f in static_findings)


def _settings(values):
    from lsprotocol import types

    return types.DidChangeConfigurationParams(settings={"hooklint": values})
