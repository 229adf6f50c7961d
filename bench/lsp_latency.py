"""How long `hooklint server` takes to answer a change: from a
`textDocument/didChange` to the `publishDiagnostics` of that version.

    python bench/lsp_latency.py [--changes N] [--lines 500] [--debounce MS] [--burst K --interval MS] [FILE]

Drives the real server (`python -m hooklint server`) over stdio with pygls'
LanguageClient and opens a Python file (by default 500 lines made of
hooklint's fixtures, full of hooks and findings).  Edits are keystrokes in a
comment, so the file still parses and every check runs the rules on the
whole file.  Two figures:

* one change: N edits one at a time, each waiting for its diagnostics (a
  quiet buffer is checked at once);
* typing: bursts of K keys MS apart; the time from the last key to the
  diagnostics of the final text (the server waits for a pause of `debounce`
  ms, then checks once).

Each as median, 90th percentile and range, with the time of the static pass
alone on the same text in this process for comparison.  Target: a median
under 150 ms for one change to a 500-line file.

Needs the `server` extra (pygls).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# whole files, in this order, each one that still fits in the asked number of lines
SOURCES = ("fixtures/rules/hkl304_hook_leak.py", "fixtures/rules/hkl201_grad_edit.py",
           "fixtures/seeds/seed004_autograd_and_hooks.py", "fixtures/seeds/seed000_fixed.py",
           "fixtures/library/feature_capture.py", "fixtures/seeds/seed003_fixed.py")
MARKER = "# latency probe: "


def build_text(lines: int) -> str:
    out: list[str] = []
    for name in SOURCES:
        chunk = (ROOT / name).read_text(encoding="utf-8").splitlines()
        if len(out) + len(chunk) > lines - 1:
            continue
        out.extend(chunk)
    out.append(MARKER)
    while len(out) < lines:
        out.append("# padding")
    return "\n".join(out) + "\n"


def static_pass(text: str, repeat: int = 10) -> tuple[float, list[str]]:
    """The median time of the static pass on ``text`` in this process, and its
    notices (a rule that skipped the file would make the figure look better)."""
    from hooklint.config import resolve_codes
    from hooklint.static.checker import check_text

    codes = frozenset(resolve_codes(None, [], []))
    times = []
    notices: list[str] = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = check_text("bench.py", text, codes, on_disk=False)
        times.append((time.perf_counter() - start) * 1000)
        notices = [n.message for n in result.notices]
    return statistics.median(times), notices


async def measure(text: str, changes: int, debounce: int | None, burst: int,
                  interval: float) -> tuple[list[float], list[float], int]:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("hooklint-bench", "1")
    published: dict[int, float] = {}
    counts: dict[int, int] = {}
    arrived = asyncio.Event()

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def on_log(params: types.LogMessageParams):
        pass

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def on_publish(params: types.PublishDiagnosticsParams):
        published.setdefault(params.version, time.perf_counter())
        counts[params.version] = len(params.diagnostics)
        arrived.set()

    folder = Path(tempfile.mkdtemp(prefix="hooklint-lsp-bench-"))
    path = folder / "bench_model.py"
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    await client.start_io(sys.executable, "-m", "hooklint", "server", cwd=str(folder))
    options = {"settings": {"debounce": debounce}} if debounce is not None else None
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=folder.as_uri(), initialization_options=options))
    client.initialized(types.InitializedParams())

    async def wait_version(version: int) -> None:
        while version not in published:
            arrived.clear()
            await asyncio.wait_for(arrived.wait(), 30)

    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    await wait_version(1)
    line = text.splitlines().index(MARKER)
    column = len(MARKER)
    version = 1

    def edit() -> float:
        """One keystroke in the probe comment: type a character, then delete it."""
        nonlocal version
        version += 1
        end = column + (1 if version % 2 else 0)
        change = types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, column), types.Position(line, end)),
            text="x" if version % 2 == 0 else "")
        sent = time.perf_counter()
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[change]))
        return sent

    single = []
    for _ in range(changes):  # one edit, then wait for its diagnostics
        sent = edit()
        await wait_version(version)
        single.append((published[version] - sent) * 1000)
    bursts = []
    for _ in range(max(changes // 4, 1)):  # typing: keys `interval` ms apart, then a pause
        for key in range(burst):
            sent = edit()
            if key < burst - 1:
                await asyncio.sleep(interval / 1000)
        await wait_version(version)
        bursts.append((published[version] - sent) * 1000)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    path.unlink()
    folder.rmdir()
    return single, bursts, counts[1]


def summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
    return (f"median {statistics.median(ordered):.1f} ms, p90 {p90:.1f} ms, min {ordered[0]:.1f} ms, "
            f"max {ordered[-1]:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", help="A Python file to edit (default: fixtures, --lines long).")
    parser.add_argument("--changes", type=int, default=40)
    parser.add_argument("--lines", type=int, default=500)
    parser.add_argument("--burst", type=int, default=5, help="Keys per burst of typing (default 5).")
    parser.add_argument("--interval", type=float, default=30, help="ms between keys in a burst (default 30).")
    parser.add_argument("--debounce", type=int, default=None,
                        help="The server's `debounce` setting in ms (default: the server's default).")
    args = parser.parse_args()
    text = Path(args.file).read_text(encoding="utf-8") if args.file else build_text(args.lines)
    if MARKER not in text.splitlines():
        text += MARKER + "\n"
    from hooklint.lsp.analysis import DEFAULT_DEBOUNCE_MS

    single, bursts, findings = asyncio.run(measure(text, args.changes, args.debounce, args.burst, args.interval))
    print(f"hooklint server, {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"file: {len(text.splitlines())} lines, {findings} findings; debounce "
          f"{args.debounce if args.debounce is not None else DEFAULT_DEBOUNCE_MS} ms")
    print(f"one change -> its diagnostics, {len(single)} changes: {summary(single)}")
    print(f"typing ({args.burst} keys {args.interval:g} ms apart) -> diagnostics after the last key, "
          f"{len(bursts)} bursts: {summary(bursts)}")
    alone, notices = static_pass(text)
    print(f"static pass alone on the same text (this process): median {alone:.1f} ms")
    for notice in notices:
        print(f"  notice: {notice}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
