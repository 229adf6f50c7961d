"""What formatters read of the checked files: texts for code frames, notebook
cells, and where a cell position is in a notebook's JSON.  Files are read once,
lazily, and never raise: an unreadable file just has no code frame."""

from __future__ import annotations

from hooklint.findings import Location
from hooklint.static.notebook import Notebook, is_notebook


class FileSources:
    def __init__(self, preloaded: dict[str, tuple[str, Notebook | None]] | None = None):
        # path -> (Python text, notebook); stdin's text is preloaded under its shown name
        self._loaded: dict[str, tuple[str, Notebook | None] | None] = dict(preloaded or {})

    def _load(self, path: str) -> tuple[str, Notebook | None] | None:
        if path not in self._loaded:
            from hooklint.static.checker import read_checkable
            from hooklint.static.source import SourceError

            try:
                self._loaded[path] = read_checkable(path)
            except (SourceError, OSError):
                self._loaded[path] = None
        return self._loaded[path]

    def __call__(self, path: str) -> str | None:
        """The file's own text: a Python file's source, a notebook's JSON (what
        rows of findings without a cell, such as invalid JSON, index into)."""
        loaded = self._load(path)
        if loaded is not None:
            return loaded[1].raw if loaded[1] is not None else loaded[0]
        if is_notebook(path):
            try:
                with open(path, "rb") as handle:
                    return handle.read().decode("utf-8", errors="replace")
            except OSError:
                return None
        return None

    def notebook(self, path: str) -> Notebook | None:
        loaded = self._load(path)
        return None if loaded is None else loaded[1]

    def cell_text(self, path: str, cell: int) -> str | None:
        notebook = self.notebook(path)
        return None if notebook is None else notebook.cell_text(cell)

    def file_location(self, path: str, cell: int, location: Location) -> Location | None:
        notebook = self.notebook(path)
        found = None if notebook is None else notebook.file_location(cell, location.row, location.column)
        return None if found is None else Location(*found)
