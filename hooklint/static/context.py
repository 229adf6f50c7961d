"""Everything a rule may look at for one file, computed lazily and shared."""

from __future__ import annotations

import ast
from functools import cached_property
from typing import Any

from hooklint.findings import Location
from hooklint.static.callgraph import Summarizer, module_name
from hooklint.static.core import Core
from hooklint.static.hooks import HookIndex
from hooklint.static.project import ProjectIndex, ProjectView
from hooklint.static.semantic import SemanticModel
from hooklint.static.source import LineIndex
from hooklint.static.values import Inference


class FileContext:
    def __init__(self, path: str, text: str, tree: ast.Module, *, display_path: str | None = None,
                 graph: Any = None, project_answers: dict[str, Any] | None = None):
        self.path = path
        self.display_path = display_path or path
        self.text = text
        self.tree = tree
        self.index = LineIndex(text)
        # Facts from the model-graph layer (hooklint.graph), when it ran for this
        # file; None in a static-only run.  Rules must work without them.
        self.graph = graph
        # Answers about the other checked files (hooklint.static.project), computed
        # by the project pass; without them the file is analysed on its own.
        self._project_answers = project_answers

    @cached_property
    def model(self) -> SemanticModel:
        return SemanticModel(self.tree)

    @cached_property
    def inference(self) -> Inference:
        return Inference(self.model)

    @cached_property
    def hooks(self) -> HookIndex:
        index = HookIndex(self.model, self.inference)
        index.through_other_files = self._registrations_through_other_files
        return index

    def _registrations_through_other_files(self) -> list:
        if not self.project.external_names():
            return []
        # only those whose hook the call passes: what the rules about the hook's body need here (a hook the
        # wrapper makes itself is analysed in the wrapper's file, with the same module)
        return [r for r in self.core.wrapped() if r.wrapper_chain and r.wrapper_chain[0][1]
                and r.hook_expr is not None]

    @cached_property
    def core(self) -> Core:
        """Control flow, places and function summaries (hooklint.static.core)."""
        core = Core(self.model, self.inference, hooks=self.hooks, summarizer=self.summarizer,
                    external=self.project.external_facts, self_removing=self.project.self_removing)
        self.summarizer.core = core
        self.inference._hl_core = core  # type: ignore[attr-defined]  # shared analysis asks this one
        return core

    @cached_property
    def module(self) -> str:
        """The dotted name Python imports this file as."""
        return module_name(self.path)

    @cached_property
    def summarizer(self) -> Summarizer:
        return Summarizer(self.model, self.inference, self.path, self.display_path, self.module)

    @cached_property
    def summary(self) -> dict[str, Any]:
        """This file's part of the project's call graph (hooklint.static.callgraph)."""
        self.core  # noqa: B018 - the summary's edges and hook facts come from this file's core
        return self.summarizer.summary()

    @cached_property
    def project(self) -> ProjectView:
        """Questions about the checked files as a whole; records what was asked."""
        return ProjectView(
            lambda: ProjectIndex([self.summary], facts=lambda _summary, site: self.summarizer.site_facts(site[3], site[4], site[6])),
            self._project_answers, self.display_path)

    def qualname(self, node: ast.AST) -> str | None:
        """``pkg.mod.Cls.method`` for a def or class of this file (None for lambdas)."""
        return self.summarizer.qualname(node)

    def close(self, release: bool = True) -> None:
        """Free the analysis promptly (see SemanticModel.release); ``release``
        False only detaches the nodes all trees share, for a caller that has the
        cycle collector free the rest (hooklint.static.garbage)."""
        if release and "model" in self.__dict__:
            self.model.release()
        else:
            SemanticModel.release_shared()

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
        return self.index.segment(node)

    def line(self, row: int) -> str:
        return self.index.line(row)
