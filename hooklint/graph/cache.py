"""``.hooklint_cache/``: graph facts that need no second import of the user's code.

An entry is keyed by the file's content and path, hooklint's version, torch's
version, the Python version and the parts of the configuration that change
facts (``models``, ``memory-limit``, ``timeout``, ``pythonpath``, ``sandbox``).
It also records the content hashes of the user's own modules the file
imported (``deps``), with a digest of the lines of each that hold code
(``code``, :mod:`hooklint.graph.code_text`): a module whose bytes changed but
whose code lines did not (a comment added or reworded, blank lines at its
end) still matches, so a comment in a model file does not make every file
that imports it build its models again.  It also records the modification time and size of every other file
the analysis imported beyond torch and hooklint (``stamps``: installed
packages such as timm); an entry whose deps or stamps changed is ignored.
Each file is analysed in a process of its own (hooklint.sandbox.zygote), so
nothing else (another file's global changes) can shape its facts.  A file whose analysis
failed (its definitions do not import, the worker crashed, a step timed out)
is cached as failed too, so that the next run does not wait it out again; an
import failure also records the state of the installed packages (the
``site-packages`` folders), and installing or removing one retries it.

The folder (shared with the static results, see ``hooklint.results_cache``)
is prepared by ``hooklint.cachedir``: a ``CACHEDIR.TAG`` and a ``.gitignore``
containing ``*``.  Deleting it is always safe.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from hooklint import __version__
from hooklint.cachedir import prepare_cache_folder
from hooklint.fsutil import load_summed_json, write_summed_json
from hooklint.graph.facts import FACTS_VERSION

T = TypeVar("T")


def file_digest(path: str | Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


@dataclass
class Entry:
    value: Any
    deps: dict[str, str]  # each file's digest now (it may differ from the stored one by comments only)
    environment: bool
    stamps: dict[str, list[int]]


class GraphCache:
    def __init__(self, folder: Path, torch_version: str, config_key: Any):
        self.folder = folder
        self.base = {"facts": FACTS_VERSION, "hooklint": __version__, "torch": torch_version,
                     "python": list(sys.version_info[:2]), "config": config_key}
        self.error: str | None = None
        self._digests: dict[str, str | None] = {}
        self._stamps: dict[str, list[int] | None] = {}
        self._codes: dict[str, str | None] = {}
        self._environment: list[list[Any]] | None = None

    def key(self, what: Any) -> str:
        data = json.dumps({**self.base, "what": what}, sort_keys=True, default=str)
        return hashlib.sha256(data.encode()).hexdigest()

    def _entry_path(self, key: str) -> Path:
        return self.folder / "graph" / key[:2] / f"{key}.json"

    def get(self, key: str, decode: Callable[[Any], T] = lambda value: value) -> T | None:
        """The value stored under ``key``, through ``decode``; None when there
        is none, its dependencies changed, or it does not decode (a value of
        another shape: an entry of another hooklint, or a forged one)."""
        found = self.get_entry(key)
        if found is None or found.value is None:
            return None
        try:
            return decode(found.value)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None

    def get_entry(self, key: str) -> "Entry | None":
        """A valid entry: its value, its deps as they are now, whether it depends
        on the installed packages, its stamps."""
        entry = load_summed_json(self._entry_path(key))
        if not isinstance(entry, dict):
            return None
        deps = entry.get("deps", {})
        codes = entry.get("code", {})
        if not isinstance(deps, dict) or not isinstance(codes, dict):
            return None
        current: dict[str, str] = {}
        for path, digest in deps.items():
            now = self._digest(path)
            # the same bytes, or other bytes with the same lines of code (a comment edited)
            if now is None or (now != digest and (not codes.get(path) or self._code(path) != codes[path])):
                return None
            current[path] = now
        stamps = entry.get("stamps", {})
        if not isinstance(stamps, dict) or any(self._stamp(p) != stamp for p, stamp in stamps.items()):
            return None
        if "environment" in entry:
            if self._environment is None:
                self._environment = environment_stamp()
            if entry["environment"] != self._environment:
                return None
        return Entry(entry.get("value"), current, "environment" in entry, stamps)

    def _digest(self, path: str) -> str | None:
        """A file's digest, once per run (many entries share the same modules)."""
        if path not in self._digests:
            self._digests[path] = file_digest(path)
        return self._digests[path]

    def _code(self, path: str) -> str | None:
        """The digest of a file's lines of code, once per run, from the bytes
        :meth:`_digest` saw (None: unreadable, not Python, or changed since)."""
        if path not in self._codes:
            from hooklint.graph.code_text import code_digest
            from hooklint.static.source import SourceError, decode_source

            self._codes[path] = None
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
                if hashlib.sha256(data).hexdigest() == self._digest(path):
                    self._codes[path] = code_digest(decode_source(data))
            except (OSError, SourceError, ValueError):
                pass
        return self._codes[path]

    def _stamp(self, path: str) -> list[int] | None:
        if path not in self._stamps:
            try:
                info = os.stat(path)
                self._stamps[path] = [info.st_mtime_ns, info.st_size]
            except OSError:
                self._stamps[path] = None
        return self._stamps[path]

    def put(self, key: str, value: Any, deps: dict[str, str], environment: bool = False,
            stamps: dict[str, list[int]] | None = None) -> None:
        """``environment``: valid only while the installed packages stay the same;
        ``stamps``: files (not in ``deps``) whose modification time and size must stay the same."""
        if self.error is not None:
            return
        entry: dict[str, Any] = {"deps": deps, "value": value}
        # each dep's lines of code, read now: only for a file that still has the bytes the analysis read
        codes = {path: self._code(path) for path, digest in deps.items() if self._digest(path) == digest}
        entry["code"] = {path: code for path, code in codes.items() if code}
        if stamps:
            entry["stamps"] = {path: stamp for path, stamp in stamps.items() if path not in deps}
        if environment:
            entry["environment"] = self._environment = environment_stamp()
        try:
            prepare_cache_folder(self.folder)
            path = self._entry_path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_summed_json(path, entry)
        except OSError as exc:
            self.error = f"cannot write the cache in {self.folder}: {exc.strerror or exc}"


def environment_stamp() -> list[list[Any]]:
    """The installed packages, cheaply: each site-packages folder's modification
    time (installing or removing a distribution adds or removes entries)."""
    import site

    folders = list(getattr(site, "getsitepackages", lambda: [])())
    user = getattr(site, "getusersitepackages", lambda: None)()
    if isinstance(user, str):
        folders.append(user)
    out: list[list[Any]] = []
    for folder in folders:
        try:
            out.append([folder, os.stat(folder).st_mtime_ns])
        except OSError:
            continue
    return out


def file_key(cache: GraphCache, path: str) -> str | None:
    digest = file_digest(path)
    if digest is None:
        return None
    return _content_key(cache, path, digest)


def content_key(cache: GraphCache, path: str, data: bytes) -> str:
    """The key of ``path`` holding ``data``: an editor's buffer finds the facts
    cached for the file when the buffer has the file's bytes."""
    return _content_key(cache, path, hashlib.sha256(data).hexdigest())


def _content_key(cache: GraphCache, path: str, digest: str) -> str:
    return cache.key({"file": os.path.realpath(path), "sha256": digest})
