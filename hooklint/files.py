"""Which files to check: folder walking, default excludes, ``.gitignore``.

Exclusion patterns use gitignore's syntax (``build``, ``fixtures/*``,
``**/legacy_*.py``, ``/top-only``), matched against paths relative to the
project root.  Folders are walked without following symlinked folders, so a
symlink loop cannot hang a run.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

# Jupyter notebooks are checked cell by cell (hooklint.static.notebook).
PYTHON_SUFFIXES = (".py", ".pyi", ".ipynb")


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern[str] | None:
    """A tame pattern as a regular expression over a relative posix path (see
    :func:`_tame`); None for the others, which :class:`_Glob` matches."""
    if not _tame(pattern):
        return None
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
                if body.startswith(("!", "^")):
                    body = "^/" + body[1:]  # a class never matches the separator
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
    return regex


def _tame(pattern: str) -> bool:
    """Can a backtracking regex match this pattern in polynomial time of low
    degree?  Each unbounded wildcard is a loop the engine may retry at every
    position: one `*` per component and one `**` in all keep it within
    (path length) x (component length); `*a*a*a*b` or `a/**/**/**/b` do not."""
    pieces = pattern.strip("/").split("/")
    if sum(1 for piece in pieces if piece == "**") > 1:
        return False
    return all(piece == "**" or piece.count("*") <= 1 for piece in pieces)


# Wild globs are matched by hand, not translated to regular expressions: a
# pattern such as `*a*a*a*a*a*b` (a user's exclude, or a hostile
# .gitignore) makes a backtracking regex engine take exponential time on a
# long name.  Here a path component is matched against a component of the
# pattern with the two-pointer wildcard algorithm (at most len(name) x
# len(pattern) steps), and components are matched against `**` by dynamic
# programming over (pattern component, path component): polynomial, and in
# practice linear, whatever the pattern.

_ANY_DIRS = "**"  # zero or more path components
_SOME_DIRS = "**+"  # one or more: a trailing `/**` ("everything inside")


@dataclass(frozen=True)
class _Glob:
    parts: tuple  # each: _ANY_DIRS, _SOME_DIRS, or a predicate on one path component
    dir_only: bool
    # the common shapes, answered without the general search: `name`
    # (any component), `a/b/c` (the first components)
    unanchored_run: tuple | None = None
    anchored_run: tuple | None = None


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> _Glob:
    """gitignore pattern -> its components, anchored or not, and whether it names folders only."""
    dir_only = pattern.endswith("/")
    pat = pattern.rstrip("/")
    anchored = "/" in pat
    if pat.startswith("/"):
        pat = pat[1:]
    pieces = pat.split("/")
    parts: list = [] if anchored else [_ANY_DIRS]
    for n, piece in enumerate(pieces):
        if piece == "**":
            last = n == len(pieces) - 1
            parts.append(_SOME_DIRS if last and n > 0 else _ANY_DIRS)
        else:
            parts.append(_component_predicate(piece))
    parts.append(_ANY_DIRS)  # the pattern matches a path or one of its parents
    inner = parts[1:-1] if not anchored else parts[:-1]
    simple = all(callable(part) for part in inner)
    return _Glob(tuple(parts), dir_only,
                 unanchored_run=tuple(inner) if simple and not anchored else None,
                 anchored_run=tuple(inner) if simple and anchored else None)


def _component_predicate(piece: str):
    """A test of one path component against one component of a pattern."""
    tokens = _tokens(piece)
    stars = sum(1 for tok in tokens if tok == ("*",))
    if all(tok[0] == "c" for tok in tokens):
        literal = "".join(tok[1] for tok in tokens)
        return literal.__eq__
    if stars == 1 and all(tok[0] == "c" or tok == ("*",) for tok in tokens):
        at = tokens.index(("*",))
        head = "".join(tok[1] for tok in tokens[:at])
        tail = "".join(tok[1] for tok in tokens[at + 1:])
        least = len(head) + len(tail)
        return lambda name: len(name) >= least and name.startswith(head) and name.endswith(tail)
    return functools.partial(_component_match, tokens)


def _tokens(piece: str) -> tuple:
    """One component of a pattern: ("c", char) | ("?",) | ("*",) | ("[", negated, ((lo, hi), ...))."""
    out: list[tuple] = []
    i = 0
    while i < len(piece):
        c = piece[i]
        if c == "*":
            while i < len(piece) and piece[i] == "*":  # `**` inside a component is `*` (gitignore)
                i += 1
            if not out or out[-1] != ("*",):
                out.append(("*",))
            continue
        if c == "?":
            out.append(("?",))
        elif c == "[" and piece.find("]", i + 1) != -1:
            j = piece.find("]", i + 1)
            body = piece[i + 1:j]
            negated = body[:1] in ("!", "^")
            if negated:
                body = body[1:]
            ranges, k = [], 0
            while k < len(body):
                if body[k] == "\\" and k + 1 < len(body):
                    k += 1
                if k + 2 < len(body) and body[k + 1] == "-":
                    ranges.append((body[k], body[k + 2]))
                    k += 3
                else:
                    ranges.append((body[k], body[k]))
                    k += 1
            out.append(("[", negated, tuple(ranges)))
            i = j
        elif c == "\\" and i + 1 < len(piece):
            i += 1
            out.append(("c", piece[i]))
        else:
            out.append(("c", c))
        i += 1
    return tuple(out)


def _one(token: tuple, ch: str) -> bool:
    kind = token[0]
    if kind == "c":
        return token[1] == ch
    if kind == "?":
        return True
    inside = any(lo <= ch <= hi for lo, hi in token[2])
    return inside != token[1]


def _component_match(tokens: tuple, name: str) -> bool:
    """Wildcard match of one path component, without backtracking beyond the last `*`."""
    t = s = 0
    star, mark = -1, 0
    while s < len(name):
        if t < len(tokens) and tokens[t] != ("*",) and _one(tokens[t], name[s]):
            t += 1
            s += 1
        elif t < len(tokens) and tokens[t] == ("*",):
            star, mark = t, s
            t += 1
        elif star != -1:
            t = star + 1
            mark += 1
            s = mark
        else:
            return False
    while t < len(tokens) and tokens[t] == ("*",):
        t += 1
    return t == len(tokens)


def _glob_match_parts(glob: _Glob, names: list[str]) -> bool:
    run = glob.anchored_run
    if run is not None:
        return len(names) >= len(run) and all(test(name) for test, name in zip(run, names))
    run = glob.unanchored_run
    if run is not None:
        if len(run) == 1:
            test = run[0]
            return any(test(name) for name in names)
        k = len(run)
        return any(all(test(name) for test, name in zip(run, names[s:s + k])) for s in range(len(names) - k + 1))
    parts = glob.parts
    n, m = len(parts), len(names)
    # can[j]: parts[i:] match names[j:], for the current i (filled from the end)
    can = [False] * (m + 1)
    can[m] = True
    for i in range(n - 1, -1, -1):
        part = parts[i]
        new = [False] * (m + 1)
        if part == _ANY_DIRS:
            new[m] = can[m]
            for j in range(m - 1, -1, -1):
                new[j] = can[j] or new[j + 1]
        elif part == _SOME_DIRS:
            for j in range(m - 1, -1, -1):
                new[j] = can[j + 1] or new[j + 1]
        else:
            for j in range(m):
                new[j] = can[j + 1] and part(names[j])
        can = new
    return can[0]


def _normal(rel_path: str) -> str:
    rel_path = rel_path.replace(os.sep, "/")
    while rel_path.startswith("./"):
        rel_path = rel_path[2:]
    return rel_path


def glob_match(pattern: str, rel_path: str, is_dir: bool = False) -> bool:
    """Does ``pattern`` (gitignore syntax) match ``rel_path`` or one of its parents?"""
    rel_path = _normal(rel_path)
    regex = _regex(pattern)
    glob = _compile(pattern)
    if glob.dir_only and not is_dir:
        # "build/" matches files inside build/, not a file named build
        rel_path = rel_path.rsplit("/", 1)[0] if "/" in rel_path else ""
    if not rel_path:
        return False
    return bool(regex.match(rel_path)) if regex is not None else _glob_match_parts(glob, rel_path.split("/"))


class PatternSet:
    """Several patterns matched together: ``glob_match`` of any of them."""

    def __init__(self, patterns: list[str]):
        # A plain name (`build`, `.venv`) matches when it is one of the path's
        # components: a set lookup, not a match per pattern.
        self.names = frozenset(p for p in patterns if _is_plain_name(p))
        self.dir_names = frozenset(p[:-1] for p in patterns if p.endswith("/") and _is_plain_name(p[:-1]))
        rest = [p for p in patterns if p not in self.names and p[:-1] not in self.dir_names]
        # tame patterns in one regex call (fast on large trees), the others by hand
        tame = [(_regex(p), p.endswith("/")) for p in rest if _tame(p)]
        plain = [rx.pattern for rx, dir_only in tame if not dir_only]
        dirs = [rx.pattern for rx, dir_only in tame if dir_only]
        self.plain_rx = re.compile("|".join(f"(?:{rx})" for rx in plain)) if plain else None
        self.dirs_rx = re.compile("|".join(f"(?:{rx})" for rx in dirs)) if dirs else None
        wild = [_compile(p) for p in rest if not _tame(p)]
        self.plain = [g for g in wild if not g.dir_only]
        self.dirs = [g for g in wild if g.dir_only]

    def match(self, rel_path: str, is_dir: bool = False) -> bool:
        rel_path = _normal(rel_path)
        parts = rel_path.split("/")
        if not self.names.isdisjoint(parts):
            return True
        if self.dir_names and not self.dir_names.isdisjoint(parts if is_dir else parts[:-1]):
            return True
        if rel_path and self.plain_rx is not None and self.plain_rx.match(rel_path):
            return True
        if rel_path and any(_glob_match_parts(g, parts) for g in self.plain):
            return True
        if self.dirs_rx is None and not self.dirs:
            return False
        folder = parts if is_dir else parts[:-1]
        if not folder or not folder[0]:
            return False
        if self.dirs_rx is not None and self.dirs_rx.match("/".join(folder)):
            return True
        return any(_glob_match_parts(g, folder) for g in self.dirs)


def _is_plain_name(pattern: str) -> bool:
    return bool(pattern) and not any(c in pattern for c in "/*?[\\!") and pattern not in (".", "..")


@dataclass
class GitIgnore:
    """The ``.gitignore`` rules in force for one folder, including its parents'."""

    rules: list[tuple[str, str, bool]] = field(default_factory=list)  # (base rel dir, pattern, negated)

    def child(self, folder: Path, rel_dir: str) -> "GitIgnore":
        path = folder / ".gitignore"
        try:
            if not path.is_file():
                return self
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:  # an unreadable folder is reported by the walk
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
        # folders that could not be listed: (path, why); their files are not checked
        self.unreadable: list[tuple[str, str]] = []

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
            except OSError as exc:
                self.unreadable.append((os.path.normpath(str(folder)), exc.strerror or str(exc)))
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
