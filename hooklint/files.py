"""Which files to check: folder walking, default excludes, ``.gitignore``.

Exclusion patterns use gitignore's syntax (``build``, ``fixtures/*``,
``**/legacy_*.py``, ``/top-only``), matched against paths relative to the
project root.  Folders are walked without following symlinked folders, so a
symlink loop cannot hang a run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

# Jupyter notebooks are checked cell by cell (hooklint.static.notebook).
PYTHON_SUFFIXES = (".py", ".pyi", ".ipynb")


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> tuple[re.Pattern[str], bool, bool]:
    """gitignore pattern -> (regex over a relative posix path, anchored, dir_only)."""
    dir_only = pattern.endswith("/")
    pat = pattern.rstrip("/")
    anchored = "/" in pat
    if pat.startswith("/"):
        pat = pat[1:]
    i, out = 0, []
    while i < len(pat):
        c = pat[i]
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("/**", i) and i + 3 == len(pat):
            out.append("/.*")
            i += 3
        elif c == "*":
            if pat.startswith("**", i):
                out.append(".*")
                i += 2
            else:
                out.append("[^/]*")
                i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pat.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = pat[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
        elif c == "\\" and i + 1 < len(pat):
            out.append(re.escape(pat[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    body = "".join(out)
    regex = re.compile(("^" if anchored else "^(?:.*/)?") + body + "(?:/.*)?$")
    return regex, anchored, dir_only


def glob_match(pattern: str, rel_path: str, is_dir: bool = False) -> bool:
    """Does ``pattern`` (gitignore syntax) match ``rel_path`` or one of its parents?"""
    regex, _anchored, dir_only = _compile(pattern)
    rel_path = rel_path.replace(os.sep, "/")
    while rel_path.startswith("./"):
        rel_path = rel_path[2:]
    if dir_only and not is_dir:
        # "build/" matches files inside build/, not a file named build
        parent = rel_path.rsplit("/", 1)[0] if "/" in rel_path else ""
        return bool(parent) and bool(regex.match(parent))
    return bool(regex.match(rel_path))


class PatternSet:
    """Several patterns matched in one regex call: ``glob_match`` of any of
    them, without a call per pattern per file (slow on large trees)."""

    def __init__(self, patterns: list[str]):
        # A plain name (`build`, `.venv`) matches when it is one of the path's
        # components: a set lookup, not a regex per pattern.
        self.names = frozenset(p for p in patterns if _is_plain_name(p))
        self.dir_names = frozenset(p[:-1] for p in patterns if p.endswith("/") and _is_plain_name(p[:-1]))
        compiled = [(_compile(p)[0].pattern, p.endswith("/")) for p in patterns
                    if p not in self.names and p[:-1] not in self.dir_names]
        plain = [rx for rx, dir_only in compiled if not dir_only]
        dirs = [rx for rx, dir_only in compiled if dir_only]
        self.plain = re.compile("|".join(f"(?:{rx})" for rx in plain)) if plain else None
        self.dirs = re.compile("|".join(f"(?:{rx})" for rx in dirs)) if dirs else None

    def match(self, rel_path: str, is_dir: bool = False) -> bool:
        rel_path = rel_path.replace(os.sep, "/")
        while rel_path.startswith("./"):
            rel_path = rel_path[2:]
        parts = rel_path.split("/")
        if not self.names.isdisjoint(parts):
            return True
        if self.dir_names and not self.dir_names.isdisjoint(parts if is_dir else parts[:-1]):
            return True
        if self.plain is not None and self.plain.match(rel_path):
            return True
        if self.dirs is None:
            return False
        if is_dir:
            return bool(self.dirs.match(rel_path))
        parent = rel_path.rsplit("/", 1)[0] if "/" in rel_path else ""
        return bool(parent) and bool(self.dirs.match(parent))


def _is_plain_name(pattern: str) -> bool:
    return bool(pattern) and not any(c in pattern for c in "/*?[\\!") and pattern not in (".", "..")


@dataclass
class GitIgnore:
    """The ``.gitignore`` rules in force for one folder, including its parents'."""

    rules: list[tuple[str, str, bool]] = field(default_factory=list)  # (base rel dir, pattern, negated)

    def child(self, folder: Path, rel_dir: str) -> "GitIgnore":
        path = folder / ".gitignore"
        if not path.is_file():
            return self
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return self
        rules = list(self.rules)
        for line in lines:
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            negated = line.startswith("!")
            if negated:
                line = line[1:]
            if line.startswith("\\"):
                line = line[1:]
            rules.append((rel_dir, line, negated))
        return GitIgnore(rules)

    def ignores(self, rel_path: str, is_dir: bool) -> bool:
        ignored = False
        for base, pattern, negated in self.rules:
            if base:
                if not rel_path.startswith(base + "/"):
                    continue
                sub = rel_path[len(base) + 1 :]
            else:
                sub = rel_path
            if glob_match(pattern, sub, is_dir):
                ignored = not negated
        return ignored


class Walker:
    """Expands paths given on the command line into the Python files to check."""

    def __init__(self, root: Path, excludes: list[str], respect_gitignore: bool = True,
                 force_exclude: bool = False):
        self.root = root.resolve()
        self.excludes = excludes
        self._exclude_set = PatternSet(excludes)
        self.respect_gitignore = respect_gitignore
        self.force_exclude = force_exclude
        self.missing: list[str] = []

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except (ValueError, OSError, RuntimeError):  # outside the root; a symlink loop
            return path.as_posix()

    def excluded(self, path: Path, is_dir: bool) -> bool:
        return self._excluded_rel(self.rel(path), path.name, is_dir)

    def _excluded_rel(self, rel: str, name: str, is_dir: bool) -> bool:
        if self._exclude_set.match(rel, is_dir):
            return True
        # The name alone only when `rel` does not end in it (a resolved symlink,
        # a path outside the root): otherwise unanchored patterns have seen it,
        # and anchored ones (`/setup.py`) must not match it at any depth.
        return bool(name) and rel != name and not rel.endswith("/" + name) \
            and self._exclude_set.match(name, is_dir)

    def _child_rel(self, folder_rel: str, entry: os.DirEntry) -> str:
        """``rel`` of a folder entry without resolving it: resolving a name that
        is not a symlink changes nothing below its (resolved) folder, and one
        resolve per file made walking large trees slow."""
        if entry.is_symlink():
            return self.rel(Path(entry.path))
        return entry.name if folder_rel == "." else f"{folder_rel}/{entry.name}"

    def _gitignore_for(self, folder: Path) -> GitIgnore:
        """Rules from .gitignore files between the project root and ``folder``."""
        ignore = GitIgnore()
        if not self.respect_gitignore:
            return ignore
        try:
            rel_parts = folder.resolve().relative_to(self.root).parts
        except ValueError:
            return ignore.child(folder, "")
        cur = self.root
        ignore = ignore.child(cur, "")
        rel = ""
        for part in rel_parts:
            cur = cur / part
            rel = f"{rel}/{part}" if rel else part
            ignore = ignore.child(cur, rel)
        return ignore

    def excludes_file(self, path: Path) -> bool:
        """Would a file at ``path`` be skipped by the excludes or .gitignore
        (whether it exists or not: stdin's --stdin-filename)?"""
        return self.excluded(path, False) or self._gitignore_for(path.parent).ignores(self.rel(path), False)

    def files(self, paths: list[str]) -> list[str]:
        out: list[str] = []
        seen: set[str] = set()
        for raw in paths:
            path = Path(raw)
            if not path.exists() and not path.is_symlink():
                self.missing.append(raw)
                continue
            if path.is_dir():
                self._walk(path, out, seen)
            else:
                if self.force_exclude and self.excludes_file(path):
                    continue
                key = os.path.normpath(raw)
                if key not in seen:
                    seen.add(key)
                    out.append(raw)
        return out

    def _walk(self, top: Path, out: list[str], seen: set[str]) -> None:
        if self.force_exclude and self.excluded(top, True):
            return
        stack: list[tuple[Path, GitIgnore, str]] = [(top, self._gitignore_for(top), self.rel(top))]
        while stack:
            folder, ignore, folder_rel = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            subdirs = []
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    if not is_dir and not entry.name.endswith(PYTHON_SUFFIXES):
                        continue
                    is_file = not is_dir and _is_regular(entry)
                    rel = self._child_rel(folder_rel, entry)
                except OSError:
                    continue
                if is_dir:
                    if self._excluded_rel(rel, entry.name, True) or ignore.ignores(rel, True):
                        continue
                    subdirs.append((Path(entry.path), rel))
                elif is_file or not _is_folder(entry):
                    # a broken symlink or a FIFO named *.py is reported (HKL002), not silently skipped
                    if self._excluded_rel(rel, entry.name, False) or ignore.ignores(rel, False):
                        continue
                    key = os.path.normpath(entry.path)
                    if key not in seen:
                        seen.add(key)
                        out.append(key)
            for sub, rel in reversed(subdirs):
                stack.append((sub, ignore.child(sub, rel), rel))


def _is_regular(entry: os.DirEntry) -> bool:
    try:
        return entry.is_file()
    except OSError:  # a symlink loop: reported when it is read
        return False


def _is_folder(entry: os.DirEntry) -> bool:
    """Does the entry lead to a folder (a symlinked one included)?"""
    try:
        return entry.is_dir()
    except OSError:  # a symlink loop
        return False
