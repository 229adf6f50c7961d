"""``hooklint server`` driven over stdio by a real LSP client (pygls'
LanguageClient), in a subprocess, checked against the CLI on the same files."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls", reason="the language server needs the `server` extra")

from lsprotocol import types  # noqa: E402

from conftest import FIXTURES, run_cli  # noqa: E402
from lsp.client import (  # noqa: E402
    RawClient,
    apply_text_edits,
    edits_for,
    server_env,
    session,
)

SEED004 = FIXTURES / "seeds" / "seed004_autograd_and_hooks.py"  # HKL101 (unsafe fix), HKL102 with related places
HKL401 = FIXTURES / "rules" / "hkl401_hook_mutates_argument.py"  # safe and unsafe fixes
HKL303 = FIXTURES / "rules" / "hkl303_forward_bypasses_hooks.py"
NOTEBOOK = FIXTURES / "notebooks" / "gradcam_debugging.ipynb"

# A line with an astral character before the finding: UTF-16 columns differ from code points.
NON_ASCII = '''\
import torch.nn as nn

def log(module, grad_input, grad_output):
    print(grad_input)

net = nn.Linear(2, 2)
label = "\N{GRINNING FACE} grad"; net.register_backward_hook(log)
'''


def run_async(test):
    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return wrapper


def cli_findings(path: Path, cwd: Path, text: str | None = None) -> list[dict]:
    """`hooklint check --static-only --output-format json` on a file (or, with
    ``text``, on that text as stdin named by the file)."""
    args = ["check", "--static-only", "--output-format", "json", "--no-cache"]
    if text is None:
        r = run_cli(*args, str(path), cwd=cwd)
    else:
        r = run_cli(*args, "-", "--stdin-filename", str(path), cwd=cwd, input=text)
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def static_findings(path: Path, text: str) -> list[dict]:
    """What `hooklint check - --stdin-filename PATH --static-only` reports on
    ``text``, computed in this process (the same call, without a process start:
    for the re-checks after each edit; the first comparisons run the CLI)."""
    from hooklint.config import load_config
    from hooklint.static.checker import check_text

    codes = frozenset(load_config(start=path.parent).enabled_codes())
    result = check_text(str(path), text, codes, display_path=path.name, on_disk=False)
    return [f.to_dict() for f in result.findings]


def cli_in_parallel(jobs: list[tuple[Path, Path]]) -> list[list[dict]]:
    """Several CLI runs at once (each its own process: no project pass across the files)."""
    env = dict(os.environ, NO_COLOR="1")
    procs = [subprocess.Popen([sys.executable, "-m", "hooklint", "check", "--static-only", "--output-format", "json",
                               "--no-cache", str(path)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for path, cwd in jobs]
    out = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), stderr
        out.append(json.loads(stdout))
    return out


def utf16_column(line: str, column: int) -> int:
    prefix = line[:column - 1]
    return len(prefix) + sum(1 for c in prefix if ord(c) > 0xFFFF)


def expected_diagnostics(findings: list[dict], text: str | None = None, cell_texts: dict[int, str] | None = None):
    """The CLI's findings as (code, start line, start char, end line, end char), LSP-style."""
    out = []
    for f in findings:
        source = cell_texts[f["cell"]] if cell_texts is not None else text
        lines = re.split(r"\r\n|\r|\n", source or "")

        def pos(loc):
            row = loc["row"]
            line = lines[row - 1] if 0 < row <= len(lines) else ""
            return row - 1, utf16_column(line, loc["column"])

        out.append((f["code"], *pos(f["location"]), *pos(f["end_location"])))
    return sorted(out)


def as_tuples(diagnostics: list[types.Diagnostic]):
    return sorted((d.code, d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character)
                  for d in diagnostics)


def copy_fixture(src: Path, folder: Path) -> Path:
    dest = folder / src.name
    shutil.copyfile(src, dest)
    return dest


# ---------------------------------------------------------------- diagnostics


@run_async
async def test_diagnostics_on_open_equal_the_cli(tmp_path):
    files = [copy_fixture(p, tmp_path) for p in (SEED004, HKL401, HKL303)]
    non_ascii = tmp_path / "non_ascii.py"
    non_ascii.write_text(NON_ASCII, encoding="utf-8")
    files.append(non_ascii)
    expected = cli_in_parallel([(path, tmp_path) for path in files])
    async with session(tmp_path) as s:
        for path in files:
            s.open(path.as_uri(), path.read_text(encoding="utf-8"))
        for path, findings in zip(files, expected):
            text = path.read_text(encoding="utf-8")
            diagnostics = await s.diagnostics(path.as_uri(), version=1)
            assert findings, f"{path.name}: the CLI found nothing, the comparison would be empty"
            assert as_tuples(diagnostics) == expected_diagnostics(findings, text), path.name
            by_place = {(f["code"], f["location"]["row"] - 1, f["message"]): f for f in findings}
            for d in diagnostics:
                f = by_place[(d.code, d.range.start.line, d.message)]
                assert d.source == "hooklint"
                assert d.severity == {"error": types.DiagnosticSeverity.Error,
                                      "warning": types.DiagnosticSeverity.Warning,
                                      "info": types.DiagnosticSeverity.Information}[f["severity"]]
                assert d.code_description is not None and d.code_description.href == f["url"]
                assert f["url"].endswith(f"{d.code}.md")
                related = [(r.location.uri, r.location.range.start.line, r.message)
                           for r in d.related_information or []]
                assert related == [(path.as_uri(), r["location"]["row"] - 1, r["message"]) for r in f["related"]]
        # the astral character counts two UTF-16 units: the column moved by one
        [d] = [d for d in await s.diagnostics(non_ascii.as_uri()) if d.code == "HKL101"]
        line = NON_ASCII.splitlines()[6]
        assert d.range.start.character == line.index("register_backward_hook") + 1
    assert s.returncode == 0  # shutdown, then exit


@run_async
async def test_changes_are_applied_incrementally_and_debounced(tmp_path):
    # \u2028 and \x0c are not line breaks for Python nor LSP (str.splitlines() would split there)
    text = "# a\u2028comment\x0cwith odd characters\n" + SEED004.read_text(encoding="utf-8")
    path = tmp_path / "model.py"
    path.write_text(text, encoding="utf-8")
    async with session(tmp_path, initialization_options={"settings": {"debounce": 200}}) as s:
        uri = path.as_uri()
        s.open(uri, text)
        before = await s.diagnostics(uri, version=1)
        assert {d.code for d in before} == {"HKL101", "HKL102"}
        target = min(d.range.start.line for d in before if d.code == "HKL101")
        lines = re.split(r"\r\n|\r|\n", text)
        column = lines[target].index("register_backward_hook") + len("register_")
        # typing "full_" one key at a time, within the debounce
        for version, char in enumerate("full_", start=2):
            s.change(uri, version, [types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(target, column + version - 2),
                                  types.Position(target, column + version - 2)), text=char)])
        after = await s.diagnostics(uri, version=6)
        # the first key of the burst may be checked at once (the buffer was quiet); the others wait for the pause
        assert [p.version for p in s.published[uri]] in ([1, 6], [1, 2, 6]), "the keystrokes were not debounced"
        lines[target] = lines[target].replace("register_backward_hook", "register_full_backward_hook")
        new_text = "\n".join(lines)
        assert as_tuples(after) == expected_diagnostics(cli_findings(path, tmp_path, new_text), new_text)
        assert not [d for d in after if d.range.start.line == target]


@run_async
async def test_a_buffer_that_does_not_parse_gives_hkl001(tmp_path):
    path = tmp_path / "broken.py"
    broken = "import torch\n\ndef hook(grad):\n    return grad *\n\nx = torch.ones(2)\nx.register_hook(hook)\n"
    async with session(tmp_path) as s:
        s.open(path.as_uri(), broken)
        [d] = await s.diagnostics(path.as_uri(), version=1)
        assert d.code == "HKL001" and d.severity == types.DiagnosticSeverity.Error
        assert as_tuples([d]) == expected_diagnostics(cli_findings(path, tmp_path, broken), broken)
        s.replace_all(path.as_uri(), 2, broken.replace("grad *\n", "grad * 2\n"))
        assert await s.diagnostics(path.as_uri(), version=2) == []


# ---------------------------------------------------------------- code actions and hover


@run_async
async def test_fix_actions_edit_the_buffer_and_the_finding_goes(tmp_path):
    path = copy_fixture(HKL401, tmp_path)
    text = path.read_text(encoding="utf-8")
    uri = path.as_uri()

    def by_place(findings):
        return {(f["location"]["row"] - 1, f["location"]["column"] - 1): f for f in findings}

    cli = by_place(cli_findings(path, tmp_path))
    async with session(tmp_path) as s:
        s.open(uri, text)
        diagnostics = await s.diagnostics(uri, version=1)
        version = 1
        for label, applicability in (("safe", "safe"), ("unsafe", "unsafe")):
            target = next(d for d in diagnostics
                          if (cli[(d.range.start.line, d.range.start.character)]["fix"] or {}).get("applicability")
                          == applicability)
            finding = cli[(target.range.start.line, target.range.start.character)]
            actions = await s.code_actions(uri, target.range, diagnostics=[target])
            fixes = [a for a in actions if a.title.startswith("Fix: ")]
            assert [a.title for a in fixes] == [
                f"Fix: {finding['fix']['message']}" + (" (unsafe)" if label == "unsafe" else "")]
            [fix] = fixes
            assert fix.kind == types.CodeActionKind.QuickFix and fix.is_preferred == (label == "safe")
            edits, edit_version = edits_for(fix, uri)
            assert edit_version == version  # edits against the buffer they were computed on
            new_text = apply_text_edits(text, edits)
            assert new_text != text
            version += 1
            s.replace_all(uri, version, new_text)
            diagnostics = await s.diagnostics(uri, version=version)
            # the fixed function no longer has the finding (the server and the CLI agree)
            after = static_findings(path, new_text)
            assert as_tuples(diagnostics) == expected_diagnostics(after, new_text)
            assert len(after) == len(cli) - 1
            assert finding["message"] not in {f["message"] for f in after}
            cli = by_place(after)
            text = new_text


@run_async
async def test_noqa_action_silences_that_code_on_that_line(tmp_path):
    path = copy_fixture(SEED004, tmp_path)
    text = path.read_text(encoding="utf-8")
    uri = path.as_uri()
    async with session(tmp_path) as s:
        s.open(uri, text)
        diagnostics = await s.diagnostics(uri, version=1)
        line = min(d.range.start.line for d in diagnostics if d.code == "HKL101")
        for version, code in ((2, "HKL101"), (3, "HKL102")):
            here = [d for d in diagnostics if d.range.start.line == line]
            assert code in {d.code for d in here}
            target = next(d for d in here if d.code == code)
            actions = await s.code_actions(uri, target.range, only=[types.CodeActionKind.QuickFix])
            [noqa] = [a for a in actions if a.title == f"Disable {code} for this line"]
            edits, _ = edits_for(noqa, uri)
            text = apply_text_edits(text, edits)
            s.replace_all(uri, version, text)
            diagnostics = await s.diagnostics(uri, version=version)
            assert code not in {d.code for d in diagnostics if d.range.start.line == line}
        # the second code was merged into the first comment
        assert re.split(r"\r\n|\r|\n", text)[line].endswith("# noqa: HKL101, HKL102")
        assert not [d for d in diagnostics if d.range.start.line == line]
        assert len(diagnostics) == 4  # the other two registrations are still reported


@run_async
async def test_fix_all_applies_the_safe_fixes_as_the_cli_does(tmp_path):
    path = copy_fixture(HKL401, tmp_path)
    text = path.read_text(encoding="utf-8")
    uri = path.as_uri()
    r = run_cli("check", "--static-only", "-", "--stdin-filename", str(path), "--fix", "--no-cache", cwd=tmp_path,
                input=text)
    assert r.returncode in (0, 1), r.stderr
    assert r.stdout != text
    async with session(tmp_path) as s:
        s.open(uri, text)
        await s.diagnostics(uri, version=1)
        actions = await s.code_actions(uri, types.Range(types.Position(0, 0), types.Position(0, 0)),
                                       only=[types.CodeActionKind.SourceFixAll])
        [fix_all] = actions
        assert fix_all.kind == "source.fixAll.hooklint"
        edits, version = edits_for(fix_all, uri)
        assert version == 1
        assert apply_text_edits(text, edits) == r.stdout


@run_async
async def test_hover_on_a_finding_shows_the_rule_docs(tmp_path):
    path = copy_fixture(SEED004, tmp_path)
    uri = path.as_uri()
    docs = run_cli("rule", "HKL101").stdout
    assert docs.startswith("# HKL101")
    async with session(tmp_path) as s:
        s.open(uri, path.read_text(encoding="utf-8"))
        diagnostics = await s.diagnostics(uri, version=1)
        target = next(d for d in diagnostics if d.code == "HKL101")
        hover = await s.hover(uri, target.range.start.line, target.range.start.character + 3)
        assert hover is not None and hover.contents.kind == types.MarkupKind.Markdown
        assert docs in hover.contents.value
        assert hover.range == target.range
        assert await s.hover(uri, 0, 0) is None  # the docstring: no finding there


# ---------------------------------------------------------------- notebooks


def notebook_cells(path: Path) -> list[tuple[str, str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for c in data["cells"]]


@run_async
async def test_notebook_cells_get_their_own_diagnostics(tmp_path):
    path = copy_fixture(NOTEBOOK, tmp_path)
    cells = notebook_cells(path)
    uri = path.as_uri()
    cell_uri = {n: f"vscode-notebook-cell:{path}#cell{n}" for n in range(1, len(cells) + 1)}
    expected = cli_findings(path, tmp_path)
    assert expected and all(f["cell"] for f in expected)
    async with session(tmp_path) as s:
        s.client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=uri, notebook_type="jupyter-notebook", version=1,
                cells=[types.NotebookCell(kind=types.NotebookCellKind.Code if kind == "code"
                                          else types.NotebookCellKind.Markup, document=cell_uri[n])
                       for n, (kind, _src) in enumerate(cells, start=1)]),
            cell_text_documents=[types.TextDocumentItem(uri=cell_uri[n], language_id="python" if kind == "code"
                                                        else "markdown", version=1, text=src)
                                 for n, (kind, src) in enumerate(cells, start=1)]))
        texts = {n: src for n, (_kind, src) in enumerate(cells, start=1)}
        got = []
        for n, (kind, _src) in enumerate(cells, start=1):
            if kind != "code":
                continue
            for d in await s.diagnostics(cell_uri[n], version=1):
                got.append((n, *as_tuples([d])[0]))
        assert sorted(got) == sorted((f["cell"], *expected_diagnostics([f], cell_texts=texts)[0]) for f in expected)

        # a fix or noqa edit in a cell is an edit of that cell's document
        first = min(expected, key=lambda f: (f["cell"], f["location"]["row"]))
        n = first["cell"]
        [d] = [d for d in await s.diagnostics(cell_uri[n], version=1)
               if d.code == first["code"] and d.range.start.line == first["location"]["row"] - 1]
        actions = await s.code_actions(cell_uri[n], d.range)
        noqa = next(a for a in actions if a.title.startswith("Disable"))
        edits, version = edits_for(noqa, cell_uri[n])
        assert version == 1
        new_source = apply_text_edits(texts[n], edits)
        assert f"# noqa: {first['code']}" in new_source

        # the user edits that cell: only its diagnostics change
        s.client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=uri, version=2),
            change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
                types.NotebookDocumentCellContentChanges(
                    document=types.VersionedTextDocumentIdentifier(uri=cell_uri[n], version=2),
                    changes=[types.TextDocumentContentChangeWholeDocument(text=new_source)])]))))
        after = await s.diagnostics(cell_uri[n], version=2)
        assert not [x for x in after if x.code == first["code"] and x.range.start.line == d.range.start.line]

        # a new code cell with a legacy hook, appended at the end: its own URI gets the finding
        added = f"vscode-notebook-cell:{path}#added"
        s.client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(uri=uri, version=3),
            change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(
                structure=types.NotebookDocumentCellChangeStructure(
                    array=types.NotebookCellArrayChange(start=len(cells), delete_count=0, cells=[
                        types.NotebookCell(kind=types.NotebookCellKind.Code, document=added)]),
                    did_open=[types.TextDocumentItem(uri=added, language_id="python", version=1,
                                                     text="model.register_backward_hook(print)\n")])))))
        [new] = await s.diagnostics(added, version=1)
        assert new.code == "HKL101" and new.range.start.line == 0


# ---------------------------------------------------------------- settings and configuration


@run_async
async def test_settings_and_saved_configuration_apply(tmp_path):
    path = copy_fixture(SEED004, tmp_path)
    uri = path.as_uri()
    async with session(tmp_path, initialization_options={"settings": {"ignore": ["HKL101"], "colour": 1}},
                       configuration={"extendSelect": []}) as s:
        s.open(uri, path.read_text(encoding="utf-8"))
        first = await s.diagnostics(uri, version=1)
        assert {d.code for d in first} == {"HKL102"}
        # the unknown setting was said, once, in a message the user sees
        await s.wait_for(lambda: any("colour" in m.message for m in s.shown), what="the unknown-setting message")
        assert [r.method for r in s.registrations] == [types.WORKSPACE_DID_CHANGE_WATCHED_FILES]

        # the project's pyproject.toml is saved with another rule ignored
        (tmp_path / "pyproject.toml").write_text('[tool.hooklint]\nignore = ["HKL102"]\n', encoding="utf-8")
        mark = s.count(uri)
        s.client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
            types.FileEvent(uri=(tmp_path / "pyproject.toml").as_uri(), type=types.FileChangeType.Created)]))
        assert await s.diagnostics(uri, after=mark) == []

        # new settings from the editor, key by key over the initialization options (the file's `ignore` stays)
        mark = s.count(uri)
        s.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"hooklint": {"select": ["HKL101", "HKL102"], "ignore": []}}))
        assert {d.code for d in await s.diagnostics(uri, after=mark)} == {"HKL101"}

        # a broken configuration file, saved in the editor: the user is told, and the defaults apply
        (tmp_path / "pyproject.toml").write_text('[tool.hooklint]\nignore = "HKL1\n', encoding="utf-8")
        mark = s.count(uri)
        s.client.text_document_did_save(types.DidSaveTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=(tmp_path / "pyproject.toml").as_uri())))
        assert {d.code for d in await s.diagnostics(uri, after=mark)} == {"HKL101", "HKL102"}
        await s.wait_for(lambda: any("invalid TOML" in m.message for m in s.shown), what="the configuration error")


# ---------------------------------------------------------------- robustness


def test_bad_messages_get_error_answers_and_the_server_goes_on(tmp_path):
    client = RawClient(tmp_path)
    try:
        early = client.request(1, "textDocument/hover", {"textDocument": {"uri": "file:///x.py"},
                                                         "position": {"line": 0, "character": 0}})
        assert early["error"]["code"] == -32002  # server not initialized
        init = client.request(2, "initialize", {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}})
        capabilities = init["result"]["capabilities"]
        assert capabilities["textDocumentSync"]["change"] == 2  # incremental
        assert capabilities["hoverProvider"] is True
        assert set(capabilities["codeActionProvider"]["codeActionKinds"]) == {"quickfix", "source.fixAll.hooklint"}
        assert init["result"]["serverInfo"]["name"] == "hooklint"
        client.notify("initialized", {})

        client.send_bytes(b"{this is not json")
        assert client.response(None)["error"]["code"] == -32700  # parse error, id null
        bad = client.request(3, "textDocument/hover", {"position": "nowhere"})
        assert bad["error"]["code"] == -32602  # invalid params
        unknown = client.request(4, "hooklint/noSuchMethod", {})
        assert unknown["error"]["code"] == -32601  # method not found
        client.notify("hooklint/noSuchNotification", {})
        client.notify("textDocument/didOpen", {"textDocument": 42})  # a broken notification: no answer, no crash
        client.send({"id": 5, "method": "textDocument/hover"})  # no "jsonrpc"
        assert client.response(5)["error"]["code"] == -32600

        # it still works: a model file is checked...
        model = tmp_path / "model.py"
        text = "import torch.nn as nn\nnet = nn.Linear(2, 2)\nnet.register_backward_hook(print)\n"
        client.notify("textDocument/didOpen", {"textDocument": {"uri": model.as_uri(), "languageId": "python",
                                                                "version": 1, "text": text}})
        published = client.message("textDocument/publishDiagnostics")["params"]
        assert [d["code"] for d in published["diagnostics"]] == ["HKL101"]
        hover = client.request(6, "textDocument/hover", {"textDocument": {"uri": model.as_uri()},
                                                         "position": {"line": 2, "character": 5}})
        assert "legacy-backward-hook" in hover["result"]["contents"]["value"]
        # ...without torch in the server's process (it reads the file, never imports it)
        maps = Path(f"/proc/{client.proc.pid}/maps")
        if maps.exists():
            assert "torch" not in maps.read_text(), "the server process loaded torch"

        assert client.request(7, "shutdown")["result"] is None
        after = client.request(8, "textDocument/hover", {"textDocument": {"uri": model.as_uri()},
                                                         "position": {"line": 2, "character": 5}})
        assert after["error"]["code"] == -32600  # invalid request: shutting down
        client.notify("exit")
        assert client.close() == 0
    finally:
        client.close()


def test_exit_without_shutdown_exits_1(tmp_path):
    client = RawClient(tmp_path)
    try:
        client.request(1, "initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        client.notify("exit")
        assert client.close() == 1
    finally:
        client.close()


# A launcher that breaks one rule, as a bug would: the server must go on.
BROKEN_RULE = """
import sys
from hooklint.rules import get_rule
def broken(self, ctx):
    raise ZeroDivisionError("a bug in the rule")
get_rule("HKL102").check = broken
from hooklint.cli import main
sys.exit(main(["server"]))
"""


@pytest.mark.parametrize("strict", [False, True], ids=["rule-error", "check-error"])
@run_async
async def test_an_internal_error_is_logged_not_fatal(tmp_path, strict):
    path = copy_fixture(SEED004, tmp_path)
    env = server_env()
    env.pop("HOOKLINT_STRICT", None)
    if strict:  # the exception leaves the checker altogether
        env["HOOKLINT_STRICT"] = "1"
    async with session(tmp_path, command=[sys.executable, "-c", BROKEN_RULE], env=env) as s:
        uri = path.as_uri()
        s.open(uri, path.read_text(encoding="utf-8"))
        diagnostics = await s.diagnostics(uri, version=1)
        await s.wait_for(lambda: any("a bug in the rule" in m.message for m in s.logs), what="the logged error")
        [logged] = [m for m in s.logs if "a bug in the rule" in m.message]
        assert logged.type == types.MessageType.Error
        if strict:
            assert diagnostics == []
        else:  # the other rules' findings are still there
            assert {d.code for d in diagnostics} == {"HKL101"}
        s.replace_all(uri, 2, "x = 1\n")
        assert await s.diagnostics(uri, version=2) == []  # and it goes on checking
    assert s.returncode == 0


def test_without_pygls_one_line_and_exit_2(tmp_path):
    code = ("import sys; sys.modules['pygls'] = None\n"
            "from hooklint.cli import main\nsys.exit(main(['server']))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and "pip install 'hooklint[server]'" in r.stderr, r.stderr


def test_server_command_is_listed():
    r = run_cli("--help")
    assert re.search(r"^\s+server\s+Run the language server", r.stdout, re.M), r.stdout
