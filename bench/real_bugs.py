"""Published PyTorch hook bugs, and hooklint's static pass run over them.

    python bench/real_bugs.py [--holdout | --all] [--cache DIR] [--cases a,b] [--list]
                              [--json FILE] [-j N] [--download-only] [--data FILE]

The cases live in bench/real_bugs.toml, the tuning corpus (each: a package
release that ships a published hook bug, the file and lines of the bug, the
rule that describes it, the release that fixed it), with a precision set of
correct, hook-heavy files.  bench/real_bugs_holdout.toml is a sealed hold-out
half of the later cases: no rule is tuned on it, `--holdout` runs it alone
(only at the end of a piece of work), `--all` runs both; the default runs the
tuning corpus only.  This script downloads every release it needs (`pip download
--no-deps`, through bench/corpus.py's helpers) into a cache outside the
repository (default `~/.cache/hooklint-realbugs`, or `$HOOKLINT_REALBUGS`),
runs `hooklint check --static-only` on each whole unpacked release, as a user
would (cross-file analysis sees the whole package), and prints:

- recall per bug class and overall, for the chosen set: a case is found when
  a finding with one of the case's expected rule codes lands on the bug's
  lines in the buggy release (HKL101 alone never finds a case); a case with
  `expected = []` (no rule describes the bug yet) counts as a miss;
- for fixed releases, whether that finding is gone;
- precision per rule: findings on the correct files and in the fixed files
  count as false positives unless judged true in the data file; findings
  elsewhere in the downloaded releases are listed for a human to judge
  (`--list`) and counted only once judged.

`--cases` takes case and correct-file ids (a subset); `--json` writes the raw
results.  Exit 1 when the check itself failed on a release (an internal
error, a bad exit code, output that is not JSON); a release that cannot be
downloaded is reported and its cases left out of the figures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import corpus  # noqa: E402  (bench/corpus.py: download and unpack helpers)

DATA_FILE = BENCH / "real_bugs.toml"
HOLDOUT_FILE = BENCH / "real_bugs_holdout.toml"

# Bug classes: key -> title.  A case names one; the figures are per class.
CLASSES: dict[str, str] = {
    "legacy-grad-input": "legacy backward hook whose grad_input is used",
    "leak": "hook registered on every call / instance, never removed",
    "leak-on-exception": "hook removed only when nothing raises",
    "shared-handles": "handles in a mutable class attribute",
    "removed-while-needed": "module hook removed while still needed",
    "tensor-hook-removed-early": "tensor hook removed before backward",
    "late-module-hook": "module backward hook registered after the forward",
    "grad-edit-in-module-hook": "module hook editing .grad before accumulation",
    "post-accumulate-misuse": "post-accumulate-grad hook misuse",
    "full-hook-inplace": "full backward hook + in-place op",
    "forward-bypass": "module.forward(x) bypassing hooks",
    "hook-mutates-argument": "hook mutating its argument in place",
    "hook-return-arity": "hook returning the wrong number of values",
    "function-grad": "custom autograd.Function gradient count / order",
    # Classes of the cases added for issue 15 (published bugs in libraries the
    # rules were not written for); most have no rule yet.
    "hook-on-tensor-without-grad": "tensor hook registered on a tensor that may not require grad",
    "handle-bookkeeping": "hook handles stored, cleared or removed inconsistently",
    "hook-argument-structure": "hook assumes one positional tensor input / one tensor output",
    "saved-tensors-hook": "saved-tensor pack / unpack hooks that do not round-trip",
    "hook-under-compile": "hook body torch.compile cannot trace",
    "duplicate-registration": "one hook registered several times on a shared module in one pass",
    "forward-hook-replaces-output": "forward hook returns a value that replaces the module's output",
    "backward-hook-never-fires": "backward hook on a module whose output may not require grad",
    "backward-to-run-hooks-writes-grad": "backward() run only to trigger hooks also writes .grad",
    "hook-outlives-phase": "hook left active after the phase it serves",
    "function-returns-view": "custom autograd.Function returns a view of a tensor it created",
    "function-backward-writes-grad": "custom Function backward runs a nested backward into .grad",
    # Classes the finders of issue 15's second round named (from the names only:
    # the cases of the sealed half are not read while work goes on).
    "hook-order-assumption": "hook assumes the order in which hooks or modules run",
    "stateful-hook-reused-module": "hook state overwritten when a module runs more than once per forward",
    "hook-on-unintended-modules": "hooks placed on more modules than the ones meant",
    "hooks-dropped-on-model-rewrite": "hooks lost when modules are replaced or the model rewritten",
    "state-dict-hook": "state-dict / load-state-dict hook misuse",
    "user-hook-breaks-instrumentation": "a user's hook breaks a library's own instrumentation",
    "hook-presence-assumed-output-replacement": "code assumes whether a hook replaced a module's output",
    "hook-wrapper-stale-binding": "forward-wrapping hook calls a stale bound forward",
    "foreign-hook-assumed-own": "code treats hooks it did not add as its own",
    # Classes the finders of issue 15's third round named (from the names only).
    "capture-wrapper-replaces-module": "a capture wrapper put in place of a module changes what callers see",
    "function-backward-ignores-grad-output": "custom Function backward ignores the incoming grad_output",
    "function-save-for-backward-none": "custom Function saves or detaches a None for backward",
    "hook-assumes-stable-inputs": "hook assumes its inputs stay the same between calls",
    "hook-missing-on-intended-modules": "hooks miss modules they were meant for",
    "hook-reference-cycle": "a hook keeps its module or owner alive through a reference cycle",
    "hook-registered-unconditionally": "hook registered where a condition should have guarded it",
    "hook-shared-across-concurrent-callers": "one hook or its state shared by concurrent callers",
    # Named by the fourth round's finders (2026-11-28), described from the names alone.
    "saved-tensors-unpacked-repeatedly": "saved-tensor hooks whose unpack runs more than once per pack",
    "hook-fires-per-microbatch": "hook meant once per step fires on every micro-batch",
    "hooks-dispatched-twice": "one hook dispatched twice for one event",
    "dispatch-hook-presence-assumed": "dispatch code assumes whether a hook is present",
    "function-save-for-backward-non-tensor": "custom Function saves a non-tensor for backward",
    "hook-signature-mismatch": "hook defined with a signature its caller does not use",
    "hook-state-rebound": "hook writes state the owner later rebinds, so one side sees stale state",
    # Named by the fifth round's finders (2026-11-28), described from the names alone.
    "function-applied-to-subset": "custom Function applied to only part of what it should cover",
    "function-skipped-by-requires-grad-guard": "custom Function skipped by a requires_grad guard",
    "checkpoint-recompute-rng-state": "checkpoint recomputation runs under different RNG state",
    "backward-fallback-signature-mismatch": "backward fallback called with a signature it does not take",
    "function-backward-undefined-helper": "custom Function backward reaches a helper that is not defined",
    "hook-edits-wrong-slice": "hook edits the wrong slice of a tensor",
    "hook-site-misplaced": "hook registered at the wrong module or site",
    "hook-site-missing": "hook missing from a site that needs it",
    "hook-assumes-unbatched-activation": "hook assumes an activation without a batch dimension",
    "hook-accumulates-autograd-graph": "hook keeps autograd graphs alive across calls",
    "forward-hook-reads-mutated-input": "forward hook reads an input the forward mutated",
    # Named by the sixth round's finders (2026-11-28), described from the names alone.
    "forward-patch-drops-original-forward": "forward monkeypatch loses the module's original forward",
    "function-ctx-stores-output-tensor": "custom Function keeps an output tensor on ctx",
    "function-grad-wrt-frozen-params": "custom Function computes gradients for frozen parameters",
    "hook-backward-on-tensor-without-grad": "hook or backward attached to a tensor that needs no grad",
    "hook-reads-owner-state-clobbered": "hook reads owner state that something else overwrote",
    "hooks-copied-on-model-rewrite": "hooks copied (or not) when a model is rewritten",
    # Named by the seventh round's finders (2026-11-28), described from the names alone.
    "capture-hook-lets-module-run": "capturing hook lets the module run on when it should stop it",
    "forward-patch-reapplied": "forward monkeypatch applied again over an earlier patch",
    "function-autocast-inputs-not-cast": "custom Function under autocast gets inputs not cast",
    "function-backward-assumes-grad-tensor": "custom backward assumes every incoming gradient is a tensor",
    "function-backward-missing-collective": "custom backward omits a collective its forward pairs with",
    "function-backward-mutates-grad-output": "custom backward mutates its incoming gradient in place",
    "function-backward-wrong-formula": "custom backward computes the wrong gradient",
    "function-ctx-attribute-unset": "custom backward reads a ctx attribute forward did not set",
    "function-ctx-stores-input-tensors": "custom Function keeps input tensors on ctx",
    "function-forward-mutates-input": "custom Function forward mutates its input in place",
    "hook-assumes-batch-leading-dim": "hook assumes the batch is the leading dimension",
    "hook-based-reparam-blocks-deepcopy": "hook-based reparametrization breaks deepcopy",
    "hook-captured-layout-assumed": "hook assumes the layout of what it captured",
    "hook-guard-ignores-training-mode": "hook guard ignores train / eval mode",
    "hook-loses-call-site-context": "hook loses context from the call site",
    "kwargs-hidden-from-hooks": "keyword arguments hidden from hooks",
    "offload-hook-overrides-module-weights": "offload hook overrides the module's weights",
}

# Codes the data file may name that hooklint does not ship yet (issue 10).
PLANNED_CODES = frozenset({"HKL305", "HKL306"})

CASE_FIELDS = ("id", "package", "buggy", "fixed", "path", "lines", "class", "expected", "source", "description")
CORRECT_FIELDS = ("id", "package", "version", "path", "description")
JUDGEMENT_FIELDS = ("package", "version", "path", "line", "code", "verdict", "reason")
CODE_RE = re.compile(r"^HKL\d{3}$")
ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def cache_dir() -> Path:
    return Path(os.environ.get("HOOKLINT_REALBUGS", "~/.cache/hooklint-realbugs")).expanduser()


# --- the data file ---------------------------------------------------------

@dataclass(frozen=True)
class Case:
    id: str
    package: str
    buggy: str
    fixed: str
    path: str
    lines: tuple[tuple[int, int], ...]
    bug_class: str
    expected: tuple[str, ...]
    source: str
    description: str
    fixed_path: str = ""
    fixed_lines: tuple[tuple[int, int], ...] = ()
    needs: tuple[str, ...] = ()
    corpus: str = "tuning"  # "tuning" (real_bugs.toml) or "holdout" (real_bugs_holdout.toml)

    @property
    def described(self) -> bool:
        """Whether some rule describes the bug (`expected = []`: none does yet)."""
        return bool(self.expected)

    def on_lines(self, row: int) -> bool:
        return any(first <= row <= last for first, last in self.lines)

    def on_fixed_lines(self, row: int) -> bool:
        """In the fixed release: where the bug was (the whole file when the
        data file does not narrow it down)."""
        return not self.fixed_lines or any(first <= row <= last for first, last in self.fixed_lines)


@dataclass(frozen=True)
class CorrectFile:
    id: str
    package: str
    version: str
    path: str
    description: str
    accept: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Judgement:
    package: str
    version: str
    path: str
    line: int
    code: str
    verdict: str  # "true" | "false"
    reason: str


@dataclass
class Data:
    cases: list[Case]
    correct: list[CorrectFile]
    judgements: list[Judgement]
    capabilities: dict[str, str]


def validate(raw: dict, known_codes: set[str] | None = None, holdout: bool = False) -> list[str]:
    """Problems in the parsed data file, one line each (empty when fine).  The
    hold-out file holds cases, and judgements of the findings its run printed
    (added once the sealed results were read, for precision only); no case of
    it says what it `needs` (nobody analyses why a sealed case is missed)."""
    problems: list[str] = []
    codes_ok = (known_codes or set()) | PLANNED_CODES
    capabilities = raw.get("capabilities", {})
    if not isinstance(capabilities, dict) or not all(isinstance(v, str) and v.strip() for v in capabilities.values()):
        problems.append("[capabilities] must map a key to a non-empty description")
        capabilities = {}
    seen: set[str] = set()

    def check_id(kind: str, entry: dict) -> str:
        ident = entry.get("id", "?")
        if not isinstance(ident, str) or not ID_RE.match(ident):
            problems.append(f"{kind} {ident!r}: id must be kebab-case")
        elif ident in seen:
            problems.append(f"{kind} {ident!r}: duplicate id")
        seen.add(str(ident))
        return str(ident)

    def check_code(where: str, code: object) -> None:
        if not isinstance(code, str) or not CODE_RE.match(code):
            problems.append(f"{where}: {code!r} is not a rule code")
        elif known_codes is not None and code not in codes_ok:
            problems.append(f"{where}: {code} is not a hooklint rule")

    for entry in raw.get("case", []):
        ident = check_id("case", entry)
        where = f"case {ident}"
        for name in CASE_FIELDS:
            if name not in entry:
                problems.append(f"{where}: missing field {name!r}")
        for name in ("package", "buggy", "path", "source", "description"):
            if name in entry and (not isinstance(entry[name], str) or not entry[name].strip()):
                problems.append(f"{where}: {name} must be a non-empty string")
        if not isinstance(entry.get("fixed", ""), str):
            problems.append(f"{where}: fixed must be a version string or \"\"")
        if entry.get("fixed") and entry.get("fixed") == entry.get("buggy"):
            problems.append(f"{where}: fixed and buggy are the same version")
        for name in ("lines", "fixed_lines"):
            lines = entry.get(name)
            if lines is not None and (not isinstance(lines, list) or not lines or not all(
                    isinstance(r, list) and len(r) == 2 and all(isinstance(n, int) and n > 0 for n in r)
                    and r[0] <= r[1] for r in lines)):
                problems.append(f"{where}: {name} must be a non-empty list of [first, last] with 0 < first <= last")
        if ("fixed_lines" in entry or "fixed_path" in entry) and not entry.get("fixed"):
            problems.append(f"{where}: fixed_lines / fixed_path without a fixed release")
        if "class" in entry and entry["class"] not in CLASSES:
            problems.append(f"{where}: unknown class {entry['class']!r}")
        expected = entry.get("expected")
        if expected is not None:
            if not isinstance(expected, list):
                problems.append(f"{where}: expected must be a list of rule codes ([] when no rule describes it)")
            else:
                for code in expected:
                    check_code(where, code)
                if expected == ["HKL101"]:
                    problems.append(f"{where}: HKL101 alone cannot describe a bug")
        if "source" in entry and isinstance(entry["source"], str) and not entry["source"].startswith("https://"):
            problems.append(f"{where}: source must be a URL")
        if holdout and "needs" in entry:
            problems.append(f"{where}: a hold-out case has no `needs`")
        for cap in entry.get("needs", []):
            if cap not in capabilities:
                problems.append(f"{where}: needs {cap!r}, which [capabilities] does not define")
        for name in ("path", "fixed_path"):
            value = entry.get(name, "")
            if isinstance(value, str) and (value.startswith("/") or ".." in value.split("/")):
                problems.append(f"{where}: {name} must be relative to the package root")

    for entry in raw.get("correct", []):
        ident = check_id("correct", entry)
        where = f"correct {ident}"
        for name in CORRECT_FIELDS:
            if not isinstance(entry.get(name), str) or not entry.get(name, "").strip():
                problems.append(f"{where}: missing or empty field {name!r}")
        accept = entry.get("accept", {})
        if not isinstance(accept, dict):
            problems.append(f"{where}: accept must be a table of code = reason")
        else:
            for code, reason in accept.items():
                check_code(where, code)
                if not isinstance(reason, str) or not reason.strip():
                    problems.append(f"{where}: accept.{code} needs a reason")

    for n, entry in enumerate(raw.get("judgement", []), 1):
        where = f"judgement #{n}"
        for name in JUDGEMENT_FIELDS:
            if name not in entry:
                problems.append(f"{where}: missing field {name!r}")
        if entry.get("verdict") not in ("true", "false"):
            problems.append(f"{where}: verdict must be \"true\" or \"false\"")
        if "code" in entry:
            check_code(where, entry["code"])
        if not isinstance(entry.get("line", 0), int):
            problems.append(f"{where}: line must be an integer")

    allowed = {"case", "judgement"} if holdout else {"case", "correct", "judgement", "capabilities"}
    unknown = set(raw) - allowed
    if unknown:
        problems.append(f"unknown top-level keys: {', '.join(sorted(unknown))}")
    return problems


def validate_sets(raws: dict[str, dict]) -> list[str]:
    """Problems across the data files (set name -> parsed file): an id is
    unique over all of them, and no release file is a case of both sets."""
    problems: list[str] = []
    owner: dict[str, str] = {}
    cases_at: dict[tuple, str] = {}
    for name, raw in raws.items():
        for kind in ("case", "correct"):
            for entry in raw.get(kind, []):
                ident = str(entry.get("id", "?"))
                if ident in owner and owner[ident] != name:
                    problems.append(f"{kind} {ident!r} is in both the {owner[ident]} and the {name} set")
                owner.setdefault(ident, name)
        for entry in raw.get("case", []):
            key = (entry.get("package"), entry.get("buggy"), entry.get("path"), str(entry.get("lines")))
            if key in cases_at and cases_at[key] != name:
                problems.append(f"case {entry.get('id')!r}: the same bug is a case of the {cases_at[key]} set")
            cases_at.setdefault(key, name)
    # `--all` merges the judgements of both files: a finding judged in both
    # must get one verdict, or the merged score would depend on file order.
    verdicts: dict[tuple, tuple[str, str]] = {}
    for name, raw in raws.items():
        for entry in raw.get("judgement", []):
            key = tuple(entry.get(k) for k in ("package", "version", "path", "line", "code"))
            if key in verdicts and verdicts[key][1] != name and verdicts[key][0] != entry.get("verdict"):
                problems.append(f"judgement of {key[4]} at {key[0]}=={key[1]} {key[2]}:{key[3]}: "
                                f"{verdicts[key][0]} in the {verdicts[key][1]} set, {entry.get('verdict')} in the {name} set")
            verdicts.setdefault(key, (entry.get("verdict"), name))
    return problems


SET_FILES = {"tuning": DATA_FILE, "holdout": HOLDOUT_FILE}


def read_raw(path: Path) -> dict:
    with open(path, "rb") as handle:
        return tomllib.load(handle)


def load_sets(sets: list[str], known_codes: set[str] | None = None,
              paths: dict[str, Path] | None = None) -> Data:
    """The chosen sets ("tuning", "holdout") merged into one Data; the correct
    files and capabilities live in the tuning file only, judgements in both
    (each file judges the findings of its own run)."""
    paths = {**SET_FILES, **(paths or {})}
    raws = {name: read_raw(paths[name]) for name in sets}
    problems = validate_sets(raws)
    if problems:
        raise ValueError("; ".join(problems))
    merged = Data([], [], [], {})
    for name in sets:
        data = load_data(paths[name], known_codes, corpus=name, raw=raws[name])
        merged.cases += data.cases
        merged.correct += data.correct
        merged.judgements += data.judgements
        merged.capabilities.update(data.capabilities)
    return merged


def load_data(path: Path = DATA_FILE, known_codes: set[str] | None = None, corpus: str = "tuning",
              raw: dict | None = None) -> Data:
    if raw is None:
        raw = read_raw(path)
    problems = validate(raw, known_codes, holdout=corpus == "holdout")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    cases = [Case(id=c["id"], package=c["package"], buggy=c["buggy"], fixed=c["fixed"], path=c["path"],
                  lines=tuple((a, b) for a, b in c["lines"]), bug_class=c["class"], expected=tuple(c["expected"]),
                  source=c["source"], description=c["description"].strip(), fixed_path=c.get("fixed_path", ""),
                  fixed_lines=tuple((a, b) for a, b in c.get("fixed_lines", ())), needs=tuple(c.get("needs", ())),
                  corpus=corpus)
             for c in raw.get("case", [])]
    correct = [CorrectFile(id=c["id"], package=c["package"], version=c["version"], path=c["path"],
                           description=c["description"].strip(), accept=dict(c.get("accept", {})))
               for c in raw.get("correct", [])]
    judgements = [Judgement(**{k: j[k] for k in JUDGEMENT_FIELDS}) for j in raw.get("judgement", [])]
    return Data(cases, correct, judgements, dict(raw.get("capabilities", {})))


def rule_codes() -> set[str]:
    from hooklint.rules import all_rules

    return {rule.code for rule in all_rules()}


# --- arguments ------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None,
                        help="Download folder (default: $HOOKLINT_REALBUGS or ~/.cache/hooklint-realbugs).")
    parser.add_argument("--cases", default="", help="Comma-separated case / correct-file ids (default: all).")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--holdout", action="store_true",
                       help="Run the sealed hold-out set (bench/real_bugs_holdout.toml) alone; only at the end of "
                            "a piece of work, never to tune a rule.")
    which.add_argument("--all", action="store_true", help="Run the tuning corpus and the hold-out set.")
    parser.add_argument("--data", type=Path, default=DATA_FILE,
                        help="The tuning case list (default: bench/real_bugs.toml).")
    parser.add_argument("--holdout-data", type=Path, default=HOLDOUT_FILE,
                        help="The hold-out case list (default: bench/real_bugs_holdout.toml).")
    parser.add_argument("--list", action="store_true",
                        help="Print the false positives and every finding no case or judgement accounts for.")
    parser.add_argument("--json", type=Path, help="Write the raw results to this file.")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="Passed to hooklint check.")
    parser.add_argument("--download-only", action="store_true")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("-j must be at least 1")
    args.selected = [s.strip() for s in args.cases.split(",") if s.strip()]
    args.sets = ["holdout"] if args.holdout else ["tuning", "holdout"] if args.all else ["tuning"]
    return args


# --- releases ----------------------------------------------------------------

@dataclass
class Release:
    package: str
    version: str
    root: Path | None = None  # package root inside the unpacked archive
    problem: str = ""
    findings: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    files: int = 0
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.package}=={self.version}"


def package_root(folder: Path, version: str) -> Path:
    """The folder paths in the data file are relative to: an sdist's single
    top folder (name-version/), or the wheel's root."""
    entries = [e for e in folder.iterdir() if not e.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and entries[0].name.endswith("-" + version):
        return entries[0]
    return folder


def fetch_release(package: str, version: str, cache: Path) -> Release:
    release = Release(package, version)
    (pkg,) = corpus.fetch({package: version}, cache, log=lambda msg: print(msg, file=sys.stderr))
    if pkg.folder is None:
        release.problem = pkg.problem or "unavailable"
    else:
        release.root = package_root(pkg.folder, version)
        release.files = len(corpus.package_files(str(release.root)))
    return release


def check_release(release: Release, jobs: int) -> None:
    """`hooklint check --static-only` over the whole release, from its root."""
    assert release.root is not None
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, "-m", "hooklint", "check", "--static-only", "--no-cache", "--exit-zero",
               "--output-format", "json", "-j", str(jobs), "."]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=release.root, capture_output=True, text=True, env=env)
    release.seconds = time.perf_counter() - start
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        release.error = f"hooklint exited {proc.returncode}: {last[0]}"
        return
    try:
        findings = json.loads(proc.stdout or "[]")
    except json.JSONDecodeError as exc:
        release.error = f"output is not JSON: {exc}"
        return
    for f in findings:
        f["path"] = f["filename"].replace(os.sep, "/").removeprefix("./")
    release.findings = findings
    internal = [ln for ln in proc.stderr.splitlines() if "internal error" in ln.lower()]
    if internal:
        release.error = internal[0]


def findings_in(release: Release | None, path: str) -> list[dict]:
    if release is None:
        return []
    return [f for f in release.findings if f["path"] == path]


def file_exists(release: Release | None, path: str) -> bool:
    return bool(release and release.root and (release.root / path).is_file())


# --- scoring -----------------------------------------------------------------

@dataclass
class CaseResult:
    case: Case
    status: str  # found | missed | unavailable
    hits: list[dict] = field(default_factory=list)  # expected-code findings on the lines
    on_lines: list[dict] = field(default_factory=list)  # other findings on the lines
    fixed_status: str = "no fixed release"  # gone | still reported | no rule | file absent | unavailable
    fixed_leftovers: list[dict] = field(default_factory=list)


def finding_key(package: str, version: str, f: dict) -> tuple:
    return (package, version, f["path"], f["location"]["row"], f["code"])


def score(data: Data, releases: dict[tuple[str, str], Release], cases: list[Case],
          correct: list[CorrectFile]) -> dict:
    judged = {(j.package, j.version, j.path, j.line, j.code): j for j in data.judgements}
    accounted: set[tuple] = set()
    true_pos: collections.Counter[str] = collections.Counter()
    false_pos: collections.Counter[str] = collections.Counter()
    fp_list: list[tuple[str, str, dict, str]] = []  # (package, version, finding, why)

    def judge(package: str, version: str, f: dict, default: str) -> str:
        key = finding_key(package, version, f)
        accounted.add(key)
        verdict = judged[key].verdict if key in judged else default
        if verdict == "true":
            true_pos[f["code"]] += 1
        elif verdict == "false":
            false_pos[f["code"]] += 1
        return verdict

    results: list[CaseResult] = []
    for case in cases:
        buggy = releases.get((case.package, case.buggy))
        if buggy is None or buggy.root is None or buggy.error:
            results.append(CaseResult(case, "unavailable"))
            continue
        in_file = findings_in(buggy, case.path)
        hits = [f for f in in_file if f["code"] in case.expected and case.on_lines(f["location"]["row"])]
        others = [f for f in in_file if f not in hits and case.on_lines(f["location"]["row"])]
        for f in hits:
            judge(case.package, case.buggy, f, "true")
        result = CaseResult(case, "found" if hits else "missed", hits, others)
        if case.fixed:
            fixed = releases.get((case.package, case.fixed))
            fixed_path = case.fixed_path or case.path
            if fixed is None or fixed.root is None or fixed.error:
                result.fixed_status = "unavailable"
            elif not file_exists(fixed, fixed_path):
                result.fixed_status = "file absent"
            else:
                leftovers = [f for f in findings_in(fixed, fixed_path) if case.on_fixed_lines(f["location"]["row"])]
                for f in leftovers:
                    if judge(case.package, case.fixed, f, "false") == "false":
                        fp_list.append((case.package, case.fixed, f, f"fixed release of {case.id}"))
                result.fixed_leftovers = leftovers
                expected_left = [f for f in leftovers if f["code"] in case.expected]
                if not case.described:
                    result.fixed_status = "no rule"  # nothing could have been reported, so nothing is "gone"
                else:
                    result.fixed_status = "still reported" if expected_left else "gone"
        results.append(result)

    correct_results = []
    for entry in correct:
        release = releases.get((entry.package, entry.version))
        if release is None or release.root is None or release.error:
            correct_results.append((entry, "unavailable", []))
            continue
        if not file_exists(release, entry.path):
            correct_results.append((entry, "file absent", []))
            continue
        found = findings_in(release, entry.path)
        for f in found:
            default = "true" if f["code"] in entry.accept else "false"
            if judge(entry.package, entry.version, f, default) == "false":
                fp_list.append((entry.package, entry.version, f, f"correct file {entry.id}"))
        correct_results.append((entry, "checked", found))

    unjudged = []
    for (package, version), release in sorted(releases.items()):
        for f in release.findings:
            key = finding_key(package, version, f)
            if key in accounted:
                continue
            if key in judged:
                judge(package, version, f, "unjudged")
            else:
                unjudged.append((package, version, f))
    return {"cases": results, "correct": correct_results, "tp": true_pos, "fp": false_pos,
            "fp_list": fp_list, "unjudged": unjudged}


# --- output ------------------------------------------------------------------

def pct(n: int, d: int) -> str:
    return f"{n / d:.0%}" if d else "-"


def describe(f: dict) -> str:
    return f"{f['path']}:{f['location']['row']}:{f['location']['column']}: {f['code']} {f['message']}"


def set_label(sets: list[str]) -> str:
    files = {"tuning": "bench/real_bugs.toml", "holdout": "bench/real_bugs_holdout.toml (SEALED hold-out)"}
    return " + ".join(f"{name} ({files[name]})" for name in sets)


def recall(results: list[CaseResult]) -> dict:
    """Recall per class and overall over the available cases; a case no rule
    describes (`expected = []`) is a miss, counted apart as `no_rule`."""
    available = [r for r in results if r.status != "unavailable"]
    per_class: dict[str, dict[str, int]] = {}
    for key in CLASSES:
        rs = [r for r in available if r.case.bug_class == key]
        if rs:
            per_class[key] = {"found": sum(r.status == "found" for r in rs), "cases": len(rs),
                              "no_rule": sum(not r.case.described for r in rs)}
    per_set: dict[str, dict[str, int]] = {}
    for name in dict.fromkeys(r.case.corpus for r in available):
        rs = [r for r in available if r.case.corpus == name]
        per_set[name] = {"found": sum(r.status == "found" for r in rs), "cases": len(rs),
                         "no_rule": sum(not r.case.described for r in rs)}
    overall = {"found": sum(r.status == "found" for r in available), "cases": len(available),
               "no_rule": sum(not r.case.described for r in available)}
    return {"per_class": per_class, "per_set": per_set, "overall": overall}


def report(data: Data, releases: dict[tuple[str, str], Release], scored: dict, args: argparse.Namespace) -> None:
    print(f"set: {set_label(args.sets)}")
    total_time = sum(r.seconds for r in releases.values())
    print(f"releases: {len(releases)} ({sum(r.files for r in releases.values())} Python files), "
          f"static pass {total_time:.1f} s in all")
    for release in sorted(releases.values(), key=lambda r: r.label):
        if release.root is None:
            print(f"  {release.label:40s} unavailable: {release.problem}")
        elif release.error:
            print(f"  {release.label:40s} ERROR: {release.error}")
        else:
            print(f"  {release.label:40s} {release.files:5d} files {len(release.findings):4d} findings "
                  f"{release.seconds:6.2f} s")

    results: list[CaseResult] = scored["cases"]
    if results:
        print("\ncases:")
        for r in results:
            c = r.case
            mark = {"found": "FOUND ", "missed": "missed", "unavailable": "n/a   "}[r.status]
            got = ", ".join(sorted({f["code"] for f in r.on_lines})) or "nothing"
            detail = "" if r.status != "missed" else f"  (on the lines: {got})"
            if r.status == "missed" and not c.described:
                detail = f"  (no rule describes it; on the lines: {got})"
            fixed = f"; fixed {c.fixed}: {r.fixed_status}" if c.fixed else ""
            print(f"  {mark} {c.id:48s} {'/'.join(c.expected) or '-':15s}{detail}{fixed}")

        print(f"\nrecall per class, {'+'.join(args.sets)} set (static pass, finding with the expected rule on "
              "the bug's lines; a case no rule describes is a miss):")
        table = recall(results)
        for key, row in table["per_class"].items():
            no_rule = f"  [{row['no_rule']} no rule]" if row["no_rule"] else ""
            print(f"  {key:34s} {row['found']:3d} / {row['cases']:<3d} {pct(row['found'], row['cases']):>5s}  "
                  f"{CLASSES[key]}{no_rule}")
        if len(table["per_set"]) > 1:
            for name, row in table["per_set"].items():
                print(f"  {'overall, ' + name:34s} {row['found']:3d} / {row['cases']:<3d} "
                      f"{pct(row['found'], row['cases']):>5s}  ({row['no_rule']} with no rule)")
        row = table["overall"]
        print(f"  {'overall':34s} {row['found']:3d} / {row['cases']:<3d} {pct(row['found'], row['cases']):>5s}  "
              f"({row['no_rule']} with no rule)")
        available = [r for r in results if r.status != "unavailable"]
        unavailable = [r.case.id for r in results if r.status == "unavailable"]
        if unavailable:
            print(f"  left out (release unavailable or check failed): {', '.join(unavailable)}")
        with_fix = [r for r in available if r.case.fixed and r.fixed_status in ("gone", "still reported")]
        if with_fix:
            gone = sum(r.fixed_status == "gone" for r in with_fix)
            print(f"  fixed releases: the expected finding is gone in {gone} of {len(with_fix)}")

        missed_needs = collections.Counter(cap for r in available if r.status == "missed" for cap in r.case.needs)
        if missed_needs:
            print("\nwhat the missed cases need (cases per capability):")
            for cap, n in missed_needs.most_common():
                print(f"  {n:3d}  {cap}: {data.capabilities.get(cap, '?')}")
        stale = [r.case.id for r in available if r.status == "found" and r.case.needs]
        if stale:
            print(f"  found although `needs` is recorded (update the data file): {', '.join(stale)}")

    checked = [(e, found) for e, status, found in scored["correct"] if status == "checked"]
    if scored["correct"]:
        clean = sum(1 for e, found in checked if not [f for f in found if f["code"] not in e.accept])
        print(f"\ncorrect files: {len(checked)} checked, {clean} without a false positive")
        for entry, status, _ in scored["correct"]:
            if status != "checked":
                print(f"  {entry.id}: {status}")

    print("\nprecision per rule (true: case findings and judged-true; false: correct files, fixed files, "
          "judged-false):")
    codes = sorted(set(scored["tp"]) | set(scored["fp"]))
    for code in codes:
        tp, fp = scored["tp"][code], scored["fp"][code]
        print(f"  {code}  true {tp:3d}  false {fp:3d}  precision {pct(tp, tp + fp):>5s}")
    if not codes:
        print("  no judged finding")
    print(f"  unjudged findings elsewhere in the releases: {len(scored['unjudged'])} "
          f"({', '.join(f'{c} {n}' for c, n in sorted(collections.Counter(f['code'] for _, _, f in scored['unjudged']).items())) or 'none'})"
          + ("; --list prints them" if scored["unjudged"] and not args.list else ""))

    if args.list:
        if scored["fp_list"]:
            print("\nfalse positives:")
            for package, version, f, why in scored["fp_list"]:
                print(f"  [{package}=={version}, {why}] {describe(f)}")
        if scored["unjudged"]:
            print("\nunjudged (add a [[judgement]] to count them):")
            for package, version, f in scored["unjudged"]:
                print(f"  [{package}=={version}] {describe(f)}")


def to_json(releases: dict[tuple[str, str], Release], scored: dict, sets: list[str] | None = None) -> dict:
    return {
        "sets": sets or ["tuning"],
        "recall": recall(scored["cases"]),
        "releases": [{"package": r.package, "version": r.version, "files": r.files, "seconds": round(r.seconds, 3),
                      "problem": r.problem, "error": r.error, "findings": r.findings}
                     for r in releases.values()],
        "cases": [{"id": r.case.id, "set": r.case.corpus, "class": r.case.bug_class,
                   "expected": list(r.case.expected),
                   "status": r.status, "hits": r.hits, "on_lines": r.on_lines,
                   "fixed": r.case.fixed, "fixed_status": r.fixed_status, "fixed_leftovers": r.fixed_leftovers,
                   "needs": list(r.case.needs)}
                  for r in scored["cases"]],
        "correct": [{"id": e.id, "status": status, "findings": found} for e, status, found in scored["correct"]],
        "precision": {code: {"true": scored["tp"][code], "false": scored["fp"][code]}
                      for code in sorted(set(scored["tp"]) | set(scored["fp"]))},
        "false_positives": [{"package": p, "version": v, "why": why, "finding": f} for p, v, f, why in scored["fp_list"]],
        "unjudged": [{"package": p, "version": v, "finding": f} for p, v, f in scored["unjudged"]],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        data = load_sets(args.sets, rule_codes(), paths={"tuning": args.data, "holdout": args.holdout_data})
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        print(f"real_bugs: {exc}", file=sys.stderr)
        return 2
    cases, correct = data.cases, data.correct
    if args.selected:
        known = {c.id for c in cases} | {c.id for c in correct}
        unknown = [s for s in args.selected if s not in known]
        if unknown:
            print(f"real_bugs: unknown ids: {', '.join(unknown)}", file=sys.stderr)
            return 2
        cases = [c for c in cases if c.id in args.selected]
        correct = [c for c in correct if c.id in args.selected]

    wanted: list[tuple[str, str]] = []
    for c in cases:
        wanted += [(c.package, c.buggy)] + ([(c.package, c.fixed)] if c.fixed else [])
    wanted += [(c.package, c.version) for c in correct]
    cache = args.cache or cache_dir()
    releases: dict[tuple[str, str], Release] = {}
    for key in dict.fromkeys(wanted):
        releases[key] = fetch_release(*key, cache)
    if args.download_only:
        missing = [r.label for r in releases.values() if r.root is None]
        print(f"{len(releases) - len(missing)} of {len(releases)} releases in {cache}"
              + (f"; unavailable: {', '.join(missing)}" if missing else ""))
        return 0
    for release in releases.values():
        if release.root is not None:
            check_release(release, args.jobs)

    scored = score(data, releases, cases, correct)
    report(data, releases, scored, args)
    if args.json:
        args.json.write_text(json.dumps(to_json(releases, scored, args.sets), indent=1))
    return 1 if any(r.error for r in releases.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
