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

PYTHON_SUFFIXES = (".py", ".pyi")


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
        self.respect_gitignore = respect_gitignore
        self.force_exclude = force_exclude
        self.missing: list[str] = []

    def rel(self, path: Path) -> str:
        try:
            return path.resolve().relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def excluded(self, path: Path, is_dir: bool) -> bool:
        rel = self.rel(path)
        name = path.name
        for pattern in self.excludes:
            if glob_match(pattern, rel, is_dir) or (name and glob_match(pattern, name, is_dir)):
                return True
        return False

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
                if self.force_exclude and (self.excluded(path, False) or
                                           self._gitignore_for(path.parent).ignores(self.rel(path), False)):
                    continue
                key = os.path.normpath(raw)
                if key not in seen:
                    seen.add(key)
                    out.append(raw)
        return out

    def _walk(self, top: Path, out: list[str], seen: set[str]) -> None:
        if self.force_exclude and self.excluded(top, True):
            return
        stack: list[tuple[Path, GitIgnore]] = [(top, self._gitignore_for(top))]
        while stack:
            folder, ignore = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            subdirs = []
            for entry in entries:
                path = Path(entry.path)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    is_file = entry.is_file()
                except OSError:
                    continue
                if is_dir:
                    if self.excluded(path, True):
                        continue
                    rel = self.rel(path)
                    if ignore.ignores(rel, True):
                        continue
                    subdirs.append(path)
                elif is_file and entry.name.endswith(PYTHON_SUFFIXES):
                    if self.excluded(path, False) or ignore.ignores(self.rel(path), False):
                        continue
                    key = os.path.normpath(entry.path)
                    if key not in seen:
                        seen.add(key)
                        out.append(os.path.normpath(entry.path))
            for sub in reversed(subdirs):
                stack.append((sub, ignore.child(sub, self.rel(sub))))
