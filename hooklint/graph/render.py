"""``hooklint graph`` output: a table per analysed model, or JSON."""

from __future__ import annotations

import json
import os
from typing import Any

from hooklint.findings import Notice
from hooklint.graph.facts import FACTS_VERSION, FileFacts, ModelFacts, ModuleFacts
from hooklint.report.escape import printable

HEADERS = ("module", "class", "ops", "legacy hook binds to", "legacy-safe", "full hook before param grads")


def _yes_no(value: bool | None) -> str:
    return "?" if value is None else ("yes" if value else "no")


def _trainable_below(model: ModelFacts, module: ModuleFacts) -> int:
    prefix = module.path + "." if module.path else ""
    return sum(m.trainable_params for m in model.modules if m.path == module.path or m.path.startswith(prefix))


def full_hook_column(model: ModelFacts, module: ModuleFacts) -> str:
    """Whether a full backward hook fires before the module's parameters' .grad is written."""
    if not module.calls:
        return ""
    if _trainable_below(model, module) == 0:
        return "- (no parameters)"
    if module.inputs_from_data is None:
        return "?"
    return "yes" if module.inputs_from_data else "no"


def bound_column(module: ModuleFacts, model_file: str | None) -> str:
    if not module.calls:
        return ""
    bound = module.bound
    if bound is None:
        return "nothing (no grad_fn: never fires)"
    site = bound.where(relative_to=model_file)
    text = f"{bound.name} ({site})" if site else bound.name
    return text if module.bound_is_own else text + " *"


def runs_in_column(module: ModuleFacts) -> str:
    """Where the module's forward runs: compiled code, a checkpointed region (docs/compile.md)."""
    parts = []
    if module.compiled:
        parts.append("compiled")
    if module.checkpointed:
        parts.append("checkpoint" + (" (reentrant)" if module.checkpointed == "reentrant" else ""))
    return ", ".join(parts)


def has_regions(model: ModelFacts) -> bool:
    return any(m.compiled or m.checkpointed for m in model.modules)


def rows(model: ModelFacts) -> list[tuple[Any, ...]]:
    model_file = os.path.realpath(model.class_file) if model.class_file else None
    regions = has_regions(model)
    out = []
    for module in model.modules:
        row = (
            module.display_path,
            module.class_name,
            len(module.ops) if module.calls else "not called",
            bound_column(module, model_file),
            _yes_no(module.legacy_safe) if module.calls else "",
            full_hook_column(model, module),
        )
        out.append(row + (runs_in_column(module),) if regions else row)
    return out


def model_heading(model: ModelFacts) -> str:
    built = f"built with {model.source}" + (f" (line {model.call_line})" if model.call_line else "")
    return f"{model.class_name}: {built}; {model.describe_method()}"


def render_table(facts: list[FileFacts], factories: list[ModelFacts],
                 notebooks: dict[str, Any] | None = None) -> str:
    """``notebooks``: the :class:`~hooklint.static.notebook.Notebook` of each
    notebook among ``facts`` (by its path as shown), whose "line N" become cells
    and lines in them."""
    from tabulate import tabulate

    if not facts and not factories:
        return ""
    chunks: list[str] = []

    def add_model(model: ModelFacts, place=lambda text: text) -> None:
        chunks.append("  " + place(model_heading(model)))
        headers = HEADERS + ("runs in",) if has_regions(model) else HEADERS
        table = tabulate([[place(c) if isinstance(c, str) else c for c in row] for row in rows(model)],
                         headers=headers, tablefmt="simple")
        chunks.append("\n".join("    " + line for line in table.splitlines()))
        if any(m.calls and m.bound is not None and not m.bound_is_own for m in model.modules):
            chunks.append("    * not an op of the module itself: its forward returns its input as is, and the "
                          "hook is attached to the op that produced it")
        chunks.append("")

    for found in facts:
        head = found.path + ("  (from the cache)" if found.cached else "")
        notebook = (notebooks or {}).get(found.path)
        place = notebook.describe_rows if notebook is not None else (lambda text: text)
        chunks.append(head)
        if found.error:
            chunks.append(f"  not analysed: {found.error}")
        for model in found.models:
            add_model(model, place)
        for missing in found.unanalysed:
            where = f" (line {missing.line})" if missing.line else ""
            chunks.append(place(f"  {missing.class_name}{where}: not analysed: {missing.reason}"))
        if found.borrowed and not found.models:
            chunks.append("  its classes are analysed as parts of: " + "; ".join(
                _borrowed_label(model) for model in found.borrowed))
        elif not found.models and not found.unanalysed and not found.error and not found.linked:
            chunks.append("  no model was built")
        if found.linked:
            chunks.extend(render_links(found))
        chunks.append("")
    if factories:
        chunks.append("factories ([tool.hooklint] models)")
        for model in factories:
            add_model(model)
    if any(found.models for found in facts) or factories:
        chunks.append("legacy-safe: the legacy hook's grad_input starts with exactly the gradients of the module's "
                      "inputs.  full hook before param grads: its inputs can come straight from data that needs "
                      "no grad, so a full backward hook runs before its parameters' .grad is accumulated.")
        if any(has_regions(m) for found in facts for m in found.models) or any(has_regions(m) for m in factories):
            chunks.append("runs in: compiled code the model builds itself (module hooks registered after its first "
                          "call never fire), or an activation-checkpointed region (its forward hooks run again "
                          "in backward); docs/compile.md.")
    # class, module and file names come from the user's code: printed escaped
    return "\n".join(printable(line) for line in "\n".join(chunks).rstrip("\n").split("\n")) + "\n"


LINK_HEADERS = ("module", "class", "legacy hook binds to", "legacy-safe", "in-place op after it")


def _inplace_column(module: ModuleFacts) -> str:
    op = module.output_inplace or module.input_inplace
    if op is None:
        return "none" if module.calls else ""
    where = op.where()
    return f"{op.name} ({where})" if where else op.name


def render_links(found: FileFacts) -> list[str]:
    """Per registration linked across files: which entry point built the model,
    through which calls the hook reached it, and the modules it lands on."""
    from tabulate import tabulate

    out = ["  hooks on models other files build:"]
    by_site: dict[tuple[int, int], list] = {}
    for link in found.linked:
        by_site.setdefault((link.line, link.col), []).append(link)
    for (line, _col), links in sorted(by_site.items()):
        first = links[0]
        complete = all(link.complete for link in links)
        out.append(f"    line {line}: `{first.method}` ({first.kind}); "
                   + ("every call in the checked files is linked" if complete else
                      "not every call in the checked files could be linked"))
        for link in links:
            model = link.model
            origin = os.path.basename(model.origin_file) if model.origin_file else "?"
            out.append(f"      {model.class_name} built in {origin} with {model.source}")
            out.append(f"        reached through {' -> '.join(link.via)}; "
                       + ("each module listed is hooked" if link.exact else
                          "the modules listed may be hooked (a condition or a step hooklint cannot follow)"))
            model_file = os.path.realpath(model.class_file) if model.class_file else None
            rows_ = []
            for path in link.paths:
                module = model.module(path)
                if module is None:
                    continue
                rows_.append((module.display_path, module.class_name, bound_column(module, model_file),
                              _yes_no(module.legacy_safe) if module.calls else "not called",
                              _inplace_column(module)))
            limit = 12
            table = tabulate(rows_[:limit], headers=LINK_HEADERS, tablefmt="simple")
            out.extend("        " + row for row in table.splitlines())
            if len(rows_) > limit:
                out.append(f"        ... and {len(rows_) - limit} more (--output-format json lists them all)")
    return out


def _borrowed_label(model: ModelFacts) -> str:
    if model.origin_file is None:
        return f"{model.class_name} ({model.source})"
    from hooklint.engine import display_path

    line = f", line {model.call_line}" if model.call_line else ""
    return f"{model.class_name} built with {model.source} ({display_path(model.origin_file)}{line})"


_LINE_FILES = {"line": "file", "call_line": "origin_file", "class_line": "class_file"}


def _lines_to_cells(data: Any, notebook: Any, real: str) -> None:
    """In a notebook's facts, each line of the notebook (an op's, a model's
    constructor call, a class) as ``cell`` and the line in it (``call_cell``...)."""
    if isinstance(data, list):
        for item in data:
            _lines_to_cells(item, notebook, real)
        return
    if not isinstance(data, dict):
        return
    for key, file_key in _LINE_FILES.items():
        row = data.get(key)
        if not isinstance(row, int) or isinstance(row, bool):
            continue
        where = data.get(file_key, real) if file_key in data else real
        if where is not None and os.path.realpath(where) == real:
            cell, in_cell, _column = notebook.to_cell(row, 1)
            data[key] = in_cell
            data[key.replace("line", "cell")] = cell
    for value in list(data.values()):
        _lines_to_cells(value, notebook, real)


def render_json(facts: list[FileFacts], factories: list[ModelFacts], notices: list[Notice],
                torch_version: str | None, notebooks: dict[str, Any] | None = None,
                real_paths: dict[str, str] | None = None) -> str:
    def model_dict(model: ModelFacts) -> dict[str, Any]:
        data = model.to_dict()
        for module_data, module in zip(data["modules"], model.modules):
            module_data["full_hook_before_param_grads"] = full_hook_column(model, module) or None
        return data

    payload = {
        "version": FACTS_VERSION,
        "torch": torch_version,
        "files": [{**found.to_dict(), "models": [model_dict(m) for m in found.models],
                   "part_of": [{"class_name": m.class_name, "source": m.source, "origin_file": m.origin_file,
                                "call_line": m.call_line} for m in found.borrowed]} for found in facts],
        "factories": [model_dict(m) for m in factories],
        "notices": [n.to_dict() for n in notices],
    }
    for entry in payload["files"]:
        notebook = (notebooks or {}).get(entry["path"])
        if notebook is not None:
            _lines_to_cells(entry, notebook, (real_paths or {}).get(entry["path"], os.path.realpath(entry["path"])))
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
