"""The language server: LSP over stdio on pygls (the ``server`` extra).

Diagnostics are pushed (``textDocument/publishDiagnostics``) on open, change
and save, for Python buffers and for the Python cells of notebooks the
client syncs (LSP 3.17 ``notebookDocument/*``).  A change to a quiet buffer
is checked at once; a burst of changes (typing) is checked when it pauses
for ``debounce`` ms.  Checks run one at a time in a worker thread, on a
snapshot of the buffer; a result whose buffer changed meanwhile is dropped
(the change's own check follows).  Code
actions offer each finding's fix (unsafe ones labelled), a ``noqa`` comment
per finding and ``source.fixAll.hooklint`` (the safe fixes, as ``--fix``);
hover on a finding shows its rule's documentation.

Robustness: a request the server cannot read gets a JSON-RPC error answer
(parse error, invalid params, method not found, server not initialized,
invalid request after shutdown), never a crash; an exception while checking
becomes a ``window/logMessage`` and the server goes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
    JsonRpcInvalidRequest,
    JsonRpcParseError,
    JsonRpcServerNotInitialized,
)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from hooklint import __version__
from hooklint.findings import Applicability, Finding, NoticeLevel, Severity
from hooklint.lsp import analysis
from hooklint.lsp.analysis import Cell, NotebookFixes, Settings, Setup
from hooklint.lsp.text import LineIndex, apply_change, changed_span, minimal_line_edit, offset_to_lsp
from hooklint.static.notebook import Notebook

SOURCE = "hooklint"
FIX_ALL_KIND = "source.fixAll.hooklint"
CONFIG_FILE_NAMES = frozenset({"pyproject.toml", "hooklint.toml", ".hooklint.toml"})
PYTHON_SUFFIXES = (".py", ".pyi")

_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}
_LOG_LEVEL = {
    NoticeLevel.ERROR: types.MessageType.Error,
    NoticeLevel.WARNING: types.MessageType.Warning,
    NoticeLevel.SKIP: types.MessageType.Info,
    NoticeLevel.INFO: types.MessageType.Log,
}

logger = logging.getLogger("hooklint.lsp")


def uri_to_path(uri: str) -> str | None:
    """The file a ``file:`` URI names; None for other schemes (untitled buffers)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if os.name == "nt" and len(path) > 2 and path[0] == "/" and path[2] == ":":
        path = path[1:]
    if parsed.netloc:
        path = f"//{parsed.netloc}{path}"
    return path


def path_to_uri(path: str) -> str:
    return Path(os.path.abspath(path)).as_uri()


def notebook_path(uri: str) -> str | None:
    """The .ipynb file of a notebook URI (VS Code's cells live under
    ``vscode-notebook-cell:`` URIs, the notebook itself under ``file:``)."""
    return uri_to_path(uri)


# ---------------------------------------------------------------- the protocol: answers to bad messages

_ANSWERED = object()  # a message already answered with an error while it was read


class HooklintProtocol(LanguageServerProtocol):
    """pygls' protocol, with an error answer for every request it cannot
    serve, and the document notifications handed to the server's own store
    (see :mod:`hooklint.lsp.text` for why not pygls' workspace)."""

    def __init__(self, server, converter):
        super().__init__(server, converter)
        self.initialize_seen = False
        self.shutdown_seen = False

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "method" in data and "id" in data:
                msg_id = data["id"] if isinstance(data["id"], (int, str)) else None
                error = JsonRpcInvalidParams(f"invalid params for {data.get('method')!r}: the message does not "
                                             f"match the LSP types ({exc.__cause__ or exc})")
                self._send_response(msg_id, error=error.to_response_error())
                return _ANSWERED
            raise

    def handle_message(self, message):
        if message is _ANSWERED:
            return
        if isinstance(message, dict) or isinstance(message, list) or not hasattr(message, "jsonrpc"):
            # no "jsonrpc" member, or a batch: not an LSP message
            msg_id = message.get("id") if isinstance(message, dict) else None
            if isinstance(message, dict) and "method" in message and "id" not in message:
                logger.warning("ignoring a notification without \"jsonrpc\": %.200s", message)
                return
            self._send_response(msg_id if isinstance(msg_id, (int, str)) else None,
                                error=JsonRpcInvalidRequest("not a JSON-RPC 2.0 request").to_response_error())
            return
        method = getattr(message, "method", None)
        is_request = method is not None and hasattr(message, "id")
        if method == types.INITIALIZE:
            self.initialize_seen = True
        elif method is not None and method != types.EXIT and not self.initialize_seen:
            if is_request:
                self._send_response(message.id, error=JsonRpcServerNotInitialized(
                    f"{method}: the server is not initialized yet").to_response_error())
            return  # a notification before `initialize` is dropped, as the protocol says
        if is_request and self.shutdown_seen and method != types.EXIT:
            self._send_response(message.id, error=JsonRpcInvalidRequest(
                f"{method}: the server is shutting down").to_response_error())
            return
        super().handle_message(message)
        if is_request and method == types.SHUTDOWN:
            self.shutdown_seen = True

    # The documents are the server's (hooklint.lsp.text): these only pass the
    # notifications on, where pygls would also keep its own copy.

    def _forward(self, method: str, params):
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        yield from self._forward(types.TEXT_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        yield from self._forward(types.TEXT_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        yield from self._forward(types.TEXT_DOCUMENT_DID_CLOSE, params)

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def lsp_notebook_document__did_open(self, params: types.DidOpenNotebookDocumentParams):
        yield from self._forward(types.NOTEBOOK_DOCUMENT_DID_OPEN, params)

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params: types.DidChangeNotebookDocumentParams):
        yield from self._forward(types.NOTEBOOK_DOCUMENT_DID_CHANGE, params)

    @lsp_method(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def lsp_notebook_document__did_close(self, params: types.DidCloseNotebookDocumentParams):
        yield from self._forward(types.NOTEBOOK_DOCUMENT_DID_CLOSE, params)


# ---------------------------------------------------------------- buffers and results


@dataclass
class TextBuffer:
    uri: str
    text: str
    version: int | None
    language_id: str
    revision: int = 0  # ours: bumped on every change, whatever the client's versions say


@dataclass
class NotebookBuffer:
    uri: str
    version: int
    cells: list[tuple[int, str]]  # (NotebookCellKind, cell document URI), in order
    metadata: Any
    revision: int = 0


@dataclass
class Result:
    """One check of a buffer (a Python document, or a whole notebook)."""

    revision: int
    generation: int  # of the settings and configuration it used
    setup: Setup
    findings: list[Finding]
    texts: dict[str, tuple[str, int | None]]  # document URI -> (its text, its version) as checked
    cell_uris: dict[int, str] = field(default_factory=dict)  # notebooks: cell number -> URI
    notebook: Notebook | None = None
    log: list[tuple[types.MessageType, str]] = field(default_factory=list)

    def findings_in(self, uri: str) -> list[Finding]:
        if self.notebook is None:
            return self.findings
        return [f for f in self.findings if self.cell_uris.get(f.cell or 0) == uri]


@dataclass(frozen=True)
class Snapshot:
    """What one check reads, taken on the event loop's thread."""

    uri: str
    revision: int
    generation: int
    path: str | None
    text: str | None = None  # a Python document
    version: int | None = None
    cells: tuple[tuple[str, bool, str, int | None], ...] = ()  # notebooks: (URI, python?, text, version)
    metadata: Any = None


# ---------------------------------------------------------------- the server


class HooklintServer(LanguageServer):
    def __init__(self):
        super().__init__(
            "hooklint", __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[types.NotebookDocumentFilterWithNotebook(
                    notebook="*", cells=[types.NotebookCellLanguage(language="python")])],
                save=True),
            protocol_cls=HooklintProtocol,
        )
        self.documents: dict[str, TextBuffer] = {}
        self.notebooks: dict[str, NotebookBuffer] = {}
        self.cells: dict[str, TextBuffer] = {}  # cell document URI -> its text
        self.cell_owner: dict[str, str] = {}  # cell document URI -> notebook URI
        self.results: dict[str, Result] = {}
        self.pending: dict[str, asyncio.Task] = {}  # checks waiting or under way, per buffer
        self.last_change: dict[str, float] = {}
        self.published_to: dict[str, set[str]] = {}  # buffer -> the documents it last published for
        self.logged: dict[str, list[str]] = {}
        self.shown_problems: set[str] = set()
        self.init_settings: Any = None
        self.settings = Settings()
        self.generation = 0  # bumped when settings or a configuration file change
        self.root = Path.cwd()
        self.encoding = "utf-16"
        self.shutdown_requested = False
        self.exit_code = 1
        # One check at a time: the rules are CPU-bound Python, a second thread would only share the GIL.
        self.checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hooklint-check")

    # -------------------------------------------------------------- errors and logging

    def report_server_error(self, error: Exception, source) -> None:
        if isinstance(error, json.JSONDecodeError):
            # the body was not JSON: JSON-RPC answers with id null
            self.protocol._send_response(None, error=JsonRpcParseError(f"Parse error: {error}").to_response_error())
            return
        if isinstance(error, JsonRpcException) and error.code != JsonRpcInternalError.CODE:
            # answered already (unknown method, bad params): worth a line in the log, not an alarm
            self.log(types.MessageType.Log, f"hooklint: {type(error).__name__}: {error}")
            return
        self.log(types.MessageType.Error, f"hooklint: internal error: {type(error).__name__}: {error} "
                                          "(please report it)")

    def log(self, level: types.MessageType, message: str) -> None:
        try:
            self.window_log_message(types.LogMessageParams(type=level, message=message))
        except Exception:  # noqa: BLE001 - the transport is gone; nothing to tell
            logger.warning("%s", message)

    def show(self, level: types.MessageType, message: str) -> None:
        self.window_show_message(types.ShowMessageParams(type=level, message=message))

    # -------------------------------------------------------------- settings

    def apply_settings(self, *sources: Any) -> None:
        """Settings from initializationOptions, then workspace configuration
        (later sources win key by key)."""
        merged: dict[str, Any] = {}
        for raw in sources:
            if isinstance(raw, dict) and isinstance(raw.get("settings"), dict):
                raw = raw["settings"]
            if isinstance(raw, dict):
                merged.update(raw)
            elif raw is not None:
                self.log(types.MessageType.Warning, "hooklint: settings must be a JSON object; ignored")
        settings, problems = analysis.parse_settings(merged)
        for problem in problems:
            self.show_once(f"hooklint: {problem}; ignored")
        self.settings = settings
        self.generation += 1

    def show_once(self, message: str) -> None:
        self.log(types.MessageType.Warning, message)
        if message not in self.shown_problems:
            self.shown_problems.add(message)
            self.show(types.MessageType.Warning, message)

    async def pull_configuration(self) -> None:
        capabilities = self.client_capabilities.workspace
        if capabilities is None or not capabilities.configuration:
            return
        try:
            values = await self.workspace_configuration_async(types.ConfigurationParams(
                items=[types.ConfigurationItem(section="hooklint")]))
        except Exception as exc:  # noqa: BLE001 - the client may not answer it after all
            self.log(types.MessageType.Log, f"hooklint: workspace/configuration failed: {exc}")
            return
        if values:
            self.apply_settings(self.init_settings, values[0])

    # -------------------------------------------------------------- scheduling

    def touch(self, uri: str, delay_ms: int) -> None:
        """Check ``uri`` (a document or a notebook) after ``delay_ms``; a
        newer change replaces a check not started yet."""
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        self.pending[uri] = asyncio.ensure_future(self._check_later(uri, delay_ms / 1000))

    def changed(self, uri: str) -> None:
        """A buffer changed: check it at once if it had been quiet (no change
        for ``debounce`` ms and no check under way), else when the burst of
        changes pauses for ``debounce`` ms.  A lone edit is answered in the
        time of one check; typing costs one check per pause, not per key."""
        now = asyncio.get_running_loop().time()
        debounce = self.settings.debounce_ms / 1000
        quiet = now - self.last_change.get(uri, float("-inf")) >= debounce and uri not in self.pending
        self.last_change[uri] = now
        self.touch(uri, 0 if quiet else self.settings.debounce_ms)

    def touch_all(self) -> None:
        for uri in list(self.documents) + list(self.notebooks):
            self.touch(uri, 0)

    async def _check_later(self, uri: str, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            await self.check(uri)
        finally:
            if self.pending.get(uri) is asyncio.current_task():
                del self.pending[uri]

    def revision(self, uri: str) -> int | None:
        buffer = self.documents.get(uri) or self.notebooks.get(uri)
        return None if buffer is None else buffer.revision

    async def check(self, uri: str) -> Result | None:
        """Check a buffer now and publish; the result, or None when the
        buffer is gone or changed meanwhile."""
        snapshot = self.snapshot(uri)
        if snapshot is None:
            return None
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self.checker, self.analyse, snapshot)
            if self.revision(uri) != snapshot.revision or self.generation != snapshot.generation:
                return None
            self.results[uri] = result
            self.publish(uri, result)
        except Exception as exc:  # noqa: BLE001 - a bug of ours must not end the editor's session
            if self.shutdown_requested:
                return None  # the checker thread is gone
            import traceback

            self.log(types.MessageType.Error, f"hooklint: internal error while checking {uri}: "
                                              f"{type(exc).__name__}: {exc} (please report it)\n"
                                              f"{traceback.format_exc()}")
            return None
        return result

    async def fresh(self, uri: str) -> tuple[str, Result] | None:
        """(owner URI, its result for the current text): a document, or the
        notebook a cell document belongs to; checked now if need be."""
        owner = self.cell_owner.get(uri, uri)
        for _attempt in range(3):
            result = self.results.get(owner)
            revision = self.revision(owner)
            if revision is None:
                return None
            if result is not None and result.revision == revision and result.generation == self.generation:
                return owner, result
            task = self.pending.pop(owner, None)
            if task is not None:
                task.cancel()
            await self.check(owner)
        return None

    def snapshot(self, uri: str) -> Snapshot | None:
        if uri in self.documents:
            doc = self.documents[uri]
            return Snapshot(uri, doc.revision, self.generation, uri_to_path(uri), text=doc.text, version=doc.version)
        notebook = self.notebooks.get(uri)
        if notebook is None:
            return None
        cells = []
        for kind, cell_uri in notebook.cells:
            doc = self.cells.get(cell_uri)
            text = doc.text if doc is not None else ""
            python = kind == types.NotebookCellKind.Code and doc is not None and doc.language_id == "python"
            cells.append((cell_uri, python, text, doc.version if doc is not None else None))
        return Snapshot(uri, notebook.revision, self.generation, notebook_path(uri), cells=tuple(cells),
                        metadata=notebook.metadata)

    # -------------------------------------------------------------- checking (in the checker thread)

    def analyse(self, snap: Snapshot) -> Result:
        setup = analysis.setup_for(snap.path, self.settings, self.root)
        log: list[tuple[types.MessageType, str]] = []
        if setup.problem:
            log.append((types.MessageType.Warning, f"hooklint: {setup.problem}"))
        notebook = None
        if snap.text is not None:
            texts = {snap.uri: (snap.text, snap.version)}
            cell_uris: dict[int, str] = {}
        else:
            texts = {u: (text, v) for u, python, text, v in snap.cells if python}
            cell_uris = {number: u for number, (u, _p, _t, _v) in enumerate(snap.cells, start=1)}
        try:
            if snap.text is not None:
                graph = analysis.cached_graph_facts(setup, snap.text) if self.settings.graph_facts else None
                checked = analysis.check_python(setup, snap.text, graph=graph)
            else:
                notebook = analysis.notebook_from_cells([Cell(python, text) for _u, python, text, _v in snap.cells],
                                                        snap.metadata)
                checked = analysis.check_notebook(setup, notebook)
        except Exception as exc:  # noqa: BLE001 - a bug of ours must not end the editor's session
            import traceback

            log.append((types.MessageType.Error, f"hooklint: internal error while checking {setup.display}: "
                        f"{type(exc).__name__}: {exc} (please report it)\n{traceback.format_exc()}"))
            # no findings for this text rather than stale ones at old places
            return Result(snap.revision, snap.generation, setup, [], texts, cell_uris, log=log)
        for notice in checked.notices:
            line = analysis.notice_lines([notice])[0]
            log.append((_LOG_LEVEL.get(notice.level, types.MessageType.Log), line))
        return Result(snap.revision, snap.generation, setup, list(checked.findings), texts, cell_uris, notebook, log)

    # -------------------------------------------------------------- publishing

    def publish(self, uri: str, result: Result) -> None:
        lines = [message for _level, message in result.log]
        if lines != self.logged.get(uri):  # say it once, not on every keystroke
            self.logged[uri] = lines
            for level, message in result.log:
                if result.setup.problem and message.endswith(result.setup.problem):
                    self.show_once(message)
                else:
                    self.log(level, message)
        # a cell that is no longer a Python cell (or no longer there) keeps no old diagnostics
        for stale in self.published_to.get(uri, set()) - set(result.texts):
            self.clear(stale)
        self.published_to[uri] = set(result.texts)
        for doc_uri, (text, version) in result.texts.items():
            index = LineIndex(text)
            diagnostics = [self.diagnostic(f, index, result) for f in result.findings_in(doc_uri)]
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
                uri=doc_uri, diagnostics=diagnostics, version=version))

    def clear(self, uri: str) -> None:
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def lsp_range(self, index: LineIndex, start: tuple[int, int], end: tuple[int, int]) -> types.Range:
        a = index.to_lsp(start[0], start[1], self.encoding)
        b = index.to_lsp(end[0], end[1], self.encoding)
        if b < a:
            b = a
        return types.Range(types.Position(*a), types.Position(*b))

    def diagnostic(self, finding: Finding, index: LineIndex, result: Result) -> types.Diagnostic:
        rng = self.lsp_range(index, (finding.location.row, finding.location.column),
                             (finding.end_location.row, finding.end_location.column))
        related = []
        for r in finding.related:
            target = self.related_uri(r.path, r.cell, result)
            if target is None:
                continue
            uri, text = target
            where = LineIndex(text) if text is not None else None
            if where is not None:
                pos = types.Position(*where.to_lsp(r.location.row, r.location.column, self.encoding))
            else:  # another file: columns in code points, the best guess without reading it
                pos = types.Position(max(r.location.row - 1, 0), max(r.location.column - 1, 0))
            related.append(types.DiagnosticRelatedInformation(
                location=types.Location(uri=uri, range=types.Range(pos, pos)), message=r.message))
        return types.Diagnostic(
            range=rng,
            message=finding.message,
            severity=_SEVERITY.get(finding.severity, types.DiagnosticSeverity.Warning),
            code=finding.code,
            code_description=types.CodeDescription(href=finding.url) if finding.url else None,
            source=SOURCE,
            related_information=related or None,
        )

    def related_uri(self, path: str, cell: int | None, result: Result) -> tuple[str, str | None] | None:
        if path == result.setup.display:
            if result.notebook is not None:
                uri = result.cell_uris.get(cell or 0)
                return None if uri is None else (uri, result.texts[uri][0])
            uri = next(iter(result.texts))
            return uri, result.texts[uri][0]
        return path_to_uri(path), None

    # -------------------------------------------------------------- edits

    def workspace_edit(self, edits: dict[str, list[types.TextEdit]], result: Result) -> types.WorkspaceEdit:
        caps = self.client_capabilities.workspace
        versioned = bool(caps and caps.workspace_edit and caps.workspace_edit.document_changes)
        if versioned:
            return types.WorkspaceEdit(document_changes=[
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri,
                                                                                version=result.texts[uri][1]),
                    edits=list(text_edits))
                for uri, text_edits in edits.items()])
        return types.WorkspaceEdit(changes={uri: list(text_edits) for uri, text_edits in edits.items()})

    def fix_edits(self, finding: Finding, text: str, newline: str) -> list[types.TextEdit]:
        index = LineIndex(text)
        return [types.TextEdit(
            range=self.lsp_range(index, (e.location.row, e.location.column),
                                 (e.end_location.row, e.end_location.column)),
            new_text=analysis.with_newline(e.content, newline)) for e in finding.fix.edits]  # type: ignore[union-attr]

    def replacement_edit(self, old: str, new: str) -> types.TextEdit:
        start, end, content = changed_span(old, new)
        index = LineIndex(old)
        a = offset_to_lsp(index, start, self.encoding)
        b = offset_to_lsp(index, end, self.encoding)
        return types.TextEdit(range=types.Range(types.Position(*a), types.Position(*b)), new_text=content)


def create_server() -> HooklintServer:
    server = HooklintServer()

    # ---------------------------------------------------------------- lifecycle

    @server.feature(types.INITIALIZE)
    def initialize(ls: HooklintServer, params: types.InitializeParams):
        ls.init_settings = params.initialization_options
        ls.apply_settings(ls.init_settings)
        folders = params.workspace_folders or []
        root_uri = folders[0].uri if folders else params.root_uri
        root = uri_to_path(root_uri) if root_uri else params.root_path
        if root and os.path.isdir(root):
            ls.root = Path(root)
        encoding = ls.workspace.position_encoding or types.PositionEncodingKind.Utf16
        ls.encoding = getattr(encoding, "value", encoding)

    @server.feature(types.INITIALIZED)
    async def initialized(ls: HooklintServer, params: types.InitializedParams):
        ls.log(types.MessageType.Info, f"hooklint {__version__} language server, static rules "
                                       f"(positions in {ls.encoding}, root {ls.root})")
        await ls.pull_configuration()
        watch = ls.client_capabilities.workspace
        if watch and watch.did_change_watched_files and watch.did_change_watched_files.dynamic_registration:
            watchers = [types.FileSystemWatcher(glob_pattern=f"**/{name}") for name in sorted(CONFIG_FILE_NAMES)]
            try:
                await ls.client_register_capability_async(types.RegistrationParams(registrations=[
                    types.Registration(id="hooklint-configuration-files",
                                       method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                       register_options=types.DidChangeWatchedFilesRegistrationOptions(
                                           watchers=watchers))]))
            except Exception as exc:  # noqa: BLE001 - saving a file re-checks anyway
                ls.log(types.MessageType.Log, f"hooklint: could not watch configuration files: {exc}")
        ls.touch_all()

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: HooklintServer, params):
        ls.shutdown_requested = True
        for task in ls.pending.values():
            task.cancel()
        ls.pending.clear()

    @server.feature(types.EXIT)
    def exit_(ls: HooklintServer, params):
        ls.exit_code = 0 if ls.shutdown_requested else 1
        ls.checker.shutdown(wait=False, cancel_futures=True)

    # ---------------------------------------------------------------- settings and configuration files

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: HooklintServer, params: types.DidChangeConfigurationParams):
        settings = params.settings
        if isinstance(settings, dict) and "hooklint" in settings:
            ls.apply_settings(ls.init_settings, settings["hooklint"])
        else:
            await ls.pull_configuration()
            ls.generation += 1
        ls.touch_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: HooklintServer, params: types.DidChangeWatchedFilesParams):
        if any(_is_config_file(change.uri) for change in params.changes):
            ls.generation += 1
            ls.touch_all()

    # ---------------------------------------------------------------- text documents

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: HooklintServer, params: types.DidOpenTextDocumentParams):
        doc = params.text_document
        if not _is_python(doc.uri, doc.language_id):
            return
        ls.documents[doc.uri] = TextBuffer(doc.uri, doc.text, doc.version, doc.language_id)
        ls.touch(doc.uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: HooklintServer, params: types.DidChangeTextDocumentParams):
        uri = params.text_document.uri
        buffer = ls.documents.get(uri) or ls.cells.get(uri)
        if buffer is None:
            return  # not a document we check (or a change before its didOpen)
        for change in params.content_changes:
            rng = getattr(change, "range", None)
            buffer.text = apply_change(buffer.text, (rng.start.line, rng.start.character) if rng else None,
                                       (rng.end.line, rng.end.character) if rng else None, change.text,
                                       ls.encoding)
        buffer.version = params.text_document.version
        buffer.revision += 1
        owner = ls.notebooks.get(ls.cell_owner.get(uri, ""))
        if owner is not None:  # a client that changes cells as text documents
            owner.revision += 1
            ls.changed(owner.uri)
        else:
            ls.changed(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: HooklintServer, params: types.DidSaveTextDocumentParams):
        uri = params.text_document.uri
        if _is_config_file(uri):
            ls.generation += 1
            ls.touch_all()
        elif uri in ls.documents:
            ls.touch(uri, 0)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: HooklintServer, params: types.DidCloseTextDocumentParams):
        uri = params.text_document.uri
        if ls.documents.pop(uri, None) is not None:
            _forget(ls, uri)
            ls.clear(uri)

    # ---------------------------------------------------------------- notebooks

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(ls: HooklintServer, params: types.DidOpenNotebookDocumentParams):
        nb = params.notebook_document
        ls.notebooks[nb.uri] = NotebookBuffer(nb.uri, nb.version, [(c.kind, c.document) for c in nb.cells],
                                              nb.metadata)
        for doc in params.cell_text_documents:
            ls.cells[doc.uri] = TextBuffer(doc.uri, doc.text, doc.version, doc.language_id)
            ls.cell_owner[doc.uri] = nb.uri
        ls.touch(nb.uri, 0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: HooklintServer, params: types.DidChangeNotebookDocumentParams):
        uri = params.notebook_document.uri
        nb = ls.notebooks.get(uri)
        if nb is None:
            return
        nb.version = params.notebook_document.version
        change = params.change
        if change.metadata is not None:
            nb.metadata = change.metadata
        closed: list[str] = []
        cells = change.cells
        if cells is not None:
            if cells.structure is not None:
                array = cells.structure.array
                new = [(c.kind, c.document) for c in array.cells or []]
                nb.cells[array.start:array.start + array.delete_count] = new
                for doc in cells.structure.did_open or []:
                    ls.cells[doc.uri] = TextBuffer(doc.uri, doc.text, doc.version, doc.language_id)
                    ls.cell_owner[doc.uri] = uri
                for ident in cells.structure.did_close or []:
                    ls.cells.pop(ident.uri, None)
                    ls.cell_owner.pop(ident.uri, None)
                    closed.append(ident.uri)
            for data in cells.data or []:
                nb.cells = [(data.kind, d) if d == data.document else (k, d) for k, d in nb.cells]
            for content in cells.text_content or []:
                buffer = ls.cells.get(content.document.uri)
                if buffer is None:
                    continue
                for piece in content.changes:
                    rng = getattr(piece, "range", None)
                    buffer.text = apply_change(buffer.text, (rng.start.line, rng.start.character) if rng else None,
                                               (rng.end.line, rng.end.character) if rng else None, piece.text,
                                               ls.encoding)
                buffer.version = content.document.version
        nb.revision += 1
        for cell_uri in closed:
            ls.clear(cell_uri)
        ls.changed(uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_did_save(ls: HooklintServer, params: types.DidSaveNotebookDocumentParams):
        if params.notebook_document.uri in ls.notebooks:
            ls.touch(params.notebook_document.uri, 0)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: HooklintServer, params: types.DidCloseNotebookDocumentParams):
        uri = params.notebook_document.uri
        nb = ls.notebooks.pop(uri, None)
        if nb is None:
            return
        _forget(ls, uri)
        for _kind, cell_uri in nb.cells:
            ls.cells.pop(cell_uri, None)
            ls.cell_owner.pop(cell_uri, None)
            ls.clear(cell_uri)

    # ---------------------------------------------------------------- code actions

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND], resolve_provider=False))
    async def code_action(ls: HooklintServer, params: types.CodeActionParams):
        uri = params.text_document.uri
        found = await ls.fresh(uri)
        if found is None:
            return None
        owner, result = found
        if uri not in result.texts:
            return None
        text, _version = result.texts[uri]
        index = LineIndex(text)
        start = index.to_hooklint(params.range.start.line, params.range.start.character, ls.encoding)
        end = index.to_hooklint(params.range.end.line, params.range.end.character, ls.encoding)
        only = params.context.only
        actions: list[types.CodeAction] = []
        notebook_fixes = NotebookFixes(result.setup, result.notebook) if result.notebook is not None else None
        newline = _cell_newline(result, uri) if notebook_fixes else analysis.newline_of(text)
        if _wants(types.CodeActionKind.QuickFix, only):
            for finding in result.findings_in(uri):
                f_start = (finding.location.row, finding.location.column)
                f_end = (finding.end_location.row, finding.end_location.column)
                if f_end < start or end < f_start:
                    continue
                diagnostic = ls.diagnostic(finding, index, result)
                offered = notebook_fixes.fix_applies(finding) if notebook_fixes else analysis.fix_applies(text, finding)
                if offered:
                    fix = finding.fix
                    unsafe = fix.applicability is Applicability.UNSAFE  # type: ignore[union-attr]
                    actions.append(types.CodeAction(
                        title=f"Fix: {fix.message}{' (unsafe)' if unsafe else ''}",  # type: ignore[union-attr]
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[diagnostic],
                        is_preferred=not unsafe,
                        edit=ls.workspace_edit({uri: ls.fix_edits(finding, text, newline)}, result)))
                if finding.code in analysis.NOT_SILENCEABLE:
                    continue
                if notebook_fixes:
                    lines = notebook_fixes.noqa_line(finding.cell or 0, finding.location.row, finding.code)
                else:
                    lines = analysis.noqa_line(text, finding.location.row, finding.code)
                if lines is None:
                    continue
                edit = minimal_line_edit(finding.location.row, *lines)
                rng = ls.lsp_range(index, (edit.row, edit.start + 1), (edit.row, edit.end + 1))
                actions.append(types.CodeAction(
                    title=f"Disable {finding.code} for this line",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    edit=ls.workspace_edit({uri: [types.TextEdit(range=rng, new_text=edit.content)]}, result)))
        if _wants(FIX_ALL_KIND, only):
            fix_all = _fix_all(ls, result, owner, uri, text)
            if fix_all is not None:
                actions.append(fix_all)
        return actions or None

    # ---------------------------------------------------------------- hover

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    async def hover(ls: HooklintServer, params: types.HoverParams):
        uri = params.text_document.uri
        found = await ls.fresh(uri)
        if found is None:
            return None
        _owner, result = found
        if uri not in result.texts:
            return None
        index = LineIndex(result.texts[uri][0])
        here = index.to_hooklint(params.position.line, params.position.character, ls.encoding)
        hits = [f for f in result.findings_in(uri)
                if (f.location.row, f.location.column) <= here <= (f.end_location.row, f.end_location.column)]
        if not hits:
            return None
        parts, seen = [], set()
        for finding in hits:
            if finding.code in seen:
                continue
            seen.add(finding.code)
            docs = analysis.rule_docs(finding.code)
            if docs is None:
                continue
            parts.append(f"{finding.help}\n\n---\n\n{docs}" if finding.help else docs)
        if not parts:
            return None
        hover_caps = ls.client_capabilities.text_document and ls.client_capabilities.text_document.hover
        formats = (hover_caps.content_format if hover_caps else None) or [types.MarkupKind.Markdown]
        kind = types.MarkupKind.Markdown if types.MarkupKind.Markdown in formats else types.MarkupKind.PlainText
        first = hits[0]
        return types.Hover(
            contents=types.MarkupContent(kind=kind, value="\n\n---\n\n".join(parts)),
            range=ls.lsp_range(index, (first.location.row, first.location.column),
                               (first.end_location.row, first.end_location.column)))

    return server


def _forget(ls: HooklintServer, uri: str) -> None:
    task = ls.pending.pop(uri, None)
    if task is not None:
        task.cancel()
    ls.results.pop(uri, None)
    ls.logged.pop(uri, None)
    ls.last_change.pop(uri, None)
    ls.published_to.pop(uri, None)


def _is_python(uri: str, language_id: str) -> bool:
    if language_id == "python":
        return True
    path = uri_to_path(uri)
    return path is not None and path.endswith(PYTHON_SUFFIXES)


def _is_config_file(uri: str) -> bool:
    path = uri_to_path(uri) or urlparse(uri).path
    return os.path.basename(path) in CONFIG_FILE_NAMES


def _wants(kind: str, only) -> bool:
    if not only:
        return True
    return any(kind == k or kind.startswith(f"{k}.") for k in only)


def _cell_newline(result: Result, uri: str) -> str:
    text = result.texts[uri][0]
    return analysis.newline_of(text)


def _fix_all(ls: HooklintServer, result: Result, owner: str, uri: str, text: str) -> types.CodeAction | None:
    """``source.fixAll.hooklint``: the safe fixes of the whole buffer (every
    cell of a notebook), as ``hooklint check --fix`` applies them."""
    if not any(f.fix is not None and f.fix.applicability is Applicability.SAFE and f.fix.edits
               for f in result.findings):
        return None
    edits: dict[str, list[types.TextEdit]] = {}
    if result.notebook is None:
        fixed = analysis.fix_all_python(result.setup, text, result.findings)
        if fixed is None:
            return None
        edits[uri] = [ls.replacement_edit(text, fixed)]
    else:
        sources = NotebookFixes(result.setup, result.notebook).fix_all(result.findings)
        if not sources:
            return None
        for number, source in sorted(sources.items()):
            cell_uri = result.cell_uris.get(number)
            if cell_uri is None:
                return None
            edits[cell_uri] = [ls.replacement_edit(result.texts[cell_uri][0], source)]
    return types.CodeAction(title="Fix all safe hooklint problems", kind=FIX_ALL_KIND,
                            edit=ls.workspace_edit(edits, result))


def serve(stdin=None, stdout=None) -> int:
    """Run the server on stdio until ``exit`` (or the client goes away); the
    exit code the protocol asks for: 0 after ``shutdown``, else 1."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="hooklint server: %(name)s: %(message)s")
    # pygls logs every message it cannot handle with a traceback at ERROR; the
    # client already gets the error answer, stderr needs one line at most
    logging.getLogger("pygls").setLevel(logging.CRITICAL)
    server = create_server()
    server.start_io(stdin, stdout)
    server.checker.shutdown(wait=False, cancel_futures=True)
    return server.exit_code


__all__ = ["HooklintServer", "create_server", "serve"]
