"""Everything a rule may look at for one file, computed lazily and shared."""

from __future__ import annotations

import ast
from functools import cached_property
from typing import Any

from hooklint.findings import Location
from hooklint.static.hooks import HookIndex
from hooklint.static.semantic import SemanticModel
from hooklint.static.source import LineIndex
from hooklint.static.values import Inference


class FileContext:
    def __init__(self, path: str, text: str, tree: ast.Module, *, display_path: str | None = None,
                 graph: Any = None):
        self.path = path
        self.display_path = display_path or path
        self.text = text
        self.tree = tree
        self.index = LineIndex(text)
        # Facts from the model-graph layer (hooklint.graph), when it ran for this
        # file; None in a static-only run.  Rules must work without them.
        self.graph = graph

    @cached_property
    def model(self) -> SemanticModel:
        return SemanticModel(self.tree)

    @cached_property
    def inference(self) -> Inference:
        return Inference(self.model)

    @cached_property
    def hooks(self) -> HookIndex:
        return HookIndex(self.model, self.inference)

    def close(self) -> None:
        """Free the analysis promptly (see SemanticModel.release)."""
        if "model" in self.__dict__:
            self.model.release()

    def span(self, node: ast.AST) -> tuple[Location, Location]:
        row = getattr(node, "lineno", 1)
        col = getattr(node, "col_offset", 0)
        end_row = getattr(node, "end_lineno", None) or row
        end_col = getattr(node, "end_col_offset", None)
        start = Location(row, self.index.char_column(row, col))
        end = Location(end_row, self.index.char_column(end_row, end_col)) if end_col is not None else start
        return start, end

    def name_span(self, node: ast.AST) -> tuple[Location, Location]:
        """For ``a.b.method`` the span of ``method`` only; otherwise the node's span."""
        start, end = self.span(node)
        if isinstance(node, ast.Attribute) and end.column > len(node.attr):
            return Location(end.row, end.column - len(node.attr)), end
        return start, end

    def segment(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.text, node) or ""

    def line(self, row: int) -> str:
        return self.index.line(row)
