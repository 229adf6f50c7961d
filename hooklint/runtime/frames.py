"""Where in the user's code something happened: the first frame outside torch
and hooklint, with the exact span of the call (Python 3.11 code positions)."""

from __future__ import annotations

import itertools
import linecache
import os
import sys
import types
from dataclasses import dataclass
from typing import Callable

from hooklint.findings import Location, Related

_HOOKLINT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_internal_prefixes: tuple[str, ...] | None = None


def _prefixes() -> tuple[str, ...]:
    global _internal_prefixes
    if _internal_prefixes is None:
        import torch

        _internal_prefixes = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _HOOKLINT_DIR)
    return _internal_prefixes


def is_internal(filename: str) -> bool:
    """Code of torch or hooklint itself, never the user's."""
    return filename.startswith(_prefixes()) or filename.startswith("<frozen runpy")


def is_hooklint(frame: types.FrameType) -> bool:
    return frame.f_code.co_filename.startswith(_HOOKLINT_DIR)


@dataclass(frozen=True)
class Site:
    """A place in a source file; columns are 1-based characters, like findings'."""

    filename: str
    line: int
    column: int = 1
    end_line: int = 0
    end_column: int = 0

    @property
    def location(self) -> Location:
        return Location(self.line, self.column)

    @property
    def end_location(self) -> Location:
        if self.end_line >= self.line and self.end_column > 0:
            return Location(self.end_line, self.end_column)
        return self.location

    @property
    def path(self) -> str:
        return display_path(self.filename)

    def text(self) -> str:
        return linecache.getline(self.filename, self.line).strip()

    def related(self, message: str) -> Related:
        return Related(message, self.path, self.location)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


def display_path(filename: str) -> str:
    """Relative to the working folder when inside it, as `hooklint check` prints paths."""
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


def _char_column(filename: str, line: int, byte_offset: int) -> int:
    text = linecache.getline(filename, line)
    if not text:
        return byte_offset + 1
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8", errors="replace")) + 1


def site_of(frame: types.FrameType) -> Site:
    return site_at(frame.f_code, frame.f_lasti, frame.f_lineno)


def site_at(code: types.CodeType, lasti: int, lineno: int | None = None) -> Site:
    """The site of the instruction at byte offset ``lasti`` of ``code`` (a frame's
    ``f_lasti``): what ``site_of`` gives for the frame while it executes it.  The
    run-time layer notes ``(f_code, f_lasti)`` on hot paths, which is cheap, and
    builds the site only when a finding needs it."""
    line = lineno or _line_at(code, lasti) or code.co_firstlineno
    column, end_line, end_column = 1, 0, 0
    try:
        start_line, stop_line, start_col, stop_col = next(itertools.islice(code.co_positions(), lasti // 2, None))
    except (AttributeError, StopIteration, ValueError):
        start_line = None
    if start_line is not None and start_col is not None:
        line = start_line
        column = _char_column(code.co_filename, start_line, start_col)
        if stop_line is not None and stop_col is not None:
            end_line, end_column = stop_line, _char_column(code.co_filename, stop_line, stop_col)
    return Site(code.co_filename, line, column, end_line, end_column)


def _line_at(code: types.CodeType, lasti: int) -> int | None:
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line
    return None


# How many frames above a registration are searched for the caller in another file.
_CALLER_SEARCH_DEPTH = 8


def caller_in_other_file(frame: types.FrameType) -> Site | None:
    """Where user code in another file called into ``frame``'s file: the line
    of the script that called the library which registered a hook."""
    filename = frame.f_code.co_filename
    outer = frame.f_back
    for _ in range(_CALLER_SEARCH_DEPTH):
        if outer is None:
            return None
        name = outer.f_code.co_filename
        if name != filename and not is_internal(name) and not name.startswith("<"):
            return site_of(outer)
        outer = outer.f_back
    return None


def user_frame(depth: int = 1) -> types.FrameType | None:
    """The innermost frame, ``depth`` frames above the caller, that is not torch's or hooklint's."""
    frame: types.FrameType | None = sys._getframe(depth + 1)
    while frame is not None and is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def called_from_user(depth: int = 1, skip: tuple[types.CodeType, ...] = ()) -> types.FrameType | None:
    """The frame that called the function ``depth`` levels up, if that frame is user
    code (after skipping the ``skip`` code objects, e.g. ``Tensor.backward``).  None
    when torch itself made the call: torch's own hooks are not the user's."""
    frame: types.FrameType | None = sys._getframe(depth + 1)
    while frame is not None and frame.f_code in skip:
        frame = frame.f_back
    if frame is None or is_internal(frame.f_code.co_filename):
        return None
    return frame


def code_site(code: types.CodeType) -> Site:
    """The ``def`` line of a function (``co_firstlineno`` is its first decorator's)."""
    line = code.co_firstlineno
    text = linecache.getline(code.co_filename, line)
    while text.lstrip().startswith("@"):
        line += 1
        text = linecache.getline(code.co_filename, line)
    column = text.find("def ") + 1 if "def " in text else 1
    return Site(code.co_filename, line, column)


def drop_frames(exc: BaseException, drop: "Callable[[types.TracebackType], bool]") -> None:
    """Unlink from the tracebacks of ``exc`` and of the exceptions chained to it
    the entries ``drop`` selects (in place: an exception on its way up keeps
    the shorter traceback).  A traceback with nothing else is left whole."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        kept = []
        tb = current.__traceback__
        while tb is not None:
            if not drop(tb):
                kept.append(tb)
            tb = tb.tb_next
        if kept:
            for entry, following in zip(kept, kept[1:]):
                entry.tb_next = following
            kept[-1].tb_next = None
            current.__traceback__ = kept[0]
        pending.extend((current.__cause__, current.__context__))


def is_hooklint_entry(tb: types.TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_HOOKLINT_DIR)


def drop_hooklint_frames(exc: BaseException) -> None:
    """What the user sees of an exception that went through hooklint's wrappers:
    their frames and the user's, as without hooklint."""
    drop_frames(exc, is_hooklint_entry)
