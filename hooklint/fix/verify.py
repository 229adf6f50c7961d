"""``hooklint check --fix --verify`` / ``--diff --verify``: prove each fix by running it.

Before any file is written, each fix that would be applied gets a verdict,
from two proofs:

* **by running what the user runs** (:mod:`hooklint.fix.entries` finds it:
  the file's ``__main__`` block or the script itself, a project script or
  test that imports it, a ``verify-entry`` command): the program runs in the
  proof worker's sandbox twice, with the file's original text and with the
  fixed text (served by an import hook: the user's tree is never written),
  each registration's hook wrapped in a probe (:mod:`hooklint.fix.program`).
  The fixed run must not fail where the original did not, must reach the
  registration, and the hook must receive the same ``grad_output`` in each
  call (with a tolerance);
* **on the built model** (:mod:`hooklint.fix.verify_worker`): the model the
  graph layer built, run forward and backward with the original registration
  and with the fixed one; the hook must receive the module's real gradients.

Verdicts:

* **verified**: the fixed program ran as the original did and the hook got
  the same values ("verified by running `train.py`'s __main__ block"), or,
  where no program could be run (none found, or it fails or times out
  without the fix too: the notice says why), the built-model proof passed
  ("verified on the built model only (...)");
* **failed**: either proof shows the fix breaks something (the program's
  exception and its line, or what the hook receives); the fix is not
  applied.  Where a rename to ``register_full_backward_hook`` fails and the
  hook uses only ``grad_output``, the output tensor hook (HKL101's other fix)
  is proven instead, and offered in its place when it passes;
* **unverified**: no proof could be made.  With ``--verify`` such a fix is
  applied only when it is *safe by construction*: marked safe by a rule
  whose fixes do not depend on the model (HKL401's out-of-place rewrite of a
  tensor hook).  HKL101's fixes depend on the model and on the code around
  it, so they need a proof.

Proofs run in a subprocess with the graph layer's timeout and memory limit;
verdicts (not failures to prove) are cached in ``.hooklint_cache`` by the
content of what they depended on: the file, the fixed text, the entry, the
user's modules the runs imported and the project files they read, and
torch's version.  The user's code never runs in this process, and torch is
never imported here.
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from hooklint.findings import Applicability, Finding, Notice, NoticeLevel
from hooklint.fix.apply import LineStarts, Recheck, applicable, newline_of, preview

# Rules whose fixes a model run can prove (and whose safety depends on the model).
PROVABLE = frozenset({"HKL101"})
VERIFY_VERSION = 2
MAX_MODELS_PER_FIX = 2
MAX_PROGRAM_RUNS = 3  # per file: entries run without the fix before giving up on programs
RTOL, ATOL = 1e-4, 1e-6

_NOT_ABOUT_A_MODEL = {
    "HKL301": "moving `remove()` after the backward pass is about the script's order, which a model run cannot show",
    "HKL303": "calling the module instead of its `forward` is about the caller, which a model run cannot show",
    "HKL401": "the rewritten tensor hook is not tied to a module",
}


@dataclass(frozen=True)
class Verdict:
    status: str  # "verified", "failed", "unverified"
    detail: str
    how: str = ""  # "by running `train.py`'s __main__ block", "on the built model only (...)"
    replaced: str = ""  # the fix offered failed its proof (why) and the output tensor hook replaced it

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
    replacements: dict[tuple, Any] = field(default_factory=dict)  # finding -> the proven fix offered instead

    def accepted(self, finding: Finding) -> bool:
        verdict = self.verdicts.get(finding_key(finding))
        if verdict is None:
            return True
        return verdict.passed or (verdict.status == "unverified" and safe_by_construction(finding))

    def keep(self, findings: Iterable[Finding]) -> list[Finding]:
        """The findings, those whose fix is refused without their fix, those whose
        fix was replaced by a proven one with that one."""
        out = []
        for finding in findings:
            replacement = self.replacements.get(finding_key(finding))
            if replacement is not None and finding.fix is not None:
                finding = finding.with_changes(fix=replacement)
            out.append(finding if finding.fix is None or self.accepted(finding) else finding.with_changes(fix=None))
        return out

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
                    how = f" {verdict.how}" if verdict.how else ""
                    text = f"{at} verified{how}: {verdict.detail}"
                    if verdict.replaced:
                        text = (f"{at} changed to the output tensor hook, which is verified{how} (the fix offered "
                                f"first failed its proof: {verdict.replaced}): {verdict.detail}")
                    out.append(Notice(finding.path, text, NoticeLevel.INFO))
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
    proofs: list[dict[str, Any]] | str  # the built-model proofs, or why there is none
    program: dict[str, Any] | None = None  # the fixed text (with the probe) and what the probe is about
    program_none: str = ""  # why the fix cannot be proven by running a program
    entries: Any = None  # hooklint.fix.entries.Entries
    alternative: "_Planned | None" = None  # the output tensor hook, should a rename fail


@dataclass
class _FilePlan:
    path: str
    original_text: str = ""  # the file with every proven registration's hook in a probe
    planned: list[_Planned] = field(default_factory=list)


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


def _probed(text: str, fix_spans: list[tuple[int, int, str]], probes: list[tuple[int, int, int]]) -> str | None:
    """``text`` with the fix's spans replaced and each hook expression ``(start,
    end, id)`` wrapped in ``__hooklint_probe__(id, ...)``, inside whatever the
    fix puts around it (``output_grad_hook(__hooklint_probe__(0, save))``).
    None when the fix rewrites a hook expression itself."""
    from hooklint.fix.program import PROBE

    spans: list[tuple[int, int, int, str]] = []  # (start, end, order among insertions at one offset, content)
    for start, end, content in fix_spans:
        for p_start, p_end, _ in probes:
            if start < end and start < p_end and end > p_start:
                return None
        spans.append((start, end, 0, content))
    for p_start, p_end, probe_id in probes:
        spans.append((p_start, p_start, 1, f"{PROBE}({probe_id}, "))
        spans.append((p_end, p_end, -1, ")"))
    out, pos = [], 0
    for start, end, _order, content in sorted(spans, key=lambda x: (x[0], x[1] > x[0], x[2])):
        out.append(text[pos:start])
        out.append(content)
        pos = max(pos, end)
    out.append(text[pos:])
    return "".join(out)


def _output_only(reg) -> bool:
    """The hook uses only ``grad_output`` and returns None: HKL101's output
    tensor hook can carry it (the rule's own condition)."""
    from hooklint.static.bodies import name_uses, returns_nothing

    if reg.hook is None or reg.hook.has_varargs:
        return False
    gi = reg.param("grad_input")
    return gi is not None and not name_uses(reg.hook.node, gi) and returns_nothing(reg.hook.node)


def _alternative(ctx, reg, finding: Finding) -> Finding | None:
    """The finding with HKL101's output tensor hook as its fix, when its fix is
    the rename and the hook can be carried by the tensor hook."""
    if finding.code != "HKL101" or finding.fix is None or not finding.fix.message.startswith("Replace"):
        return None
    if not isinstance(reg.call.func, ast.Attribute) or not _output_only(reg):
        return None
    from dataclasses import replace

    from hooklint.rules.legacy_backward_hook import _output_hook_fix

    fix = _output_hook_fix(ctx, reg, reg.call.func, safe=False)
    if fix is None:
        return None
    # proven before it is offered: it is as safe as the fix it replaces
    return finding.with_changes(fix=replace(fix, applicability=finding.fix.applicability))


def _hook_name(ctx, reg) -> str:
    text = ctx.segment(reg.hook_expr) if reg.hook_expr is not None else ""
    if reg.hook is not None and reg.hook.name != "<lambda>":
        return reg.hook.name
    return text if text and len(text) <= 40 and "\n" not in text else "the hook"


def plan_file(path: str, text: str, findings: list[Finding], facts: Any, config: Any = None,
              project: Any = None) -> tuple[_FilePlan, dict]:
    """Planned proofs, and verdicts for the fixes no proof can cover."""
    from hooklint.static.context import FileContext

    plan = _FilePlan(os.path.realpath(path))
    verdicts: dict[tuple, Verdict] = {}
    provable = [f for f in findings if f.code in PROVABLE]
    for finding in findings:
        if finding.code not in PROVABLE:
            reason = _NOT_ABOUT_A_MODEL.get(finding.code, "this rule's fixes are not proven by a model run")
            verdicts[finding_key(finding)] = Verdict("unverified", reason)
    if not provable:
        return plan, verdicts
    from hooklint.static.notebook import is_notebook
    if is_notebook(path):
        # the findings are in cell coordinates and the proofs edit a script's text
        for finding in provable:
            verdicts[finding_key(finding)] = Verdict(
                "unverified", "fixes in notebooks are not proven yet: run the fixed cells to check it")
        return plan, verdicts
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        for finding in provable:
            verdicts[finding_key(finding)] = Verdict("unverified", "the file does not parse")
        return plan, verdicts
    ctx = FileContext(path, text, tree, graph=facts)
    lines = LineStarts(text)
    newline = newline_of(text)
    probes: list[tuple[int, int, int]] = []
    try:
        for finding in provable:
            item = _Planned(finding, plan_fix(ctx, text, finding))
            plan.planned.append(item)
            reg = _registration_at(ctx, finding)
            if reg is None or reg.hook_expr is None:
                item.program_none = "hooklint could not find the registration's hook again"
                continue
            hook_start, hook_end = _offsets(lines, ctx, reg.hook_expr)
            probe_id = len(probes)
            probes.append((hook_start, hook_end, probe_id))
            rows = (reg.call.lineno, reg.call.end_lineno or reg.call.lineno)
            if config is not None and project is not None:
                from hooklint.fix.entries import entries_for

                try:
                    item.entries = entries_for(path, tree, rows, config, project)
                except Exception as exc:  # noqa: BLE001 - a strange tree: the built model remains
                    from hooklint.fix.entries import Entries

                    item.entries = Entries([], f"searching the project for one failed ({exc})")
            common = {"id": probe_id, "hook_name": _hook_name(ctx, reg), "row": reg.call.lineno}
            fixed = _probed(text, _edit_spans(finding, lines, newline), [(hook_start, hook_end, probe_id)])
            if fixed is None:
                item.program_none = "the fix rewrites the hook expression, which hooklint cannot follow in a run"
            else:
                item.program = {**common, "fixed_text": fixed}
            alternative = _alternative(ctx, reg, finding)
            if alternative is not None:
                alt = _Planned(alternative, plan_fix(ctx, text, alternative), entries=item.entries)
                alt_fixed = _probed(text, _edit_spans(alternative, lines, newline),
                                    [(hook_start, hook_end, probe_id)])
                if alt_fixed is not None:
                    alt.program = {**common, "fixed_text": alt_fixed}
                item.alternative = alt
        plan.original_text = _probed(text, [], probes) or text
    finally:
        ctx.close()
    return plan, verdicts


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

    def run_program(self, entry: dict[str, Any], texts: dict[str, str], fixed: bool) -> dict[str, Any]:
        """One run of a program in the proof worker (:mod:`hooklint.fix.program`)."""
        worker = self._worker()
        if worker is None:
            return {"outcome": "unusable", "detail": f"the proof worker could not start ({self.fatal})"}
        root = Path(self.config.root)
        request = {"kind": "program", "entry": entry, "texts": texts, "root": str(root), "fixed": fixed,
                   "pythonpath": [str((root / p).resolve()) for p in getattr(self.config, "pythonpath", [])]}
        reply = worker.request(request, self.timeout)
        if reply.status == "timeout":
            return {"outcome": "timeout", "detail": f"did not finish within the {self.timeout:g} s timeout"}
        if reply.status != "ok" or reply.result is None:
            return {"outcome": "crash", "detail": f"it crashed the proof worker ({reply.detail})"}
        return reply.result

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


# ---------------------------------------------------------------- proofs by running a program


@dataclass(frozen=True)
class ProgramVerdict:
    status: str  # "verified", "failed", "unverified" (the fixed run timed out), "unusable" (no program ran)
    detail: str
    label: str = ""  # the entry that gave it
    hook_ran: bool = False


def _same_print(a: dict | None, b: dict | None) -> str | None:
    """How two fingerprints of a gradient differ beyond the tolerance, or None."""
    import math

    if a is None or b is None:
        if a is None and b is None:
            return None
        return f"{'None' if b is None else 'a tensor'} where it was {'None' if a is None else 'a tensor'}"
    if a["shape"] != b["shape"]:
        return f"shape {tuple(b['shape'])} where it was {tuple(a['shape'])}"

    def close(x: float, y: float, scale: float) -> bool:
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        if math.isinf(x) or math.isinf(y):
            return x == y
        return abs(x - y) <= ATOL + RTOL * scale

    worst = 0.0
    for x, y in zip(a["sample"], b["sample"]):
        if not close(x, y, abs(x)):
            worst = max(worst, abs(x - y))
    if worst or not close(a["sum"], b["sum"], abs(a["abs"])) or not close(a["abs"], b["abs"], abs(a["abs"])):
        return f"values off by up to {worst or abs(a['sum'] - b['sum']):.3g}"
    return None


def judge_runs(original: dict[str, Any], fixed: dict[str, Any], program: dict[str, Any], label: str) -> ProgramVerdict:
    """The fixed run against the original one, for the probe ``program["id"]``."""
    probe = str(program["id"])
    hook = program["hook_name"]
    state = fixed.get("outcome")
    if state == "timeout":
        return ProgramVerdict("unverified", f"with the fix, {label} {fixed['detail']} (without it, it does)", label)
    if state in ("error", "crash"):
        return ProgramVerdict("failed", f"{label} fails with the fix: {fixed.get('detail', '')}", label)
    if state != "ok":
        return ProgramVerdict("unverified", f"with the fix, {label} could not run: {fixed.get('detail', '')}", label)
    if not fixed.get("registered", {}).get(probe):
        return ProgramVerdict("failed", f"with the fix, {label} no longer reaches the registration at line "
                                        f"{program['row']}", label)
    before = int(original.get("counts", {}).get(probe, 0))
    after = int(fixed.get("counts", {}).get(probe, 0))
    if before != after:
        return ProgramVerdict("failed", f"`{hook}` runs {after} time{'s' if after != 1 else ''} when {label} runs "
                                        f"with the fix, {before} without it", label)
    if not before:
        return ProgramVerdict("verified", f"it runs as it does without the fix (`{hook}` does not run there)", label)
    calls_before = original.get("calls", {}).get(probe, [])
    calls_after = fixed.get("calls", {}).get(probe, [])
    returned = [r for r in (original.get("returned", {}).get(probe), fixed.get("returned", {}).get(probe))
                if r is not None]
    compared = min(len(calls_before), len(calls_after))
    if returned:
        # from then on the gradients are what the hook made them: legacy and full hooks mean different things
        compared = min(compared, min(returned) + 1)
    for index in range(compared):
        old, new = calls_before[index], calls_after[index]
        if old.get("module") != new.get("module"):
            return ProgramVerdict("failed", f"with the fix, call {index + 1} of `{hook}` is on a {new.get('module')} "
                                            f"where it was on a {old.get('module')}", label)
        difference = _same_print(old.get("grad_output"), new.get("grad_output"))
        if difference is not None:
            return ProgramVerdict("failed", f"with the fix, the grad_output `{hook}` receives in call {index + 1} "
                                            f"({new.get('module')}) is not the one it received before: {difference}",
                                  label)
    modules = sorted({c.get("module", "?") for c in calls_before})
    calls = {1: "its one call", 2: "both of its calls"}.get(before, f"all {before} of its calls")
    detail = (f"it runs as it does without the fix, and `{hook}` receives the same grad_output in {calls} "
              f"(on {', '.join(modules)})")
    if compared < before:
        if returned and compared == min(returned) + 1:
            detail += (f"; the first {compared} compared: from call {compared} on, `{hook}` returns a value, "
                       f"which changes the gradients after it")
        else:
            detail += f"; the first {compared} compared value by value"
    return ProgramVerdict("verified", detail, label, hook_ran=True)


def _unusable(original: dict[str, Any], program: dict[str, Any], label: str) -> str | None:
    """Why this run without the fix cannot be the reference, or None."""
    state = original.get("outcome")
    if state == "ok":
        if not original.get("registered", {}).get(str(program["id"])):
            return f"{label} does not reach the registration at line {program['row']}"
        return None
    detail = original.get("detail", "")
    if state == "error":
        where = "in hooklint's sandbox " if original.get("blocked") else ""
        return f"{label} fails {where}without the fix too: {detail}"
    if state == "timeout":
        return f"{label} {detail}, without the fix too"
    if state == "crash":
        return f"{label}: {detail}, without the fix too"
    return f"{label} could not run: {detail}"


# What a run says, once, before the first program runs (as the graph layer does before it imports code).
RUN_NOTICE = ("hooklint: --verify runs {what} (and other programs that reach a fix) with and without each fix, "
              "confined as model code is (no network, your files are not written, a time limit); `verify-entry` in "
              "[tool.hooklint] names what to run")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Programs:
    """Proofs by running programs, for one ``--verify`` run: each entry runs once
    without the fix per file (all of its registrations probed), once with each fix."""

    def __init__(self, prover: Prover, announce: Callable[[str], None] | None = None):
        self.prover = prover
        self.announce = announce
        self.originals: dict[tuple, dict[str, Any]] = {}
        self.runs_by_file: dict[str, int] = {}

    def _original(self, plan: _FilePlan, entry) -> dict[str, Any] | None:
        key = (plan.path, repr(entry.to_request()))
        if key not in self.originals:
            if self.runs_by_file.get(plan.path, 0) >= MAX_PROGRAM_RUNS:
                return None
            self.runs_by_file[plan.path] = self.runs_by_file.get(plan.path, 0) + 1
            if self.announce is not None:
                self.announce(RUN_NOTICE.format(what=entry.label))
                self.announce = None
            self.originals[key] = self.prover.run_program(entry.to_request(), {plan.path: plan.original_text}, False)
        return self.originals[key]

    def _cache_key(self, plan: _FilePlan, entry, program: dict[str, Any]) -> str | None:
        cache = self.prover._cache()
        if cache is None:
            return None
        from hooklint.graph.cache import file_key

        base = file_key(cache, plan.path)
        if base is None:
            return None
        return cache.key({"program": VERIFY_VERSION, "file": base, "entry": entry.to_request(),
                          "original": _digest(plan.original_text), "fixed": _digest(program["fixed_text"]),
                          "probe": {k: v for k, v in program.items() if k != "fixed_text"}})

    def _store(self, key: str | None, verdict: ProgramVerdict, runs: list[dict[str, Any]]) -> None:
        cache = self.prover._cache()
        if key is None or cache is None:
            return
        if any(not run.get("reads_complete", False) for run in runs):
            return  # it read more project files than hooklint keeps track of
        deps: dict[str, str] = {}
        stamps: dict[str, list[int]] = {}
        for run in runs:
            deps.update(run.get("deps", {}))
            stamps.update(run.get("imported", {}))
            stamps.update(run.get("reads", {}))
        cache.put(key, {"status": verdict.status, "detail": verdict.detail, "label": verdict.label,
                        "hook_ran": verdict.hook_ran}, deps, stamps=stamps)

    def prove(self, plan: _FilePlan, item: _Planned) -> ProgramVerdict:
        if item.program is None:
            return ProgramVerdict("unusable", f"no program could prove it: {item.program_none}"
                                  if item.program_none else "no program could prove it")
        entries = item.entries
        if entries is None or not entries.entries:
            why = entries.none_because if entries is not None else "programs are not searched here"
            return ProgramVerdict("unusable", f"the file has no entry hooklint could run: {why}")
        reasons: list[str] = []
        cache = self.prover._cache()
        for entry in entries.entries:
            key = self._cache_key(plan, entry, item.program)
            hit = cache.get(key, lambda v: ProgramVerdict(str(v["status"]), str(v["detail"]), str(v["label"]),
                                                          bool(v["hook_ran"]))) if key and cache else None
            if hit is not None:
                if hit.status == "unusable":
                    reasons.append(hit.detail)
                    continue
                return hit
            original = self._original(plan, entry)
            if original is None:
                reasons.append(f"{entry.label} was not run (hooklint runs at most {MAX_PROGRAM_RUNS} programs "
                               f"without the fix per file)")
                break
            why = _unusable(original, item.program, entry.label)
            if why is not None:
                reasons.append(why)
                if original.get("outcome") in ("ok", "error", "unusable"):  # not a timeout or a crash
                    self._store(key, ProgramVerdict("unusable", why, entry.label), [original])
                continue
            fixed = self.prover.run_program(entry.to_request(), {plan.path: item.program["fixed_text"]}, True)
            verdict = judge_runs(original, fixed, item.program, entry.label)
            if verdict.status in ("verified", "failed") and fixed.get("outcome") in ("ok", "error"):
                self._store(key, verdict, [original, fixed])
            return verdict
        if not reasons:
            return ProgramVerdict("unusable", "no entry could be run")
        more = len(entries.entries) - 1
        return ProgramVerdict("unusable", "; ".join(reasons[:2]) + (
            f" (and {more - 1} more entr{'ies' if more - 1 > 1 else 'y'})" if more > 1 and len(reasons) > 2 else ""))


def _merge(program: ProgramVerdict, built: Verdict) -> Verdict:
    """One verdict from the program run and the built-model proof."""
    if program.status == "failed":
        return Verdict("failed", program.detail)
    if built.status == "failed":
        return built
    if program.status == "unverified":
        return Verdict("unverified", program.detail)
    if program.status == "verified":
        how = f"by running {program.label}"
        if program.hook_ran:
            extra = f"; on the built model too: {built.detail}" if built.passed else ""
            return Verdict("verified", program.detail + extra, how)
        if built.passed:
            return Verdict("verified", f"{program.detail}; on the built model: {built.detail}",
                           how + " and on the built model")
        return Verdict("unverified", f"{program.label} {program.detail[3:]}, so what it receives is not proven; on "
                                     f"the built model: {built.detail}")
    if built.passed:
        return Verdict("verified", built.detail, f"on the built model only ({program.detail})")
    return Verdict(built.status, f"{built.detail}; {program.detail}")


def _built(prover: Prover, path: str, item: _Planned) -> Verdict:
    if isinstance(item.proofs, str):
        return Verdict("unverified", item.proofs)
    return _combine([prover.prove(path, proof) for proof in item.proofs])


def _decide(prover: Prover, programs: Programs, plan: _FilePlan, item: _Planned) -> Verdict:
    program = programs.prove(plan, item)
    if program.status == "failed":
        return Verdict("failed", program.detail)
    return _merge(program, _built(prover, plan.path, item))


def verify_fixes(findings: Iterable[Finding], *, allowed, locate: Callable[[str], str], graph_facts: dict[str, Any],
                 config, use_cache: bool = True, announce: Callable[[str], None] | None = None) -> Verification:
    """A verdict for every fix that ``--fix`` / ``--diff`` would apply.
    ``announce(line)``: said once, before the first of the user's programs runs."""
    from hooklint.fix.entries import ProjectFiles
    from hooklint.fix.files import SourceFile
    from hooklint.static.source import SourceError

    verification = Verification()
    by_path: dict[str, list[Finding]] = {}
    for finding in findings:
        if applicable(finding, allowed):
            by_path.setdefault(finding.path, []).append(finding)
            verification.findings[finding_key(finding)] = finding
    prover = Prover(config, use_cache=use_cache)
    programs = Programs(prover, announce)
    project = ProjectFiles(Path(config.root), config.excludes(), getattr(config, "respect_gitignore", True),
                           tuple(getattr(config, "pythonpath", [])))
    try:
        for shown in sorted(by_path):
            real = locate(shown)
            try:
                text = SourceFile.read(real).text
            except SourceError:
                continue  # fix_files reports it
            facts = graph_facts.get(real)
            plan, verdicts = plan_file(real, text, by_path[shown], facts, config, project)
            verification.verdicts.update(verdicts)
            for item in plan.planned:
                key = finding_key(item.finding)
                verdict = _decide(prover, programs, plan, item)
                if verdict.status == "failed" and item.alternative is not None:
                    other = _decide(prover, programs, plan, item.alternative)
                    if other.passed:
                        verification.replacements[key] = item.alternative.finding.fix
                        verdict = Verdict("verified", other.detail, other.how, replaced=verdict.detail)
                    else:
                        verdict = Verdict("failed", f"{verdict.detail}; the output tensor hook in its place is not "
                                                    f"proven either: {other.detail}")
                verification.verdicts[key] = verdict
    finally:
        prover.close()
    where = next(iter(sorted(by_path)), "configuration")
    verification.extra_notices = prover.pool.sandbox_notices(where)
    return verification
