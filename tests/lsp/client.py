"""Test clients for ``hooklint server``: pygls' real LanguageClient driving
the server over stdio in a subprocess (:class:`Session`), and a raw JSON-RPC
client (:class:`RawClient`) for the messages a typed client cannot send
(bad JSON, params of the wrong shape, requests before ``initialize``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient

SERVER = [sys.executable, "-m", "hooklint", "server"]


def server_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def client_capabilities(*, configuration: bool = True, watched_files: bool = True) -> types.ClientCapabilities:
    return types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(did_save=True),
            publish_diagnostics=types.PublishDiagnosticsClientCapabilities(
                related_information=True, version_support=True),
            hover=types.HoverClientCapabilities(content_format=[types.MarkupKind.Markdown]),
            code_action=types.CodeActionClientCapabilities(
                code_action_literal_support=types.ClientCodeActionLiteralOptions(
                    code_action_kind=types.ClientCodeActionKindOptions(value_set=[
                        types.CodeActionKind.QuickFix, types.CodeActionKind.SourceFixAll]))),
        ),
        workspace=types.WorkspaceClientCapabilities(
            configuration=configuration,
            workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
            did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=watched_files),
        ),
        notebook_document=types.NotebookDocumentClientCapabilities(
            synchronization=types.NotebookDocumentSyncClientCapabilities()),
    )


class Session:
    """One server process and the client that talks to it."""

    def __init__(self, client: LanguageClient):
        self.client = client
        self.published: dict[str, list[types.PublishDiagnosticsParams]] = {}
        self.logs: list[types.LogMessageParams] = []
        self.shown: list[types.ShowMessageParams] = []
        self.registrations: list[types.Registration] = []
        self.configuration: Any = None  # what workspace/configuration answers for "hooklint"
        self.returncode: int | None = None
        self.stderr: list[str] = []
        self._changed = asyncio.Condition()

    async def _note(self, store: Any, value: Any) -> None:
        async with self._changed:
            store.append(value)
            self._changed.notify_all()

    async def wait_for(self, predicate, timeout: float = 20.0, what: str = "a condition") -> None:
        async def waiting():
            async with self._changed:
                await self._changed.wait_for(predicate)

        try:
            await asyncio.wait_for(waiting(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"timed out waiting for {what}; server log: {self.log_text()}\n"
                                 f"stderr: {''.join(self.stderr)}") from None

    def count(self, uri: str) -> int:
        return len(self.published.get(uri, []))

    async def diagnostics(self, uri: str, *, version: int | None = None, after: int = 0,
                          timeout: float = 20.0) -> list[types.Diagnostic]:
        """The first diagnostics published for ``uri`` after the ``after``-th
        publication (and for ``version``, if given)."""

        def ready():
            return any(version is None or p.version == version for p in self.published.get(uri, [])[after:])

        await self.wait_for(ready, timeout, f"diagnostics of {uri} (version {version})")
        return list(next(p for p in self.published[uri][after:]
                         if version is None or p.version == version).diagnostics)

    def log_text(self) -> str:
        return "\n".join(m.message for m in self.logs)

    # ---------------------------------------------------------------- document helpers

    def open(self, uri: str, text: str, version: int = 1, language: str = "python") -> None:
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))

    def change(self, uri: str, version: int, changes: list) -> None:
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=changes))

    def replace_all(self, uri: str, version: int, text: str) -> None:
        self.change(uri, version, [types.TextDocumentContentChangeWholeDocument(text=text)])

    async def code_actions(self, uri: str, rng: types.Range, only: list[str] | None = None,
                           diagnostics: list[types.Diagnostic] | None = None) -> list[types.CodeAction]:
        result = await self.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), range=rng,
            context=types.CodeActionContext(diagnostics=diagnostics or [], only=only)))
        return list(result or [])

    async def hover(self, uri: str, line: int, character: int) -> types.Hover | None:
        return await self.client.text_document_hover_async(types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, character)))


def _listen(session: Session) -> None:
    client = session.client

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    async def publish(params: types.PublishDiagnosticsParams):
        await session._note(session.published.setdefault(params.uri, []), params)

    @client.feature(types.WINDOW_LOG_MESSAGE)
    async def log(params: types.LogMessageParams):
        await session._note(session.logs, params)

    @client.feature(types.WINDOW_SHOW_MESSAGE)
    async def show(params: types.ShowMessageParams):
        await session._note(session.shown, params)

    @client.feature(types.WORKSPACE_CONFIGURATION)
    def configuration(params: types.ConfigurationParams):
        return [session.configuration for _item in params.items]

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register(params: types.RegistrationParams):
        session.registrations.extend(params.registrations)
        return None


class _Client(LanguageClient):
    session: Session | None = None

    async def server_exit(self, server):
        if self.session is not None:
            self.session.returncode = server.returncode


@asynccontextmanager
async def session(cwd: Path, *, initialization_options: Any = None, configuration: Any = None,
                  command: list[str] | None = None, env: dict[str, str] | None = None,
                  capabilities: types.ClientCapabilities | None = None, shutdown: bool = True):
    """A started and initialized server; shut down (shutdown, exit) at the end."""
    client = _Client("hooklint-tests", "1")
    s = Session(client)
    s.configuration = configuration
    client.session = s
    _listen(s)
    cmd = command or SERVER
    await client.start_io(cmd[0], *cmd[1:], cwd=str(cwd), env=env or server_env())
    stderr_task = asyncio.ensure_future(_drain(client, s))
    finished = False
    try:
        await asyncio.wait_for(client.initialize_async(types.InitializeParams(
            capabilities=capabilities or client_capabilities(),
            root_uri=cwd.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=cwd.as_uri(), name=cwd.name)],
            initialization_options=initialization_options)), 30)
        client.initialized(types.InitializedParams())
        yield s
        if shutdown:
            await asyncio.wait_for(client.shutdown_async(None), 20)
            client.exit(None)
        finished = True
    finally:
        server = client._server
        if not finished and server is not None and server.returncode is None:
            server.kill()  # a failed test: never leave a server behind
        try:
            await asyncio.wait_for(client.stop(), 20)
        finally:
            if server is not None and server.returncode is None:
                server.kill()
                await server.wait()
            stderr_task.cancel()


async def _drain(client: LanguageClient, s: Session) -> None:
    # pygls pipes the server's stderr and never reads it: a chatty server would block on a full pipe
    while client._server is None:
        await asyncio.sleep(0.01)
    stream = client._server.stderr
    while stream is not None:
        line = await stream.readline()
        if not line:
            return
        s.stderr.append(line.decode("utf-8", "replace"))


# ---------------------------------------------------------------- applying edits as a client does


def utf16_offset(text: str, line: int, character: int) -> int:
    """The offset of an LSP position (UTF-16 units) in ``text``."""
    import re

    starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
    if line >= len(starts):
        return len(text)
    pos = starts[line]
    units = 0
    while units < character and pos < len(text) and text[pos] not in "\r\n":
        units += 2 if ord(text[pos]) > 0xFFFF else 1
        pos += 1
    return pos


def apply_text_edits(text: str, edits: list[types.TextEdit]) -> str:
    spans = sorted(((utf16_offset(text, e.range.start.line, e.range.start.character),
                     utf16_offset(text, e.range.end.line, e.range.end.character), e.new_text) for e in edits),
                   reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def edits_for(action: types.CodeAction, uri: str) -> tuple[list[types.TextEdit], int | None]:
    """The edits (and the document version they are for) an action makes to ``uri``."""
    assert action.edit is not None, action
    for change in action.edit.document_changes or []:
        if change.text_document.uri == uri:
            return list(change.edits), change.text_document.version
    return list((action.edit.changes or {}).get(uri, [])), None


# ---------------------------------------------------------------- raw JSON-RPC


class RawClient:
    """A JSON-RPC client that writes whatever bytes it is given."""

    def __init__(self, cwd: Path, command: list[str] | None = None, env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(command or SERVER, cwd=cwd, env=env or server_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.pending: list[dict[str, Any]] = []
        self.buffer = b""

    def send_bytes(self, body: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(json.dumps(message).encode())

    def request(self, msg_id: Any, method: str, params: Any = None) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return self.response(msg_id)

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def read(self, timeout: float = 20.0) -> dict[str, Any]:
        """The next message, framed by its Content-Length header."""
        import select

        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            head, sep, rest = self.buffer.partition(b"\r\n\r\n")
            if sep:
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                if len(rest) >= length:
                    self.buffer = rest[length:]
                    return json.loads(rest[:length])
            if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise AssertionError("the server sent nothing in time")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"the server closed its output (exit status {self.proc.poll()})")
            self.buffer += chunk

    def response(self, msg_id: Any, timeout: float = 20.0) -> dict[str, Any]:
        """The answer to request ``msg_id`` (``id`` None: an answer with id null)."""
        deadline = time.monotonic() + timeout
        while True:
            for message in self.pending:
                if "method" not in message and message.get("id") == msg_id:
                    self.pending.remove(message)
                    return message
            self.pending.append(self.read(max(deadline - time.monotonic(), 0.01)))

    def message(self, method: str, timeout: float = 20.0, where=lambda m: True) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for message in self.pending:
                if message.get("method") == method and where(message):
                    self.pending.remove(message)
                    return message
            self.pending.append(self.read(max(deadline - time.monotonic(), 0.01)))

    def close(self) -> int:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            return self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
