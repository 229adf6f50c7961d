"""``hooklint check --fix --verify`` / ``--diff --verify``: prove each fix by running it.

Before any file is written, each fix that would be applied gets a verdict:

* **verified**: the worker (:mod:`hooklint.fix.verify_worker`) built the model
  the graph layer built, ran a forward and a backward with the original
  registration and with the fixed one, and the fixed code ran and the hook
  received the module's real gradients;
* **failed**: the fixed code raised, or the hook received something else; the
  fix is not applied and the output says why, in one line;
* **unverified**: no proof could be made (no model hooklint builds contains
  the hooked module, the fix is not about a module, the model could not be
  built again, the proof timed out).  With ``--verify`` such a fix is applied
  only when it is *safe by construction*: marked safe by a rule whose fixes do
  not depend on the model (HKL401's out-of-place rewrite of a tensor hook).
  HKL101's fixes depend on the model (whether an in-place op follows the
  module), so they need a proof.

Proofs run in a subprocess with the graph layer's timeout and memory limit;
verdicts (not failures to prove) are cached in ``.hooklint_cache`` by the
file's content, the fixed text and torch's version.  The user's code never
runs in this process, and torch is never imported here.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from hooklint.findings import Applicability, Finding, Notice, NoticeLevel
from hooklint.fix.apply import LineStarts, Recheck, applicable, newline_of, preview

# Rules whose fixes a model run can prove (and whose safety depends on the model).
PROVABLE = frozenset({"HKL101"})
VERIFY_VERSION = 1
MAX_MODELS_PER_FIX = 2

_NOT_ABOUT_A_MODEL = {
    "HKL301": "moving `remove()` after the backward pass is about the script's order, which a model run cannot show",
    "HKL303": "calling the module instead of its `forward` is about the caller, which a model run cannot show",
    "HKL401": "the rewritten tensor hook is not tied to a module",
}


@dataclass(frozen=True)
class Verdict:
    status: str  # "verified", "failed", "unverified"
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == "verified"


def finding_key(finding: Finding) -> tuple:
    return (finding.path, finding.code, finding.location.row, finding.location.column, finding.message)


def safe_by_construction(finding: Finding) -> bool:
    return finding.fix is not None and finding.fix.applicability is Applicability.SAFE \
        and finding.code not in PROVABLE


@dataclass
class Verification:
    verdicts: dict[tuple, Verdict] = field(default_factory=dict)
    findings: dict[tuple, Finding] = field(default_factory=dict)
    extra_notices: list[Notice] = field(default_factory=list)  # about the proof worker (its sandbox)

    def accepted(self, finding: Finding) -> bool:
        verdict = self.verdicts.get(finding_key(finding))
        if verdict is None:
            return True
        return verdict.passed or (verdict.status == "unverified" and safe_by_construction(finding))

    def keep(self, findings: Iterable[Finding]) -> list[Finding]:
        """The findings, those whose fix is refused without their fix."""
        return [f if f.fix is None or self.accepted(f) else f.with_changes(fix=None) for f in findings]

    def recheck_for(self, inner: Callable[[str], Recheck]) -> Callable[[str], Recheck]:
        """Findings of later rounds (after other fixes changed the text) have
        no proof: only fixes that are safe by construction stay."""

        def for_path(path: str) -> Recheck:
            recheck = inner(path)

            def filtered(text: str) -> list[Finding]:
                return [f if f.fix is None or safe_by_construction(f) else f.with_changes(fix=None)
                        for f in recheck(text)]

            return filtered

        return for_path

    def notices(self, applied: Iterable[Finding]) -> list[Notice]:
        """One line per fix: verified and applied, or why not applied."""
        applied_keys = {finding_key(f) for f in applied}
        out = list(self.extra_notices)
        for key, verdict in sorted(self.verdicts.items(), key=lambda kv: kv[0][:4]):
            finding = self.findings[key]
            at = f"{finding.code} fix at {finding.location.row}:{finding.location.column}"
            if verdict.passed:
                if key in applied_keys:
                    out.append(Notice(finding.path, f"{at} verified: {verdict.detail}", NoticeLevel.INFO))
            elif verdict.status == "failed":
                out.append(Notice(finding.path, f"{at} not applied: its proof failed: {verdict.detail}",
                                  NoticeLevel.SKIP))
            elif safe_by_construction(finding):
                if key in applied_keys:
                    out.append(Notice(finding.path, f"{at} applied without a proof ({verdict.detail}); it is safe "
                                      f"by construction", NoticeLevel.INFO))
            else:
                how = "--fix" if finding.fix and finding.fix.applicability is Applicability.SAFE \
                    else "--fix --unsafe-fixes"
                out.append(Notice(finding.path, f"{at} not applied: unverified ({verdict.detail}); without "
                                  f"--verify, {how} applies it", NoticeLevel.SKIP))
        return out


# ---------------------------------------------------------------- planning (static, no torch)


@dataclass
class _Planned:
    finding: Finding
    proofs: list[dict[str, Any]]


def _registration_at(ctx, finding: Finding):
    for reg in ctx.hooks.registrations:
        if reg.call.func is not None and ctx.name_span(reg.call.func)[0] == finding.location:
            return reg
    return None


def _offsets(lines: LineStarts, ctx, node: ast.AST) -> tuple[int, int]:
    start, end = ctx.span(node)
    return lines.offset(start), lines.offset(end)  # type: ignore[return-value]


def _edit_spans(finding: Finding, lines: LineStarts, newline: str) -> list[tuple[int, int, str]]:
    out = []
    for edit in finding.fix.edits:  # type: ignore[union-attr]
        start, end = lines.offset(edit.location), lines.offset(edit.end_location)
        if start is None or end is None:
            continue
        out.append((start, end, edit.content.replace("\n", newline)))
    return out


def _template(text: str, start: int, end: int, spans: list[tuple[int, int, str]]) -> str:
    """``text[start:end]`` with the spans (inside it) replaced."""
    out, pos = [], start
    for s, e, content in sorted(spans, key=lambda x: (x[0], x[1])):
        if s < start or e > end:
            continue
        out.append(text[pos:s])
        out.append(content)
        pos = e
    out.append(text[pos:end])
    return "".join(out)


def plan_fix(ctx, text: str, finding: Finding) -> list[dict[str, Any]] | str:
    """The proofs of one HKL101 fix (one per model), or why it cannot be proven."""
    from hooklint.graph.link import modules_for
    from hooklint.static.bodies import name_uses
    from hooklint.static.output_grad_hook import existing_helper

    reg = _registration_at(ctx, finding)
    if reg is None:
        return "hooklint could not find the registration again"
    if reg.is_global or reg.receiver is None:
        return "a global hook covers every module; proofs run on one hooked module"
    if reg.hook_expr is None:
        return "the registration passes no hook hooklint can see"
    if ctx.graph is None:
        return "the graph analysis did not run for this file, so no model is known"
    if getattr(ctx.graph, "error", None):
        return f"the graph analysis of this file failed ({ctx.graph.error})"
    pairs = [(model, module) for model, module in modules_for(ctx, reg.receiver) if module.calls]
    if not pairs:
        return f"no model the graph analysis built contains `{reg.receiver_text}`"
    fixed_text = preview(text, finding)
    if fixed_text is None:
        return "the fix does not fit the file"
    lines = LineStarts(text)
    newline = newline_of(text)
    spans = _edit_spans(finding, lines, newline)
    call_start, call_end = _offsets(lines, ctx, reg.call)
    receiver = (*_offsets(lines, ctx, reg.receiver), "__hooklint_module__")
    hook = (*_offsets(lines, ctx, reg.hook_expr), "__hooklint_hook__")
    inside = [s for s in spans if call_start <= s[0] and s[1] <= call_end]
    original_call = _template(text, call_start, call_end, [receiver, hook])
    fixed_call = _template(text, call_start, call_end, [receiver, hook] + inside)
    shift = sum(content.count(newline) - text[s:e].count(newline) for s, e, content in spans if e <= call_start)
    grow = sum(content.count(newline) - text[s:e].count(newline) for s, e, content in inside)
    first_row, last_row = reg.call.lineno, reg.call.end_lineno or reg.call.lineno
    try:
        fixed_tree = ast.parse(fixed_text)
    except SyntaxError:
        return "the fixed text does not parse"
    known = {getattr(s, "name", None) for s in ctx.tree.body}
    helper = "\n\n".join(ast.get_source_segment(fixed_text, s) or "" for s in fixed_tree.body
                         if isinstance(s, ast.FunctionDef) and s.name not in known)
    gi = reg.param("grad_input")
    reads_grad_input = reg.hook is None or gi is None or bool(name_uses(reg.hook.node, gi))
    hook_text = ctx.segment(reg.hook_expr)
    hook_name = reg.hook.name if reg.hook is not None and reg.hook.name != "<lambda>" else (
        hook_text if len(hook_text) <= 40 and "\n" not in hook_text else "the hook")
    by_model: dict[int, tuple[Any, list[str]]] = {}
    for model, module in pairs:
        by_model.setdefault(id(model), (model, []))[1].append(module.path)
    proofs = []
    for model, paths in list(by_model.values())[:MAX_MODELS_PER_FIX]:
        proofs.append({
            "label": f"{finding.code} fix at {finding.location.row}:{finding.location.column}",
            "model": {"class_name": model.class_name, "source": model.source, "call_line": model.call_line,
                      "inputs": [[spec.dtype, list(spec.shape)] for spec in model.inputs]},
            "paths": sorted(set(paths)),
            "rows": [first_row, last_row],
            "fixed_rows": [first_row + shift, last_row + shift + grow],
            "original_call": original_call,
            "fixed_call": fixed_call,
            "helper": helper,
            "helper_name": existing_helper(fixed_tree),
            "fixed_text": fixed_text,
            "hook_text": hook_text,
            "hook_name": hook_name,
            "reads_grad_input": reads_grad_input,
        })
    return proofs


def plan_file(path: str, text: str, findings: list[Finding], facts: Any) -> tuple[list[_Planned], dict]:
    """Planned proofs, and verdicts for the fixes no proof can cover."""
    from hooklint.static.context import FileContext

    planned: list[_Planned] = []
    verdicts: dict[tuple, Verdict] = {}
    provable = [f for f in findings if f.code in PROVABLE]
    for finding in findings:
        if finding.code not in PROVABLE:
            reason = _NOT_ABOUT_A_MODEL.get(finding.code, "this rule's fixes are not proven by a model run")
            verdicts[finding_key(finding)] = Verdict("unverified", reason)
    if not provable:
        return planned, verdicts
    from hooklint.static.notebook import is_notebook
    if is_notebook(path):
        # the findings are in cell coordinates and the proofs edit a script's text
        for finding in provable:
            verdicts[finding_key(finding)] = Verdict(
                "unverified", "fixes in notebooks are not proven yet: run the fixed cells to check it")
        return planned, verdicts
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        for finding in provable:
            verdicts[finding_key(finding)] = Verdict("unverified", "the file does not parse")
        return planned, verdicts
    ctx = FileContext(path, text, tree, graph=facts)
    try:
        for finding in provable:
            result = plan_fix(ctx, text, finding)
            if isinstance(result, str):
                verdicts[finding_key(finding)] = Verdict("unverified", result)
            else:
                planned.append(_Planned(finding, result))
    finally:
        ctx.close()
    return planned, verdicts


# ---------------------------------------------------------------- running the proofs


def _combine(verdicts: list[Verdict]) -> Verdict:
    failed = [v for v in verdicts if v.status == "failed"]
    if failed:
        return failed[0]
    passed = [v for v in verdicts if v.passed]
    if passed:
        others = [v.detail for v in verdicts if not v.passed]
        return Verdict("verified", passed[0].detail + (f" (another model was not proven: {others[0]})"
                                                        if others else ""))
    return verdicts[0]


class Prover:
    """Runs proofs in a worker subprocess (sandboxed, a fresh child per file;
    restarted after it dies)."""

    def __init__(self, config, *, use_cache: bool = True, timeout: float | None = None):
        from hooklint.graph.provider import GraphRun, WorkerPool, WorkerProcess

        class ProofWorker(WorkerProcess):
            module = "hooklint.fix.verify_worker"

        self.config = config
        self.timeout = timeout if timeout is not None else config.timeout
        self.use_cache = use_cache
        self.pool = WorkerPool(config.memory_limit, config.root, GraphRun(), config.sandbox, ProofWorker)
        self.cache = None

    def _cache(self):
        if self.cache is None and self.use_cache and self.config.cache:
            from hooklint.graph.cache import GraphCache
            from hooklint.graph.provider import torch_version

            folder = Path(self.config.cache_dir)
            if not folder.is_absolute():
                folder = self.config.root / folder
            self.cache = GraphCache(folder, torch_version() or "", {"verify": VERIFY_VERSION,
                                                                    "memory-limit": self.config.memory_limit,
                                                                    "sandbox": self.config.sandbox})
        return self.cache

    def prove(self, path: str, proof: dict[str, Any]) -> Verdict:
        from hooklint.graph.cache import file_key

        cache = self._cache()
        key = None
        if cache is not None:
            base = file_key(cache, path)
            key = cache.key({"proof": proof, "file": base}) if base else None
            hit = cache.get(key, lambda value: Verdict(str(value["status"]), str(value["detail"]))) if key else None
            if hit is not None:
                return hit
        worker = self._worker()
        if worker is None:
            return Verdict("unverified", f"the proof worker could not start ({self.fatal})")
        request = {"path": os.path.abspath(path), "root": str(self.config.root), "proofs": [{**proof, "id": 0}],
                   "pythonpath": list(getattr(self.config, "pythonpath", []))}
        reply = worker.request(request, self.timeout)
        if reply.status == "timeout":
            during = f" while {reply.stage}" if reply.stage else ""
            return Verdict("unverified", f"the proof timed out after {self.timeout:g} s{during}")
        if reply.status != "ok" or reply.result is None:
            return Verdict("unverified", f"the model code crashed the proof worker ({reply.detail})")
        data = reply.result["verdicts"][0]
        verdict = Verdict(data["status"], data["detail"])
        if key is not None and cache is not None and verdict.status in ("verified", "failed"):
            cache.put(key, {"status": verdict.status, "detail": verdict.detail}, reply.result.get("deps", {}),
                      stamps=reply.result.get("imported"))
        return verdict

    def _worker(self):
        return self.pool.get()

    @property
    def fatal(self) -> str | None:
        """Why the proof worker could not start."""
        if self.pool.refused is not None:
            return "the sandbox is incomplete and `sandbox = \"require\"`"
        return self.pool.fatal

    def close(self) -> None:
        self.pool.close()


def verify_fixes(findings: Iterable[Finding], *, allowed, locate: Callable[[str], str], graph_facts: dict[str, Any],
                 config, use_cache: bool = True) -> Verification:
    """A verdict for every fix that ``--fix`` / ``--diff`` would apply."""
    from hooklint.fix.files import SourceFile
    from hooklint.static.source import SourceError

    verification = Verification()
    by_path: dict[str, list[Finding]] = {}
    for finding in findings:
        if applicable(finding, allowed):
            by_path.setdefault(finding.path, []).append(finding)
            verification.findings[finding_key(finding)] = finding
    prover = Prover(config, use_cache=use_cache)
    try:
        for shown in sorted(by_path):
            real = locate(shown)
            try:
                text = SourceFile.read(real).text
            except SourceError:
                continue  # fix_files reports it
            facts = graph_facts.get(real)
            planned, verdicts = plan_file(real, text, by_path[shown], facts)
            verification.verdicts.update(verdicts)
            for item in planned:
                results = [prover.prove(real, proof) for proof in item.proofs]
                verification.verdicts[finding_key(item.finding)] = _combine(results)
    finally:
        prover.close()
    where = next(iter(sorted(by_path)), "configuration")
    verification.extra_notices = prover.pool.sandbox_notices(where)
    return verification
