"""``.hooklint_cache/``: graph facts that need no second import of the user's code.

An entry is keyed by the file's content and path, hooklint's version, torch's
version, the Python version and the parts of the configuration that change
facts (``models``, ``memory-limit``, ``timeout``, ``pythonpath``).  It also
records the content hashes of the user's own modules the file imported
(``deps``); an entry whose deps changed is ignored.  A file whose analysis
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
from typing import Any

from hooklint import __version__
from hooklint.cachedir import prepare_cache_folder
from hooklint.fsutil import atomic_write_text
from hooklint.graph.facts import FACTS_VERSION


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
        self._environment: list[list[Any]] | None = None

    def key(self, what: Any) -> str:
        data = json.dumps({**self.base, "what": what}, sort_keys=True, default=str)
        return hashlib.sha256(data.encode()).hexdigest()

    def _entry_path(self, key: str) -> Path:
        return self.folder / "graph" / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        found = self.get_entry(key)
        return found[0] if found is not None else None

    def get_entry(self, key: str) -> tuple[Any, dict[str, str], bool] | None:
        """(value, deps, whether it depends on the installed packages) of a valid entry."""
        try:
            with open(self._entry_path(key), encoding="utf-8") as handle:
                entry = json.load(handle)
        except (OSError, ValueError):
            return None
        deps = entry.get("deps", {})
        if not isinstance(deps, dict) or any(self._digest(p) != digest for p, digest in deps.items()):
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

    def put(self, key: str, value: Any, deps: dict[str, str], environment: bool = False) -> None:
        """``environment``: valid only while the installed packages stay the same."""
        if self.error is not None:
            return
        entry: dict[str, Any] = {"deps": deps, "value": value}
        if environment:
            entry["environment"] = self._environment = environment_stamp()
        try:
            prepare_cache_folder(self.folder)
            path = self._entry_path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(entry, ensure_ascii=False))
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
    return cache.key({"file": os.path.realpath(path), "sha256": digest})
