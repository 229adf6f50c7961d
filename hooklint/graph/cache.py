"""``.hooklint_cache/``: graph facts that need no second import of the user's code.

An entry is keyed by the file's content and path, hooklint's version, torch's
version, the Python version and the parts of the configuration that change
facts (``models``, ``memory-limit``, ``timeout``, ``pythonpath``, ``sandbox``).
It also records the content hashes of the user's own modules the file
imported (``deps``), and the modification time and size of every other file
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


class GraphCache:
    def __init__(self, folder: Path, torch_version: str, config_key: Any):
        self.folder = folder
        self.base = {"facts": FACTS_VERSION, "hooklint": __version__, "torch": torch_version,
                     "python": list(sys.version_info[:2]), "config": config_key}
        self.error: str | None = None
        self._digests: dict[str, str | None] = {}
        self._stamps: dict[str, list[int] | None] = {}
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
        if found is None or found[0] is None:
            return None
        try:
            return decode(found[0])
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None

    def get_entry(self, key: str) -> tuple[Any, dict[str, str], bool] | None:
        """(value, deps, whether it depends on the installed packages) of a valid entry."""
        entry = load_summed_json(self._entry_path(key))
        if not isinstance(entry, dict):
            return None
        deps = entry.get("deps", {})
        if not isinstance(deps, dict) or any(self._digest(p) != digest for p, digest in deps.items()):
            return None
        stamps = entry.get("stamps", {})
        if not isinstance(stamps, dict) or any(self._stamp(p) != stamp for p, stamp in stamps.items()):
            return None
        if "environment" in entry:
            if self._environment is None:
                self._environment = environment_stamp()
            if entry["environment"] != self._environment:
                return None
        return entry.get("value"), deps, "environment" in entry

    def _digest(self, path: str) -> str | None:
        """A file's digest, once per run (many entries share the same modules)."""
        if path not in self._digests:
            self._digests[path] = file_digest(path)
        return self._digests[path]

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
