"""Static results by file, in ``.hooklint_cache/static/``: a warm run parses nothing.

One index file per *run key*: hooklint's version and the contents of its own
source files (an editable install changes rules without a version bump), the
Python version, the enabled codes, ``per-file-ignores``, the project root,
the working folder and the prefilter setting.  In it, for each path as the
run names it (results hold display paths, which depend on the path and the
working folder only): the file's stat signature (size, mtime, ctime, inode),
the SHA-256 of its bytes, when it was read, and its result (findings and
notices).

A file whose stat signature is unchanged is answered without being opened;
one whose signature changed (a checkout, ``touch``) is read and hashed, and
answered from the index when its bytes are the same.  A signature is trusted
only when the file's mtime is older than the moment it was read by more than
``RACY_NS``: a file written within the timestamp granularity of its last read
could change without changing its signature (git's "racy" entries).

Results that depend on more than the file are never stored: files with graph
facts (those are cached by the graph layer) and results with an internal
error.  Unreadable or undecodable files are checked again every time.

The project pass (``hooklint.parallel.ProjectPass``) makes a file's result
depend on other files, but only through the questions its rules asked about
them.  So each entry also keeps the file's call-graph summary and those
questions with the answers they got; a warm run rebuilds the project index
from the stored summaries, and a file whose questions now get other answers
is checked again (its bytes need not change).  For files the prefilter rules
out, the entry says whether their text names none of the index's
``scan_names`` (then they need not be searched again), or holds their summary.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hooklint import __version__
from hooklint.cachedir import prepare_cache_folder
from hooklint.findings import NoticeLevel
from hooklint.fsutil import load_summed_json, write_summed_json
from hooklint.static.checker import FileResult
from hooklint.static.source import read_regular_file

RACY_NS = 2_000_000_000
# Index files of other configurations kept next to the current one.
MAX_INDEXES = 8
INDEX_FORMAT = 3


def signature(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Names, sizes and mtimes of hooklint's own source files."""
    package = Path(__file__).resolve().parent
    parts = []
    for root, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                st = os.stat(os.path.join(root, name))
                parts.append(f"{os.path.relpath(os.path.join(root, name), package)}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@dataclass
class Record:
    """What the cache keeps about one file besides its result."""

    signature: list[int]
    sha256: str
    read_at: int  # time.time_ns() just before the file was read


def read_for_cache(path: str) -> tuple[bytes, Record]:
    """The file's bytes and its record; raises SourceError."""
    read_at = time.time_ns()
    data, st = read_regular_file(path)
    return data, Record(signature(st), hashlib.sha256(data).hexdigest(), read_at)


class StaticCache:
    def __init__(self, folder: Path, codes: frozenset[str], *, per_file_ignores: dict[str, list[str]],
                 root: Path, prefilter: bool, target_version: str | None = None, ignore_noqa: bool = False):
        self.folder = folder
        key_data = {
            "format": INDEX_FORMAT, "hooklint": __version__, "code": code_fingerprint(),
            "python": list(sys.version_info[:2]), "codes": sorted(codes),
            "per-file-ignores": sorted((k, sorted(v)) for k, v in per_file_ignores.items()),
            "root": str(root), "cwd": os.getcwd(), "prefilter": prefilter,
        }
        if target_version is not None:  # which syntax is valid changes results (HKL001)
            key_data["target-version"] = target_version
        if ignore_noqa:  # --ignore-noqa: the findings `# noqa` would silence are kept
            key_data["ignore-noqa"] = True
        self.key = hashlib.sha256(json.dumps(key_data, sort_keys=True).encode()).hexdigest()[:32]
        self.index_path = folder / "static" / f"{self.key}.json"
        self._entries: dict[str, list[Any]] | None = None
        self._updates: dict[str, list[Any]] = {}
        self._scan_names: list[str] | None = None  # read with the entries
        self.hits = 0
        self.error: str | None = None

    @property
    def entries(self) -> dict[str, list[Any]]:
        if self._entries is None:
            self._entries, names = self._load()
            if self._scan_names is None:
                self._scan_names = names
        return self._entries

    @property
    def scan_names(self) -> list[str]:
        """The names that every entry flagged as scanned is known not to contain."""
        self.entries  # noqa: B018 - loads the index
        return self._scan_names or []

    @scan_names.setter
    def scan_names(self, names: list[str]) -> None:
        self.entries  # noqa: B018 - loads the index
        self._scan_names = sorted(names)
        self._scan_names_changed = True

    def scanned(self, path: str) -> bool:
        """Is the file, unchanged since, known not to name any of ``scan_names``?"""
        entry = self.entries.get(path)
        return _well_formed(entry) and bool(entry[4].get("n"))

    def _load(self) -> tuple[dict[str, list[Any]], list[str]]:
        data = load_summed_json(self.index_path)
        if not isinstance(data, dict) or data.get("key") != self.key or not isinstance(data.get("files"), dict):
            return {}, []
        names = data.get("scan_names")
        names = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
        return data["files"], names

    def lookup(self, path: str) -> tuple[FileResult | None, str | None]:
        """``(result, None)`` when the stat signature answers; otherwise
        ``(None, sha256)`` of the stored bytes to compare after reading (or
        ``(None, None)`` when nothing usable is stored)."""
        entry = self.entries.get(path)
        if not _well_formed(entry):
            return None, None
        sig, sha, read_at, result, extra = entry
        try:
            st = os.stat(path)
        except OSError:
            return None, None
        if signature(st) == sig and st.st_mtime_ns < read_at - RACY_NS:
            found = _result(result, extra)
            if found is None:
                return None, None
            self.hits += 1
            return found, None
        return None, sha

    def lent(self, path: str) -> tuple[bool, dict[str, Any] | None, bool]:
        """For a file of the project that the run does not check: (whether the
        entry still describes the file on disk, its call-graph summary, whether
        it was parsed).  Entries written by :meth:`store_context` hold no
        checked result and never answer :meth:`lookup`."""
        entry = self.entries.get(path)
        if not _well_formed(entry):
            return False, None, False
        sig, _sha, read_at, result, extra = entry
        try:
            st = os.stat(path)
        except OSError:
            return False, None, False
        if signature(st) != sig or st.st_mtime_ns >= read_at - RACY_NS:
            return False, None, False
        summary = extra.get("s")
        parsed = (isinstance(result, list) and len(result) == 2 and result[1] is True) or \
            (isinstance(result, dict) and result.get("parsed") is True)
        return True, summary if isinstance(summary, dict) else None, parsed

    def store_context(self, path: str, record: Record, summary: dict[str, Any] | None, scanned: bool) -> None:
        """What the project pass learned about a file it searched but did not
        check (its summary, or that it names none of ``scan_names``): an entry
        without a result, so that a run that checks the file checks it."""
        extra: dict[str, Any] = {}
        if summary is not None:
            extra["s"] = summary
        if scanned:
            extra["n"] = 1
        self._updates[path] = [record.signature, record.sha256, record.read_at, [], extra]

    def reuse(self, path: str, record: Record, need_summary: bool = False) -> FileResult | None:
        """The stored result for bytes that hash as before, under a new signature.
        ``need_summary``: a parsed result must hold its call-graph summary (a
        project run), as :func:`hooklint.parallel.check_parallel` asks of a
        :meth:`lookup` hit."""
        entry = self.entries.get(path)
        if not _well_formed(entry) or entry[1] != record.sha256:
            return None
        found = _result(entry[3], entry[4])
        if found is None or (need_summary and found.parsed and found.summary is None):
            return None
        self.store(path, record, found, scanned=bool(entry[4].get("n")))
        self.hits += 1
        return found

    def store(self, path: str, record: Record, result: FileResult, scanned: bool = False) -> None:
        """``scanned``: the file is known not to name any of ``scan_names``."""
        if any(n.level is NoticeLevel.ERROR for n in result.notices):
            return
        # most files have no finding: [display path, parsed] is enough for them
        stored = result.to_dict() if result.findings or result.notices else [result.path, result.parsed]
        extra: dict[str, Any] = {}
        if result.summary is not None:
            extra["s"] = result.summary
        if result.asked:
            extra["a"] = result.asked
        if scanned:
            extra["n"] = 1
        self._updates[path] = [record.signature, record.sha256, record.read_at, stored, extra]

    def save(self) -> None:
        """Merge this run's results into the index on disk (atomically)."""
        if not self._updates and not getattr(self, "_scan_names_changed", False):
            return
        on_disk, disk_names = self._load()  # another run may have written meanwhile
        merged = dict(on_disk)
        names = self._scan_names if self._scan_names is not None else disk_names
        if not set(names) <= set(disk_names):
            # the other entries were searched for fewer names: no longer known to be clean
            for key, entry in merged.items():
                if key not in self._updates and _well_formed(entry) and entry[4].get("n"):
                    merged[key] = entry[:4] + [{k: v for k, v in entry[4].items() if k != "n"}]
        merged.update(self._updates)
        # entries of files that were deleted since
        for path in [p for p in merged if p not in self._updates and not os.path.exists(p)]:
            del merged[path]
        try:
            prepare_cache_folder(self.folder)
            write_summed_json(self.index_path, {"key": self.key, "scan_names": names, "files": merged})
            self._prune_other_indexes()
        except OSError as exc:
            self.error = f"cannot write the cache in {self.folder}: {exc.strerror or exc}"
        self._entries = merged
        self._updates = {}
        self._scan_names_changed = False

    def _prune_other_indexes(self) -> None:
        folder = self.index_path.parent
        others = []
        for path in folder.glob("*.json"):
            if path != self.index_path:
                try:
                    others.append((path.stat().st_mtime_ns, path))
                except OSError:
                    continue
        others.sort(reverse=True)
        for _mtime, path in others[MAX_INDEXES - 1:]:
            try:
                path.unlink()
            except OSError:
                pass


def _well_formed(entry: Any) -> bool:
    return (isinstance(entry, list) and len(entry) == 5 and isinstance(entry[0], list)
            and isinstance(entry[1], str) and isinstance(entry[2], int) and isinstance(entry[3], (dict, list))
            and isinstance(entry[4], dict))


def _result(stored: dict | list, extra: dict[str, Any]) -> FileResult | None:
    if isinstance(stored, list):
        if len(stored) == 2 and isinstance(stored[0], str) and isinstance(stored[1], bool):
            found = FileResult(stored[0], parsed=stored[1])
        else:
            return None
    else:
        try:
            found = FileResult.from_dict(stored)
        except (KeyError, TypeError, ValueError):
            return None
    summary, asked = extra.get("s"), extra.get("a")
    found.summary = summary if isinstance(summary, dict) else None
    found.asked = asked if isinstance(asked, dict) else None
    return found


def cache_for(config, prefilter: bool, codes: frozenset[str], ignore_noqa: bool = False) -> StaticCache:
    folder = Path(config.cache_dir)
    if not folder.is_absolute():
        folder = config.root / folder
    return StaticCache(folder, codes, per_file_ignores=config.per_file_ignores, root=config.root,
                       prefilter=prefilter, target_version=getattr(config, "target_version", None),
                       ignore_noqa=ignore_noqa)
